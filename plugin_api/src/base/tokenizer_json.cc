// TokenizerSpec::FromHfDir: a Hugging Face tokenizer directory mapped onto the byte-level BPE
// that the GGUF path already implements (bpe_tokenizer.cc, pretokenizer.cc); nothing here
// tokenizes.
//
// Accepted (anything else is refused with the file, the key and what is supported):
//   tokenizer.json
//     model          {"type": "BPE"} with vocab and merges ("a b" strings or ["a", "b"] pairs),
//                    byte_fallback false, no dropout, no continuing_subword_prefix or
//                    end_of_word_suffix; ignore_merges as stated; unk_token looked up if set.
//     normalizer     null, NFC, or a Sequence of at most those.
//     pre_tokenizer  one of the four byte-level forms pretokenizer.h implements:
//                      ByteLevel(use_regex=true)                               -> gpt-2
//                      Sequence[Digits(individual_digits=true), ByteLevel(regex)] -> smollm
//                      Sequence[Split(Llama 3 regex, Isolated), ByteLevel(no regex)] -> llama3
//                      Sequence[Split(Qwen2 regex, Isolated), ByteLevel(no regex)]   -> qwen2
//                    always with add_prefix_space false.
//     decoder        ByteLevel.
//     added_tokens   any number; special -> control token, not special -> user-defined token
//                    (both are matched in text as HF does); lstrip/rstrip/single_word must be
//                    false.
//     post_processor null, ByteLevel, or TemplateProcessing whose "single" starts with the BOS
//                    token (-> add_bos) or with the sequence (a Sequence of those is read too).
//   tokenizer_config.json (optional): bos/eos/pad/unk_token (string or {"content": ...}),
//     add_bos_token, chat_template (string, or a list of {name, template}: "default", else the
//     first). The template must be one ChatTemplate recognises (ChatML, Llama 3, Mistral).
//   chat_template.jinja (optional; transformers >= 4.43 writes the template there): wins over
//     tokenizer_config.json's.
//   generation_config.json (optional): eos_token_id (an id or a list) adds end-of-generation ids;
//     bos_token_id / eos_token_id are used when tokenizer_config.json names none.
//
// THREADING: pure function of the files. ERRORS: sift::Error naming the file and key.
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "sift/chat_template.h"
#include "sift/error.h"
#include "sift/tokenizer.h"

