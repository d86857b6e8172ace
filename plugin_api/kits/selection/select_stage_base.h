// SDK kit sift_kit_selection (plugin_api/kits/selection), linked by the select plugins and
// the reuse plugin (layerwise).
//
// SelectStageBase: the shared flow of the one-shot select plugins (snapkv, streamingllm, h2o,
// pyramidkv, chunkkv). A plugin supplies only its scoring signal and three hooks; the base does
// the rest:
//
//   Plan  asks prefill_full for the signal on every layer: window_sum over the last `window`
//         queries (SnapKV / PyramidKV / ChunkKV) or column_sum over all queries (H2O). A reuse
//         stage that follows (layerwise) removes its follower layers again, so they pay nothing.
//   Run   for every layer that is not a reuse follower (state.plan.reuse_leader):
//         1. the compressible span is the whole prompt (query_aware = true, the question is
//            inside the compressed span and the observation window ends with it) or only the
//            context tokens[0, question_begin) (query_aware = false: the observation window is
//            the last `window` context tokens, recomputed from the cache; the question's own
//            entries are dropped and the question is prefilled again on the compressed cache,
//            as kvpress does);
//         2. layer budget L (budget or keep_ratio of the span, raised to the floor:
//            ApplyFloor; PyramidKV then varies it per layer, each layer at least the hard
//            minimum); L >= span: the layer is left as is (no-op), so a span at or below the
//            floor is never compressed;
//         3. the last max(KeptWindow(L), question) tokens are always kept (the question span,
//            query-aware only, when it is at most kMaxKeptQuestion tokens: a longer "question"
//            is a document pasted into the last chat message, of which the window part stays);
//            the rest of the budget is chosen by ChoosePrefix from the prefix scores: signal
//            columns [0, p), pooled per query head (Pool1d), then aggregated over each KV
//            head's query group (AggregateGqa). ChoosePrefix keeps the first Sinks() tokens
//            (StreamingLLM) or the best-scored ones;
//         4. KvCache::Select (memory really freed), state.kept_indices[layer] = [Hkv, m] sorted
//            prompt indices, optional RoPE re-rotation to 0..m-1 (cache_edit.h).
//         Without followers it then finishes (question re-prefill, next_position);
//         with followers the reuse stage finishes after copying the leaders' indices.
//   By layer (query_aware = true, no reuse stage, and a prefill that offers it:
//         RequestPlan::prefill_offers_layers, prefill_full's select_by_layer): Plan also sets
//         plan.select_layer, which the prefill calls as each layer completes, and
//         plan.kv_peak_entries (what the request then holds at most); steps 2-4 then run per
//         layer inside the prefill (the same indices: a layer's selection reads only its own
//         statistics and entries), and Run only finishes.
//   Context state (query_aware = false, not re-rotated, no reuse followers, the host's prefix
//         cache at hand; docs/context-cache.md#compressed-contexts): Plan names the variant
//         "context" (RequestPlan::context_state); Run files what it kept of the context
//         tokens[0, question_begin) as a state entry under that scope, and when the prefill
//         served such an entry (RequestState::context_state_hit) it only finishes: kept_indices
//         from the entries' positions, then the question re-prefill. The selection depends on
//         the context alone (its window is the context's last rows), so a cached one is the one
//         this request would make.
//
// Common parameters (read here, so every select plugin has them):
//   budget       int >= 0, default 0        absolute KV entries kept per layer and KV head,
//                                           window included (SnapKV's max_capacity_prompt)
//   keep_ratio   float in (0, 1], default 0.1 when budget is 0: fraction of the span kept
//                                           (paper: "compression ratio 10%" = 0.1). Setting
//                                           both is an error.
//   floor        int >= 0, default 128      the compression floor (selection_ops.h
//                                           ApplyFloor): a span of at most max(floor, hard
//                                           minimum) entries is left whole; above it no layer
//                                           keeps fewer. Hard minimum (also when a request sets
//                                           floor = 0): Sinks() + max(window, question kept),
//                                           what step 3 always keeps.
//   query_aware  bool, default true         see 1. (true = SnapKV / LongBench protocol)
//   rerotate     bool, default false        re-rotate kept keys to contiguous positions
//
// THREADING: one instance per request (sift/stage.h). ERRORS: constructor throws sift::Error
// naming the key; Run returns FAILED_PRECONDITION without a prefilled cache or without the
// statistics its plan asked for.
#ifndef SIFT_KITS_SELECTION_SELECT_STAGE_BASE_H_
#define SIFT_KITS_SELECTION_SELECT_STAGE_BASE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "scores/score_ops.h"
#include "selection/selection_ops.h"
#include "sift/stage.h"

namespace sift::plugins {

class SelectStageBase : public Stage {
 public:
  Status Plan(const Model& model, RequestPlan& plan) const override;
  Status Run(const Model& model, RequestState& state, StageContext& context) override;

