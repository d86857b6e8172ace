#include "filter/scoring_pass.h"

#include <utility>

namespace sift::plugins {

void FinishScoringPass(RequestState& state, std::map<int64_t, AttentionStats> stats,
                       std::chrono::steady_clock::time_point start) {
  state.cache.reset();
  state.layer_stats = std::move(stats);
  state.last_logits = at::Tensor();
  state.hidden = at::Tensor();
  state.layer_cursor = 0;
  state.kept_indices.clear();
  if (state.prompt_length == 0) state.prompt_length = static_cast<int64_t>(state.tokens.size());
  state.stats.prefill_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace sift::plugins
