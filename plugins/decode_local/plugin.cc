// decode_local.so: generation in this process (see decode_local_stage.h).
#include "sift/plugin.h"
#include "decode_local_stage.h"

SIFT_PLUGIN("decode_local", "1.0.0", sift::StageKind::kDecode, sift::plugins::DecodeLocalStage)
