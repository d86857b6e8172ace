#include "prefill_streaming_stage.h"

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "prefill/prefix_reuse.h"
#include "prefill/prompt_check.h"
#include "sift/prefix_cache.h"

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
  full_ = params.GetString("mode", "retrieval", {"retrieval", "full"}) == "full";
}

Status PrefillStreamingStage::RunFull(const Model& model, RequestState& state,
                                      StageContext& context) {
  SIFT_RETURN_IF_ERROR(CheckPrompt(model, state.tokens));
  if (!state.plan.stats.empty()) {
    return Status(StatusCode::kFailedPrecondition, "stats_unsupported",
                  "prefill_streaming with mode = \"full\" collects no attention statistics, and "
                  "a later stage asked for some: use prefill_full before a select stage");
  }
  const int64_t n = static_cast<int64_t>(state.tokens.size());
  const int64_t max_tokens = state.generation.max_tokens;
  // The rolling state after the context (the question's start) serves other questions about it;
  // the state after the whole prompt serves the next turn of a conversation.
  const int64_t question_begin =
      state.question_begin > 0 && state.question_begin < n ? state.question_begin : 0;
  PrefixCacheAccess shared = prefix_cache_ ? context.prefix_cache() : PrefixCacheAccess{};
  shared.scope += "/rolling:sink=" + std::to_string(options_.sink) +
                  ",window=" + std::to_string(options_.window);
  std::unique_ptr<KvCache> cache;
  int64_t reused = 0;
  if (shared.cache != nullptr) {
    try {
      // The last prompt token always runs: its row gives the first token's logits.
      auto hit = shared.cache->LookupState(shared.scope, state.tokens, n - 1, max_tokens);
      if (hit) {
        cache = std::make_unique<KvCache>(std::move(hit->cache));
        reused = hit->tokens;
      }
    } catch (const std::exception&) {
      reused = 0;  // no memory for the copy: stream the whole prompt
    }
  }
  if (cache == nullptr) cache = std::make_unique<KvCache>(model.CacheShape());
  cache->set_headroom(max_tokens);

  StreamingPrefillOptions options = options_;
  options.cancelled = [&] { return context.Cancelled(); };
  options.progress = [&](int64_t done, int64_t total) {
    context.Progress("prefill_streaming", done, total);
    context.Yield();  // other requests' decode steps may run between steps
  };
  KvCache context_state(model.CacheShape());
  at::Tensor logits;
  // Chunks end at the question's start whether or not the state there is cached, so that a
  // question asked again from the cached state runs exactly the rows a fresh daemon runs (in bf16
  // too), and answers alike.
  if (!StreamingForward(model, state.tokens, reused, question_begin, options, cache.get(),
                        shared.cache != nullptr ? &context_state : nullptr, &logits)) {
    return context.CancelStatus();
  }
  if (shared.cache != nullptr) {
    try {
      // One conversation or document keeps two entries: this prompt's state replaces the
      // earlier turns' (and questions') except the context's, which is then (re)stored.
      shared.cache->InsertState(shared.scope, state.tokens, *cache, question_begin);
      if (question_begin > reused) {
        const std::vector<TokenId> context_tokens(state.tokens.begin(),
                                                  state.tokens.begin() + question_begin);
        shared.cache->InsertState(shared.scope, context_tokens, context_state, -1);
      }
    } catch (const std::exception&) {
      // No memory for a copy: the request goes on, its states are not cached.
    }
  }
  state.AdoptPrefill(std::move(cache), std::move(logits), {});
  state.cached_tokens += reused;
  return Status::Ok();
}

Status PrefillStreamingStage::Run(const Model& model, RequestState& state, StageContext& context) {
  if (full_) return RunFull(model, state, context);
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
