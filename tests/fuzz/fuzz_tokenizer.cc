// libFuzzer target: the tokenizer (plugin_api tokenizer.h) on arbitrary text, with every
// byte-level BPE pre-tokenizer and SentencePiece-style BPE on small vocabularies, and the
// model's own tokenizer when $SIFT_MODEL names a GGUF file.
//
// Input: byte 0 picks the vocabulary and whether special tokens are parsed; the rest is the
// text. Checked besides memory safety: byte-level BPE round-trips valid UTF-8 made of bytes
// its vocabulary has exactly (Decode(Encode(text)) == text) and the streaming detokenizer
// emits what Decode returns.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "sift/error.h"
#include "sift/gguf.h"
#include "sift/tokenizer.h"

namespace {

using sift::TokenId;
using sift::Tokenizer;
using sift::TokenizerSpec;
using sift::TokenType;

// GPT-2 bytes_to_unicode: the vocabulary symbol of one byte.
std::string ByteSymbol(int b) {
  auto printable = [](int x) {
    return (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
  };
  int cp = b;
  if (!printable(b)) {
    cp = 0x100;
    for (int x = 0; x < b; ++x) cp += !printable(x);
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

std::unique_ptr<Tokenizer> ByteLevel(const std::string& pre) {
  TokenizerSpec spec;
  spec.model = "gpt2";
  spec.pre = pre;
  for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    spec.tokens.push_back(special);
    spec.token_types.push_back(TokenType::kControl);
  }
  for (int b = 0; b < 256; ++b) {
    spec.tokens.push_back(ByteSymbol(b));
    spec.token_types.push_back(TokenType::kNormal);
  }
  // A few merges, including multi-byte ones, so that merging runs on every input.
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"t", "h"},       {"th", "e"}, {" ", "t"},  {" t", "he"}, {"i", "n"},
      {"\xc3", "\xa9"}, {"1", "2"},  {"12", "3"}, {"e", "r"},   {" ", " "}};
  for (const auto& [l, r] : merges) {
    std::string ml, mr;
    for (char c : l) ml += ByteSymbol(static_cast<unsigned char>(c));
    for (char c : r) mr += ByteSymbol(static_cast<unsigned char>(c));
    spec.merges.push_back(ml + " " + mr);
    spec.tokens.push_back(ml + mr);
    spec.token_types.push_back(TokenType::kNormal);
  }
  spec.eos_id = 0;
  return Tokenizer::FromSpec(spec);
}

std::unique_ptr<Tokenizer> SentencePiece() {
  TokenizerSpec spec;
  spec.model = "llama";
  spec.tokens = {"<unk>", "<s>", "</s>"};
  spec.token_types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  spec.scores = {0, 0, 0};
  spec.unk_id = 0;
  spec.bos_id = 1;
  spec.eos_id = 2;
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    spec.tokens.push_back(name);
    spec.token_types.push_back(TokenType::kByte);
    spec.scores.push_back(0);
  }
  const std::string space = "\xE2\x96\x81";
  float score = -1;
  const std::vector<std::string> pieces = {space + "the", space + "t", "he",  "h",
                                           "e",           "t",         space, "in",
                                           space + "caf", "\xc3\xa9",  "12",  "3"};
  for (const std::string& piece : pieces) {
    spec.tokens.push_back(piece);
    spec.token_types.push_back(TokenType::kNormal);
    spec.scores.push_back(score--);
  }
  return Tokenizer::FromSpec(spec);
}

std::unique_ptr<Tokenizer> FromModel() {
  const char* path = std::getenv("SIFT_MODEL");
  if (path == nullptr || *path == '\0') return nullptr;
  try {
    return Tokenizer::FromGguf(*sift::GgufFile::Open(path));
  } catch (const sift::Error& e) {
    std::fprintf(stderr, "fuzz_tokenizer: SIFT_MODEL not used: %s\n", e.what());
    return nullptr;
  }
}

struct Vocab {
  Vocab(std::unique_ptr<Tokenizer> t, bool bl) : tokenizer(std::move(t)), byte_level(bl) {
    // Byte-level BPE drops a byte whose symbol is not in the vocabulary (as HF does); the
    // round trip holds for texts made of known bytes only.
    for (int b = 0; b < 256; ++b) known[b] = tokenizer->FindToken(ByteSymbol(b)) >= 0;
  }
  std::unique_ptr<Tokenizer> tokenizer;
  bool byte_level;
  bool known[256];
};

std::vector<Vocab>& Vocabs() {
  static auto* vocabs = [] {
    auto* v = new std::vector<Vocab>;
    for (const char* pre : {"default", "smollm", "llama3", "qwen2"}) {
      v->emplace_back(ByteLevel(pre), true);
    }
    v->emplace_back(SentencePiece(), false);
    if (auto model = FromModel()) v->emplace_back(std::move(model), true);
    return v;
  }();
  return *vocabs;
}

bool ValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<Vocab>& vocabs = Vocabs();
  const Vocab& vocab = vocabs[data[0] % vocabs.size()];
  const bool parse_special = (data[0] / vocabs.size()) % 2 == 1;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const Tokenizer& tok = *vocab.tokenizer;
  const std::vector<TokenId> ids = tok.Encode(text, parse_special);
  for (TokenId id : ids) {
    if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
  }
  const std::string decoded = tok.Decode(ids, /*skip_special=*/false);
  bool all_known = true;
  for (unsigned char c : text) all_known = all_known && vocab.known[c];
  if (vocab.byte_level && all_known && ValidUtf8(text) && decoded != text) __builtin_trap();
  sift::StreamingDetokenizer stream(tok, /*skip_special=*/false);
  std::string streamed;
  for (TokenId id : ids) streamed += stream.Push(id);
  streamed += stream.Flush();
  if (vocab.byte_level && streamed != decoded) __builtin_trap();
  (void)tok.Decode(ids, /*skip_special=*/true);
  return 0;
}
