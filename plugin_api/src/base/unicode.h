// UTF-8 helpers and code point classes for the tokenizer (internal to sift_base).
//
// Classes come from the generated table unicode_tables.inc (tools/gen_unicode_tables.py):
// letter = \p{L}, number = \p{N}, whitespace = Unicode White_Space (\s), everything else other.
//
// THREADING: pure functions over constant tables; safe from any thread.
// ERRORS:    none; malformed UTF-8 is replaced by U+FFFD, never rejected.
#ifndef SIFT_BASE_UNICODE_H_
#define SIFT_BASE_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sift::unicode {

enum class CodepointClass : uint8_t { kOther = 0, kLetter, kNumber, kWhitespace };

CodepointClass ClassOf(uint32_t cp);
inline bool IsLetter(uint32_t cp) { return ClassOf(cp) == CodepointClass::kLetter; }
inline bool IsNumber(uint32_t cp) { return ClassOf(cp) == CodepointClass::kNumber; }
inline bool IsWhitespace(uint32_t cp) { return ClassOf(cp) == CodepointClass::kWhitespace; }

constexpr uint32_t kReplacementChar = 0xFFFD;

// Appends the UTF-8 encoding of `cp` (which must be <= 0x10FFFF) to `out`.
void AppendUtf8(uint32_t cp, std::string* out);

// Decodes the well-formed UTF-8 sequence starting at text[pos]. Returns its length in bytes and
// stores the code point in *cp; returns 0 if the bytes there are not a complete well-formed
// sequence (bad lead byte, bad or missing continuation, overlong form, surrogate, > U+10FFFF).
size_t DecodeUtf8At(std::string_view text, size_t pos, uint32_t* cp);

// Length of the "maximal subpart of an ill-formed subsequence" at text[pos] (Unicode §3.9,
// as used by WHATWG and Rust's from_utf8_lossy): the bytes that one U+FFFD replaces. Only
// meaningful where DecodeUtf8At returned 0; always >= 1.
size_t InvalidUtf8Length(std::string_view text, size_t pos);

// True if text[pos..] is a proper prefix of some well-formed sequence (a sequence cut short by
// the end of the text, e.g. "\xF0\x9F\x98").
bool IsIncompleteUtf8(std::string_view text, size_t pos);

// True if `text` is entirely well-formed UTF-8.
bool IsWellFormedUtf8(std::string_view text);

// Returns `text` with every ill-formed subsequence replaced by U+FFFD (lossy decoding).
std::string SanitizeUtf8(std::string_view text);

}  // namespace sift::unicode

#endif  // SIFT_BASE_UNICODE_H_
