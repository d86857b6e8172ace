// prefill_full.so: the standard full prefill (see prefill_full_stage.h).
#include "sift/plugin.h"
#include "prefill_full_stage.h"

SIFT_PLUGIN("prefill_full", "1.0.0", sift::StageKind::kPrefill, sift::plugins::PrefillFullStage)
