// Tokenizer factories (GGUF metadata, TokenizerSpec), Tokenizer::IsEog and
// StreamingDetokenizer. The tokenizers themselves live in bpe_tokenizer.cc and spm_tokenizer.cc.
#include "sift/tokenizer.h"

#include <algorithm>
#include <utility>

#include "bpe_tokenizer.h"
#include "sift/error.h"
#include "sift/gguf.h"
#include "spm_tokenizer.h"
#include "unicode.h"

namespace sift {
namespace {

TokenId OptionalId(const GgufFile& file, std::string_view key) {
  const GgufValue* value = file.Find(key);
  if (value == nullptr) return -1;
  const int64_t id = value->AsInt();
  return (id >= 0 && id <= INT32_MAX) ? static_cast<TokenId>(id) : -1;
}

std::optional<bool> OptionalBool(const GgufFile& file, std::string_view key) {
  const GgufValue* value = file.Find(key);
  if (value == nullptr) return std::nullopt;
  return value->AsBool();
}

}  // namespace

TokenizerSpec TokenizerSpec::FromGguf(const GgufFile& file) {
  TokenizerSpec spec;
  spec.model = file.GetString("tokenizer.ggml.model");
  spec.pre = file.GetString("tokenizer.ggml.pre", "default");

  const GgufValue* tokens = file.Find("tokenizer.ggml.tokens");
  SIFT_CHECK(tokens != nullptr, file.path(), ": missing key tokenizer.ggml.tokens");
  for (const std::string_view token : tokens->AsStringArray()) spec.tokens.emplace_back(token);

  if (const GgufValue* types = file.Find("tokenizer.ggml.token_type")) {
    for (const int64_t type : types->AsIntArray()) {
      spec.token_types.push_back(static_cast<TokenType>(type));
    }
  }
  if (const GgufValue* merges = file.Find("tokenizer.ggml.merges")) {
    for (const std::string_view merge : merges->AsStringArray()) spec.merges.emplace_back(merge);
  }
  if (const GgufValue* scores = file.Find("tokenizer.ggml.scores")) {
    for (const double score : scores->AsFloatArray()) {
      spec.scores.push_back(static_cast<float>(score));
    }
  }
  spec.bos_id = OptionalId(file, "tokenizer.ggml.bos_token_id");
  spec.eos_id = OptionalId(file, "tokenizer.ggml.eos_token_id");
  spec.unk_id = OptionalId(file, "tokenizer.ggml.unknown_token_id");
  spec.pad_id = OptionalId(file, "tokenizer.ggml.padding_token_id");
  spec.eot_id = OptionalId(file, "tokenizer.ggml.eot_token_id");
  spec.eom_id = OptionalId(file, "tokenizer.ggml.eom_token_id");
  spec.add_bos = OptionalBool(file, "tokenizer.ggml.add_bos_token");
  spec.add_space_prefix = OptionalBool(file, "tokenizer.ggml.add_space_prefix");
  spec.chat_template = file.GetString("tokenizer.chat_template", "");
  return spec;
}

std::unique_ptr<Tokenizer> Tokenizer::FromSpec(TokenizerSpec spec) {
  if (spec.model == "gpt2") return std::make_unique<BpeTokenizer>(spec);
  if (spec.model == "llama") return std::make_unique<SpmTokenizer>(spec);
  throw Error(detail::Concat("unsupported tokenizer model (tokenizer.ggml.model) '", spec.model,
                             "'; supported: gpt2 (byte-level BPE), llama (SentencePiece BPE)"));
}

std::unique_ptr<Tokenizer> Tokenizer::FromGguf(const GgufFile& file) {
  try {
    return FromSpec(TokenizerSpec::FromGguf(file));
  } catch (const Error& e) {
    throw Error(detail::Concat(file.path(), ": ", e.what()));
  }
}

bool Tokenizer::IsEog(TokenId id) const {
  const std::vector<TokenId>& ids = eog_ids();
  return std::binary_search(ids.begin(), ids.end(), id);
}

std::string StreamingDetokenizer::Push(TokenId id) {
  if (skip_special_) {
    const TokenType type = tokenizer_.token_type(id);
    if (type == TokenType::kControl || type == TokenType::kUnknown) return "";
  }
  pending_ += tokenizer_.TokenBytes(id);
  // Emit everything except a trailing sequence that the next token may still complete.
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    uint32_t cp;
    const size_t n = unicode::DecodeUtf8At(pending_, pos, &cp);
    if (n > 0) {
      out.append(pending_, pos, n);
      pos += n;
    } else if (unicode::IsIncompleteUtf8(pending_, pos)) {
      break;
    } else {
      unicode::AppendUtf8(unicode::kReplacementChar, &out);
      pos += unicode::InvalidUtf8Length(pending_, pos);
    }
  }
  pending_.erase(0, pos);
  return out;
}

std::string StreamingDetokenizer::Flush() {
  std::string out = unicode::SanitizeUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace sift
