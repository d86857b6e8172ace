// snapkv.so: the plugin shim (see snapkv_stage.h).
#include "sift/plugin.h"
#include "snapkv_stage.h"

SIFT_PLUGIN("snapkv", "1.0.0", sift::StageKind::kSelect, sift::plugins::SnapKvStage)
