// Byte-level BPE (tokenizer.ggml.model "gpt2"): GPT-2 / SmolLM2 / Llama 3 / Qwen2 vocabularies.
// The algorithm is described in sift/tokenizer.h; pre-tokenizers in pretokenizer.h.
//
// THREADING: immutable after construction; safe from many threads.
// ERRORS:    the constructor throws sift::Error for an unknown pre-tokenizer or a malformed
//            merge. Merges whose parts or result are not in the vocabulary are ignored (they can
//            never apply).
#ifndef SIFT_BASE_BPE_TOKENIZER_H_
#define SIFT_BASE_BPE_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

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
  struct Merge {
    int32_t rank;
    TokenId result;
  };
  static uint64_t PairKey(TokenId left, TokenId right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  struct Scratch;  // per-call working memory
  // Appends the ids of one pre-tokenizer piece.
  void EncodePiece(std::string_view piece, Scratch* scratch, std::vector<TokenId>* out) const;

  PreTokenizer pre_;
  // HF ignore_merges (Llama 3): a piece that is itself a vocabulary token is emitted as is.
  bool ignore_merges_ = false;
  std::array<TokenId, 256> byte_token_;  // id of each byte's symbol, -1 if not in the vocabulary
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace sift

#endif  // SIFT_BASE_BPE_TOKENIZER_H_
