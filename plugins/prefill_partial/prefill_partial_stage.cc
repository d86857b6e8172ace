#include "prefill_partial_stage.h"

#include <string>

#include "partial_prefill.h"
#include "prefill/prefix_reuse.h"
#include "prefill/prompt_check.h"

namespace sift::plugins {

PrefillPartialStage::PrefillPartialStage(const StageParams& params, const Model& model)
    : block_size_(params.GetInt("block_size", 256, 1, 65536, RequestCap{64, 65536})),
      prefix_cache_(params.GetBool("prefix_cache", true)) {}

Status PrefillPartialStage::Run(const Model& model, RequestState& state, StageContext& context) {
  SIFT_RETURN_IF_ERROR(CheckPromptTokens(model, state.tokens));
  if (state.plan.stats.empty()) {
    return Status(StatusCode::kFailedPrecondition, "nothing_planned",
                  "prefill_partial runs up to the deepest layer a later stage needs statistics "
                  "of, and none asked: put a filter such as gemfilter after it");
  }
  PartialPrefillOptions options;
  options.block_size = block_size_;
  options.cancelled = [&] { return context.Cancelled(); };
  options.progress = [&](int64_t done, int64_t total) {
    context.Progress("prefill_partial", done, total);
    context.Yield();  // other requests' decode steps may run between layers
  };
  // With the host's prefix cache, the pass keeps layers 0..r's KV: it starts from a cached
  // prefix's and stores its own prompt's. Entries are filed per depth (another r, another scope).
  PrefixCacheAccess shared = prefix_cache_ ? context.prefix_cache() : PrefixCacheAccess{};
  const int64_t depth = state.plan.stats.rbegin()->first + 1;
  const int64_t n = static_cast<int64_t>(state.tokens.size());
  PrefixStart start;
  if (shared.cache != nullptr) {
    shared.scope += "/layers=" + std::to_string(depth);
    KvCacheShape shape = model.CacheShape();
    shape.num_layers = depth;
    start =
        StartFromPrefixCache(shared, state.tokens, ReusableTokens(state.plan.stats, n), 0, shape);
    for (int64_t l = 0; l < depth; ++l) start.cache->Reserve(l, n - start.reused);
    options.cache = start.cache.get();
    options.cached = start.reused;
  }
  std::map<int64_t, AttentionStats> stats;
  if (!PartialPrefill(model, state.tokens, state.plan.stats, options, &stats)) {
    return context.CancelStatus();
  }
  if (start.cache != nullptr) StoreInPrefixCache(shared, state.tokens, *start.cache);
  start.cache.reset();  // the pass's KV is not a product: the filter re-prefills what it keeps
  state.AdoptScores(std::move(stats));
  state.cached_tokens += start.reused;
  return Status::Ok();
}

}  // namespace sift::plugins
