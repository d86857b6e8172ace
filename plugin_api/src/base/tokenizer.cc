// Tokenizer factories (GGUF metadata, HF directory, TokenizerSpec), Tokenizer::IsEog and
// StreamingDetokenizer. TokenizerSpec::FromHfDir lives in tokenizer_json.cc. The tokenizers
// themselves live in bpe_tokenizer.cc and spm_tokenizer.cc.
#include "sift/tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>
#include <utility>

#include "bpe_tokenizer.h"
#include "sift/error.h"
#include "sift/gguf.h"
#include "spm_tokenizer.h"
#include "unicode.h"

namespace sift {
namespace {

// Calls read(value) if `key` is present; a type error names the file and the key.
template <typename Read>
void ReadOptional(const GgufFile& file, std::string_view key, Read&& read) {
  const GgufValue* value = file.Find(key);
  if (value == nullptr) return;
  try {
    read(*value);
  } catch (const Error& e) {
    throw Error(detail::Concat(file.path(), ": metadata key '", key, "': ", e.what()));
  }
}

void ReadId(const GgufFile& file, std::string_view key, TokenId* id) {
  ReadOptional(file, key, [&](const GgufValue& v) {
    const int64_t value = v.AsInt();
    *id = (value >= 0 && value <= INT32_MAX) ? static_cast<TokenId>(value) : -1;
  });
}

void ReadBool(const GgufFile& file, std::string_view key, std::optional<bool>* flag) {
  ReadOptional(file, key, [&](const GgufValue& v) { *flag = v.AsBool(); });
}

}  // namespace

TokenizerSpec TokenizerSpec::FromGguf(const GgufFile& file) {
  TokenizerSpec spec;
  spec.model = file.GetString("tokenizer.ggml.model");
  spec.pre = file.GetString("tokenizer.ggml.pre", "default");
  SIFT_CHECK(file.Has("tokenizer.ggml.tokens"), file.path(),
             ": missing metadata key 'tokenizer.ggml.tokens'");
  ReadOptional(file, "tokenizer.ggml.tokens", [&](const GgufValue& v) {
    for (const std::string_view token : v.AsStringArray()) spec.tokens.emplace_back(token);
  });
  ReadOptional(file, "tokenizer.ggml.token_type", [&](const GgufValue& v) {
    for (const int64_t type : v.AsIntArray())
      spec.token_types.push_back(static_cast<TokenType>(type));
  });
  ReadOptional(file, "tokenizer.ggml.merges", [&](const GgufValue& v) {
    for (const std::string_view merge : v.AsStringArray()) spec.merges.emplace_back(merge);
  });
  ReadOptional(file, "tokenizer.ggml.scores", [&](const GgufValue& v) {
    for (const double score : v.AsFloatArray()) spec.scores.push_back(static_cast<float>(score));
  });
  ReadId(file, "tokenizer.ggml.bos_token_id", &spec.bos_id);
  ReadId(file, "tokenizer.ggml.eos_token_id", &spec.eos_id);
  ReadId(file, "tokenizer.ggml.unknown_token_id", &spec.unk_id);
  ReadId(file, "tokenizer.ggml.padding_token_id", &spec.pad_id);
  ReadId(file, "tokenizer.ggml.eot_token_id", &spec.eot_id);
  ReadId(file, "tokenizer.ggml.eom_token_id", &spec.eom_id);
  ReadBool(file, "tokenizer.ggml.add_bos_token", &spec.add_bos);
  ReadBool(file, "tokenizer.ggml.add_space_prefix", &spec.add_space_prefix);
  spec.chat_template = file.GetString("tokenizer.chat_template", "");
  // GGUF has no normalizer key. Qwen2's original tokenizer.json normalizes to NFC (llama.cpp
  // skips it); sift follows the original, so that a GGUF and its HF directory give the same ids.
  if (spec.model == "gpt2" && spec.pre == "qwen2") spec.normalizer = "nfc";
  return spec;
}

std::unique_ptr<Tokenizer> Tokenizer::FromSpec(TokenizerSpec spec) {
  if (spec.model == "gpt2") return std::make_unique<BpeTokenizer>(spec);
  SIFT_CHECK(spec.normalizer.empty(), "tokenizer: a normalizer ('", spec.normalizer,
             "') is only supported with byte-level BPE");
  if (spec.model == "llama") return std::make_unique<SpmTokenizer>(spec);
  throw Error(detail::Concat("unsupported tokenizer model (tokenizer.ggml.model) '", spec.model,
                             "'; supported: gpt2 (byte-level BPE), llama (SentencePiece BPE)"));
}

std::unique_ptr<Tokenizer> Tokenizer::FromHfDir(const std::string& dir) {
  TokenizerSpec spec = TokenizerSpec::FromHfDir(dir);  // its errors name the file already
  try {
    return FromSpec(std::move(spec));
  } catch (const Error& e) {
    throw Error(detail::Concat(dir, "/tokenizer.json: ", e.what()));
  }
}

std::unique_ptr<Tokenizer> Tokenizer::ForModel(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    if (!std::filesystem::exists(std::filesystem::path(path) / "tokenizer.json", ec)) {
      return nullptr;
    }
    return FromHfDir(path);
  }
  const std::unique_ptr<GgufFile> file = GgufFile::Open(path);
  return FromGguf(*file);
}

std::unique_ptr<Tokenizer> Tokenizer::FromGguf(const GgufFile& file) {
  TokenizerSpec spec = TokenizerSpec::FromGguf(file);  // its errors name the file already
  try {
    return FromSpec(std::move(spec));
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
