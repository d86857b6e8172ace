#include "prefill_full_stage.h"

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "prefill/prefix_reuse.h"
#include "prefill/prompt_check.h"
#include "sift/prefix_cache.h"

namespace sift::plugins {
namespace {

// Thrown from the per-layer hook to abandon the forward when the request is cancelled; caught
// in Run, never leaves this library.
struct Interrupted {};

// The part of `r` that the rows [c0, c1) of an n-row prompt contribute to.
AttentionStatsRequest RequestForChunk(const AttentionStatsRequest& r, int64_t c0, int64_t c1,
                                      int64_t n) {
  AttentionStatsRequest out;
  if (r.window > 0) {
    const int64_t from = std::max(c0, n - r.window);
    if (from < c1) out.window = c1 - from;  // the window is a suffix of this chunk
  }
  out.last_query = r.last_query && c1 == n;
  out.last_query_logit_sum = r.last_query_logit_sum && c1 == n;
  out.column_sum = r.column_sum;
  if (r.max_from_query >= 0 && r.max_from_query < c1) {
    out.max_from_query = std::max<int64_t>(0, r.max_from_query - c0);
  }
  return out;
}

// Folds one chunk's statistic into the running one. Later chunks see more keys, so the running
// value is zero-padded on the key axis (the last one) before summing or taking the maximum.
void Fold(at::Tensor& acc, at::Tensor part, bool take_max) {
  if (!part.defined()) return;
  if (!acc.defined()) {
    acc = std::move(part);
    return;
  }
  at::Tensor grown = at::zeros(part.sizes(), part.options());
  grown.narrow(-1, 0, acc.size(-1)).copy_(acc);
  acc = take_max ? at::maximum(grown, part) : grown.add_(part);
}

void Merge(AttentionStats& acc, AttentionStats&& part) {
  Fold(acc.window_sum, std::move(part.window_sum), false);
  Fold(acc.column_sum, std::move(part.column_sum), false);
  Fold(acc.max_prob, std::move(part.max_prob), true);
  if (part.last_query.defined()) acc.last_query = std::move(part.last_query);
  if (part.last_query_logit_sum.defined()) {
    acc.last_query_logit_sum = std::move(part.last_query_logit_sum);
  }
}

}  // namespace

PrefillFullStage::PrefillFullStage(const StageParams& params, const Model& model)
    : chunk_size_(params.GetInt("chunk_size", 0, 0, INT64_MAX, RequestCap{64, INT64_MAX, true})),
      block_size_(params.GetInt("block_size", 256, 1, 65536, RequestCap{64, 65536})),
      prefix_cache_(params.GetBool("prefix_cache", true)),
      select_by_layer_(params.GetBool("select_by_layer", false)) {}

Status PrefillFullStage::Plan(const Model& model, RequestPlan& plan) const {
  plan.prefill_offers_layers = select_by_layer_;
  return Status::Ok();
}

int64_t PrefillFullStage::ChunkRows(int64_t rows, StageContext& context) const {
  // The pipeline's chunk_size, else the host's slice (chunks attend to the cache the earlier ones
  // filled, so the result is the same), else the whole prompt at once.
  const int64_t size = chunk_size_ > 0 ? chunk_size_ : context.slice_tokens();
  return size > 0 ? std::min(size, rows) : rows;
}

Status PrefillFullStage::RunByLayer(const Model& model, RequestState& state,
                                    StageContext& context) {
  const int64_t n = static_cast<int64_t>(state.tokens.size());
  const int64_t layers = model.config().num_layers;
  // The request takes the (empty) cache at once: the select stage edits it layer by layer.
  auto fresh = std::make_unique<KvCache>(model.NewCache());
  fresh->set_headroom(state.generation.max_tokens);
  state.AdoptPrefill(std::move(fresh), at::Tensor(), {});
  KvCache& cache = *state.cache;

  // Every chunk's rows, positions and RoPE tables, carried from layer to layer: each (layer,
  // chunk) step gets exactly the inputs the chunk-major order gives it.
  const int64_t chunk = ChunkRows(n, context);
  const int64_t chunks = (n + chunk - 1) / chunk;
  const int64_t total_steps = layers * chunks;
  std::vector<at::Tensor> x, positions;
  std::vector<RopeTables> rope;
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const int64_t c1 = std::min(n, c0 + chunk);
    positions.push_back(at::arange(c0, c1, at::kLong));  // host: positions
    x.push_back(model.EmbedTokens(state.tokens, c0, c1));
    rope.push_back(model.Rope(positions.back()));
  }
  AttentionOptions attention;
  attention.block_size = block_size_;
  // One step: one chunk through one layer; after a layer's last chunk its statistics are
  // complete and the layer goes to the select stage. The host may run other requests' steps
  // between two (StageContext::RunSteps).
  int64_t l = 0, c = 0;
  AttentionStats merged;
  const auto step = [&](bool* more) -> Status {
    if (context.Cancelled()) return context.CancelStatus();
    context.Progress("prefill", l * chunks + c, total_steps);
    if (c == 0) cache.Reserve(l, n);
    const auto asked = state.plan.stats.find(l);
    const int64_t c0 = c * chunk, c1 = std::min(n, c0 + chunk);
    const AttentionStatsRequest request = asked == state.plan.stats.end()
                                              ? AttentionStatsRequest{}
                                              : RequestForChunk(asked->second, c0, c1, n);
    AttentionStats stats;
    x[c] = model.Layer(l, x[c], positions[c], rope[c], &cache, attention, request,
                       request.any() ? &stats : nullptr);
    if (request.any()) Merge(merged, std::move(stats));
    if (++c == chunks) {
      if (asked != state.plan.stats.end()) state.layer_stats[l] = std::move(merged);
      merged = AttentionStats();
      SIFT_RETURN_IF_ERROR(state.plan.select_layer(l, state));
      c = 0;
      ++l;
    }
    *more = l < layers;
    return Status::Ok();
  };
  SIFT_RETURN_IF_ERROR(context.RunSteps(step, total_steps));
  context.Progress("prefill", total_steps, total_steps);
  const at::Tensor& last = x.back();
  state.last_logits = model.Logits(last.slice(0, last.size(0) - 1, last.size(0))).squeeze(0);
  return Status::Ok();
}

