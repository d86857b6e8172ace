// PrefillPartialStage: a prefill that runs the prompt through the first layers only and hands
// no KV cache on (GemFilter pass 1; see partial_prefill.h).
//
// The depth comes from the plan: the deepest layer a later stage (the gemfilter filter) asked
// statistics of, r (0-based, so r + 1 layers run, as the paper's code `layers[:r+1]`). Layer r
// computes only the last query's scores against all keys. Results (RequestState::AdoptScores):
// state.layer_stats (as planned); state.cache null, last_logits undefined (a filter and a full
// prefill must follow); prompt_length is set if unset.
//
// Parameters:
//   block_size    int in [1, 65536], default 256   least rows per attention query block
//   (sift/attention.h) prefix_cache  bool, default true               use the host's prefix cache
//                                                  (StageContext::prefix_cache())
//
// With the host's prefix cache the pass keeps the KV of layers 0..r while it runs, starts from
// the longest cached prefix of the prompt (the same depth r; at most n - 1 tokens, none a
// statistic reads) and stores its own prompt for later requests: a second question about a
// cached document runs only the question through layers 0..r (docs/context-cache.md). The
// cache is dropped when the pass ends; state.cached_tokens grows by the tokens reused. Without
// the prefix cache (a remote worker, prefix_cache = false) nothing is kept: one layer's
// activations and keys at a time.
//
// Cancellation is checked and context.Yield() called before every layer (siftd runs other
// requests' decode steps there).
//
// THREADING: one instance per request (sift/stage.h).
// ERRORS:    FAILED_PRECONDITION when no later stage planned statistics; INVALID_ARGUMENT for an
//            empty prompt or out-of-vocabulary token; the context's cancel status.
#ifndef SIFT_PLUGINS_PREFILL_PARTIAL_PREFILL_PARTIAL_STAGE_H_
#define SIFT_PLUGINS_PREFILL_PARTIAL_PREFILL_PARTIAL_STAGE_H_

#include <cstdint>

#include "sift/stage.h"

namespace sift::plugins {

class PrefillPartialStage : public Stage {
 public:
  PrefillPartialStage(const StageParams& params, const Model& model);
  Status Run(const Model& model, RequestState& state, StageContext& context) override;

 private:
  int64_t block_size_;
  bool prefix_cache_;
};

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_PREFILL_PARTIAL_PREFILL_PARTIAL_STAGE_H_
