// prefill_skip.so: the SPTS token-skipping prefill (see prefill_skip_stage.h).
#include "sift/plugin.h"
#include "prefill_skip_stage.h"

SIFT_PLUGIN("prefill_skip", "1.0.0", sift::StageKind::kPrefill, sift::plugins::PrefillSkipStage)
