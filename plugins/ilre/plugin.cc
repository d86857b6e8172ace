// ilre.so: ILRe's context allocation filter (ilre_stage.h).
#include "sift/plugin.h"
#include "ilre_stage.h"

SIFT_PLUGIN("ilre", "1.0.0", sift::StageKind::kFilter, sift::plugins::IlreStage)
