// Byte-level BPE (tokenizer.ggml.model "gpt2"): GPT-2 / SmolLM2 / Llama 3 / Qwen2 vocabularies.
// The algorithm is described in sift/tokenizer.h; pre-tokenizers in pretokenizer.h.
//
// THREADING: immutable after construction apart from an internally synchronised cache of
//            encoded pieces; safe from many threads.
// ERRORS:    the constructor throws sift::Error for an unknown pre-tokenizer or normalizer or a
//            malformed merge. Merges whose parts or result are not in the vocabulary are ignored
//            (they can never apply).
#ifndef SIFT_BASE_BPE_TOKENIZER_H_
#define SIFT_BASE_BPE_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "piece_cache.h"
#include "pretokenizer.h"
#include "vocab_tokenizer.h"

namespace sift {

// GPT-2 bytes_to_unicode: the code point that stands for `byte` in byte-level vocabularies.
uint32_t ByteLevelCodepoint(uint8_t byte);

class BpeTokenizer : public VocabTokenizer {
 public:
  explicit BpeTokenizer(TokenizerSpec& spec);

 protected:
  void EncodeText(std::string_view text, bool after_special,
                  std::vector<TokenId>* out) const override;

 private:
  // Merge table: open addressing with linear probing over (left, right) id pairs, sized to a
  // power of two at most half full. left == -1 marks an empty slot.
  struct MergeSlot {
    TokenId left = -1;
    TokenId right = -1;
    int32_t rank = 0;
    TokenId result = -1;
  };
  static size_t PairHash(TokenId left, TokenId right) {
    const uint64_t key =
        (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 32);
  }
  // The merge of `left` followed by `right`, or nullptr.
  const MergeSlot* FindMerge(TokenId left, TokenId right) const {
    for (size_t i = PairHash(left, right) & merge_mask_;; i = (i + 1) & merge_mask_) {
      const MergeSlot& slot = merges_[i];
      if (slot.left == left && slot.right == right) return &slot;
      if (slot.left < 0) return nullptr;
    }
  }
  void AddMerge(TokenId left, TokenId right, int32_t rank, TokenId result);
  struct Scratch;  // per-call working memory
  // Appends the ids of one pre-tokenizer piece.
  void EncodePiece(std::string_view piece, Scratch* scratch, std::vector<TokenId>* out) const;

  PreTokenizer pre_;
  // HF ignore_merges (Llama 3): a piece that is itself a vocabulary token is emitted as is.
  bool ignore_merges_ = false;
  bool nfc_ = false;  // normalize ordinary text to NFC before pre-tokenizing (Qwen2)
  std::array<TokenId, 256> byte_token_;  // id of each byte's symbol, -1 if not in the vocabulary
  std::vector<MergeSlot> merges_;
  size_t merge_mask_ = 0;
  mutable PieceCache cache_;  // results of EncodePiece, by piece
};

}  // namespace sift

#endif  // SIFT_BASE_BPE_TOKENIZER_H_
