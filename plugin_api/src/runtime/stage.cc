// Stage kind names, as pipeline files and `list` spell them.
#include "sift/stage_kind.h"

namespace sift {

const char* StageKindName(StageKind kind) {
  switch (kind) {
    case StageKind::kPrefill:
      return "prefill";
    case StageKind::kFilter:
      return "filter";
    case StageKind::kSelect:
      return "select";
    case StageKind::kReuse:
      return "reuse";
    case StageKind::kDecode:
      return "decode";
  }
  return "unknown";
}

bool ParseStageKind(const std::string& name, StageKind* kind) {
  for (StageKind k : {StageKind::kPrefill, StageKind::kFilter, StageKind::kSelect,
                      StageKind::kReuse, StageKind::kDecode}) {
    if (name == StageKindName(k)) {
      *kind = k;
      return true;
    }
  }
  return false;
}

}  // namespace sift
