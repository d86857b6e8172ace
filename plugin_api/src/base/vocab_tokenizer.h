// What every vocabulary-based tokenizer shares: the token table and its kinds, special-token
// splitting, decoding, BOS/EOS/EOG bookkeeping and the chat template. Subclasses (byte-level
// BPE, SentencePiece-style BPE) encode ordinary text and say what bytes each token stands for.
//
// THREADING: immutable after construction; safe from many threads.
// ERRORS:    the constructor throws sift::Error for inconsistent spec arrays.
#ifndef SIFT_BASE_VOCAB_TOKENIZER_H_
#define SIFT_BASE_VOCAB_TOKENIZER_H_

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sift/tokenizer.h"
#include "special_tokens.h"

namespace sift {

class VocabTokenizer : public Tokenizer {
 public:
  std::vector<TokenId> Encode(std::string_view text, bool parse_special) const override;
  std::string Decode(const std::vector<TokenId>& ids, bool skip_special) const override;
  std::string TokenBytes(TokenId id) const override;
  const std::string& TokenText(TokenId id) const override;
  TokenId FindToken(std::string_view text) const override;
  TokenType token_type(TokenId id) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  bool IsSpecial(TokenId id) const override;
  TokenId bos_id() const override { return bos_id_; }
  TokenId eos_id() const override { return eos_id_; }
  bool add_bos() const override { return add_bos_; }
  const std::vector<TokenId>& eog_ids() const override { return eog_ids_; }
  const ChatTemplate& chat_template() const override { return chat_template_; }

 protected:
  // Takes the token table, kinds, special ids and chat template from `spec`.
  // default_add_bos applies when spec.add_bos is unset.
  VocabTokenizer(TokenizerSpec& spec, bool default_add_bos);

  // Appends the ids of one run of ordinary text (well-formed UTF-8, no special tokens inside).
  // after_special: the run is the start of the input or follows a special token.
  virtual void EncodeText(std::string_view text, bool after_special,
                          std::vector<TokenId>* out) const = 0;
  // Whether Decode strips one leading space (SentencePiece space prefix).
  virtual bool DecodeStripsLeadingSpace() const { return false; }

  // Subclass constructors fill token_bytes_ (one entry per token; specials already hold their
  // text when the subclass runs).
  std::vector<std::string> token_bytes_;

  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  // Text -> id over all tokens (first id wins for duplicate texts); views into tokens_.
  std::unordered_map<std::string_view, TokenId> token_ids_;
  TokenId unk_id_ = -1;

 private:
  TokenId bos_id_ = -1;
  TokenId eos_id_ = -1;
  bool add_bos_ = false;
  std::vector<TokenId> eog_ids_;
  ChatTemplate chat_template_;
  SpecialTokenMatcher specials_;
};

// Special ids outside [0, vocab_size) become -1.
TokenId ValidTokenId(TokenId id, size_t vocab_size);

}  // namespace sift

#endif  // SIFT_BASE_VOCAB_TOKENIZER_H_
