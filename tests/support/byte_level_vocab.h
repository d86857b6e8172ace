// Test-only helpers for small byte-level BPE vocabularies: GPT-2's bytes_to_unicode written out
// independently of the library, and a TokenizerSpec builder. Header-only; not part of the library.
#ifndef SIFT_TESTS_SUPPORT_BYTE_LEVEL_VOCAB_H_
#define SIFT_TESTS_SUPPORT_BYTE_LEVEL_VOCAB_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sift/tokenizer.h"

namespace sift::testing {

// GPT-2 bytes_to_unicode, written out independently of the library.
inline std::string ByteSymbol(uint8_t b) {
  uint32_t cp;
  if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) {
    cp = b;
  } else {
    uint32_t n = 0;  // rank of b among the unprintable bytes
    for (int x = 0; x < b; ++x) {
      if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) ++n;
    }
    cp = 0x100 + n;
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

inline std::string Mapped(std::string_view raw) {
  std::string s;
  for (const char c : raw) s += ByteSymbol(static_cast<uint8_t>(c));
  return s;
}

// Vocabulary: the specials (control) first, then the 256 byte symbols (minus `missing_bytes`),
// then each merge's result in merge order. Merges are given as raw (unmapped) text pairs.
inline TokenizerSpec ByteLevelSpec(const std::string& pre,
                                   const std::vector<std::pair<std::string, std::string>>& merges,
                                   const std::vector<std::string>& specials = {},
                                   const std::string& missing_bytes = "") {
  TokenizerSpec spec;
  spec.model = "gpt2";
  spec.pre = pre;
  for (const std::string& s : specials) {
    spec.tokens.push_back(s);
    spec.token_types.push_back(TokenType::kControl);
  }
  for (int b = 0; b < 256; ++b) {
    if (missing_bytes.find(static_cast<char>(b)) != std::string::npos) continue;
    spec.tokens.push_back(ByteSymbol(static_cast<uint8_t>(b)));
    spec.token_types.push_back(TokenType::kNormal);
  }
  for (const auto& [left, right] : merges) {
    spec.merges.push_back(Mapped(left) + " " + Mapped(right));
    const std::string joined = Mapped(left + right);
    bool present = false;
    for (const std::string& t : spec.tokens) present = present || t == joined;
    if (!present) {
      spec.tokens.push_back(joined);
      spec.token_types.push_back(TokenType::kNormal);
    }
  }
  return spec;
}

}  // namespace sift::testing

#endif  // SIFT_TESTS_SUPPORT_BYTE_LEVEL_VOCAB_H_
