#include "normalizer.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include "sift/error.h"

namespace sift {

std::string NormalizeNfc(std::string_view text) {
  bool ascii = true;
  for (const char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  SIFT_CHECK(U_SUCCESS(status) && nfc != nullptr, "ICU: no NFC normalizer (", u_errorName(status),
             ")");
  const icu::UnicodeString in = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  if (nfc->isNormalized(in, status) && U_SUCCESS(status)) return std::string(text);
  status = U_ZERO_ERROR;
  const icu::UnicodeString out = nfc->normalize(in, status);
  SIFT_CHECK(U_SUCCESS(status), "ICU: NFC normalization failed (", u_errorName(status), ")");
  std::string result;
  out.toUTF8String(result);
  return result;
}

}  // namespace sift
