// KeepRecentStage: the example plugin of docs/writing-a-plugin.md, a small but real select stage.
//
// After the prefill, every layer keeps only its `keep` most recent cache entries (the tail of
// the prompt, which usually holds the question) and evicts the rest. Kept entries retain their
// original RoPE positions, so decoding continues at state.next_position as if the whole prompt
// were there. Records the kept indices per layer in state.kept_indices ([Hkv, m], sorted). (The
// pipeline runner measures what the smaller cache costs, after the stage.)
//
// Parameters:
//   keep  int in [1, 1048576], default 256   entries kept per layer and KV head
//
// THREADING: one instance per request (sift/stage.h).
// ERRORS:    FAILED_PRECONDITION without a prefilled cache; the context's cancel status.
#ifndef SIFT_PLUGINS_EXAMPLE_KEEP_RECENT_STAGE_H_
#define SIFT_PLUGINS_EXAMPLE_KEEP_RECENT_STAGE_H_

#include <cstdint>

#include "sift/stage.h"

namespace sift::plugins {

class KeepRecentStage : public Stage {
 public:
  // Reads and validates the parameters; a bad value throws sift::Error naming the key.
  KeepRecentStage(const StageParams& params, const Model& model);
  Status Run(const Model& model, RequestState& state, StageContext& context) override;

 private:
  int64_t keep_;
};

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_EXAMPLE_KEEP_RECENT_STAGE_H_
