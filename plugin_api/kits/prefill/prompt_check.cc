#include "prefill/prompt_check.h"

#include <string>

namespace sift::plugins {

Status CheckPromptTokens(const Model& model, const std::vector<TokenId>& tokens) {
  if (tokens.empty()) {
    return Status(StatusCode::kInvalidArgument, "empty_prompt", "the prompt is empty");
  }
  const int64_t vocab = model.config().vocab_size;
  for (TokenId id : tokens) {
    if (id < 0 || id >= vocab) {
      return Status(StatusCode::kInvalidArgument, "bad_token",
                    "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                        std::to_string(vocab) + ")");
    }
  }
  return Status::Ok();
}

Status CheckPrompt(const Model& model, const std::vector<TokenId>& tokens) {
  const ModelConfig& config = model.config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n > 0 && config.context_length > 0 && n > config.context_length) {
    return Status(StatusCode::kInvalidArgument, "prompt_too_long",
                  "the prompt has " + std::to_string(n) + " tokens; the model's context is " +
                      std::to_string(config.context_length));
  }
  return CheckPromptTokens(model, tokens);
}

}  // namespace sift::plugins
