// prefill_partial.so: GemFilter's pass 1, layers 0..r with no cache (prefill_partial_stage.h).
#include "sift/plugin.h"
#include "prefill_partial_stage.h"

SIFT_PLUGIN("prefill_partial", "1.0.0", sift::StageKind::kPrefill,
            sift::plugins::PrefillPartialStage)
