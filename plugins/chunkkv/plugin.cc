// chunkkv.so: the plugin shim (see chunkkv_stage.h).
#include "sift/plugin.h"
#include "chunkkv_stage.h"

SIFT_PLUGIN("chunkkv", "1.0.0", sift::StageKind::kSelect, sift::plugins::ChunkKvStage)
