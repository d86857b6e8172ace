#include "filter/replace_prompt.h"

#include "sift/error.h"

namespace sift::plugins {

void ReplacePrompt(RequestState& state, const std::vector<int64_t>& kept) {
  const int64_t n = static_cast<int64_t>(state.tokens.size());
  std::vector<TokenId> tokens;
  tokens.reserve(kept.size());
  int64_t question_begin = -1;
  for (size_t i = 0; i < kept.size(); ++i) {
    SIFT_CHECK(kept[i] >= 0 && kept[i] < n, "filter: kept index ", kept[i], " outside [0, ", n,
               ")");
    if (question_begin < 0 && kept[i] >= state.question_begin) {
      question_begin = static_cast<int64_t>(i);
    }
    tokens.push_back(state.tokens[kept[i]]);
  }
  if (state.prompt_length == 0) state.prompt_length = n;
  state.tokens = std::move(tokens);
  state.question_begin =
      question_begin < 0 ? static_cast<int64_t>(state.tokens.size()) : question_begin;
  state.cache.reset();
  state.layer_stats.clear();
  state.last_logits = at::Tensor();
  state.hidden = at::Tensor();
  state.layer_cursor = 0;
  state.next_position = 0;
  state.kept_indices.clear();
  state.stats.tokens_kept = static_cast<int64_t>(state.tokens.size());
}

}  // namespace sift::plugins
