#include "vocab_tokenizer.h"

#include <algorithm>
#include <utility>

#include "sift/error.h"
#include "unicode.h"

namespace sift {
namespace {

// Texts that end generation where they are special tokens of a vocabulary (llama.cpp's list).
constexpr std::string_view kEogTexts[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>",
                                          "<|end|>",    "<|eom_id|>",    "</s>"};

bool IsSpecialType(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUnknown ||
         type == TokenType::kUserDefined;
}

bool IsSkippedType(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUnknown;
}

}  // namespace

TokenId ValidTokenId(TokenId id, size_t vocab_size) {
  return (id >= 0 && static_cast<size_t>(id) < vocab_size) ? id : -1;
}

VocabTokenizer::VocabTokenizer(TokenizerSpec& spec, bool default_add_bos) {
  SIFT_CHECK(!spec.tokens.empty(), "tokenizer: the vocabulary (tokenizer.ggml.tokens) is empty");
  const size_t n = spec.tokens.size();
  SIFT_CHECK(spec.token_types.empty() || spec.token_types.size() == n,
             "tokenizer: tokenizer.ggml.token_type has ", spec.token_types.size(), " entries for ",
             n, " tokens");
  tokens_ = std::move(spec.tokens);
  types_ = spec.token_types.empty() ? std::vector<TokenType>(n, TokenType::kNormal)
                                    : std::move(spec.token_types);
  token_ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) token_ids_.emplace(tokens_[i], static_cast<TokenId>(i));

  bos_id_ = ValidTokenId(spec.bos_id, n);
  eos_id_ = ValidTokenId(spec.eos_id, n);
  unk_id_ = ValidTokenId(spec.unk_id, n);
  add_bos_ = spec.add_bos.value_or(default_add_bos);

  std::vector<TokenId> eog = spec.extra_eog_ids;
  eog.insert(eog.end(), {spec.eos_id, spec.eot_id, spec.eom_id});
  for (const TokenId id : eog) {
    if (ValidTokenId(id, n) >= 0) eog_ids_.push_back(id);
  }
  for (const std::string_view text : kEogTexts) {
    // Only as a special token: Qwen2's vocabulary also has "</s>" as ordinary text (id 128247),
    // which code and HTML legitimately produce (HF's generation_config does not list it).
    const TokenId id = FindToken(text);
    if (id >= 0 && IsSpecialType(types_[id])) eog_ids_.push_back(id);
  }
  std::sort(eog_ids_.begin(), eog_ids_.end());
  eog_ids_.erase(std::unique(eog_ids_.begin(), eog_ids_.end()), eog_ids_.end());

  chat_template_ =
      ChatTemplate::Detect(spec.chat_template, bos_id_ >= 0 ? tokens_[bos_id_] : std::string());

  std::vector<std::pair<std::string_view, TokenId>> specials;
  for (size_t i = 0; i < n; ++i) {
    if (IsSpecialType(types_[i])) specials.emplace_back(tokens_[i], static_cast<TokenId>(i));
  }
  specials_ = SpecialTokenMatcher(specials);
  token_bytes_ = tokens_;
}

std::vector<TokenId> VocabTokenizer::Encode(std::string_view text, bool parse_special) const {
  std::string sanitized;
  if (!unicode::IsWellFormedUtf8(text)) {
    sanitized = unicode::SanitizeUtf8(text);
    text = sanitized;
  }
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  if (!parse_special || specials_.empty()) {
    if (!text.empty()) EncodeText(text, /*after_special=*/true, &out);
    return out;
  }
  bool after_special = true;
  specials_.Split(
      text,
      [&](std::string_view fragment) {
        EncodeText(fragment, after_special, &out);
        after_special = false;
      },
      [&](TokenId id) {
        out.push_back(id);
        after_special = true;
      });
  return out;
}

std::string VocabTokenizer::Decode(const std::vector<TokenId>& ids, bool skip_special) const {
  std::string bytes;
  for (const TokenId id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) continue;
    if (skip_special && IsSkippedType(types_[id])) continue;
    bytes += token_bytes_[id];
  }
  std::string text =
      unicode::IsWellFormedUtf8(bytes) ? std::move(bytes) : unicode::SanitizeUtf8(bytes);
  if (DecodeStripsLeadingSpace() && !text.empty() && text[0] == ' ') text.erase(0, 1);
  return text;
}

std::string VocabTokenizer::TokenBytes(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) return "";
  return token_bytes_[id];
}

const std::string& VocabTokenizer::TokenText(TokenId id) const {
  static const std::string kEmpty;
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) return kEmpty;
  return tokens_[id];
}

TokenId VocabTokenizer::FindToken(std::string_view text) const {
  const auto it = token_ids_.find(text);
  return it == token_ids_.end() ? -1 : it->second;
}

TokenType VocabTokenizer::token_type(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= types_.size()) return TokenType::kUndefined;
  return types_[id];
}

bool VocabTokenizer::IsSpecial(TokenId id) const { return IsSpecialType(token_type(id)); }

}  // namespace sift
