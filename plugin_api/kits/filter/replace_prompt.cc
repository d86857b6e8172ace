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
  if (question_begin < 0) question_begin = static_cast<int64_t>(tokens.size());
  state.ResetForNewTokens(std::move(tokens), question_begin);
}

}  // namespace sift::plugins
