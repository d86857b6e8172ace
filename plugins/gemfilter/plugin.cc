// gemfilter.so: GemFilter's token selection filter (gemfilter_stage.h).
#include "sift/plugin.h"
#include "gemfilter_stage.h"

SIFT_PLUGIN("gemfilter", "1.0.0", sift::StageKind::kFilter, sift::plugins::GemFilterStage)
