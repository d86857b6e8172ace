// The Hugging Face tokenizer directory loader (TokenizerSpec::FromHfDir, tokenizer_json.cc) on
// small hand-built tokenizer.json files: each supported pre-tokenizer form gives the same ids
// as the equivalent GGUF-style spec, NFC, added tokens, tokenizer_config.json /
// chat_template.jinja / generation_config.json, and a clear refusal for everything else.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sift/error.h"
#include "sift/tokenizer.h"
#include "support/byte_level_vocab.h"
#include "support/safetensors_writer.h"
#include "support/temp_dir.h"

namespace sift {
namespace {

using nlohmann::json;
using testing::ByteLevelSpec;
using testing::Mapped;
using testing::TempDir;
using testing::WriteText;

constexpr char kLlama3Regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr char kQwen2Regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const std::vector<std::pair<std::string, std::string>> kMerges = {
    {" ", "t"}, {"h", "e"},  {" t", "he"},        {"1", "2"}, {"12", "3"}, {"\xC3", "\xA9"},
    {"c", "a"}, {"ca", "f"}, {"caf", "\xC3\xA9"}, {"'", "s"}, {" ", " "}};
const std::vector<std::string> kSpecials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

json ByteLevel(bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

json PreTokenizerJson(const std::string& pre) {
  if (pre == "gpt-2") return ByteLevel(true);
  if (pre == "smollm") {
    return {
        {"type", "Sequence"},
        {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, ByteLevel(true)}}};
  }
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", pre == "llama3" ? kLlama3Regex : kQwen2Regex}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            ByteLevel(false)}}};
}

// tokenizer.json for ByteLevelSpec(pre, kMerges, kSpecials): the specials become added tokens.
json TokenizerJson(const std::string& pre, const TokenizerSpec& spec, bool pair_merges = false) {
  json vocab = json::object();
  json added = json::array();
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    if (spec.token_types[id] == TokenType::kControl) {
      added.push_back({{"id", id},
                       {"content", spec.tokens[id]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
    }
    vocab[spec.tokens[id]] = id;
  }
  json merges = json::array();
  for (const std::string& m : spec.merges) {
    const size_t space = m.find(' ', 1);
    if (pair_merges) {
      merges.push_back({m.substr(0, space), m.substr(space + 1)});
    } else {
      merges.push_back(m);
    }
  }
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", PreTokenizerJson(pre)},
          {"post_processor", ByteLevel(true)},
          {"decoder", ByteLevel(true)},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", pre == "llama3"},
            {"vocab", vocab},
            {"merges", merges}}}};
}

void WriteJson(const TempDir& dir, const std::string& name, const json& j) {
  WriteText(dir.File(name), j.dump(1));
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

const std::vector<std::string> kTexts = {"the cat's café 123 12345 and  the   end",
                                         "<|im_start|>user\nhi the<|im_end|>\n",
                                         "x  1\n\n\t2 THE'S", "café\u0301 e\u0301", ""};

TEST(TokenizerJsonTest, EachPreTokenizerFormMatchesTheGgufSpec) {
  for (const std::string pre : {"gpt-2", "smollm", "llama3", "qwen2"}) {
    SCOPED_TRACE(pre);
    TempDir dir;
    const TokenizerSpec spec = ByteLevelSpec(pre, kMerges, kSpecials);
    WriteJson(dir, "tokenizer.json", TokenizerJson(pre, spec, /*pair_merges=*/pre == "qwen2"));
    const TokenizerSpec read = TokenizerSpec::FromHfDir(dir.path());
    EXPECT_EQ(read.pre, pre);
    EXPECT_EQ(read.tokens, spec.tokens);
    EXPECT_EQ(read.token_types, spec.token_types);
    EXPECT_EQ(read.merges, spec.merges);
    EXPECT_EQ(read.normalizer, "");
    const auto from_dir = Tokenizer::FromHfDir(dir.path());
    TokenizerSpec gguf_like = spec;
    if (pre == "qwen2") gguf_like.normalizer = "";  // the file states no normalizer here
    const auto from_spec = Tokenizer::FromSpec(gguf_like);
    for (const std::string& text : kTexts) {
      EXPECT_EQ(from_dir->Encode(text), from_spec->Encode(text)) << text;
      EXPECT_EQ(from_dir->Decode(from_dir->Encode(text)), text);
    }
    EXPECT_FALSE(from_dir->add_bos());
    EXPECT_EQ(from_dir->eog_ids(), (std::vector<TokenId>{0, 2}));  // by text
  }
}

TEST(TokenizerJsonTest, IgnoreMergesIsReadFromTheFile) {
  TempDir dir;
  // With ignore_merges a piece that is a whole token is emitted without merging; "caf" + "é"
  // exists as the token "café", so both settings give it here, but "the" differs: without
  // ignore_merges " the" merges as " t" + "he".
  const TokenizerSpec spec = ByteLevelSpec("qwen2", kMerges, kSpecials);
  json j = TokenizerJson("qwen2", spec);
  j["model"]["ignore_merges"] = true;
  WriteJson(dir, "tokenizer.json", j);
  EXPECT_EQ(TokenizerSpec::FromHfDir(dir.path()).ignore_merges, std::optional<bool>(true));
  j["model"].erase("ignore_merges");
  WriteJson(dir, "tokenizer.json", j);
  EXPECT_FALSE(TokenizerSpec::FromHfDir(dir.path()).ignore_merges.has_value());
}

TEST(TokenizerJsonTest, NfcNormalizerComposesBeforeEncoding) {
  TempDir dir;
  const TokenizerSpec spec = ByteLevelSpec("qwen2", kMerges, kSpecials);
  json j = TokenizerJson("qwen2", spec);
  WriteJson(dir, "tokenizer.json", j);
  const auto plain = Tokenizer::FromHfDir(dir.path());
  j["normalizer"] = {{"type", "NFC"}};
  WriteJson(dir, "tokenizer.json", j);
  EXPECT_EQ(TokenizerSpec::FromHfDir(dir.path()).normalizer, "nfc");
  const auto nfc = Tokenizer::FromHfDir(dir.path());
  const std::string composed = "caf\xC3\xA9";     // café, U+00E9
  const std::string decomposed = "cafe\xCC\x81";  // cafe + U+0301
  EXPECT_EQ(nfc->Encode(decomposed), nfc->Encode(composed));
  EXPECT_EQ(nfc->Encode(composed), std::vector<TokenId>{plain->FindToken(Mapped(composed))});
  EXPECT_NE(plain->Encode(decomposed), plain->Encode(composed));
  // Special tokens are matched before normalizing, as HF does; the text between is normalized.
  EXPECT_EQ(nfc->Encode("<|im_start|>" + decomposed),
            (std::vector<TokenId>{1, plain->FindToken(Mapped(composed))}));
  // A Sequence holding only NFC is NFC; other normalizers are refused.
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  WriteJson(dir, "tokenizer.json", j);
  EXPECT_EQ(TokenizerSpec::FromHfDir(dir.path()).normalizer, "nfc");
  j["normalizer"] = {{"type", "NFKC"}};
  WriteJson(dir, "tokenizer.json", j);
  EXPECT_CONTAINS(ErrorOf([&] { TokenizerSpec::FromHfDir(dir.path()); }),
                  "normalizer {\"type\":\"NFKC\"} is not supported");
  // The GGUF route: the qwen2 pre-tokenizer implies NFC (Qwen2's original tokenizer.json).
  TokenizerSpec gguf = spec;
  gguf.normalizer = "nfc";
  EXPECT_EQ(Tokenizer::FromSpec(gguf)->Encode(decomposed), nfc->Encode(composed));
}

TEST(TokenizerJsonTest, AddedTokensSpecialAndNot) {
  TempDir dir;
  const TokenizerSpec spec = ByteLevelSpec("qwen2", kMerges, kSpecials);
  json j = TokenizerJson("qwen2", spec);
  const auto n = static_cast<TokenId>(spec.tokens.size());
  // An added token beyond the vocabulary, not special (like Qwen's <tool_call>), and a gap id.
  j["added_tokens"].push_back({{"id", n + 1}, {"content", "<tool_call>"}, {"special", false}});
  WriteJson(dir, "tokenizer.json", j);
  const auto tok = Tokenizer::FromHfDir(dir.path());
  EXPECT_EQ(tok->vocab_size(), n + 2);
  EXPECT_EQ(tok->token_type(1), TokenType::kControl);
  EXPECT_EQ(tok->token_type(n), TokenType::kUnused);  // nobody names id n
  EXPECT_EQ(tok->token_type(n + 1), TokenType::kUserDefined);
  const std::vector<TokenId> ids = tok->Encode("a<tool_call>b<|im_end|>");
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[1], n + 1);
  EXPECT_EQ(ids[3], 2);
  EXPECT_EQ(tok->Decode(ids, /*skip_special=*/true), "a<tool_call>b");
  EXPECT_EQ(tok->Decode(ids), "a<tool_call>b<|im_end|>");
}

TEST(TokenizerJsonTest, ConfigFilesGiveSpecialIdsChatTemplateAndEog) {
  TempDir dir;
  const TokenizerSpec spec = ByteLevelSpec("qwen2", kMerges, kSpecials);
  WriteJson(dir, "tokenizer.json", TokenizerJson("qwen2", spec));
  const std::string chatml =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\\nYou are Tiny.<|im_end|>\\n' }}{% endif %}"
      "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n'}}"
      "{% endfor %}";
  WriteJson(dir, "tokenizer_config.json",
            {{"bos_token", nullptr},
             {"eos_token", {{"content", "<|im_end|>"}, {"special", true}}},
             {"pad_token", "<|endoftext|>"},
             {"add_bos_token", false},
             {"chat_template", chatml}});
  auto tok = Tokenizer::FromHfDir(dir.path());
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_EQ(tok->chat_template().format(), ChatFormat::kChatML);
  EXPECT_EQ(tok->chat_template().default_system(), "You are Tiny.");

  // chat_template.jinja (transformers >= 4.43) wins; a list of named templates picks "default".
  WriteText(dir.File("chat_template.jinja"),
            "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}"
            "<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}");
  EXPECT_EQ(Tokenizer::FromHfDir(dir.path())->chat_template().format(), ChatFormat::kLlama3);
  std::filesystem::remove(dir.File("chat_template.jinja"));
  WriteJson(dir, "tokenizer_config.json",
            {{"eos_token", "<|im_end|>"},
             {"chat_template",
              {{{"name", "tool_use"}, {"template", "[INST] tools"}},
               {{"name", "default"}, {"template", chatml}}}}});
  EXPECT_EQ(Tokenizer::FromHfDir(dir.path())->chat_template().format(), ChatFormat::kChatML);

  // generation_config.json: a list of eos ids adds end-of-generation ids.
  WriteJson(dir, "generation_config.json", {{"eos_token_id", {2, 40}}, {"bos_token_id", 1}});
  tok = Tokenizer::FromHfDir(dir.path());
  EXPECT_EQ(tok->eog_ids(), (std::vector<TokenId>{0, 2, 40}));
  EXPECT_EQ(tok->bos_id(), 1);  // tokenizer_config.json names none

  // An unknown template is refused, naming the file.
  WriteText(dir.File("chat_template.jinja"), "{{ '<start_of_turn>' + messages[0]['content'] }}");
  const std::string msg = ErrorOf([&] { Tokenizer::FromHfDir(dir.path()); });
  EXPECT_CONTAINS(msg, "chat_template.jinja");
  EXPECT_CONTAINS(msg, "ChatML, Llama 3, Mistral");
}

TEST(TokenizerJsonTest, PostProcessorAddingBosSetsAddBos) {
  TempDir dir;
  const TokenizerSpec spec = ByteLevelSpec("llama3", kMerges, {"<|begin_of_text|>"});
  json j = TokenizerJson("llama3", spec);
  j["post_processor"] = {{"type", "Sequence"},
                         {"processors",
                          {ByteLevel(false),
                           {{"type", "TemplateProcessing"},
                            {"single",
                             {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}}}};
  WriteJson(dir, "tokenizer.json", j);
  WriteJson(dir, "tokenizer_config.json", {{"bos_token", "<|begin_of_text|>"}});
  auto tok = Tokenizer::FromHfDir(dir.path());
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->bos_id(), 0);
  // tokenizer_config.json's add_bos_token wins.
  WriteJson(dir, "tokenizer_config.json",
            {{"bos_token", "<|begin_of_text|>"}, {"add_bos_token", false}});
  EXPECT_FALSE(Tokenizer::FromHfDir(dir.path())->add_bos());
  // A template that puts another token first is refused.
  WriteJson(dir, "tokenizer_config.json", {{"bos_token", "<|begin_of_text|>"}});
  j["post_processor"]["processors"][1]["single"][0]["SpecialToken"]["id"] = "[CLS]";
  WriteJson(dir, "tokenizer.json", j);
  EXPECT_CONTAINS(ErrorOf([&] { Tokenizer::FromHfDir(dir.path()); }), "which is not the BOS token");
}

TEST(TokenizerJsonTest, UnsupportedContentIsRefusedNamingTheKey) {
  const TokenizerSpec spec = ByteLevelSpec("qwen2", kMerges, kSpecials);
  struct Case {
    std::function<void(json&)> edit;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["model"]["type"] = "WordPiece"; }, "model.type \"WordPiece\""},
      {[](json& j) { j["model"]["byte_fallback"] = true; }, "byte_fallback = true"},
      {[](json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout"},
      {[](json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       "continuing_subword_prefix"},
      {[](json& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}};
       },
       "is not supported"},
      {[](json& j) { j["pre_tokenizer"] = nullptr; }, "pre_tokenizer is null"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+"; },
       "is not one sift implements"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; },
       "add_prefix_space = true"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true; },
       "use_regex = true"},
      {[](json& j) {
         j["decoder"] = {{"type", "Metaspace"}};
       },
       "decoder"},
      {[](json& j) { j["added_tokens"][0]["lstrip"] = true; }, "lstrip = true"},
      {[](json& j) { j["added_tokens"][0]["content"] = "<other>"; }, "is already the vocabulary's"},
      {[](json& j) { j["model"]["vocab"]["a"] = -1; }, "must be an id"},
      {[](json& j) { j["model"]["merges"][0] = 7; }, "is neither"},
      {[](json& j) {
         j["post_processor"] = {{"type", "BertProcessing"}};
       },
       "BertProcessing"},
      {[](json& j) { j.erase("model"); }, "missing \"model\""},
  };
  for (const Case& c : cases) {
    TempDir dir;
    json j = TokenizerJson("qwen2", spec);
    c.edit(j);
    WriteJson(dir, "tokenizer.json", j);
    const std::string msg = ErrorOf([&] { TokenizerSpec::FromHfDir(dir.path()); });
    EXPECT_CONTAINS(msg, dir.File("tokenizer.json"));
    EXPECT_CONTAINS(msg, c.expected);
  }
  TempDir dir;
  EXPECT_CONTAINS(ErrorOf([&] { TokenizerSpec::FromHfDir(dir.path()); }), "cannot open");
  WriteText(dir.File("tokenizer.json"), "{not json");
  EXPECT_CONTAINS(ErrorOf([&] { TokenizerSpec::FromHfDir(dir.path()); }), "invalid JSON");
  WriteJson(dir, "tokenizer.json", TokenizerJson("qwen2", spec));
  WriteJson(dir, "tokenizer_config.json", {{"eos_token", "<|nope|>"}});
  EXPECT_CONTAINS(ErrorOf([&] { TokenizerSpec::FromHfDir(dir.path()); }), "is not a token");
}

TEST(TokenizerJsonTest, ForModelPicksTheSource) {
  TempDir dir;
  EXPECT_EQ(Tokenizer::ForModel(dir.path()), nullptr);  // an HF directory without tokenizer.json
  WriteJson(dir, "tokenizer.json", TokenizerJson("gpt-2", ByteLevelSpec("gpt-2", kMerges)));
  ASSERT_NE(Tokenizer::ForModel(dir.path()), nullptr);
  EXPECT_CONTAINS(ErrorOf([&] { Tokenizer::ForModel(dir.File("tokenizer.json")); }),
                  dir.File("tokenizer.json"));  // a file that is not GGUF
}

}  // namespace
}  // namespace sift
