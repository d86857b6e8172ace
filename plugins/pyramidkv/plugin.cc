// pyramidkv.so: the plugin shim (see pyramidkv_stage.h).
#include "sift/plugin.h"
#include "pyramidkv_stage.h"

SIFT_PLUGIN("pyramidkv", "1.0.0", sift::StageKind::kSelect, sift::plugins::PyramidKvStage)