Status PrefillFullStage::Run(const Model& model, RequestState& state, StageContext& context) {
  const ModelConfig& config = model.config();
  const int64_t n = static_cast<int64_t>(state.tokens.size());
  SIFT_RETURN_IF_ERROR(CheckPrompt(model, state.tokens));
  if (state.plan.select_layer) return RunByLayer(model, state, context);

  const int64_t layers = config.num_layers;
  const int64_t max_tokens = state.generation.max_tokens;
  const PrefixCacheAccess shared = prefix_cache_ ? context.prefix_cache() : PrefixCacheAccess{};
  // A later stage caches its own product of the context (a context-only select's compressed
  // context): served whole when cached; otherwise the prompt is prefilled and not stored, since
  // that stage files what it keeps of the context.
  const int64_t qb = state.question_begin;
  const bool context_state = !state.plan.context_state.empty() && 0 < qb && qb < n;
  if (context_state && shared.cache != nullptr) {
    std::optional<PrefixCache::Hit> hit;
    try {
      const std::vector<TokenId> context_tokens(state.tokens.begin(), state.tokens.begin() + qb);
      hit = shared.cache->LookupState(state.plan.context_state, context_tokens, qb,
                                      n - qb + max_tokens, qb);
    } catch (const std::exception&) {
      hit.reset();  // no memory for the copy: prefill instead
    }
    if (hit.has_value()) {
      auto cache = std::make_unique<KvCache>(std::move(hit->cache));
      cache->set_headroom(max_tokens);
      state.AdoptContextState(std::move(cache));
      context.Progress("prefill", 1, 1);
      return Status::Ok();
    }
  }
  // A cached prefix of the prompt, else a fresh cache; sized once for the prompt and the answer
  // either way: decode appends into free slots.
  PrefixStart start = StartFromPrefixCache(
      shared, state.tokens, ReusableTokens(state.plan.stats, n), max_tokens, model.CacheShape());
  std::unique_ptr<KvCache> cache = std::move(start.cache);
  const int64_t reused = start.reused;
  cache->set_headroom(max_tokens);
  for (int64_t l = 0; l < layers; ++l) cache->Reserve(l, n - reused);
  const int64_t chunk = ChunkRows(n - reused, context);
  const int64_t chunks = (n - reused + chunk - 1) / chunk;
  const int64_t total_steps = layers * chunks;

  std::map<int64_t, AttentionStats> stats;
  int64_t c0 = reused, c1 = reused, chunk_index = 0;
  ForwardOptions options;
  options.attention.block_size = block_size_;
  options.hooks.stats_request = [&](int64_t layer) {
    if (context.Cancelled()) throw Interrupted{};
    if (c0 > 0 || layer > 0) context.Yield();  // other requests' decode steps may run here
    context.Progress("prefill", chunk_index * layers + layer, total_steps);
    auto it = state.plan.stats.find(layer);
    if (it == state.plan.stats.end()) return AttentionStatsRequest{};
    return RequestForChunk(it->second, c0, c1, n);
  };
  options.hooks.on_stats = [&](int64_t layer, AttentionStats&& s) {
    Merge(stats[layer], std::move(s));
  };

  at::Tensor logits;
  try {
    for (; c0 < n; c0 = c1, ++chunk_index) {
      c1 = std::min(n, c0 + chunk);
      std::vector<TokenId> ids(state.tokens.begin() + c0, state.tokens.begin() + c1);
      logits = model.Forward(ids, c0, *cache, options);
    }
  } catch (const Interrupted&) {
    return context.CancelStatus();
  }
  context.Progress("prefill", total_steps, total_steps);

  if (!context_state) StoreInPrefixCache(shared, state.tokens, *cache);
  state.AdoptPrefill(std::move(cache), std::move(logits), std::move(stats));
  state.cached_tokens += reused;
  return Status::Ok();
}

}  // namespace sift::plugins