namespace sift {
namespace {

using Json = nlohmann::json;

// The Split regexes of the original Llama 3 and Qwen2 tokenizer.json files, exactly.
constexpr char kLlama3Regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr char kQwen2Regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr char kSupportedPre[] =
    "supported: ByteLevel (GPT-2), Sequence[Digits(individual_digits), ByteLevel] (SmolLM2), "
    "Sequence[Split(the Llama 3 or Qwen2 regex), ByteLevel(use_regex=false)]";

[[noreturn]] void Fail(const std::string& file, const std::string& what) {
  throw Error(file + ": " + what);
}

// Parses a JSON file; nullopt-like empty object when `optional` and the file is absent.
Json ReadJson(const std::string& path, bool optional) {
  std::ifstream in(path);
  if (!in) {
    if (optional) return Json();
    Fail(path, "cannot open (a Hugging Face tokenizer directory needs tokenizer.json)");
  }
  try {
    Json j = Json::parse(in);
    if (!j.is_object()) Fail(path, "the top level must be a JSON object");
    return j;
  } catch (const Json::exception& e) {
    Fail(path, std::string("invalid JSON: ") + e.what());
  }
}

// A key that is absent or null reads as nullptr.
const Json* Find(const Json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::string TypeOf(const Json& obj) {
  const Json* t = Find(obj, "type");
  return t != nullptr && t->is_string() ? t->get<std::string>() : "";
}

bool BoolOr(const std::string& file, const Json& obj, const char* key, bool fallback,
            const std::string& where) {
  const Json* v = Find(obj, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) Fail(file, where + "." + key + " must be true or false, got " + v->dump());
  return v->get<bool>();
}

// "use_regex" and "add_prefix_space" of a ByteLevel pre-tokenizer.
void CheckByteLevel(const std::string& file, const Json& bl, bool use_regex,
                    const std::string& where) {
  if (BoolOr(file, bl, "add_prefix_space", false, where)) {
    Fail(file, where + ": ByteLevel with add_prefix_space = true is not supported");
  }
  if (BoolOr(file, bl, "use_regex", true, where) != use_regex) {
    Fail(file, where + ": ByteLevel use_regex = " + (use_regex ? "false" : "true") +
                   " is not supported in this position (" + kSupportedPre + ")");
  }
}

std::string PreTokenizerName(const std::string& file, const Json* pre) {
  const std::string where = "pre_tokenizer";
  if (pre == nullptr) Fail(file, "pre_tokenizer is null (" + std::string(kSupportedPre) + ")");
  if (TypeOf(*pre) == "ByteLevel") {
    CheckByteLevel(file, *pre, /*use_regex=*/true, where);
    return "gpt-2";
  }
  const Json* list = Find(*pre, "pretokenizers");
  if (TypeOf(*pre) != "Sequence" || list == nullptr || !list->is_array() || list->size() != 2) {
    Fail(file, "pre_tokenizer " + pre->dump().substr(0, 200) + " is not supported (" +
                   kSupportedPre + ")");
  }
  const Json& first = (*list)[0];
  const Json& second = (*list)[1];
  if (TypeOf(second) != "ByteLevel") {
    Fail(file, where + ": the second step must be ByteLevel, got " + second.dump().substr(0, 200));
  }
  if (TypeOf(first) == "Digits") {
    if (!BoolOr(file, first, "individual_digits", false, where + "[0]")) {
      Fail(file, where + "[0]: Digits(individual_digits = false) is not supported");
    }
    CheckByteLevel(file, second, /*use_regex=*/true, where + "[1]");
    return "smollm";
  }
  if (TypeOf(first) == "Split") {
    const Json* pattern = Find(first, "pattern");
    const Json* regex = pattern != nullptr ? Find(*pattern, "Regex") : nullptr;
    if (regex == nullptr || !regex->is_string()) {
      Fail(file, where + "[0]: Split needs a {\"Regex\": ...} pattern");
    }
    const Json* behavior = Find(first, "behavior");
    if (behavior == nullptr || *behavior != "Isolated" ||
        BoolOr(file, first, "invert", false, where + "[0]")) {
      Fail(file, where + "[0]: only Split with behavior Isolated and invert false is supported");
    }
    CheckByteLevel(file, second, /*use_regex=*/false, where + "[1]");
    const std::string r = regex->get<std::string>();
    if (r == kLlama3Regex) return "llama3";
    if (r == kQwen2Regex) return "qwen2";
    Fail(file, where + "[0]: Split regex " + Json(r).dump() +
                   " is not one sift implements (the Llama 3 and Qwen2 patterns)");
  }
  Fail(file,
       where + "[0]: " + first.dump().substr(0, 200) + " is not supported (" + kSupportedPre + ")");
}

std::string NormalizerName(const std::string& file, const Json* norm) {
  if (norm == nullptr) return "";
  const std::string type = TypeOf(*norm);
  if (type == "NFC") return "nfc";
  if (type == "Sequence") {
    const Json* list = Find(*norm, "normalizers");
    std::string out;
    if (list != nullptr && list->is_array()) {
      for (const Json& n : *list) {
        const std::string one = NormalizerName(file, &n);
        if (!one.empty()) out = one;
      }
      return out;
    }
  }
  Fail(file,
       "normalizer " + norm->dump().substr(0, 200) + " is not supported (supported: none, NFC)");
}

// "<|x|>" or {"content": "<|x|>", ...} or null.
std::string TokenText(const std::string& file, const Json& config, const char* key) {
  const Json* v = Find(config, key);
  if (v == nullptr) return "";
  if (v->is_string()) return v->get<std::string>();
  const Json* content = Find(*v, "content");
  if (content != nullptr && content->is_string()) return content->get<std::string>();
  Fail(file, std::string(key) + " must be a string or {\"content\": ...}, got " + v->dump());
}

std::vector<TokenId> IdList(const std::string& file, const Json* v, const char* key) {
  std::vector<TokenId> out;
  if (v == nullptr) return out;
  const auto one = [&](const Json& x) {
    if (!x.is_number_integer()) Fail(file, std::string(key) + " must be an id or a list of ids");
    out.push_back(static_cast<TokenId>(x.get<int64_t>()));
  };
  if (v->is_array()) {
    for (const Json& x : *v) one(x);
  } else {
    one(*v);
  }
  return out;
}

// add_bos from a TemplateProcessing post-processor (searched inside a Sequence).
std::optional<bool> PostProcessorAddsBos(const std::string& file, const Json* post,
                                         const std::string& bos_text) {
  if (post == nullptr) return std::nullopt;
  const std::string type = TypeOf(*post);
  if (type == "Sequence") {
    std::optional<bool> out;
    if (const Json* list = Find(*post, "processors"); list != nullptr && list->is_array()) {
      for (const Json& p : *list) {
        if (auto b = PostProcessorAddsBos(file, &p, bos_text)) out = b;
      }
    }
    return out;
  }
  if (type == "ByteLevel") return std::nullopt;
  if (type != "TemplateProcessing") {
    Fail(file, "post_processor " + type +
                   " is not supported (supported: ByteLevel, "
                   "TemplateProcessing adding the BOS token)");
  }
  const Json* single = Find(*post, "single");
  if (single == nullptr || !single->is_array() || single->empty()) return false;
  const Json* special = Find((*single)[0], "SpecialToken");
  if (special == nullptr) return false;  // starts with the sequence itself
  const Json* id = Find(*special, "id");
  if (id == nullptr || !id->is_string() || bos_text.empty() || *id != bos_text) {
    Fail(file, "post_processor: TemplateProcessing puts " + special->dump() +
                   " before the text, which is not the BOS token (" +
                   (bos_text.empty() ? "none set" : bos_text) + "); not supported");
  }
  return true;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// model: {"type": "BPE", "vocab", "merges", ...}. Fills spec.merges / ignore_merges and returns
// the vocabulary by id.
std::map<TokenId, std::string> ReadBpeModel(const std::string& path, const Json& model,
                                            TokenizerSpec* spec) {
  if (TypeOf(model) != "BPE") {
    Fail(path, "model.type \"" + TypeOf(model) +
                   "\" is not supported (supported: BPE with a byte-level pre-tokenizer)");
  }
  if (BoolOr(path, model, "byte_fallback", false, "model")) {
    Fail(path,
         "model.byte_fallback = true (SentencePiece-style BPE, e.g. Llama 2 or Mistral) is "
         "not supported from tokenizer.json; load the model's GGUF instead");
  }
  if (const Json* d = Find(model, "dropout"); d != nullptr && !(d->is_number() && *d == 0)) {
    Fail(path, "model.dropout is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json* v = Find(model, key);
    if (v != nullptr && !(v->is_string() && v->get<std::string>().empty())) {
      Fail(path, std::string("model.") + key + " is not supported");
    }
  }
  if (Find(model, "ignore_merges") != nullptr) {
    spec->ignore_merges = BoolOr(path, model, "ignore_merges", false, "model");
  }
  const Json* vocab = Find(model, "vocab");
  if (vocab == nullptr || !vocab->is_object() || vocab->empty()) {
    Fail(path, "model.vocab must be a non-empty object");
  }
  std::map<TokenId, std::string> by_id;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() >= (1 << 24)) {
      Fail(path, "model.vocab[" + Json(it.key()).dump() + "] must be an id in [0, 2^24)");
    }
    const auto id = static_cast<TokenId>(it->get<int64_t>());
    if (!by_id.emplace(id, it.key()).second) {
      Fail(path, "model.vocab: id " + std::to_string(id) + " is used twice");
    }
  }
  const Json* merges = Find(model, "merges");
  if (merges == nullptr) return by_id;
  if (!merges->is_array()) Fail(path, "model.merges must be a list");
  spec->merges.reserve(merges->size());
  for (const Json& m : *merges) {
    if (m.is_string()) {
      spec->merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      const std::string left = m[0], right = m[1];
      if (left.empty() || left.find(' ') != std::string::npos) {
        Fail(path, "model.merges: " + m.dump() + ": a part holding a space is not supported");
      }
      spec->merges.push_back(left + " " + right);
    } else {
      Fail(path,
           "model.merges: " + m.dump().substr(0, 100) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  return by_id;
}

// added_tokens: adds each to `by_id` (or checks it matches the vocabulary's entry) and returns
// their types (special -> control, else user-defined).
std::map<TokenId, TokenType> ReadAddedTokens(const std::string& path, const Json* added,
                                             std::map<TokenId, std::string>* by_id) {
  std::map<TokenId, TokenType> types;
  if (added == nullptr) return types;
  if (!added->is_array()) Fail(path, "added_tokens must be a list");
  for (const Json& t : *added) {
    const Json* id = Find(t, "id");
    const Json* content = Find(t, "content");
    if (id == nullptr || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() >= (1 << 24) || content == nullptr || !content->is_string() ||
        content->get<std::string>().empty()) {
      Fail(path, "added_tokens: " + t.dump() + " needs an id in [0, 2^24) and a content");
    }
    const std::string where = "added_tokens[" + content->dump() + "]";
    for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
      if (BoolOr(path, t, flag, false, where)) {
        Fail(path, where + ": " + flag + " = true is not supported");
      }
    }
    const auto tid = static_cast<TokenId>(id->get<int64_t>());
    const auto [it, inserted] = by_id->emplace(tid, content->get<std::string>());
    if (!inserted && it->second != content->get<std::string>()) {
      Fail(path, where + ": id " + std::to_string(tid) + " is already the vocabulary's " +
                     Json(it->second).dump());
    }
    types[tid] =
        BoolOr(path, t, "special", false, where) ? TokenType::kControl : TokenType::kUserDefined;
  }
  return types;
}

// The id of a token's text among the named ids, -1 when none has it.
TokenId FindId(const TokenizerSpec& spec, const std::string& text) {
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    if (spec.token_types[id] != TokenType::kUnused && spec.tokens[id] == text) {
      return static_cast<TokenId>(id);
    }
  }
  return -1;
}

// tokenizer_config.json's bos/eos/pad/unk tokens and add_bos_token, generation_config.json's
// ids; the post-processor decides add_bos when the config does not.
void ReadSpecialTokens(const std::string& dir, const std::string& path, const Json& j,
                       const std::string& config_path, const Json& config, TokenizerSpec* spec) {
  namespace fs = std::filesystem;
  const std::string gen_path = (fs::path(dir) / "generation_config.json").string();
  const Json gen = ReadJson(gen_path, /*optional=*/true);
  const auto token_id = [&](const char* key, const char* gen_key) -> TokenId {
    const std::string text = TokenText(config_path, config, key);
    if (!text.empty()) {
      const TokenId id = FindId(*spec, text);
      if (id < 0) Fail(config_path, std::string(key) + " " + Json(text).dump() + " is not a token");
      return id;
    }
    const std::vector<TokenId> ids =
        IdList(gen_path, gen_key ? Find(gen, gen_key) : nullptr, gen_key ? gen_key : "");
    return ids.empty() ? -1 : ids.front();
  };
  spec->bos_id = token_id("bos_token", "bos_token_id");
  spec->eos_id = token_id("eos_token", "eos_token_id");
  spec->pad_id = token_id("pad_token", nullptr);
  if (const TokenId unk = token_id("unk_token", nullptr); unk >= 0) spec->unk_id = unk;
  spec->extra_eog_ids = IdList(gen_path, Find(gen, "eos_token_id"), "eos_token_id");

  if (Find(config, "add_bos_token") != nullptr) {
    spec->add_bos = BoolOr(config_path, config, "add_bos_token", false, "tokenizer_config");
  } else {
    spec->add_bos =
        PostProcessorAddsBos(path, Find(j, "post_processor"),
                             spec->bos_id >= 0 ? spec->tokens[spec->bos_id] : std::string());
  }
}

// The chat template: chat_template.jinja, else tokenizer_config.json's chat_template (a string,
// or a list of {name, template}: "default", else the first); refused unless ChatTemplate
// recognises it.
void ReadChatTemplate(const std::string& dir, const std::string& config_path, const Json& config,
                      TokenizerSpec* spec) {
  namespace fs = std::filesystem;
  std::string chat_source = config_path;
  if (const Json* t = Find(config, "chat_template")) {
    if (t->is_string()) {
      spec->chat_template = t->get<std::string>();
    } else if (t->is_array()) {
      for (const Json& named : *t) {
        const Json* name = Find(named, "name");
        const Json* tmpl = Find(named, "template");
        if (tmpl == nullptr || !tmpl->is_string()) {
          Fail(config_path, "chat_template: each entry needs a \"template\" string");
        }
        if (spec->chat_template.empty() || (name != nullptr && *name == "default")) {
          spec->chat_template = tmpl->get<std::string>();
        }
      }
    } else {
      Fail(config_path, "chat_template must be a string or a list of {name, template}");
    }
  }
  const fs::path jinja = fs::path(dir) / "chat_template.jinja";
  std::error_code ec;
  if (fs::exists(jinja, ec)) {
    spec->chat_template = ReadText(jinja.string());
    chat_source = jinja.string();
  }
  if (!spec->chat_template.empty() && !ChatTemplate::Recognizes(spec->chat_template)) {
    Fail(chat_source,
         "the chat template is none sift renders (ChatML, Llama 3, Mistral); "
         "refusing to format chats with a different one");
  }
}

}  // namespace

TokenizerSpec TokenizerSpec::FromHfDir(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "tokenizer.json").string();
  const Json j = ReadJson(path, /*optional=*/false);
  TokenizerSpec spec;
  spec.model = "gpt2";

  const Json* model = Find(j, "model");
  if (model == nullptr || !model->is_object()) Fail(path, "missing \"model\"");
  std::map<TokenId, std::string> by_id = ReadBpeModel(path, *model, &spec);
  const std::map<TokenId, TokenType> types = ReadAddedTokens(path, Find(j, "added_tokens"), &by_id);
  const TokenId n = by_id.rbegin()->first + 1;
  spec.tokens.assign(static_cast<size_t>(n), std::string());
  spec.token_types.assign(static_cast<size_t>(n), TokenType::kUnused);  // ids nobody names
  for (auto& [id, text] : by_id) {
    spec.tokens[id] = std::move(text);
    auto t = types.find(id);
    spec.token_types[id] = t == types.end() ? TokenType::kNormal : t->second;
  }

  spec.normalizer = NormalizerName(path, Find(j, "normalizer"));
  spec.pre = PreTokenizerName(path, Find(j, "pre_tokenizer"));
  const Json* decoder = Find(j, "decoder");
  if (decoder == nullptr || TypeOf(*decoder) != "ByteLevel") {
    Fail(path, "decoder " + (decoder ? decoder->dump().substr(0, 200) : std::string("null")) +
                   " is not supported (supported: ByteLevel)");
  }
  if (const Json* unk = Find(*model, "unk_token")) {
    if (!unk->is_string()) Fail(path, "model.unk_token must be a string or null");
    spec.unk_id = FindId(spec, unk->get<std::string>());
  }
  const std::string config_path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  const Json config = ReadJson(config_path, /*optional=*/true);
  ReadSpecialTokens(dir, path, j, config_path, config, &spec);
  ReadChatTemplate(dir, config_path, config, &spec);
  return spec;
}

}  // namespace sift
