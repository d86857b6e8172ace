// streamingllm.so: the plugin shim (see streamingllm_stage.h).
#include "sift/plugin.h"
#include "streamingllm_stage.h"

SIFT_PLUGIN("streamingllm", "1.0.0", sift::StageKind::kSelect, sift::plugins::StreamingLlmStage)
