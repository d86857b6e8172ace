// Tokenizer unit tests on small hand-built vocabularies (TokenizerSpec), plus white-box tests of
// the pre-tokenizer splits. Expected splits were cross-checked against Python's `regex` module
// running the same patterns.
#include "sift/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "../../plugin_api/src/base/pretokenizer.h"
#include "sift/error.h"
#include "support/byte_level_vocab.h"

namespace sift {
namespace {

using testing::ByteLevelSpec;
using testing::ByteSymbol;
using testing::Mapped;

using Strings = std::vector<std::string>;

// ---------------------------------------------------------------------------------------------
// Pre-tokenizer splits.

struct SplitCase {
  std::string text;
  Strings pieces;
};

Strings Split(PreTokenizer kind, std::string_view text) {
  std::vector<std::string_view> views;
  PreTokenize(kind, text, &views);
  return Strings(views.begin(), views.end());
}

void ExpectSplits(PreTokenizer kind, const std::vector<SplitCase>& cases) {
  for (const SplitCase& c : cases) {
    EXPECT_EQ(Split(kind, c.text), c.pieces) << PreTokenizerName(kind) << " on '" << c.text << "'";
  }
}

TEST(PreTokenizerTest, Gpt2) {
  ExpectSplits(PreTokenizer::kGpt2, {
                                        {"a  b", {"a", " ", " b"}},
                                        {"a\n\nb", {"a", "\n", "\n", "b"}},
                                        {"a\n\n", {"a", "\n\n"}},
                                        {"hello   ", {"hello", "   "}},
                                        {"  hi", {" ", " hi"}},
                                        {"2023-2025", {"2023", "-", "2025"}},
                                        {"IT'S", {"IT", "'", "S"}},
                                        {"y'all", {"y", "'", "all"}},
                                        {"don't we'll", {"don", "'t", " we", "'ll"}},
                                        {"Hi!!! ...ok?", {"Hi", "!!!", " ...", "ok", "?"}},
                                        {"你好世界 ok", {"你好世界", " ok"}},
                                        {"😀👍 x", {"😀👍", " x"}},
                                        {"a 12b", {"a", " 12", "b"}},
                                        {"$250,000", {"$", "250", ",", "000"}},
                                        {"x\t\ty", {"x", "\t", "\t", "y"}},
                                        {"l1\r\n\r\nl2", {"l", "1", "\r\n\r", "\n", "l", "2"}},
                                        {"I'M here", {"I", "'", "M", " here"}},
                                        {"  \n  a", {"  \n ", " a"}},
                                        {"(abc) 12345", {"(", "abc", ")", " 12345"}},
                                        {"", {}},
                                    });
}

TEST(PreTokenizerTest, SmolLMIsolatesDigitsBeforeTheGpt2Pattern) {
  ExpectSplits(PreTokenizer::kSmolLM,
               {
                   {"a  b", {"a", " ", " b"}},
                   {"a\n\nb", {"a", "\n", "\n", "b"}},
                   {"a\n\n", {"a", "\n\n"}},
                   {"hello   ", {"hello", "   "}},
                   {"  hi", {" ", " hi"}},
                   {"2023-2025", {"2", "0", "2", "3", "-", "2", "0", "2", "5"}},
                   {"IT'S", {"IT", "'", "S"}},
                   {"y'all", {"y", "'", "all"}},
                   {"don't we'll", {"don", "'t", " we", "'ll"}},
                   {"Hi!!! ...ok?", {"Hi", "!!!", " ...", "ok", "?"}},
                   {"你好世界 ok", {"你好世界", " ok"}},
                   {"😀👍 x", {"😀👍", " x"}},
                   // The space before a digit is not attached to it (as HF tokenizers splits it).
                   {"a 12b", {"a", " ", "1", "2", "b"}},
                   {"$250,000", {"$", "2", "5", "0", ",", "0", "0", "0"}},
                   {"x\t\ty", {"x", "\t", "\t", "y"}},
                   {"l1\r\n\r\nl2", {"l", "1", "\r\n\r", "\n", "l", "2"}},
                   {"I'M here", {"I", "'", "M", " here"}},
                   {"  \n  a", {"  \n ", " a"}},
                   {"(abc) 12345", {"(", "abc", ")", " ", "1", "2", "3", "4", "5"}},
                   {"٣½Ⅻ", {"٣", "½", "Ⅻ"}},  // \p{N} beyond ASCII: Nd, No, Nl
               });
}

TEST(PreTokenizerTest, Llama3) {
  ExpectSplits(PreTokenizer::kLlama3, {
                                          {"a  b", {"a", " ", " b"}},
                                          {"a\n\nb", {"a", "\n\n", "b"}},
                                          {"a\n\n", {"a", "\n\n"}},
                                          {"hello   ", {"hello", "   "}},
                                          {"  hi", {" ", " hi"}},
                                          {"2023-2025", {"202", "3", "-", "202", "5"}},
                                          {"IT'S", {"IT", "'S"}},
                                          {"y'all", {"y", "'all"}},
                                          {"don't we'll", {"don", "'t", " we", "'ll"}},
                                          {"Hi!!! ...ok?", {"Hi", "!!!", " ...", "ok", "?"}},
                                          {"你好世界 ok", {"你好世界", " ok"}},
                                          {"😀👍 x", {"😀👍", " x"}},
                                          {"a 12b", {"a", " ", "12", "b"}},
                                          {"$250,000", {"$", "250", ",", "000"}},
                                          {"x\t\ty", {"x", "\t", "\ty"}},
                                          {"l1\r\n\r\nl2", {"l", "1", "\r\n\r\n", "l", "2"}},
                                          {"I'M here", {"I", "'M", " here"}},
                                          {"  \n  a", {"  \n", " ", " a"}},
                                          {"(abc) 12345", {"(abc", ")", " ", "123", "45"}},
                                          {"x.\n\ny", {"x", ".\n\n", "y"}},
                                      });
}

TEST(PreTokenizerTest, Qwen2SplitsNumbersIntoSingleDigits) {
  ExpectSplits(PreTokenizer::kQwen2,
               {
                   {"a\n\nb", {"a", "\n\n", "b"}},
                   {"2023-2025", {"2", "0", "2", "3", "-", "2", "0", "2", "5"}},
                   {"IT'S", {"IT", "'S"}},
                   {"y'all", {"y", "'all"}},
                   {"a 12b", {"a", " ", "1", "2", "b"}},
                   {"x\t\ty", {"x", "\t", "\ty"}},
                   {"  \n  a", {"  \n", " ", " a"}},
                   {"(abc) 12345", {"(abc", ")", " ", "1", "2", "3", "4", "5"}},
               });
}

TEST(PreTokenizerTest, UnicodeWhitespace) {
  // U+00A0 and U+3000 are White_Space; U+001C is not (it is "other").
  EXPECT_EQ(Split(PreTokenizer::kGpt2, "a\u00a0\u00a0b"), (Strings{"a", "\u00a0", "\u00a0", "b"}));
  EXPECT_EQ(Split(PreTokenizer::kGpt2, "a\u3000"), (Strings{"a", "\u3000"}));
  EXPECT_EQ(Split(PreTokenizer::kGpt2, "a \x1c"), (Strings{"a", " \x1c"}));
  // A combining mark (\p{M}) is not a letter: it ends the letter run.
  EXPECT_EQ(Split(PreTokenizer::kGpt2, "e\u0301t"), (Strings{"e", "\u0301", "t"}));
}

TEST(PreTokenizerTest, NamesAndErrors) {
  EXPECT_EQ(PreTokenizerFromName("smollm"), PreTokenizer::kSmolLM);
  EXPECT_EQ(PreTokenizerFromName("llama-bpe"), PreTokenizer::kLlama3);
  EXPECT_EQ(PreTokenizerFromName("llama3"), PreTokenizer::kLlama3);
  EXPECT_EQ(PreTokenizerFromName("qwen2"), PreTokenizer::kQwen2);
  EXPECT_EQ(PreTokenizerFromName("default"), PreTokenizer::kGpt2);
  EXPECT_EQ(PreTokenizerFromName("gpt-2"), PreTokenizer::kGpt2);
  try {
    PreTokenizerFromName("deepseek-coder");
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'deepseek-coder'"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// Byte-level BPE on a small vocabulary.

// The stored texts of the ids `text` encodes to.
Strings EncodeToTexts(const Tokenizer& tok, std::string_view text, bool parse_special = true) {
  Strings out;
  for (const TokenId id : tok.Encode(text, parse_special)) out.push_back(tok.TokenText(id));
  return out;
}

TEST(ByteLevelBpeTest, BytesToUnicodeTable) {
  EXPECT_EQ(ByteSymbol(' '), "Ġ");
  EXPECT_EQ(ByteSymbol('\n'), "Ċ");
  EXPECT_EQ(ByteSymbol(0x00), "Ā");
  EXPECT_EQ(ByteSymbol(0x7F), "ġ");
  EXPECT_EQ(ByteSymbol(0xA0), "ł");
  EXPECT_EQ(ByteSymbol(0xAD), "Ń");
  // The library agrees: every single byte encodes to its symbol and decodes back.
  const auto tok = Tokenizer::FromSpec(ByteLevelSpec("default", {}));
  for (int b = 1; b < 128; ++b) {
    const std::string text(1, static_cast<char>(b));
    const std::vector<TokenId> ids = tok->Encode(text);
    ASSERT_EQ(ids.size(), 1u) << b;
    EXPECT_EQ(tok->TokenText(ids[0]), ByteSymbol(static_cast<uint8_t>(b))) << b;
    EXPECT_EQ(tok->TokenBytes(ids[0]), text) << b;
  }
}

TEST(ByteLevelBpeTest, LowestRankMergesFirst) {
  const auto bc_first = Tokenizer::FromSpec(ByteLevelSpec("default", {{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(EncodeToTexts(*bc_first, "abc"), (Strings{"a", "bc"}));
  const auto ab_first = Tokenizer::FromSpec(ByteLevelSpec("default", {{"a", "b"}, {"b", "c"}}));
  EXPECT_EQ(EncodeToTexts(*ab_first, "abc"), (Strings{"ab", "c"}));
}

TEST(ByteLevelBpeTest, TiesGoToTheLeftmostPair) {
  const auto tok = Tokenizer::FromSpec(ByteLevelSpec("default", {{"a", "a"}}));
  EXPECT_EQ(EncodeToTexts(*tok, "aaa"), (Strings{"aa", "a"}));
  EXPECT_EQ(EncodeToTexts(*tok, "aaaa"), (Strings{"aa", "aa"}));
  EXPECT_EQ(EncodeToTexts(*tok, "aaaaa"), (Strings{"aa", "aa", "a"}));
}

TEST(ByteLevelBpeTest, MergesChainAndRequeueNeighbours) {
  // "the": t+h (rank 0), th+e (1), " "+the (2); "there" needs r+e (3) and the+re (4).
  const auto tok = Tokenizer::FromSpec(
      ByteLevelSpec("smollm", {{"t", "h"}, {"th", "e"}, {" ", "the"}, {"r", "e"}, {"the", "re"}}));
  EXPECT_EQ(EncodeToTexts(*tok, "the there"), (Strings{"the", "Ġthe", "re"}));
  EXPECT_EQ(EncodeToTexts(*tok, "there"), (Strings{"there"}));
  // Pieces are encoded independently: no merge across a pre-tokenizer boundary.
  EXPECT_EQ(EncodeToTexts(*tok, "t h"), (Strings{"t", "Ġ", "h"}));
}

TEST(ByteLevelBpeTest, SmolLMWhitespaceAndDigits) {
  const auto tok = Tokenizer::FromSpec(
      ByteLevelSpec("smollm", {{"\n", "\n"}, {" ", " "}, {" ", "b"}, {"1", "2"}}));
  // Two newlines before a word are two pieces, so never the "\n\n" token; at the end they are.
  EXPECT_EQ(EncodeToTexts(*tok, "a\n\nb"), (Strings{"a", "Ċ", "Ċ", "b"}));
  EXPECT_EQ(EncodeToTexts(*tok, "a\n\n"), (Strings{"a", "ĊĊ"}));
  EXPECT_EQ(EncodeToTexts(*tok, "a   b"), (Strings{"a", "ĠĠ", "Ġb"}));
  // Digits are isolated, so the "12" merge never applies and " 1" stays two tokens.
  EXPECT_EQ(EncodeToTexts(*tok, "a 12"), (Strings{"a", "Ġ", "1", "2"}));
}

TEST(ByteLevelBpeTest, Llama3EmitsWholeTokensWithoutMerging) {
  // HF ignore_merges: "abc" is in the vocabulary (via the a+bc merge) and is emitted directly
  // even though the only applicable merge (a+b) would give "ab", "c".
  TokenizerSpec spec = ByteLevelSpec("llama3", {{"a", "b"}, {"b", "c"}, {"a", "bc"}});
  const auto llama3 = Tokenizer::FromSpec(spec);
  EXPECT_EQ(EncodeToTexts(*llama3, "abc"), (Strings{"abc"}));
  spec.pre = "qwen2";
  const auto qwen2 = Tokenizer::FromSpec(std::move(spec));
  EXPECT_EQ(EncodeToTexts(*qwen2, "abc"), (Strings{"ab", "c"}));
}

TEST(ByteLevelBpeTest, SpecialTokensInsideText) {
  const auto tok = Tokenizer::FromSpec(ByteLevelSpec(
      "smollm", {{"h", "i"}}, {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im_start|>x"}));
  EXPECT_EQ(EncodeToTexts(*tok, "<|im_start|>user\nhi<|im_end|>"),
            (Strings{"<|im_start|>", "u", "s", "e", "r", "Ċ", "hi", "<|im_end|>"}));
  // Longest match at a position wins.
  EXPECT_EQ(EncodeToTexts(*tok, "<|im_start|>xy"), (Strings{"<|im_start|>x", "y"}));
  // Adjacent specials, and specials at both ends.
  EXPECT_EQ(EncodeToTexts(*tok, "<|im_end|><|endoftext|>"),
            (Strings{"<|im_end|>", "<|endoftext|>"}));
  // Without parse_special the text is ordinary bytes.
  const Strings plain = EncodeToTexts(*tok, "<|im_end|>", /*parse_special=*/false);
  EXPECT_EQ(plain.size(), 10u);
  EXPECT_EQ(plain.front(), "<");
  // A broken special is ordinary text.
  EXPECT_EQ(EncodeToTexts(*tok, "<|im_end|").size(), 9u);
  EXPECT_TRUE(tok->IsSpecial(tok->FindToken("<|im_end|>")));
  EXPECT_FALSE(tok->IsSpecial(tok->FindToken("hi")));
}

TEST(ByteLevelBpeTest, LeftmostSpecialWinsOverLongerLaterOne) {
  TokenizerSpec spec = ByteLevelSpec("default", {}, {"ab", "bcd"});
  const auto tok = Tokenizer::FromSpec(std::move(spec));
  EXPECT_EQ(EncodeToTexts(*tok, "abcd"), (Strings{"ab", "c", "d"}));
  EXPECT_EQ(EncodeToTexts(*tok, "xbcd"), (Strings{"x", "bcd"}));
}

TEST(ByteLevelBpeTest, UserDefinedTokensAreMatchedAndKeptWhenSkippingSpecials) {
  TokenizerSpec spec = ByteLevelSpec("default", {}, {"<ctl>"});
  spec.tokens.push_back("<user>");
  spec.token_types.push_back(TokenType::kUserDefined);
  const auto tok = Tokenizer::FromSpec(std::move(spec));
  const std::vector<TokenId> ids = tok->Encode("a<user>b<ctl>");
  EXPECT_EQ(ids.size(), 4u);
  EXPECT_EQ(tok->Decode(ids), "a<user>b<ctl>");
  EXPECT_EQ(tok->Decode(ids, /*skip_special=*/true), "a<user>b");
}

TEST(ByteLevelBpeTest, BytesMissingFromTheVocabularyAreDroppedBeforeMerging) {
  const auto tok =
      Tokenizer::FromSpec(ByteLevelSpec("smollm", {{".", "."}}, {}, std::string("\x04\x06", 2)));
  EXPECT_EQ(EncodeToTexts(*tok,
                          "a\x04"
                          "b"),
            (Strings{"a", "b"}));
  // The neighbours of a dropped byte become adjacent and merge (HF drops before merging).
  EXPECT_EQ(EncodeToTexts(*tok, ".\x06."), (Strings{".."}));
  EXPECT_TRUE(tok->Encode("\x04").empty());
}

TEST(ByteLevelBpeTest, DecodeRoundTripAndInvalidUtf8) {
  const auto tok = Tokenizer::FromSpec(ByteLevelSpec("smollm", {{" ", "w"}, {"h", "e"}}));
  for (const std::string s :
       {"hello world", "héllo\n\n  wörld\t!", "你好，世界", "😀 emoji 👍🏽",
        "  leading and trailing  ", "2023-2025: $250,000", ""}) {
    EXPECT_EQ(tok->Decode(tok->Encode(s)), s);
  }
  // Half an emoji decodes to one U+FFFD; a lone continuation byte to another.
  const std::string emoji = "😀";  // F0 9F 98 80
  std::vector<TokenId> ids = tok->Encode(emoji);
  ASSERT_EQ(ids.size(), 4u);
  ids.resize(2);
  EXPECT_EQ(tok->Decode(ids), "\xEF\xBF\xBD");
  EXPECT_EQ(tok->Decode({ids[1], tok->Encode("a")[0]}),
            "\xEF\xBF\xBD"
            "a");
  // Out-of-range ids are skipped; TokenBytes/TokenText give "".
  EXPECT_EQ(tok->Decode({-1, 1 << 20}), "");
  EXPECT_EQ(tok->TokenBytes(-1), "");
  EXPECT_EQ(tok->TokenText(1 << 20), "");
  EXPECT_EQ(tok->token_type(-5), TokenType::kUndefined);
}

TEST(ByteLevelBpeTest, IllFormedInputIsReadAsReplacementCharacters) {
  const auto tok = Tokenizer::FromSpec(ByteLevelSpec("smollm", {}));
  EXPECT_EQ(tok->Decode(tok->Encode("a\xFF"
                                    "b")),
            "a\xEF\xBF\xBD"
            "b");
}

TEST(StreamingDetokenizerTest, HoldsPartialCharactersUntilComplete) {
  const auto tok = Tokenizer::FromSpec(ByteLevelSpec("smollm", {}, {"<|im_end|>"}));
  const std::vector<TokenId> ids = tok->Encode("a😀b<|im_end|>");
  ASSERT_EQ(ids.size(), 7u);  // a, 4 emoji bytes, b, <|im_end|>
  StreamingDetokenizer detok(*tok);
  EXPECT_EQ(detok.Push(ids[0]), "a");
  EXPECT_EQ(detok.Push(ids[1]), "");
  EXPECT_EQ(detok.Push(ids[2]), "");
  EXPECT_EQ(detok.Push(ids[3]), "");
  EXPECT_EQ(detok.Push(ids[4]), "😀");
  EXPECT_EQ(detok.Push(ids[5]), "b");
  EXPECT_EQ(detok.Push(ids[6]), "");  // skipped special
  EXPECT_EQ(detok.Flush(), "");

  StreamingDetokenizer keep(*tok, /*skip_special=*/false);
  EXPECT_EQ(keep.Push(ids[6]), "<|im_end|>");
  // Cut short: Flush turns the pending bytes into one U+FFFD.
  EXPECT_EQ(keep.Push(ids[1]), "");
  EXPECT_EQ(keep.Push(ids[2]), "");
  EXPECT_EQ(keep.Flush(), "\xEF\xBF\xBD");
  // A sequence that can no longer complete is replaced at once.
  EXPECT_EQ(keep.Push(ids[1]), "");
  EXPECT_EQ(keep.Push(ids[0]),
            "\xEF\xBF\xBD"
            "a");
}

TEST(TokenizerTest, EogIdsAndSpecialIds) {
  TokenizerSpec spec = ByteLevelSpec("smollm", {}, {"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.unk_id = 0;
  spec.pad_id = 2;
  spec.eot_id = 100000;  // out of range: absent
  const auto tok = Tokenizer::FromSpec(std::move(spec));
  EXPECT_EQ(tok->eog_ids(), (std::vector<TokenId>{0, 2}));
  EXPECT_TRUE(tok->IsEog(0));
  EXPECT_TRUE(tok->IsEog(2));
  EXPECT_FALSE(tok->IsEog(1));
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_EQ(tok->vocab_size(), 3 + 256);
  EXPECT_EQ(tok->chat_template().format(), ChatFormat::kChatML);
}

TEST(TokenizerTest, OrdinaryTokensWithAnEogTextDoNotEndGeneration) {
  // Qwen2's vocabulary has "</s>" as ordinary text (HTML); only special tokens count by text.
  TokenizerSpec spec = ByteLevelSpec("qwen2", {{"<", "/"}, {"</", "s"}, {"</s", ">"}},
                                     {"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
  const auto tok = Tokenizer::FromSpec(std::move(spec));
  const TokenId plain = tok->FindToken("</s>");
  ASSERT_GE(plain, 0);
  EXPECT_FALSE(tok->IsSpecial(plain));
  EXPECT_FALSE(tok->IsEog(plain));
  EXPECT_EQ(tok->eog_ids(), (std::vector<TokenId>{0, 2}));
}

TEST(TokenizerTest, SpecErrorsNameTheProblem) {
  TokenizerSpec bad_model = ByteLevelSpec("smollm", {});
  bad_model.model = "bert";
  EXPECT_THROW(Tokenizer::FromSpec(std::move(bad_model)), Error);
  TokenizerSpec bad_pre = ByteLevelSpec("smollm", {});
  bad_pre.pre = "mystery";
  try {
    Tokenizer::FromSpec(std::move(bad_pre));
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mystery"), std::string::npos);
  }
  TokenizerSpec bad_types = ByteLevelSpec("smollm", {});
  bad_types.token_types.pop_back();
  EXPECT_THROW(Tokenizer::FromSpec(std::move(bad_types)), Error);
  TokenizerSpec bad_merge = ByteLevelSpec("smollm", {});
  bad_merge.merges.push_back("nospace");
  EXPECT_THROW(Tokenizer::FromSpec(std::move(bad_merge)), Error);
  EXPECT_THROW(Tokenizer::FromSpec(TokenizerSpec{}), Error);  // empty vocabulary
}

// ---------------------------------------------------------------------------------------------
// SentencePiece-style BPE.

// <unk>, <s>, </s>, the 256 byte tokens, then `pieces` (U+2581 written as "_" here) with their
// scores.
TokenizerSpec SpmSpec(const std::vector<std::pair<std::string, float>>& pieces,
                      bool byte_tokens = true) {
  TokenizerSpec spec;
  spec.model = "llama";
  spec.tokens = {"<unk>", "<s>", "</s>"};
  spec.token_types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  spec.scores = {0, 0, 0};
  spec.unk_id = 0;
  spec.bos_id = 1;
  spec.eos_id = 2;
  if (byte_tokens) {
    char name[8];
    for (int b = 0; b < 256; ++b) {
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      spec.tokens.push_back(name);
      spec.token_types.push_back(TokenType::kByte);
      spec.scores.push_back(0);
    }
  }
  for (const auto& [piece, score] : pieces) {
    std::string text;
    for (const char c : piece) text += c == '_' ? std::string("\xE2\x96\x81") : std::string(1, c);
    spec.tokens.push_back(text);
    spec.token_types.push_back(TokenType::kNormal);
    spec.scores.push_back(score);
  }
  return spec;
}

// Stored texts with U+2581 shown as "_".
Strings SpmTexts(const Tokenizer& tok, std::string_view text, bool parse_special = true) {
  Strings out;
  for (const TokenId id : tok.Encode(text, parse_special)) {
    std::string t = tok.TokenText(id);
    for (size_t pos; (pos = t.find("\xE2\x96\x81")) != std::string::npos;) t.replace(pos, 3, "_");
    out.push_back(t);
  }
  return out;
}

// With the prefix, the "_h..." chain (scores -3..-7) wins over the "he..." chain (-8..-11).
const std::vector<std::pair<std::string, float>> kHelloWorld = {
    {"_", -1},      {"h", -2},   {"e", -2},     {"l", -2},      {"o", -2},     {"w", -2},
    {"r", -2},      {"d", -2},   {"_h", -3},    {"_he", -4},    {"_hel", -5},  {"_hell", -6},
    {"_hello", -7}, {"_w", -3},  {"_wo", -4},   {"_wor", -5},   {"_worl", -6}, {"_world", -7},
    {"he", -8},     {"hel", -9}, {"hell", -10}, {"hello", -11},
};

TEST(SentencePieceTest, SpacePrefixAndSpaces) {
  const auto tok = Tokenizer::FromSpec(SpmSpec(kHelloWorld));
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(SpmTexts(*tok, "hello world"), (Strings{"_hello", "_world"}));
  EXPECT_EQ(tok->Decode(tok->Encode("hello world")), "hello world");
  EXPECT_EQ(tok->Decode(tok->Encode(" hello")), " hello");  // only the added space is removed
  // A space prefix also follows every special token (llama.cpp).
  EXPECT_EQ(SpmTexts(*tok, "<s>hello</s>world"), (Strings{"<s>", "_hello", "</s>", "_world"}));
  EXPECT_EQ(tok->Decode(tok->Encode("<s>hello"), /*skip_special=*/true), "hello");

  TokenizerSpec no_prefix = SpmSpec(kHelloWorld);
  no_prefix.add_space_prefix = false;
  const auto bare = Tokenizer::FromSpec(std::move(no_prefix));
  EXPECT_EQ(SpmTexts(*bare, "hello world"), (Strings{"hello", "_world"}));
  EXPECT_EQ(bare->Decode(bare->Encode(" hello")), " hello");
}

TEST(SentencePieceTest, HighestScoreMergesFirstTiesLeftmost) {
  TokenizerSpec spec = SpmSpec({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -3}, {"bc", -2}});
  spec.add_space_prefix = false;
  const auto bc_wins = Tokenizer::FromSpec(std::move(spec));
  EXPECT_EQ(SpmTexts(*bc_wins, "abc"), (Strings{"a", "bc"}));

  spec = SpmSpec({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -2}, {"bc", -3}});
  spec.add_space_prefix = false;
  const auto ab_wins = Tokenizer::FromSpec(std::move(spec));
  EXPECT_EQ(SpmTexts(*ab_wins, "abc"), (Strings{"ab", "c"}));

  spec = SpmSpec({{"a", -1}, {"aa", -2}});
  spec.add_space_prefix = false;
  const auto ties = Tokenizer::FromSpec(std::move(spec));
  EXPECT_EQ(SpmTexts(*ties, "aaa"), (Strings{"aa", "a"}));
}

TEST(SentencePieceTest, ByteFallback) {
  const auto tok = Tokenizer::FromSpec(SpmSpec(kHelloWorld));
  EXPECT_EQ(SpmTexts(*tok, "hé"), (Strings{"_h", "<0xC3>", "<0xA9>"}));
  EXPECT_EQ(tok->Decode(tok->Encode("hé wörld")), "hé wörld");
  EXPECT_EQ(SpmTexts(*tok, "\n"), (Strings{"_", "<0x0A>"}));

  // Without byte tokens an unknown code point becomes <unk>.
  const auto no_bytes = Tokenizer::FromSpec(SpmSpec(kHelloWorld, /*byte_tokens=*/false));
  EXPECT_EQ(SpmTexts(*no_bytes, "hé"), (Strings{"_h", "<unk>"}));
  EXPECT_EQ(no_bytes->Decode(no_bytes->Encode("hé"), /*skip_special=*/true), "h");
}

TEST(SentencePieceTest, ControlTokensAreNeverFormedByMerges) {
  TokenizerSpec spec = SpmSpec({{"<", -1}, {"s", -1}, {">", -1}, {"<s", -1}});
  spec.add_space_prefix = false;
  const auto tok = Tokenizer::FromSpec(std::move(spec));
  EXPECT_EQ(SpmTexts(*tok, "<s>", /*parse_special=*/false), (Strings{"<s", ">"}));
  EXPECT_EQ(SpmTexts(*tok, "<s>"), (Strings{"<s>"}));
}

TEST(SentencePieceTest, EogIncludesEndOfSentence) {
  const auto tok = Tokenizer::FromSpec(SpmSpec(kHelloWorld));
  EXPECT_EQ(tok->eog_ids(), (std::vector<TokenId>{2}));
  EXPECT_EQ(tok->bos_id(), 1);
}

}  // namespace
}  // namespace sift
