#include "bpe_tokenizer.h"

#include <algorithm>

#include "normalizer.h"
#include "sift/error.h"
#include "unicode.h"

namespace sift {

uint32_t ByteLevelCodepoint(uint8_t byte) {
  // Printable bytes stand for themselves; the other 68, in increasing order, for U+0100...
  if ((byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE) {
    return byte;
  }
  if (byte <= 0x20) return 0x100 + byte;                  // 0x00-0x20 -> U+0100-U+0120
  if (byte <= 0xA0) return 0x100 + 0x21 + (byte - 0x7F);  // 0x7F-0xA0 -> U+0121-U+0142
  return 0x143;                                           // 0xAD
}

namespace {

// Inverts ByteLevelCodepoint over a whole token text; false if some code point stands for no
// byte (the token is then rendered as its raw text, as HF's ByteLevel decoder does).
bool ByteLevelDecode(std::string_view text, std::string* bytes) {
  static const std::vector<int16_t> kInverse = [] {
    std::vector<int16_t> inverse(0x144, -1);
    for (int b = 0; b < 256; ++b) inverse[ByteLevelCodepoint(static_cast<uint8_t>(b))] = b;
    return inverse;
  }();
  bytes->clear();
  for (size_t pos = 0; pos < text.size();) {
    uint32_t cp;
    const size_t n = unicode::DecodeUtf8At(text, pos, &cp);
    if (n == 0 || cp >= kInverse.size() || kInverse[cp] < 0) return false;
    bytes->push_back(static_cast<char>(kInverse[cp]));
    pos += n;
  }
  return true;
}

}  // namespace

struct BpeTokenizer::Scratch {
  struct Symbol {
    TokenId id;    // -1 once merged into its left neighbour
    int32_t prev;  // index of the previous live symbol, -1 at the start
    int32_t next;  // index of the next live symbol, -1 at the end
  };
  // A possible merge of symbols[left] and symbols[right] as they were when it was queued.
  struct Candidate {
    int32_t rank;
    int32_t left;
    int32_t right;
    TokenId left_id;
    TokenId right_id;
    TokenId result;
    // Heap order: lowest rank first, then leftmost.
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::vector<std::string_view> pieces;
  std::vector<Symbol> symbols;
  std::vector<Candidate> queue;
  std::string mapped;
};

BpeTokenizer::BpeTokenizer(TokenizerSpec& spec)
    : VocabTokenizer(spec, /*default_add_bos=*/false),
      pre_(PreTokenizerFromName(spec.pre.empty() ? "default" : spec.pre)),
      ignore_merges_(spec.ignore_merges.value_or(pre_ == PreTokenizer::kLlama3)),
      nfc_(spec.normalizer == "nfc") {
  SIFT_CHECK(spec.normalizer.empty() || nfc_, "tokenizer: normalizer '", spec.normalizer,
             "' is not supported (supported: none, nfc)");
  std::string symbol;
  for (int b = 0; b < 256; ++b) {
    symbol.clear();
    unicode::AppendUtf8(ByteLevelCodepoint(static_cast<uint8_t>(b)), &symbol);
    byte_token_[b] = FindToken(symbol);
  }

  size_t capacity = 16;
  while (capacity < 2 * spec.merges.size()) capacity *= 2;
  merges_.resize(capacity);
  merge_mask_ = capacity - 1;
  std::string joined;
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const std::string_view merge = spec.merges[rank];
    const size_t space = merge.find(' ', 1);
    SIFT_CHECK(space != std::string_view::npos && space + 1 < merge.size(), "tokenizer: merge ",
               rank, " ('", merge, "') is not of the form 'left right'");
    const std::string_view left = merge.substr(0, space);
    const std::string_view right = merge.substr(space + 1);
    joined.assign(left).append(right);
    const TokenId left_id = FindToken(left);
    const TokenId right_id = FindToken(right);
    const TokenId result = FindToken(joined);
    if (left_id < 0 || right_id < 0 || result < 0) continue;
    AddMerge(left_id, right_id, static_cast<int32_t>(rank), result);
  }

  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (IsSpecial(static_cast<TokenId>(i))) continue;
    std::string bytes;
    if (ByteLevelDecode(tokens_[i], &bytes)) token_bytes_[i] = std::move(bytes);
  }
}

void BpeTokenizer::AddMerge(TokenId left, TokenId right, int32_t rank, TokenId result) {
  for (size_t i = PairHash(left, right) & merge_mask_;; i = (i + 1) & merge_mask_) {
    MergeSlot& slot = merges_[i];
    if (slot.left == left && slot.right == right) return;  // a repeated pair keeps its first rank
    if (slot.left < 0) {
      slot = MergeSlot{left, right, rank, result};
      return;
    }
  }
}

void BpeTokenizer::EncodeText(std::string_view text, bool /*after_special*/,
                              std::vector<TokenId>* out) const {
  std::string normalized;
  if (nfc_) {
    normalized = NormalizeNfc(text);
    text = normalized;
  }
  Scratch scratch;
  PreTokenize(pre_, text, &scratch.pieces);
  for (const std::string_view piece : scratch.pieces) {
    if (cache_.Lookup(piece, out)) continue;
    const size_t begin = out->size();
    EncodePiece(piece, &scratch, out);
    cache_.Insert(piece, out->data() + begin, out->data() + out->size());
  }
}

void BpeTokenizer::EncodePiece(std::string_view piece, Scratch* scratch,
                               std::vector<TokenId>* out) const {
  if (ignore_merges_) {
    scratch->mapped.clear();
    for (const char c : piece) {
      unicode::AppendUtf8(ByteLevelCodepoint(static_cast<uint8_t>(c)), &scratch->mapped);
    }
    const TokenId id = FindToken(scratch->mapped);
    if (id >= 0 && !IsSpecial(id)) {
      out->push_back(id);
      return;
    }
  }

  // One symbol per byte; bytes without a symbol in the vocabulary are dropped before merging.
  auto& symbols = scratch->symbols;
  symbols.clear();
  for (const char c : piece) {
    const TokenId id = byte_token_[static_cast<uint8_t>(c)];
    if (id < 0) continue;
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  auto& queue = scratch->queue;
  queue.clear();
  const auto try_queue = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const MergeSlot* merge = FindMerge(symbols[left].id, symbols[right].id);
    if (merge == nullptr) return;
    queue.push_back({merge->rank, left, right, symbols[left].id, symbols[right].id, merge->result});
    std::push_heap(queue.begin(), queue.end());
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) try_queue(i, i + 1);

  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end());
    const Scratch::Candidate c = queue.back();
    queue.pop_back();
    Scratch::Symbol& left = symbols[c.left];
    Scratch::Symbol& right = symbols[c.right];
    // Stale: one side was merged away or into something else since this was queued.
    if (left.id != c.left_id || right.id != c.right_id || left.next != c.right) continue;
    left.id = c.result;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.id = -1;
    try_queue(left.prev, c.left);
    try_queue(c.left, left.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) out->push_back(symbols[i].id);
}

}  // namespace sift
