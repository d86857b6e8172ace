// prefill_streaming.so: ILRe's streaming (Λ-mask) prefill up to the retrieval layer
// (prefill_streaming_stage.h).
#include "sift/plugin.h"
#include "prefill_streaming_stage.h"

SIFT_PLUGIN("prefill_streaming", "1.0.0", sift::StageKind::kPrefill,
            sift::plugins::PrefillStreamingStage)
