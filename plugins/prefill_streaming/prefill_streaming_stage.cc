#include "prefill_streaming_stage.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "prefill/prefix_reuse.h"
#include "prefill/prompt_check.h"

namespace sift::plugins {

PrefillStreamingStage::PrefillStreamingStage(const StageParams& params, const Model& model) {
  options_.sink = params.GetInt("sink", 4, 0, 65536);
  options_.window = params.GetInt("window", 512, 1, int64_t{1} << 20);
  options_.chunk =
      params.GetInt("chunk", 1024, 1, int64_t{1} << 20, RequestCap{64, int64_t{1} << 20});
  options_.block_size = params.GetInt("block_size", 256, 1, 65536, RequestCap{64, 65536});
  options_.include_query_keys = params.GetBool("include_query_keys", false);
  options_.fallback_query = params.GetInt("fallback_query", 32, 1, 4096);
  prefix_cache_ = params.GetBool("prefix_cache", true);
}

Status PrefillStreamingStage::Run(const Model& model, RequestState& state, StageContext& context) {
  const int64_t n = static_cast<int64_t>(state.tokens.size());
  SIFT_RETURN_IF_ERROR(CheckPromptTokens(model, state.tokens));
  std::set<int64_t> layers;
  for (const auto& [layer, request] : state.plan.stats) {
    if (request.max_from_query >= 0) layers.insert(layer);
  }
  if (layers.empty()) {
    return Status(StatusCode::kFailedPrecondition, "nothing_planned",
                  "prefill_streaming computes retrieval scores for a later stage (max_prob), and "
                  "none asked: put a filter such as ilre after it");
  }
  int64_t question_begin = state.question_begin;
  if (question_begin >= n) question_begin = n - options_.fallback_query;
  question_begin = std::max<int64_t>(question_begin, 0);  // all question: nothing to score
  StreamingPrefillOptions options = options_;
  options.cancelled = [&] { return context.Cancelled(); };
  options.progress = [&](int64_t done, int64_t total) {
    context.Progress("prefill_streaming", done, total);
    context.Yield();  // other requests' decode steps may run between steps
  };
  // With the host's prefix cache the pass keeps layers 0..R's KV of every row (the archive): it
  // starts from a cached prefix of the context and stores its own prompt. Entries are filed per
  // mask and depth, which the KV depends on (chunk and block size do not change it).
  PrefixCacheAccess shared = prefix_cache_ ? context.prefix_cache() : PrefixCacheAccess{};
  PrefixStart start;
  if (shared.cache != nullptr) {
    const int64_t depth = *layers.rbegin() + 1;
    shared.scope += "/sink=" + std::to_string(options_.sink) +
                    ",window=" + std::to_string(options_.window) +
                    ",layers=" + std::to_string(depth);
    KvCacheShape shape = model.CacheShape();
    shape.num_layers = depth;
    // The query part's rows always run: their queries give the scores.
    start = StartFromPrefixCache(shared, state.tokens, question_begin, 0, shape);
    for (int64_t l = 0; l < depth; ++l) start.cache->Reserve(l, n - start.reused);
    options.archive = start.cache.get();
    options.cached = start.reused;
  }
  StreamingScores scores;
  if (!StreamingPrefill(model, state.tokens, question_begin, layers, options, &scores)) {
    return context.CancelStatus();
  }
  // A prompt with no context to score runs nothing and leaves nothing worth storing.
  if (start.cache != nullptr && start.cache->size(0) == n) {
    StoreInPrefixCache(shared, state.tokens, *start.cache);
  }
  start.cache.reset();  // the pass's KV is not a product: the filter re-prefills what it keeps
  state.cached_tokens += start.reused;
  state.question_begin = question_begin;
  std::map<int64_t, AttentionStats> stats;
  for (auto& [layer, a] : scores.scores) stats[layer].max_prob = std::move(a);
  state.AdoptScores(std::move(stats));
  return Status::Ok();
}

}  // namespace sift::plugins
