#include "unicode.h"

#include <algorithm>
#include <array>
#include <iterator>

namespace sift::unicode {
namespace {

struct ClassRange {
  uint32_t first;
  uint32_t last;
  CodepointClass cls;
};

constexpr ClassRange kClassRanges[] = {
#include "unicode_tables.inc"
};

std::array<CodepointClass, 128> MakeAsciiTable() {
  std::array<CodepointClass, 128> table{};
  for (const ClassRange& r : kClassRanges) {
    if (r.first >= 128) break;
    for (uint32_t cp = r.first; cp <= r.last && cp < 128; ++cp) table[cp] = r.cls;
  }
  return table;
}

const std::array<CodepointClass, 128> kAsciiClasses = MakeAsciiTable();

// Scans the sequence at text[pos] against Unicode Table 3-7. Returns the number of bytes that
// form a valid prefix (lead included) and whether the sequence is complete; *cp is set when it
// is complete.
struct Scan {
  size_t valid;   // bytes accepted so far (0 only for a bad lead byte)
  size_t needed;  // total length the lead byte announces (0 for a bad lead byte)
  uint32_t cp;
};

Scan ScanUtf8(std::string_view text, size_t pos) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  if (b0 < 0x80) return {1, 1, b0};
  size_t needed;
  uint32_t cp;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    needed = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    needed = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    needed = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0, 0, 0};
  }
  size_t valid = 1;
  while (valid < needed && pos + valid < text.size()) {
    const auto b = static_cast<uint8_t>(text[pos + valid]);
    if (b < lo || b > hi) break;
    cp = (cp << 6) | (b & 0x3F);
    ++valid;
    lo = 0x80;
    hi = 0xBF;
  }
  return {valid, needed, cp};
}

}  // namespace

CodepointClass ClassOf(uint32_t cp) {
  if (cp < 128) return kAsciiClasses[cp];
  const ClassRange* end = std::end(kClassRanges);
  const ClassRange* it =
      std::upper_bound(std::begin(kClassRanges), end, cp,
                       [](uint32_t value, const ClassRange& r) { return value < r.first; });
  if (it == std::begin(kClassRanges)) return CodepointClass::kOther;
  --it;
  return cp <= it->last ? it->cls : CodepointClass::kOther;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t DecodeUtf8At(std::string_view text, size_t pos, uint32_t* cp) {
  const Scan s = ScanUtf8(text, pos);
  if (s.needed == 0 || s.valid != s.needed) return 0;
  *cp = s.cp;
  return s.valid;
}

size_t InvalidUtf8Length(std::string_view text, size_t pos) {
  const Scan s = ScanUtf8(text, pos);
  return s.valid == 0 ? 1 : s.valid;
}

bool IsIncompleteUtf8(std::string_view text, size_t pos) {
  const Scan s = ScanUtf8(text, pos);
  return s.needed > 0 && s.valid < s.needed && pos + s.valid == text.size();
}

bool IsWellFormedUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    uint32_t cp;
    const size_t n = DecodeUtf8At(text, pos, &cp);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    uint32_t cp;
    const size_t n = DecodeUtf8At(text, pos, &cp);
    if (n > 0) {
      out.append(text.data() + pos, n);
      pos += n;
    } else {
      AppendUtf8(kReplacementChar, &out);
      pos += InvalidUtf8Length(text, pos);
    }
  }
  return out;
}

}  // namespace sift::unicode
