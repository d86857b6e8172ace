#include "prefill_partial_stage.h"

#include <chrono>
#include <string>

#include "partial_prefill.h"

namespace sift::plugins {

PrefillPartialStage::PrefillPartialStage(const StageParams& params, const Model& model)
    : block_size_(params.GetInt("block_size", 256, 1, 65536)) {}

Status PrefillPartialStage::Run(const Model& model, RequestState& state, StageContext& context) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t n = static_cast<int64_t>(state.tokens.size());
  if (n == 0) return Status(StatusCode::kInvalidArgument, "empty_prompt", "the prompt is empty");
  for (TokenId id : state.tokens) {
    if (id < 0 || id >= model.config().vocab_size) {
      return Status(StatusCode::kInvalidArgument, "bad_token",
                    "token id " + std::to_string(id) + " is outside the vocabulary");
    }
  }
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
  };
  std::map<int64_t, AttentionStats> stats;
  if (!PartialPrefill(model, state.tokens, state.plan.stats, options, &stats)) {
    return context.CancelStatus();
  }
  state.cache.reset();
  state.layer_stats = std::move(stats);
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
