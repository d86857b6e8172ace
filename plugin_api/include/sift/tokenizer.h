// Tokenizer built from GGUF metadata (tokenizer.ggml.*) or a Hugging Face directory
// (tokenizer.json, tokenizer_json.cc): byte-level BPE ("gpt2" model, with the model's
// pre-tokenizer: smollm, llama3, qwen2, gpt-2) or, from GGUF only, SentencePiece-style BPE
// ("llama" model: Llama 2, Mistral); special tokens recognised inside text.
//
// Exactness target: the same ids as Hugging Face `tokenizers` for the same vocabulary.
// Checked against committed fixtures in tests/ (tools/make_reference_fixtures.py).
//
// Byte-level BPE ("gpt2"): text -> normalizer (none, or Unicode NFC: Qwen2's tokenizer.json,
// and GGUF files with the qwen2 pre-tokenizer, whose original tokenizer.json has it) ->
// pre-tokenizer pieces (pretokenizer.h) -> each piece's UTF-8 bytes mapped through GPT-2
// bytes_to_unicode -> one symbol per byte; a byte whose symbol is not in the vocabulary is
// dropped (HF with unk_token null, byte_fallback false) -> merges applied lowest rank first, ties
// leftmost. With ignore_merges (the llama3 pre-tokenizer's default) a piece that is itself a
// (non-special) vocabulary token is emitted whole.
// SentencePiece-style BPE ("llama"): spaces become U+2581, a leading U+2581 is added when
// add_space_prefix (also after every special token, as llama.cpp), symbols are code points,
// adjacent pairs that form a normal or user-defined token are merged highest score first (ties
// leftmost; llama.cpp llm_tokenizer_spm); a code point that ends up in no token is emitted as
// its <0xXX> byte tokens (else the unknown token, else dropped).
//
// Token kinds: control (3), unknown (2) and user-defined (4) tokens are "special": with
// parse_special, their exact texts in the input become their ids (leftmost, then longest
// first, as HF's added-token matcher) and are never split by BPE. Decoding renders every token
// as its bytes; skip_special drops control and unknown tokens (user-defined ones are text).
//
// THREADING: immutable after construction (apart from an internally synchronised, bounded cache
//            of encoded pieces); Encode/Decode are safe from many threads.
// ERRORS:    FromGguf/FromHfDir/FromSpec throw sift::Error for a missing key, inconsistent arrays
//            or an unsupported tokenizer model, normalizer, pre-tokenizer, decoder or added-token
//            option, naming the file and the key. Encode/Decode do not throw for any input
//            (ill-formed UTF-8 input is read as U+FFFD).
#ifndef SIFT_TOKENIZER_H_
#define SIFT_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sift/chat_template.h"

namespace sift {

class GgufFile;

using TokenId = int32_t;

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Everything a tokenizer is built from; mirrors the GGUF tokenizer.* keys so that tests can
// build small vocabularies without a file.
struct TokenizerSpec {
  std::string model = "gpt2";          // tokenizer.ggml.model: "gpt2" or "llama"
  std::string pre = "default";         // tokenizer.ggml.pre (byte-level BPE only)
  std::vector<std::string> tokens;     // index = id
  std::vector<TokenType> token_types;  // empty = all normal; else one per token
  std::vector<std::string> merges;     // "left right", rank = index (byte-level BPE)
  std::vector<float> scores;           // one per token (SentencePiece); empty = all 0
  TokenId bos_id = -1;                 // ids outside the vocabulary count as absent
  TokenId eos_id = -1;
  TokenId unk_id = -1;
  TokenId pad_id = -1;
  TokenId eot_id = -1;
  TokenId eom_id = -1;
  std::optional<bool> add_bos;           // absent: false for "gpt2", true for "llama"
  std::optional<bool> add_space_prefix;  // absent: false for "gpt2", true for "llama"
  std::string chat_template;             // Jinja source; "" = ChatML
  std::string normalizer;                // "" (none) or "nfc"; byte-level BPE only
  std::optional<bool> ignore_merges;     // byte-level BPE; absent: true for the llama3 pre only
  std::vector<TokenId> extra_eog_ids;    // more end-of-generation ids (generation_config.json)

