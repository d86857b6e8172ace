// Test-only: the real model named by $SIFT_MODEL loaded once per binary in fp32 (tight
// tolerances against the dense references), and short token prompts for the filter suites.
#ifndef SIFT_TESTS_FILTERS_MODEL_ENV_H_
#define SIFT_TESTS_FILTERS_MODEL_ENV_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "sift/model.h"
#include "support/model_path.h"

namespace sift::testing {

inline std::shared_ptr<const Model> Fp32Model() {
  static std::shared_ptr<const Model> model = []() -> std::shared_ptr<const Model> {
    if (ModelPath().empty()) return nullptr;
    ModelOptions options;
    options.dtype = at::kFloat;
    return Model::Load(ModelPath(), options);
  }();
  return model;
}

#define SIFT_FILTERS_REQUIRE_MODEL()                                     \
  do {                                                                   \
    if (::sift::testing::Fp32Model() == nullptr) {                       \
      GTEST_SKIP() << "set SIFT_MODEL to a GGUF model to run this test"; \
    }                                                                    \
  } while (0)

// A prompt of about `repeat` sentences of filler with a fact in the middle, and a question.
inline std::vector<TokenId> FillerPrompt(const Model& model, int repeat, int64_t* question_begin) {
  std::string context;
  for (int i = 0; i < repeat; ++i) {
    context += i == repeat / 2 ? "The secret code of the blue door is 7341. "
                               : "The grass is green and the sky is blue today. ";
  }
  std::vector<TokenId> tokens = model.tokenizer().Encode(context);
  *question_begin = static_cast<int64_t>(tokens.size());
  const std::vector<TokenId> q = model.tokenizer().Encode(" What is the secret code?");
  tokens.insert(tokens.end(), q.begin(), q.end());
  return tokens;
}

}  // namespace sift::testing

#endif  // SIFT_TESTS_FILTERS_MODEL_ENV_H_
