// The tokenizer of the real SmolLM2-135M-Instruct GGUF ($SIFT_MODEL; skipped when unset):
// metadata it must pick up, self-consistency of the vocabulary, round trips, the chat prompt,
// the exact ids of Hugging Face `tokenizers` (tests/fixtures/reference/tokenizer.json, written
// by tools/make_reference_fixtures.py; a missing fixture is a failure) and encode speed.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "sift/gguf.h"
#include "sift/tokenizer.h"

namespace sift {
namespace {

constexpr TokenId kNewline = 198;         // "Ċ"
constexpr TokenId kDoubleNewline = 1116;  // "ĊĊ"
constexpr char kFixture[] = SIFT_SOURCE_DIR "/tests/fixtures/reference/tokenizer.json";

class SmolLM2TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* path = std::getenv("SIFT_MODEL");
    if (path == nullptr || *path == '\0') return;
    file_ = GgufFile::Open(path).release();
    tokenizer_ = Tokenizer::FromGguf(*file_).release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete file_;
    tokenizer_ = nullptr;
    file_ = nullptr;
  }
  void SetUp() override {
    if (tokenizer_ == nullptr) GTEST_SKIP() << "SIFT_MODEL is not set";
  }

  static nlohmann::json LoadFixture() {
    std::ifstream in(kFixture);
    if (!in) {
      ADD_FAILURE() << "missing reference fixture " << kFixture
                    << " (generate it with tools/make_reference_fixtures.py)";
      return nlohmann::json();
    }
    return nlohmann::json::parse(in);
  }

  static inline const GgufFile* file_ = nullptr;
  static inline const Tokenizer* tokenizer_ = nullptr;
};

TEST_F(SmolLM2TokenizerTest, Metadata) {
  const Tokenizer& tok = *tokenizer_;
  EXPECT_EQ(tok.vocab_size(), 49152);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.eog_ids(), (std::vector<TokenId>{0, 2}));
  EXPECT_EQ(tok.TokenText(0), "<|endoftext|>");
  EXPECT_EQ(tok.TokenText(1), "<|im_start|>");
  EXPECT_EQ(tok.TokenText(2), "<|im_end|>");
  int specials = 0;
  for (TokenId id = 0; id < tok.vocab_size(); ++id) specials += tok.IsSpecial(id) ? 1 : 0;
  EXPECT_EQ(specials, 17);
  EXPECT_EQ(tok.chat_template().format(), ChatFormat::kChatML);
  EXPECT_EQ(tok.chat_template().default_system(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  const TokenizerSpec spec = TokenizerSpec::FromGguf(*file_);
  EXPECT_EQ(spec.model, "gpt2");
  EXPECT_EQ(spec.pre, "smollm");
  EXPECT_EQ(spec.merges.size(), 48900u);
}

TEST_F(SmolLM2TokenizerTest, EveryMergeAndItsResultIsInTheVocabulary) {
  const GgufValue* merges = file_->Find("tokenizer.ggml.merges");
  ASSERT_NE(merges, nullptr);
  size_t checked = 0;
  for (const std::string_view merge : merges->AsStringArray()) {
    const size_t space = merge.find(' ', 1);
    ASSERT_NE(space, std::string_view::npos) << merge;
    const std::string left(merge.substr(0, space));
    const std::string right(merge.substr(space + 1));
    EXPECT_GE(tokenizer_->FindToken(left), 0) << merge;
    EXPECT_GE(tokenizer_->FindToken(right), 0) << merge;
    EXPECT_GE(tokenizer_->FindToken(left + right), 0) << merge;
    ++checked;
  }
  EXPECT_EQ(checked, 48900u);
}

TEST_F(SmolLM2TokenizerTest, TwentyOneBytesHaveNoSymbol) {
  std::vector<bool> has_symbol(256, false);
  for (TokenId id = 0; id < tokenizer_->vocab_size(); ++id) {
    const std::string bytes = tokenizer_->TokenBytes(id);
    if (bytes.size() == 1) has_symbol[static_cast<uint8_t>(bytes[0])] = true;
  }
  std::vector<int> missing;
  for (int b = 0; b < 256; ++b) {
    if (!has_symbol[b]) missing.push_back(b);
  }
  EXPECT_EQ(missing,
            (std::vector<int>{0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, 0xF5,
                              0xF6, 0xF7, 0xF8, 0xF9, 0xFA, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF}));
  // Such bytes are dropped, not mapped to <|endoftext|>.
  EXPECT_TRUE(tokenizer_->Encode("\x04").empty());
  EXPECT_EQ(tokenizer_
                ->Encode("a\x1d"
                         "b")
                .size(),
            2u);
}

TEST_F(SmolLM2TokenizerTest, NewlinesAndDigits) {
  const Tokenizer& tok = *tokenizer_;
  EXPECT_EQ(tok.Encode("\n"), (std::vector<TokenId>{kNewline}));
  EXPECT_EQ(tok.Encode("\n\n"), (std::vector<TokenId>{kDoubleNewline}));
  const std::vector<TokenId> ids = tok.Encode("a\n\nb");
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[1], kNewline);
  EXPECT_EQ(ids[2], kNewline);
  // " 1" is two tokens: the space is not merged with the digit.
  const std::vector<TokenId> digit = tok.Encode(" 1");
  ASSERT_EQ(digit.size(), 2u);
  EXPECT_EQ(tok.TokenText(digit[0]), "Ġ");
  EXPECT_EQ(tok.TokenText(digit[1]), "1");
}

