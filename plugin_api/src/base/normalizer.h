// Unicode normalization for tokenizers whose tokenizer.json states a normalizer (Qwen2: NFC),
// done by ICU (libicu: Normalizer2), so the tables follow the Unicode version ICU ships.
//
// THREADING: safe from any thread (ICU's normalizer instances are immutable singletons).
// ERRORS:    NormalizeNfc throws sift::Error if ICU cannot provide its NFC data (broken install).
#ifndef SIFT_BASE_NORMALIZER_H_
#define SIFT_BASE_NORMALIZER_H_

#include <string>
#include <string_view>

namespace sift {

// `text` (well-formed UTF-8) in Normalization Form C. ASCII text is returned unchanged without
// calling ICU.
std::string NormalizeNfc(std::string_view text);

}  // namespace sift

#endif  // SIFT_BASE_NORMALIZER_H_
