// h2o.so: the plugin shim (see h2o_stage.h).
#include "sift/plugin.h"
#include "h2o_stage.h"

SIFT_PLUGIN("h2o", "1.0.0", sift::StageKind::kSelect, sift::plugins::H2oStage)