TEST_F(SmolLM2TokenizerTest, DecodeOfEncodeIsIdentity) {
  std::vector<std::string> texts = {
      "Hello, world!",
      "  two leading, trailing two  ",
      "tabs\tand\nnewlines\r\n\r\nand  runs   of    spaces",
      "Digits 0123456789 and 3.14159 and -42",
      "Emoji 😀👍🏽🎉 and CJK 你好世界 and Ελληνικά and Русский",
      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
      "Mixed: café, naïve, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢, ½, Ⅻ, x²",
  };
  // Random strings over assorted scripts (no code point whose UTF-8 uses a missing byte).
  const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {0x20, 0x7E},     {0x09, 0x0A},     {0xA0, 0x17F},     {0x370, 0x3FF},
      {0x400, 0x4FF},   {0x600, 0x6FF},   {0x900, 0x97F},    {0x3040, 0x30FF},
      {0x4E00, 0x4FFF}, {0xAC00, 0xAD00}, {0x1F300, 0x1F64F}};
  std::mt19937 rng(1234);
  for (int i = 0; i < 300; ++i) {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int j = 0; j < n; ++j) {
      const auto& r = ranges[rng() % ranges.size()];
      const uint32_t cp = r.first + rng() % (r.second - r.first + 1);
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else if (cp < 0x800) {
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      } else if (cp < 0x10000) {
        s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      } else {
        s.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        s.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
    }
    texts.push_back(s);
  }
  for (const std::string& text : texts) {
    EXPECT_EQ(tokenizer_->Decode(tokenizer_->Encode(text)), text);
    // Streaming gives the same text, token by token.
    StreamingDetokenizer detok(*tokenizer_, /*skip_special=*/false);
    std::string streamed;
    for (const TokenId id : tokenizer_->Encode(text)) streamed += detok.Push(id);
    streamed += detok.Flush();
    EXPECT_EQ(streamed, text);
  }
}

TEST_F(SmolLM2TokenizerTest, ChatPromptStartsWithImStart) {
  const std::string prompt = tokenizer_->chat_template().Render({{"user", "What is 2+2?"}},
                                                                /*add_generation_prompt=*/true);
  EXPECT_EQ(prompt,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<TokenId> ids = tokenizer_->Encode(prompt);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 3);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 2);
  // The generation prompt: <|im_start|> then "assistant\n" as ordinary text.
  const auto last_start = std::find(ids.rbegin(), ids.rend(), 1).base();
  EXPECT_EQ(tokenizer_->Decode(std::vector<TokenId>(last_start, ids.end())), "assistant\n");
  EXPECT_EQ(ids.back(), kNewline);
  EXPECT_EQ(tokenizer_->Decode(ids), prompt);
}

TEST_F(SmolLM2TokenizerTest, MatchesHuggingFaceReferenceIds) {
  const nlohmann::json fixture = LoadFixture();
  ASSERT_TRUE(fixture.contains("cases")) << kFixture;
  ASSERT_GT(fixture["cases"].size(), 0u);
  int mismatches = 0;
  for (const auto& c : fixture["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const auto expected = c["ids"].get<std::vector<TokenId>>();
    const std::vector<TokenId> ids = tokenizer_->Encode(text);
    if (ids != expected) ++mismatches;
    EXPECT_EQ(ids, expected) << "text: '" << text << "'";
    if (c.contains("decodes_to_text")) {
      EXPECT_EQ(tokenizer_->Decode(expected) == text, c["decodes_to_text"].get<bool>())
          << "text: '" << text << "'";
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << fixture["cases"].size() << " cases";
}

TEST_F(SmolLM2TokenizerTest, ConcurrentEncodesAgree) {
  const std::string text = "The quick brown fox jumps over the lazy dog 1234 times. ";
  const std::vector<TokenId> expected = tokenizer_->Encode(text);
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) bad[t] += tokenizer_->Encode(text) != expected;
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(bad, (std::vector<int>(4, 0)));
}

TEST_F(SmolLM2TokenizerTest, EncodesEightThousandTokensQuickly) {
  // English prose: the longest fixture text (a Paul Graham essay excerpt) repeated.
  const nlohmann::json fixture = LoadFixture();
  ASSERT_TRUE(fixture.contains("cases"));
  std::string essay;
  for (const auto& c : fixture["cases"]) {
    const std::string text = c["text"].get<std::string>();
    if (text.size() > essay.size() && text.find("<|") == std::string::npos) essay = text;
  }
  ASSERT_GT(essay.size(), 1000u);
  std::string text;
  while (tokenizer_->Encode(text).size() < 8192) text += essay + "\n\n";
  // A fresh tokenizer, so that the first encode runs with an empty piece cache (the repeated
  // essay then hits the cache after its first copy; distinct text hits it less).
  const std::unique_ptr<Tokenizer> fresh = Tokenizer::FromGguf(*file_);
  using Ms = std::chrono::duration<double, std::milli>;
  auto start = std::chrono::steady_clock::now();
  const size_t n = fresh->Encode(text).size();
  const double first_ms = Ms(std::chrono::steady_clock::now() - start).count();
  double best_ms = 1e9;
  for (int run = 0; run < 5; ++run) {
    start = std::chrono::steady_clock::now();
    fresh->Encode(text);
    best_ms = std::min(best_ms, Ms(std::chrono::steady_clock::now() - start).count());
  }
  std::printf("encode: %zu tokens (%zu bytes): first %.2f ms, then best %.2f ms\n", n, text.size(),
              first_ms, best_ms);
#if defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(first_ms, 50.0);
#endif
}

}  // namespace
}  // namespace sift
