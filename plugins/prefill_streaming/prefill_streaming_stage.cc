#include "prefill_streaming_stage.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

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
  StreamingScores scores;
  if (!StreamingPrefill(model, state.tokens, question_begin, layers, options, &scores)) {
    return context.CancelStatus();
  }
  state.question_begin = question_begin;
  std::map<int64_t, AttentionStats> stats;
  for (auto& [layer, a] : scores.scores) stats[layer].max_prob = std::move(a);
  state.AdoptScores(std::move(stats));
  return Status::Ok();
}

}  // namespace sift::plugins
