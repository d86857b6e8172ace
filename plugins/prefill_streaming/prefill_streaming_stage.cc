#include "prefill_streaming_stage.h"

#include <chrono>
#include <set>
#include <string>

namespace sift::plugins {

PrefillStreamingStage::PrefillStreamingStage(const StageParams& params, const Model& model) {
  options_.sink = params.GetInt("sink", 4, 0, 65536);
  options_.window = params.GetInt("window", 512, 1, int64_t{1} << 20);
  options_.chunk = params.GetInt("chunk", 1024, 1, int64_t{1} << 20);
  options_.block_size = params.GetInt("block_size", 256, 1, 65536);
  options_.include_query_keys = params.GetBool("include_query_keys", false);
  options_.fallback_query = params.GetInt("fallback_query", 32, 1, 4096);
}

Status PrefillStreamingStage::Run(const Model& model, RequestState& state, StageContext& context) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t n = static_cast<int64_t>(state.tokens.size());
  if (n == 0) return Status(StatusCode::kInvalidArgument, "empty_prompt", "the prompt is empty");
  for (TokenId id : state.tokens) {
    if (id < 0 || id >= model.config().vocab_size) {
      return Status(StatusCode::kInvalidArgument, "bad_token",
                    "token id " + std::to_string(id) + " is outside the vocabulary");
    }
  }
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
  if (question_begin <= 0) {
    return Status(StatusCode::kInvalidArgument, "no_context",
                  "prefill_streaming needs context tokens before the question");
  }
  StreamingPrefillOptions options = options_;
  options.cancelled = [&] { return context.Cancelled(); };
  options.progress = [&](int64_t done, int64_t total) {
    context.Progress("prefill_streaming", done, total);
  };
  StreamingScores scores;
  if (!StreamingPrefill(model, state.tokens, question_begin, layers, options, &scores)) {
    return context.CancelStatus();
  }
  state.question_begin = question_begin;
  state.cache.reset();
  state.layer_stats.clear();
  for (auto& [layer, a] : scores.scores) state.layer_stats[layer].max_prob = std::move(a);
  state.last_logits = at::Tensor();
  state.hidden = at::Tensor();
  state.layer_cursor = 0;
  state.kept_indices.clear();
  if (state.prompt_length == 0) state.prompt_length = n;
  state.stats.prefill_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return Status::Ok();
}

}  // namespace sift::plugins
