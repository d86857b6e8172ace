#include "spm_tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "sift/error.h"
#include "unicode.h"

namespace sift {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

// "<0xAB>" -> 0xAB; -1 if `text` is not of that form.
int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = text[i];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

struct Symbol {
  size_t offset;  // into the escaped text
  size_t length;  // 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

// A possible merge of two adjacent symbols; `length` is their combined length when queued.
struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  size_t length;
  // Heap order: highest score first, then leftmost.
  bool operator<(const Bigram& o) const {
    return score != o.score ? score < o.score : left > o.left;
  }
};

}  // namespace

SpmTokenizer::SpmTokenizer(TokenizerSpec& spec)
    : VocabTokenizer(spec, /*default_add_bos=*/true),
      add_space_prefix_(spec.add_space_prefix.value_or(true)) {
  const size_t n = tokens_.size();
  SIFT_CHECK(spec.scores.empty() || spec.scores.size() == n,
             "tokenizer: tokenizer.ggml.scores has ", spec.scores.size(), " entries for ", n,
             " tokens");
  scores_ = spec.scores.empty() ? std::vector<float>(n, 0.0f) : std::move(spec.scores);

  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_token_[b] = FindToken(name);
  }

  for (size_t i = 0; i < n; ++i) {
    const TokenType type = types_[i];
    if (type == TokenType::kByte) {
      const int byte = ParseByteToken(tokens_[i]);
      if (byte >= 0) token_bytes_[i] = std::string(1, static_cast<char>(byte));
    } else if (type == TokenType::kNormal || type == TokenType::kUndefined ||
               type == TokenType::kUnused) {
      std::string& bytes = token_bytes_[i];
      for (size_t pos = 0; (pos = bytes.find(kSpaceMark, pos)) != std::string::npos;) {
        bytes.replace(pos, kSpaceMark.size(), " ");
        pos += 1;
      }
    }
  }
}

TokenId SpmTokenizer::PieceId(std::string_view text) const {
  const TokenId id = FindToken(text);
  if (id < 0) return -1;
  const TokenType type = types_[id];
  return (type == TokenType::kNormal || type == TokenType::kUserDefined ||
          type == TokenType::kUndefined)
             ? id
             : -1;
}

void SpmTokenizer::EncodeText(std::string_view text, bool after_special,
                              std::vector<TokenId>* out) const {
  // Escape: optional leading space, then every space becomes U+2581.
  std::string escaped;
  escaped.reserve(text.size() + 16);
  if (add_space_prefix_ && after_special) escaped.append(kSpaceMark);
  for (const char c : text) {
    if (c == ' ') {
      escaped.append(kSpaceMark);
    } else {
      escaped.push_back(c);
    }
  }

  // One symbol per code point (the text is well-formed UTF-8).
  std::vector<Symbol> symbols;
  symbols.reserve(escaped.size());
  for (size_t pos = 0; pos < escaped.size();) {
    uint32_t cp;
    size_t length = unicode::DecodeUtf8At(escaped, pos, &cp);
    if (length == 0) length = 1;
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({pos, length, index - 1, index + 1});
    pos += length;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::vector<Bigram> queue;
  const auto try_queue = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const size_t length = symbols[left].length + symbols[right].length;
    const TokenId id = PieceId(std::string_view(escaped).substr(symbols[left].offset, length));
    if (id < 0) return;
    queue.push_back({scores_[id], left, right, length});
    std::push_heap(queue.begin(), queue.end());
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) try_queue(i, i + 1);

  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end());
    const Bigram b = queue.back();
    queue.pop_back();
    Symbol& left = symbols[b.left];
    Symbol& right = symbols[b.right];
    // Stale: a side was merged since this was queued (lengths changed or went to 0).
    if (left.length == 0 || right.length == 0 || left.length + right.length != b.length ||
        left.next != b.right) {
      continue;
    }
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    try_queue(left.prev, b.left);
    try_queue(b.left, left.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece =
        std::string_view(escaped).substr(symbols[i].offset, symbols[i].length);
    const TokenId id = PieceId(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    // Byte fallback; without byte tokens, the unknown token (once per code point).
    bool all_bytes = true;
    for (const char c : piece) all_bytes = all_bytes && byte_token_[static_cast<uint8_t>(c)] >= 0;
    if (all_bytes) {
      for (const char c : piece) out->push_back(byte_token_[static_cast<uint8_t>(c)]);
    } else if (unk_id_ >= 0) {
      out->push_back(unk_id_);
    }
  }
}

}  // namespace sift
