// Tokenizer built from GGUF metadata (tokenizer.ggml.*): byte-level BPE ("gpt2" model, with the
// model's pre-tokenizer: smollm, llama3, qwen2, ...) or SentencePiece-style BPE ("llama" model:
// Llama 2, Mistral), special tokens recognised inside text.
//
// Exactness target: the same ids as Hugging Face `tokenizers` for the same vocabulary
// (engine-specs §3). Checked against committed fixtures in tests/.
//
// THREADING: immutable after construction; Encode/Decode are safe from many threads.
// ERRORS:    FromGguf throws sift::Error for a missing key or an unsupported tokenizer model or
//            pre-tokenizer, naming it. Encode/Decode do not throw for any input.
#ifndef SIFT_TOKENIZER_H_
#define SIFT_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sift/chat_template.h"

namespace sift {

class GgufFile;

using TokenId = int32_t;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  static std::unique_ptr<Tokenizer> FromGguf(const GgufFile& file);

  // Text to ids. With parse_special, exact occurrences of special (control / user-defined)
  // token texts become their ids; no BOS/EOS is added here (see add_bos()).
  virtual std::vector<TokenId> Encode(std::string_view text, bool parse_special = true) const = 0;
  // Ids to text (UTF-8; invalid sequences become U+FFFD). Special tokens are rendered as their
  // text unless skip_special.
  virtual std::string Decode(const std::vector<TokenId>& ids, bool skip_special = false) const = 0;
  // The raw bytes one token stands for (may be a partial UTF-8 sequence); special tokens give
  // their text. Out-of-range ids give "".
  virtual std::string TokenBytes(TokenId id) const = 0;
  // The vocabulary string as stored (e.g. "Ġthe"), for display.
  virtual const std::string& TokenText(TokenId id) const = 0;

  virtual int64_t vocab_size() const = 0;
  virtual bool IsSpecial(TokenId id) const = 0;
  virtual TokenId bos_id() const = 0;  // -1 if none
  virtual TokenId eos_id() const = 0;  // -1 if none
  virtual bool add_bos() const = 0;    // whether prompts should start with BOS
  // End-of-generation ids: eos, eot and tokens like <|im_end|>, <|endoftext|>, <|eot_id|>.
  virtual const std::vector<TokenId>& eog_ids() const = 0;
  bool IsEog(TokenId id) const;

  // The chat template chosen from tokenizer.chat_template (ChatML if absent).
  virtual const ChatTemplate& chat_template() const = 0;
};

// Turns a stream of ids into text without ever emitting half a UTF-8 character: bytes of an
// incomplete sequence are held until the next token completes them (or Flush).
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special = true)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}
  // Returns the text that became complete with this token (possibly "").
  std::string Push(TokenId id);
  // Returns whatever is pending; incomplete sequences become U+FFFD.
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace sift

#endif  // SIFT_TOKENIZER_H_