  // Reads tokenizer.ggml.{model,pre,tokens,token_type,merges,scores,*_token_id,add_bos_token,
  // add_space_prefix} and tokenizer.chat_template; normalizer "nfc" for the qwen2 pre-tokenizer.
  // Throws sift::Error naming the file and key if model or tokens is missing or a value has the
  // wrong type.
  static TokenizerSpec FromGguf(const GgufFile& file);
  // Reads a Hugging Face directory: tokenizer.json (required), tokenizer_config.json,
  // chat_template.jinja and generation_config.json (optional). What is accepted is listed at the
  // top of tokenizer_json.cc; anything else throws sift::Error naming the file and the key.
  static TokenizerSpec FromHfDir(const std::string& dir);
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  static std::unique_ptr<Tokenizer> FromGguf(const GgufFile& file);
  static std::unique_ptr<Tokenizer> FromHfDir(const std::string& dir);
  static std::unique_ptr<Tokenizer> FromSpec(TokenizerSpec spec);
  // The tokenizer of a model path as Model::Load takes it: GGUF metadata for a .gguf file,
  // FromHfDir for a directory holding tokenizer.json, nullptr for a directory without one.
  static std::unique_ptr<Tokenizer> ForModel(const std::string& path);

  // Text to ids. With parse_special, exact occurrences of special (control / unknown /
  // user-defined) token texts become their ids; without it they are ordinary text. No BOS/EOS
  // is added here (see add_bos()).
  virtual std::vector<TokenId> Encode(std::string_view text, bool parse_special = true) const = 0;
  // Ids to text: the concatenated TokenBytes, read as UTF-8 with every ill-formed subsequence
  // replaced by U+FFFD. skip_special drops control and unknown tokens; out-of-range ids are
  // skipped. SentencePiece with add_space_prefix strips one leading space from the result.
  virtual std::string Decode(const std::vector<TokenId>& ids, bool skip_special = false) const = 0;
  // The raw bytes one token stands for (may be a partial UTF-8 sequence); special tokens give
  // their text. Out-of-range ids give "".
  virtual std::string TokenBytes(TokenId id) const = 0;
  // The vocabulary string as stored (e.g. "Ġthe"), for display; "" for out-of-range ids.
  virtual const std::string& TokenText(TokenId id) const = 0;
  // The id whose stored text is exactly `text`, or -1.
  virtual TokenId FindToken(std::string_view text) const = 0;
  virtual TokenType token_type(TokenId id) const = 0;  // kUndefined for out-of-range ids

  virtual int64_t vocab_size() const = 0;
  // Control, unknown or user-defined token (matched whole in text, never produced by BPE).
  virtual bool IsSpecial(TokenId id) const = 0;
  virtual TokenId bos_id() const = 0;  // -1 if none
  virtual TokenId eos_id() const = 0;  // -1 if none
  virtual bool add_bos() const = 0;    // whether prompts should start with BOS
  // End-of-generation ids, sorted: eos, eot, eom, the spec's extra_eog_ids and every special
  // token whose text is one of <|im_end|>, <|endoftext|>, <|eot_id|>, <|end|>, <|eom_id|>, </s>
  // (an ordinary token with such a text, e.g. Qwen2's "</s>", does not end generation).
  virtual const std::vector<TokenId>& eog_ids() const = 0;
  bool IsEog(TokenId id) const;

  // The chat template chosen from tokenizer.chat_template or tokenizer_config.json (ChatML if
  // absent).
  virtual const ChatTemplate& chat_template() const = 0;
};

// Turns a stream of ids into text without ever emitting half a UTF-8 character: bytes of an
// incomplete sequence are held until the next token completes them (or Flush). Ill-formed
// bytes become U+FFFD as in Decode. Unlike Decode, it does not strip the space a SentencePiece
// tokenizer adds in front of the first word (streamed text continues a prompt).
// THREADING: one instance per stream; the Tokenizer must outlive it.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special = true)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}
  // Returns the text that became complete with this token (possibly "").
  std::string Push(TokenId id);
  // Returns whatever is pending (an incomplete sequence becomes one U+FFFD) and clears it.
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace sift

#endif  // SIFT_TOKENIZER_H_
