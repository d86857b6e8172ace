// StageKind: what a pipeline stage does (its slot in a pipeline), as plugins declare it and
// pipeline files, `list` replies and cost reports name it.
//
// THREADING: pure functions. ERRORS: none (ParseStageKind returns false for an unknown name).
#ifndef SIFT_STAGE_KIND_H_
#define SIFT_STAGE_KIND_H_

#include <string>

namespace sift {

enum class StageKind { kPrefill = 1, kFilter = 2, kSelect = 3, kReuse = 4, kDecode = 5 };
const char* StageKindName(StageKind kind);
// Parses "prefill", "filter", ...; returns false for anything else.
bool ParseStageKind(const std::string& name, StageKind* kind);

}  // namespace sift

#endif  // SIFT_STAGE_KIND_H_
