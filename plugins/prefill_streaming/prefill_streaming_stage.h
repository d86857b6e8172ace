// PrefillStreamingStage: a chunked prefill under the Λ mask (sink + window; streaming_prefill.h)
// in one of two modes.
//
// mode = "retrieval" (the default): ILRe's encoding (ILRe §3.3) through the layers below the
// retrieval layer, the context's keys at the retrieval layer, and the retrieval scores A^C of the
// query part. The retrieval layers come from the plan: every layer a later stage asked max_prob
// of (the ilre filter asks for its l_R; 0-based layer l_R − 1). Results:
// state.layer_stats[l].max_prob = A [|context|] (sink included), state.cache null, no logits (a
// filter and a full prefill must follow), prompt_length set if unset (RequestState::AdoptScores).
// Without a question span the last `fallback_query` tokens are the query part and question_begin
// is moved there. There is no context-length check here: the streaming prefill's cost is linear,
// and prompts past the model's context (siftd --n-ctx) are only compressed, never decoded at
// full length.
//
// mode = "full": StreamingLLM's streaming setting (StreamingForward): every layer, the rolling
// cache (sink + window entries per layer) and the last row's logits as the prefill's products,
// for a decode stage (RequestState::AdoptPrefill). With the host's prefix cache it stores the
// rolling state after the context (the question's start) and after the whole prompt, and a
// later prompt that starts with either streams only the rest: a second question about a
// document, or the next turn of a conversation, in memory bounded by sink + window
// (docs/context-cache.md). The prompt must fit the model's context; no statistics are collected.
//
// Parameters (defaults: the paper's S = 4, W = 512, chunk 1024):
//   sink                int in [0, 65536], default 4
//   window              int in [1, 1048576], default 512
//   chunk               int in [1, 1048576], default 1024 (the first chunk gets `sink` more)
//   block_size          int in [1, 65536], default 256    least rows per attention query block
//   (sift/attention.h) include_query_keys  bool, default false   softmax over context + query keys
//   (else context) fallback_query      int in [1, 4096], default 32 mode                "retrieval"
//   (default) or "full" (above) prefix_cache        bool, default true   with the host's prefix
//   cache: retrieval mode starts
//                       from a cached prefix of the context and stores this prompt's layers 0..R
//                       (memory: R + 1 layers of the prompt's KV during the pass); full mode
//                       starts from and stores rolling states (docs/context-cache.md)
//
// Cancellation is checked and context.Yield() called before every layer of every segment
// (siftd runs other requests' decode steps there).
//
// THREADING: one instance per request (sift/stage.h).
// ERRORS:    FAILED_PRECONDITION when no later stage planned max_prob (retrieval) or one
//            planned statistics (full); INVALID_ARGUMENT for an empty prompt, a prompt without
//            context, an out-of-vocabulary token, or (full) a prompt longer than the model's
//            context; the context's cancel status.
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
  // mode = "full": StreamingLLM's streaming prefill of the whole model (StreamingForward).
  Status RunFull(const Model& model, RequestState& state, StageContext& context);

  StreamingPrefillOptions options_;
  bool prefix_cache_ = true;
  bool full_ = false;
};

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_PREFILL_STREAMING_PREFILL_STREAMING_STAGE_H_
