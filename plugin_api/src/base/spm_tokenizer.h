// SentencePiece-style BPE (tokenizer.ggml.model "llama"): Llama 2 / Mistral vocabularies with
// per-token scores and <0xXX> byte tokens. The algorithm is described in sift/tokenizer.h; it
// follows llama.cpp's llm_tokenizer_spm.
//
// THREADING: immutable after construction; safe from many threads.
// ERRORS:    the constructor throws sift::Error if scores and tokens differ in length.
#ifndef SIFT_BASE_SPM_TOKENIZER_H_
#define SIFT_BASE_SPM_TOKENIZER_H_

#include <array>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "vocab_tokenizer.h"

namespace sift {

class SpmTokenizer : public VocabTokenizer {
 public:
  explicit SpmTokenizer(TokenizerSpec& spec);

 protected:
  void EncodeText(std::string_view text, bool after_special,
                  std::vector<TokenId>* out) const override;
  bool DecodeStripsLeadingSpace() const override { return add_space_prefix_; }

 private:
  // The id of a token that text can be encoded to (normal or user-defined; not control,
  // unknown, unused or byte tokens), or -1.
  TokenId PieceId(std::string_view text) const;

  std::vector<float> scores_;
  bool add_space_prefix_ = true;
  std::array<TokenId, 256> byte_token_;  // <0xXX> token per byte, -1 if absent
};

}  // namespace sift

#endif  // SIFT_BASE_SPM_TOKENIZER_H_