  // The same without a Model (unit tests): Plan for `num_layers` layers; RunOn with model ==
  // nullptr works unless re-rotation or context-only compression is asked.
  void PlanStats(int64_t num_layers, RequestPlan& plan) const;
  // The by-layer part of Plan (see "By layer" above); `model` may be null unless re-rotating.
  void TakeLayerOffer(const Model* model, int64_t num_layers, RequestPlan& plan) const;
  Status RunOn(const Model* model, RequestState& state, StageContext& context);

 protected:
  enum class Signal { kNone, kWindow, kColumnSum };
  SelectStageBase(const StageParams& params, Signal signal);

  // Reads window / pooling / kernel / gqa_reduce (the scoring parameters).
  void ReadScoring(const StageParams& params, int64_t default_window,
                   const std::string& default_pooling, int64_t default_kernel);

  // Total kept entries per layer (window included) for a span of n_c tokens and a resolved
  // budget; default: the same budget on every layer.
  virtual std::vector<int64_t> LayerBudgets(int64_t num_layers, int64_t n_c, int64_t budget) const;
  // Trailing tokens of the span always kept for a layer budget L (clamped to L by the caller).
  virtual int64_t KeptWindow(int64_t layer_budget) const = 0;
  // Leading tokens of the span ChoosePrefix always keeps (StreamingLLM's attention sinks).
  virtual int64_t Sinks() const { return 0; }
  // `keep` indices in [0, p), sorted, per KV head ([heads, keep]) or shared ([keep]), created
  // with `index_options` (int64 on the cache's device). `scores` is [heads, p] on that device
  // (undefined for Signal::kNone).
  virtual at::Tensor ChoosePrefix(int64_t layer, const at::Tensor& scores, int64_t p, int64_t keep,
                                  int64_t heads, const at::TensorOptions& index_options) const = 0;

  // The longest question span kept whole (step 3); the question tokens of a query-aware span
  // that are always kept: question_tokens up to that length, else none.
  static constexpr int64_t kMaxKeptQuestion = kDefaultFloor;
  static int64_t QuestionKept(int64_t question_tokens);

  Signal signal_;
  Budget budget_;
  int64_t floor_ = kDefaultFloor;
  bool query_aware_ = true;
  bool rerotate_ = false;
  int64_t window_ = 0;  // observation window (Signal::kWindow)
  PoolKind pooling_ = PoolKind::kNone;
  int64_t kernel_ = 1;
  Reduce gqa_reduce_ = Reduce::kMean;

 private:
  static constexpr const char* kContextStateVariant = "context";
  // What an n-token prompt with its question at question_begin is compressed to.
  struct SelectionShape {
    int64_t n = 0;                 // the prompt's tokens
    int64_t question_begin = 0;    // as given (RequestState::question_begin)
    bool context_only = false;     // step 1: only the context tokens are compressible
    int64_t n_c = 0;               // the compressible span [0, n_c)
    int64_t question_kept = 0;     // question tokens always kept (step 3)
    std::vector<int64_t> budgets;  // per layer (step 2), at least the hard minimum
  };
  SelectionShape Shape(int64_t num_layers, int64_t n, int64_t question_begin) const;
  // Steps 2-4 for one layer of a query-aware selection (plan.select_layer) shaped by `shape`
  // (Shape() of the request's prompt), its statistics in state.layer_stats[layer] (erased after).
  Status SelectLayer(const Model* model, int64_t layer, const SelectionShape& shape,
                     RequestState& state) const;
  // Whether state.plan.context_state is this stage's (and the host's prefix cache is at hand).
  bool NamedContextState(const RequestState& state, StageContext& context) const;
  // The request's prefill served the context state: kept indices from its positions, then the
  // question re-prefill (FinishSelection).
  Status FinishFromContextState(const Model* model, RequestState& state,
                                StageContext& context) const;
  // Files the context's entries of state.cache (`evicted`: the cache holds them alone; else the
  // whole prompt) under state.plan.context_state; a failed copy files nothing.
  void FileContextState(const RequestState& state, StageContext& context, bool evicted) const;
  // Per-query-head signal [Hq, >= n_c] of `layer` over the compressible span.
  at::Tensor LayerSignal(const AttentionStats& stats) const;
  // Context-only selection (query_aware = false): the signal of the `selected` layers observed
  // from context queries only, recomputed with the model (the prefill's saw the question).
  std::map<int64_t, AttentionStats> ContextOnlyStats(const Model& model, const RequestState& state,
                                                     const std::vector<int64_t>& selected,
                                                     int64_t qb, int64_t n_c) const;
  // The kept indices [Hkv, budget] of `layer`: ChoosePrefix over the pooled prefix scores plus
  // the last max(KeptWindow, question_kept) tokens of the compressible span [0, n_c).
  Status LayerIndices(int64_t layer, const std::map<int64_t, AttentionStats>& stats, int64_t n_c,
                      int64_t budget, int64_t question_kept, int64_t heads,
                      const at::TensorOptions& index_options, at::Tensor* idx) const;
};

}  // namespace sift::plugins

#endif  // SIFT_KITS_SELECTION_SELECT_STAGE_BASE_H_
