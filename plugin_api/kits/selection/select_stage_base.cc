#include "selection/select_stage_base.h"

#include <algorithm>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "selection/cache_edit.h"
#include "sift/error.h"
#include "sift/prefix_cache.h"

namespace sift::plugins {

SelectStageBase::SelectStageBase(const StageParams& params, Signal signal) : signal_(signal) {
  budget_.tokens = params.GetInt("budget", 0, 0, int64_t{1} << 24);
  const bool has_ratio = params.Has("keep_ratio");
  budget_.keep_ratio = params.GetDouble("keep_ratio", 0.1, 1e-6, 1.0);
  if (budget_.tokens > 0 && has_ratio) {
    params.Fail("keep_ratio", "set either budget or keep_ratio, not both");
  }
  query_aware_ = params.GetBool("query_aware", true);
  rerotate_ = params.GetBool("rerotate", false);
  floor_ = params.GetInt("floor", kDefaultFloor, 0, kMaxFloor);
}

int64_t SelectStageBase::QuestionKept(int64_t question_tokens) {
  return question_tokens <= kMaxKeptQuestion ? std::max<int64_t>(0, question_tokens) : 0;
}

void SelectStageBase::ReadScoring(const StageParams& params, int64_t default_window,
                                  const std::string& default_pooling, int64_t default_kernel) {
  if (signal_ == Signal::kWindow) window_ = params.GetInt("window", default_window, 1, 8192);
  pooling_ = ParsePoolKind(params.GetString("pooling", default_pooling, {"none", "avg", "max"}));
  kernel_ = params.GetInt("kernel", default_kernel, 1, 1023);
  gqa_reduce_ = ParseReduce(params.GetString("gqa_reduce", "mean", {"mean", "max", "sum"}));
}

std::vector<int64_t> SelectStageBase::LayerBudgets(int64_t num_layers, int64_t n_c,
                                                   int64_t budget) const {
  return std::vector<int64_t>(num_layers, budget);
}

Status SelectStageBase::Plan(const Model& model, RequestPlan& plan) const {
  PlanStats(model.config().num_layers, plan);
  TakeLayerOffer(&model, model.config().num_layers, plan);
  return Status::Ok();
}

void SelectStageBase::TakeLayerOffer(const Model* model, int64_t num_layers,
                                     RequestPlan& plan) const {
  // Query-aware only: a context-only selection observes the context again with the model after
  // the whole prompt is in (ContextOnlyStats). A reuse stage that follows clears the offer.
  if (!plan.prefill_offers_layers || !query_aware_ || !plan.reuse_leader.empty() ||
      plan.prompt_tokens <= 0) {
    return;
  }
  const int64_t n = plan.prompt_tokens;
  const SelectionShape shape = Shape(num_layers, n, plan.question_begin);
  // While layer l is prefilled, the layers before it hold what they kept and layer l the whole
  // prompt; its selection then copies the kept entries before the whole prompt is released.
  int64_t held = 0, peak = 0;
  for (int64_t l = 0; l < num_layers; ++l) {
    const int64_t kept = std::min(shape.budgets[l], n);
    peak = std::max(peak, held + n + kept);
    held += kept;
  }
  if (peak >= n * num_layers) return;  // it keeps (nearly) everything: nothing to save
  plan.kv_peak_entries = peak;
  // The shape is computed once per request, from the prompt the prefill actually holds.
  plan.select_layer = [this, model, shape = std::optional<SelectionShape>()](
                          int64_t layer, RequestState& state) mutable {
    const int64_t tokens = static_cast<int64_t>(state.tokens.size());
    if (!shape || shape->n != tokens || shape->question_begin != state.question_begin) {
      shape = Shape(state.cache->num_layers(), tokens, state.question_begin);
    }
    return SelectLayer(model, layer, *shape, state);
  };
}

SelectStageBase::SelectionShape SelectStageBase::Shape(int64_t num_layers, int64_t n,
                                                       int64_t question_begin) const {
  SelectionShape shape;
  shape.n = n;
  shape.question_begin = question_begin;
  const int64_t qb = std::clamp<int64_t>(question_begin, 0, n);
  shape.context_only = !query_aware_ && qb > 0 && qb < n;
  shape.n_c = shape.context_only ? qb : n;
  // The floor (selection_ops.h ApplyFloor): the hard minimum is what every layer always keeps,
  // the sinks plus the tail of the span (the observation window and, query-aware, the question).
  shape.question_kept = shape.context_only ? 0 : QuestionKept(n - qb);
  const int64_t n_c = shape.n_c;
  const int64_t hard_minimum =
      std::min(n_c, Sinks() + std::max(window_, std::min(shape.question_kept, n_c)));
  shape.budgets =
      LayerBudgets(num_layers, n_c, ApplyFloor(n_c, budget_.Resolve(n_c), floor_, hard_minimum));
  for (int64_t& b : shape.budgets) b = std::max(b, hard_minimum);
  return shape;
}

Status SelectStageBase::SelectLayer(const Model* model, int64_t layer, const SelectionShape& shape,
                                    RequestState& state) const {
  KvCache& cache = *state.cache;
  const int64_t n = static_cast<int64_t>(state.tokens.size());
  if (cache.size(layer) != n) {
    return Status(StatusCode::kFailedPrecondition, "ragged_cache",
                  "select needs the layer to hold the whole prompt (layer " +
                      std::to_string(layer) + " holds " + std::to_string(cache.size(layer)) + ")");
  }
  const int64_t heads = cache.shape().num_kv_heads;
  const at::TensorOptions index_options =
      at::TensorOptions().dtype(at::kLong).device(cache.shape().device);
  const int64_t budget = std::min(shape.budgets[layer], n);
  at::Tensor idx;
  if (budget >= n) {
    idx = at::arange(n, index_options).expand({heads, -1});
  } else {
    SIFT_RETURN_IF_ERROR(LayerIndices(layer, state.layer_stats, n, budget, shape.question_kept,
                                      heads, index_options, &idx));
  }
  SIFT_RETURN_IF_ERROR(ApplyLayerSelection(model, state, layer, idx, rerotate_));
  state.layer_stats.erase(layer);
  return Status::Ok();
}

void SelectStageBase::PlanStats(int64_t num_layers, RequestPlan& plan) const {
  // Context-only selection depends on the context alone: its result is cached across requests
  // (not when re-rotated: the kept positions, which say what was kept, are then rewritten).
  if (!query_aware_ && !rerotate_) plan.context_state = kContextStateVariant;
  for (int64_t l = 0; l < num_layers; ++l) {
    if (plan.reuse_leader.count(l)) continue;
    if (signal_ == Signal::kWindow && query_aware_) {
      plan.stats[l].window = std::max(plan.stats[l].window, window_);
    } else if (signal_ == Signal::kColumnSum) {
      plan.stats[l].column_sum = true;
    }
  }
}

Status SelectStageBase::Run(const Model& model, RequestState& state, StageContext& context) {
  return RunOn(&model, state, context);
}

at::Tensor SelectStageBase::LayerSignal(const AttentionStats& stats) const {
  return signal_ == Signal::kWindow ? stats.window_sum : stats.column_sum;
}

std::map<int64_t, AttentionStats> SelectStageBase::ContextOnlyStats(
    const Model& model, const RequestState& state, const std::vector<int64_t>& selected, int64_t qb,
    int64_t n_c) const {
  const KvCache& cache = *state.cache;
  const int64_t last = selected.empty() ? 0 : selected.back();
  AttentionStatsRequest r;
  if (signal_ == Signal::kWindow) {
    r.window = std::min(window_, n_c);
    return ObserveRows(model, cache, state.tokens, n_c - r.window, n_c, r, last);
  }
  // H2O over context queries only: all queries' column sums minus the question's.
  r.column_sum = true;
  std::map<int64_t, AttentionStats> q =
      ObserveRows(model, cache, state.tokens, qb, cache.size(0), r, last);
  std::map<int64_t, AttentionStats> observed;
  for (int64_t l : selected) {
    auto it = state.layer_stats.find(l);
    if (it == state.layer_stats.end() || !it->second.column_sum.defined()) continue;
    observed[l].column_sum = it->second.column_sum - q[l].column_sum;
  }
  return observed;
}

Status SelectStageBase::LayerIndices(int64_t layer, const std::map<int64_t, AttentionStats>& stats,
                                     int64_t n_c, int64_t budget, int64_t question_kept,
                                     int64_t heads, const at::TensorOptions& index_options,
                                     at::Tensor* idx) const {
  const int64_t kept_window =
      std::clamp<int64_t>(std::max(KeptWindow(budget), question_kept), 0, budget);
  const int64_t p = n_c - kept_window;
  at::Tensor scores;
  if (signal_ != Signal::kNone) {
    auto it = stats.find(layer);
    at::Tensor sig = it == stats.end() ? at::Tensor() : LayerSignal(it->second);
    if (!sig.defined() || sig.size(-1) < n_c) {
      return Status(StatusCode::kFailedPrecondition, "no_stats",
                    "layer " + std::to_string(layer) +
                        " has no attention statistics: the prefill must collect what this "
                        "stage's plan asks (prefill_full does)");
    }
    scores = Pool1d(sig.narrow(-1, 0, p), pooling_, kernel_);
    scores = AggregateGqa(scores, heads, gqa_reduce_);
  }
  at::Tensor prefix = ChoosePrefix(layer, scores, p, budget - kept_window, heads, index_options);
  if (prefix.dim() == 1) prefix = prefix.unsqueeze(0).expand({heads, prefix.size(0)});
  at::Tensor tail = at::arange(p, n_c, index_options).expand({heads, kept_window});
  *idx = at::cat({prefix.to(at::kLong), tail}, 1);
  return Status::Ok();
}

bool SelectStageBase::NamedContextState(const RequestState& state, StageContext& context) const {
  const PrefixCacheAccess access = context.prefix_cache();
  const std::string mine = access.scope + "/" + kContextStateVariant + "/";
  return access.cache != nullptr && state.plan.context_state.compare(0, mine.size(), mine) == 0;
}

Status SelectStageBase::FinishFromContextState(const Model* model, RequestState& state,
                                               StageContext& context) const {
  KvCache& cache = *state.cache;
  // Not re-rotated (PlanStats): each entry's position is the prompt index it was kept for.
  for (int64_t l = 0; l < cache.num_layers(); ++l) {
    state.kept_indices[l] = cache.Positions(l).to(cache.shape().device).clone();
  }
  state.context_state_hit = false;
  context.Progress("select", cache.num_layers(), cache.num_layers());
  return FinishSelection(model, state, false);
}

void SelectStageBase::FileContextState(const RequestState& state, StageContext& context,
                                       bool evicted) const {
  const int64_t qb = state.question_begin;
  const std::vector<TokenId> context_tokens(state.tokens.begin(), state.tokens.begin() + qb);
  try {
    // Evicted: the cache holds the selected context alone; else the whole prompt, of which the
    // context's entries are the first qb of every layer.
    PrefixCache& shared = *context.prefix_cache().cache;
    if (evicted) {
      shared.InsertState(state.plan.context_state, context_tokens, *state.cache, 0);
    } else {
      shared.InsertState(state.plan.context_state, context_tokens, state.cache->ClonePrefix(qb, 0),
                         0);
    }
  } catch (const std::exception&) {
    // No memory for the copy: the request goes on uncached.
  }
}

Status SelectStageBase::RunOn(const Model* model, RequestState& state, StageContext& context) {
  if (state.cache == nullptr) {
    return Status(StatusCode::kFailedPrecondition, "no_prefill",
                  "a select stage needs a prefilled cache: put a prefill stage before it");
  }
  const bool named = NamedContextState(state, context);
  if (state.context_state_hit) {
    if (!named) {
      return Status(StatusCode::kFailedPrecondition, "foreign_context_state",
                    "the prefill served a context state that this stage did not name");
    }
    return FinishFromContextState(model, state, context);
  }
  KvCache& cache = *state.cache;
  const int64_t layers = cache.num_layers();
  if (state.plan.select_layer && static_cast<int64_t>(state.kept_indices.size()) == layers) {
    // The prefill handed over every layer as it completed (TakeLayerOffer): only the finish.
    state.layer_stats.clear();
    context.Progress("select", layers, layers);
    return FinishSelection(model, state, rerotate_);
  }
  const int64_t heads = cache.shape().num_kv_heads;
  const at::TensorOptions index_options =
      at::TensorOptions().dtype(at::kLong).device(cache.shape().device);
  const int64_t n = cache.size(0);
  const int64_t qb = std::clamp<int64_t>(state.question_begin, 0, n);
  const SelectionShape shape = Shape(layers, n, state.question_begin);
  const bool context_only = shape.context_only;
  const int64_t n_c = shape.n_c;
  const int64_t question_kept = shape.question_kept;
  const std::vector<int64_t>& budgets = shape.budgets;

  std::vector<int64_t> selected;
  for (int64_t l = 0; l < layers; ++l) {
    if (!state.plan.reuse_leader.count(l)) selected.push_back(l);
  }
  bool evicts = false;
  for (int64_t l : selected) {
    if (cache.size(l) != n) {
      return Status(StatusCode::kFailedPrecondition, "ragged_cache",
                    "select needs every layer to hold the whole prompt (layer " +
                        std::to_string(l) + " holds " + std::to_string(cache.size(l)) + ")");
    }
    evicts = evicts || budgets[l] < n_c;
  }
  if (evicts && context_only && model == nullptr) {
    return Status(StatusCode::kFailedPrecondition, "no_model",
                  "context-only selection needs the model");
  }

  // The signal per selected layer: from the prefill, or recomputed for context-only spans.
  std::map<int64_t, AttentionStats> observed;
  if (evicts && signal_ != Signal::kNone && context_only) {
    observed = ContextOnlyStats(*model, state, selected, qb, n_c);
  }
  const std::map<int64_t, AttentionStats>& stats =
      evicts && signal_ != Signal::kNone && context_only ? observed : state.layer_stats;

  for (int64_t l : selected) {
    if (context.Cancelled()) return context.CancelStatus();
    const int64_t budget = std::min(budgets[l], n_c);
    at::Tensor idx;
    if (!evicts || budget >= n_c) {
      idx = at::arange(evicts && context_only ? n_c : n, index_options).expand({heads, -1});
    } else {
      SIFT_RETURN_IF_ERROR(
          LayerIndices(l, stats, n_c, budget, question_kept, heads, index_options, &idx));
    }
    SIFT_RETURN_IF_ERROR(ApplyLayerSelection(model, state, l, idx, rerotate_));
    context.Progress("select", l + 1, layers);
  }
  if (context_only && named) FileContextState(state, context, evicts);
  if (evicts && context_only) state.last_logits = at::Tensor();  // the question is re-prefilled
  state.layer_stats.clear();
  if (!state.plan.reuse_leader.empty()) return Status::Ok();  // the reuse stage finishes
  return FinishSelection(model, state, rerotate_);
}

}  // namespace sift::plugins
