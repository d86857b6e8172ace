// Request building with the real SmolLM2 tokenizer ($SIFT_MODEL): the question span of each
// input mode, BOS handling, token validation.
#include "daemon/request_builder.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "sift/gguf.h"

namespace sift::daemon {
namespace {

class RequestBuilderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* path = std::getenv("SIFT_MODEL");
    if (!path) return;
    auto file = GgufFile::Open(path);
    tokenizer_ = Tokenizer::FromGguf(*file).release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  void SetUp() override {
    if (!tokenizer_) GTEST_SKIP() << "SIFT_MODEL not set";
  }
  std::string Text(const std::vector<TokenId>& ids, size_t from) const {
    return tokenizer_->Decode(std::vector<TokenId>(ids.begin() + from, ids.end()));
  }
  static inline Tokenizer* tokenizer_ = nullptr;
};

TEST_F(RequestBuilderTest, ContextQuestionSpanStartsAtTheQuestion) {
  GenerateRequest g;
  g.input = InputKind::kContextQuestion;
  g.context = "The shed's code is 4417.";
  g.question = "What is the code?";
  TokenizedPrompt p;
  nlohmann::json details;
  ASSERT_TRUE(TokenizePrompt(*tokenizer_, g, 32, &p, &details).ok());
  EXPECT_TRUE(p.exact_split);
  const std::string question = Text(p.tokens, p.question_begin);
  EXPECT_EQ(question.rfind("What is the code?", 0), 0u) << question;
  EXPECT_NE(question.find("<|im_start|>assistant\n"), std::string::npos);
  const std::string before = tokenizer_->Decode(
      std::vector<TokenId>(p.tokens.begin(), p.tokens.begin() + p.question_begin));
  EXPECT_NE(before.find("<|im_start|>user\nThe shed's code is 4417.\n\n"), std::string::npos)
      << before;
  // SmolLM2's template injects its default system prompt.
  EXPECT_EQ(before.rfind("<|im_start|>system\n", 0), 0u) << before;
}

TEST_F(RequestBuilderTest, MessagesSpanIsTheLastMessage) {
  GenerateRequest g;
  g.input = InputKind::kMessages;
  g.messages = {
      {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Name a colour."}};
  TokenizedPrompt p;
  nlohmann::json details;
  ASSERT_TRUE(TokenizePrompt(*tokenizer_, g, 32, &p, &details).ok());
  EXPECT_TRUE(p.exact_split);
  EXPECT_EQ(Text(p.tokens, p.question_begin).rfind("Name a colour.<|im_end|>", 0), 0u);
}

TEST_F(RequestBuilderTest, PromptAndTokensUseTheLastTokens) {
  GenerateRequest g;
  g.input = InputKind::kPrompt;
  g.prompt = "one two three four five six seven eight";
  g.question_tokens = 3;
  TokenizedPrompt p;
  nlohmann::json details;
  ASSERT_TRUE(TokenizePrompt(*tokenizer_, g, 32, &p, &details).ok());
  EXPECT_EQ(p.question_begin, static_cast<int64_t>(p.tokens.size()) - 3);
  EXPECT_EQ(p.tokens, tokenizer_->Encode(g.prompt));  // SmolLM2 adds no BOS
  g.question_tokens = -1;                             // default 32 > length: the whole prompt
  ASSERT_TRUE(TokenizePrompt(*tokenizer_, g, 32, &p, &details).ok());
  EXPECT_EQ(p.question_begin, 0);

  GenerateRequest t;
  t.input = InputKind::kTokens;
  t.tokens = {1, 2, 3, 4};
  ASSERT_TRUE(TokenizePrompt(*tokenizer_, t, 2, &p, &details).ok());
  EXPECT_EQ(p.question_begin, 2);
  t.tokens = {1, 999999};
  Status st = TokenizePrompt(*tokenizer_, t, 2, &p, &details);
  EXPECT_EQ(st.reason(), "bad_token");
  EXPECT_EQ(details["index"], 1);
}

}  // namespace
}  // namespace sift::daemon
