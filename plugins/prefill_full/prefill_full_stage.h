// PrefillFullStage: the standard prefill, every prompt token through every layer.
//
// Builds the KV cache (state.cache) of state.tokens at positions 0..n-1, collects the
// attention statistics that the pipeline's later stages asked for in state.plan.stats (merged
// across chunks so that chunked and unchunked prefill give the same statistics), and hands them
// over with last_logits (RequestState::AdoptPrefill: next_position = n, kept indices dropped).
//
// Parameters (pipeline TOML or per-request overrides; a request may set only the capped range):
//   chunk_size  int >= 0, default 0     rows per forward chunk; 0 = the host's slice
//                                       (StageContext::slice_tokens(), siftd's
//                                       --prefill-chunk), or the whole prompt at once when it has
//                                       none (request: 0 or >= 64)
//   block_size  int in [1, 65536], 256  least rows per attention query block (LibTorch path;
//   sift/attention.h)
//                                       (request: >= 64)
//   prefix_cache  bool, default true    use the host's prefix cache (StageContext::
//                                       prefix_cache()): start from the KV of the longest cached
//                                       prefix of the prompt and prefill only the rest, then
//                                       store this prompt's KV for later requests
//   select_by_layer  bool, default false  compute the prompt one layer at a time and hand each
//                                       layer to the select stage as soon as it holds the whole
//                                       prompt (RequestPlan::select_layer), so a compressing
//                                       request never holds the full KV of every layer: at most
//                                       the prompt in one layer plus what the others kept
//                                       (RequestPlan::kv_peak_entries, what siftd's KV budget
//                                       reserves). Taken by the query-aware select stages
//                                       without a reuse stage; the result is the same
//                                       (each layer sees the same inputs in either order). The
//                                       prefix cache is then neither read nor written (the
//                                       whole prompt's KV never exists at once).
//
// What may be reused (docs/context-cache.md): at most n - 1 tokens (the last token's logits are
// computed) and no row a later stage's statistics read (a window's rows: SnapKV, PyramidKV,
// ChunkKV); a plan asking for column sums over every row (H2O) reuses nothing.
// state.cached_tokens grows by the prompt tokens that came from the cache (prefill/prefix_reuse.h).
// When a later stage names a context state (RequestPlan::context_state: a context-only select's
// compressed context) and the prompt has a question, the prefill serves that state when the cache
// holds it for exactly tokens[0, question_begin) (RequestState::AdoptContextState: nothing is
// prefilled, the naming stage finishes) and otherwise prefills as above but stores nothing.
//
// Before every layer of every chunk (but the first) it calls context.Yield(), so siftd runs the
// other requests' decode steps there, and checks cancellation; progress is reported per layer as
// ("prefill", layers done, layers × chunks). With select_by_layer taken, each (layer, chunk) is
// a step of context.RunSteps() instead, so siftd may run the steps of similar prefills between
// them (side by side) as well as decode steps.
//
// THREADING: one instance per request (sift/stage.h).
// ERRORS:    INVALID_ARGUMENT for an empty or too long prompt or an out-of-vocabulary token;
//            CANCELLED / DEADLINE_EXCEEDED from the context.
#ifndef SIFT_PLUGINS_PREFILL_FULL_PREFILL_FULL_STAGE_H_
#define SIFT_PLUGINS_PREFILL_FULL_PREFILL_FULL_STAGE_H_

#include <cstdint>

#include "sift/stage.h"

namespace sift::plugins {

class PrefillFullStage : public Stage {
 public:
  PrefillFullStage(const StageParams& params, const Model& model);
  Status Plan(const Model& model, RequestPlan& plan) const override;
  Status Run(const Model& model, RequestState& state, StageContext& context) override;

 private:
  // Rows per forward chunk for `rows` rows to prefill (chunk_size, the host's slice, or all).
  int64_t ChunkRows(int64_t rows, StageContext& context) const;
  // The select_by_layer order: layer by layer, each handed to plan.select_layer when complete.
  Status RunByLayer(const Model& model, RequestState& state, StageContext& context);

  int64_t chunk_size_;
  int64_t block_size_;
  bool prefix_cache_;
  bool select_by_layer_;
};

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_PREFILL_FULL_PREFILL_FULL_STAGE_H_
