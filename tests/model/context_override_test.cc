// ModelOptions::context_length: the context limit a daemon's --n-ctx (and sift-engine-bench's)
// sets, including past the model's trained context (speed measurements at 32K on an 8K model, as
// llama-bench allows). Needs the real SmolLM2 GGUF ($SIFT_MODEL).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "prefill/prompt_check.h"
#include "sift/model.h"
#include "support/model_path.h"

namespace sift {
namespace {

using ::sift::testing::ModelPath;

TEST(ContextOverrideTest, DefaultIsTheTrainedContextAndPromptsPastItAreRefused) {
  SIFT_SKIP_WITHOUT_MODEL();
  const auto model = Model::Load(ModelPath(), ModelOptions{});
  ASSERT_EQ(model->config().context_length, 8192);
  const std::vector<TokenId> prompt(8300, 42);
  const Status s = plugins::CheckPrompt(*model, prompt);
  EXPECT_EQ(s.reason(), "prompt_too_long") << s.ToString();
}

TEST(ContextOverrideTest, LargerLimitAdmitsLongerPromptsAndDecodesPastTheTrainedContext) {
  SIFT_SKIP_WITHOUT_MODEL();
  ModelOptions options;
  options.context_length = 8400;
  const auto model = Model::Load(ModelPath(), options);
  EXPECT_EQ(model->config().context_length, 8400);
  const std::vector<TokenId> prompt(8300, 42);
  EXPECT_TRUE(plugins::CheckPrompt(*model, prompt).ok());
  // A few tokens at RoPE positions past 8192 run and give finite logits.
  KvCache cache = model->NewCache();
  const at::Tensor logits = model->Forward({1, 2, 3, 4}, 8290, cache);
  EXPECT_TRUE(at::isfinite(logits).all().item<bool>());
  EXPECT_EQ(cache.size(0), 4);
}

TEST(ContextOverrideTest, SmallerLimitRefusesEarlierAndNegativeIsAnError) {
  SIFT_SKIP_WITHOUT_MODEL();
  ModelOptions options;
  options.context_length = 100;
  const auto model = Model::Load(ModelPath(), options);
  EXPECT_EQ(plugins::CheckPrompt(*model, std::vector<TokenId>(101, 42)).reason(),
            "prompt_too_long");
  options.context_length = -1;
  EXPECT_ANY_THROW(Model::Load(ModelPath(), options));
}

}  // namespace
}  // namespace sift
