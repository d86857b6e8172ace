// layerwise.so: the plugin shim (see layerwise_stage.h).
#include "sift/plugin.h"
#include "layerwise_stage.h"

SIFT_PLUGIN("layerwise", "1.0.0", sift::StageKind::kReuse, sift::plugins::LayerwiseStage)
