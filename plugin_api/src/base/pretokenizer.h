// Pre-tokenizers for byte-level BPE: split text into the pieces that BPE then encodes one by
// one. Hand-written matchers that give exactly the matches of the regexes below (leftmost
// match, first matching alternative, backtracking as in Oniguruma/PCRE), without std::regex.
//
//   kGpt2   (tokenizer.ggml.pre "default", "gpt-2", "gpt2"): HF ByteLevel's pattern
//           's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   kSmolLM ("smollm"): HF Digits(individual_digits) first (every \p{N} code point becomes its
//           own piece), then the kGpt2 pattern on each remaining run separately.
//   kLlama3 ("llama3", "llama-bpe"):
//           (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   kQwen2  ("qwen2"): as kLlama3 but \p{N} (one code point) instead of \p{N}{1,3}. Qwen2's HF
//           NFC normalizer is not applied (llama.cpp does not either).
//
// \p{L}, \p{N} and \s are the classes of unicode.h. The case-insensitive contractions fold
// ASCII letters only.
//
// THREADING: stateless; safe from any thread.
// ERRORS:    PreTokenizerFromName throws sift::Error naming an unknown pre-tokenizer.
#ifndef SIFT_BASE_PRETOKENIZER_H_
#define SIFT_BASE_PRETOKENIZER_H_

#include <string_view>
#include <vector>

namespace sift {

enum class PreTokenizer { kGpt2, kSmolLM, kLlama3, kQwen2 };

PreTokenizer PreTokenizerFromName(std::string_view name);
const char* PreTokenizerName(PreTokenizer kind);

// Appends the pieces of `text` (well-formed UTF-8) to *pieces, as views into `text`, in order;
// their concatenation is `text`.
void PreTokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>* pieces);

}  // namespace sift

#endif  // SIFT_BASE_PRETOKENIZER_H_
