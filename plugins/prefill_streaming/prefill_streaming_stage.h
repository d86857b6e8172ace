// PrefillStreamingStage: ILRe's encoding (ILRe §3.3): a chunked prefill under a Λ mask through
// the layers below the retrieval layer, the context's keys at the retrieval layer, and the
// retrieval scores A^C of the query part (streaming_prefill.h).
//
// The retrieval layers come from the plan: every layer a later stage asked max_prob of (the
// ilre filter asks for its l_R; 0-based layer l_R − 1). Results: state.layer_stats[l].max_prob =
// A [|context|] (sink included), state.cache null, no logits (a filter and a full prefill must
// follow), prompt_length set if unset (RequestState::AdoptScores). Without a question span the
// last `fallback_query` tokens are the query part and question_begin is moved there.
// There is no context-length check here: the streaming prefill's cost is linear, and prompts
// past the model's context (siftd --n-ctx) are only compressed, never decoded at full length.
//
// Parameters (defaults: the paper's S = 4, W = 512, chunk 1024):
//   sink                int in [0, 65536], default 4
//   window              int in [1, 1048576], default 512
//   chunk               int in [1, 1048576], default 1024 (the first chunk gets `sink` more)
//   block_size          int in [1, 65536], default 256    attention query block
//   include_query_keys  bool, default false   softmax over context + query keys (else context)
//   fallback_query      int in [1, 4096], default 32
//   prefix_cache        bool, default true   with the host's prefix cache: start from a cached
//                       prefix of the context and store this prompt's layers 0..R (memory: R + 1
//                       layers of the prompt's KV during the pass; docs/context-cache.md)
//
// Cancellation is checked and context.Yield() called before every layer of every segment
// (siftd runs other requests' decode steps there).
//
// THREADING: one instance per request (sift/stage.h).
// ERRORS:    FAILED_PRECONDITION when no later stage planned max_prob; INVALID_ARGUMENT for an
//            empty prompt, a prompt without context, or an out-of-vocabulary token; the
//            context's cancel status.
#ifndef SIFT_PLUGINS_PREFILL_STREAMING_PREFILL_STREAMING_STAGE_H_
#define SIFT_PLUGINS_PREFILL_STREAMING_PREFILL_STREAMING_STAGE_H_

#include "sift/stage.h"
#include "streaming_prefill.h"

namespace sift::plugins {

class PrefillStreamingStage : public Stage {
 public:
  PrefillStreamingStage(const StageParams& params, const Model& model);
  Status Run(const Model& model, RequestState& state, StageContext& context) override;

 private:
  StreamingPrefillOptions options_;
  bool prefix_cache_ = true;
};

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_PREFILL_STREAMING_PREFILL_STREAMING_STAGE_H_
