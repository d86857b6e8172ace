#include "pretokenizer.h"

#include <cstdint>
#include <string>

#include "sift/error.h"
#include "unicode.h"

namespace sift {
namespace {

using unicode::CodepointClass;

// The text decoded once: code points, their classes and byte offsets (offset[n] = size).
struct Codepoints {
  std::vector<uint32_t> cp;
  std::vector<CodepointClass> cls;
  std::vector<size_t> offset;

  explicit Codepoints(std::string_view text) {
    cp.reserve(text.size());
    cls.reserve(text.size());
    offset.reserve(text.size() + 1);
    size_t pos = 0;
    while (pos < text.size()) {
      uint32_t c;
      size_t n = unicode::DecodeUtf8At(text, pos, &c);
      if (n == 0) {
        c = unicode::kReplacementChar;
        n = unicode::InvalidUtf8Length(text, pos);
      }
      cp.push_back(c);
      cls.push_back(unicode::ClassOf(c));
      offset.push_back(pos);
      pos += n;
    }
    offset.push_back(text.size());
  }
  size_t size() const { return cp.size(); }
};

inline uint32_t AsciiLower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c; }

// 's|'t|'re|'ve|'m|'ll|'d at `pos` (end exclusive); returns the match end or `pos` if none.
size_t MatchContraction(const Codepoints& t, size_t pos, size_t end, bool ignore_case) {
  if (t.cp[pos] != '\'' || pos + 1 >= end) return pos;
  const auto fold = [&](size_t i) { return ignore_case ? AsciiLower(t.cp[i]) : t.cp[i]; };
  const uint32_t c1 = fold(pos + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return pos + 2;
  if (pos + 2 < end) {
    const uint32_t c2 = fold(pos + 2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
      return pos + 3;
    }
  }
  return pos;
}

size_t SkipClass(const Codepoints& t, size_t pos, size_t end, CodepointClass cls) {
  while (pos < end && t.cls[pos] == cls) ++pos;
  return pos;
}

// \s+(?!\S)|\s+ at `pos`, which is whitespace: the whole run at the end of the range, else the
// run minus its last code point (left to prefix the next match), else the single code point.
size_t MatchTrailingWhitespace(const Codepoints& t, size_t pos, size_t end) {
  const size_t run_end = SkipClass(t, pos, end, CodepointClass::kWhitespace);
  if (run_end == end) return run_end;
  if (run_end - pos >= 2) return run_end - 1;
  return pos + 1;
}

// One match of the GPT-2 pattern at `pos` within [pos, end); returns the match end (> pos).
size_t MatchGpt2(const Codepoints& t, size_t pos, size_t end) {
  const size_t contraction = MatchContraction(t, pos, end, /*ignore_case=*/false);
  if (contraction != pos) return contraction;
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional U+0020, then a run of one class.
  const size_t start = (t.cp[pos] == ' ' && pos + 1 < end) ? pos + 1 : pos;
  const CodepointClass cls = t.cls[start];
  if (cls != CodepointClass::kWhitespace) return SkipClass(t, start, end, cls);
  return MatchTrailingWhitespace(t, pos, end);
}

// One match of the Llama 3 / Qwen2 pattern at `pos`; max_digits is 3 or 1.
size_t MatchLlama3(const Codepoints& t, size_t pos, size_t end, size_t max_digits) {
  const size_t contraction = MatchContraction(t, pos, end, /*ignore_case=*/true);
  if (contraction != pos) return contraction;
  const uint32_t c = t.cp[pos];
  const CodepointClass cls = t.cls[pos];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (cls == CodepointClass::kLetter) return SkipClass(t, pos, end, cls);
  if (c != '\r' && c != '\n' && cls != CodepointClass::kNumber && pos + 1 < end &&
      t.cls[pos + 1] == CodepointClass::kLetter) {
    return SkipClass(t, pos + 1, end, CodepointClass::kLetter);
  }
  // \p{N}{1,max_digits}
  if (cls == CodepointClass::kNumber) {
    size_t e = pos;
    while (e < end && e - pos < max_digits && t.cls[e] == CodepointClass::kNumber) ++e;
    return e;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  const size_t start = (c == ' ' && pos + 1 < end) ? pos + 1 : pos;
  if (t.cls[start] == CodepointClass::kOther) {
    size_t e = SkipClass(t, start, end, CodepointClass::kOther);
    while (e < end && (t.cp[e] == '\r' || t.cp[e] == '\n')) ++e;
    return e;
  }
  // Here t.cp[pos] is whitespace. \s*[\r\n]+: the run up to and including its last CR/LF.
  const size_t run_end = SkipClass(t, pos, end, CodepointClass::kWhitespace);
  for (size_t i = run_end; i > pos; --i) {
    if (t.cp[i - 1] == '\r' || t.cp[i - 1] == '\n') return i;
  }
  return MatchTrailingWhitespace(t, pos, end);
}

void Emit(const Codepoints& t, std::string_view text, size_t begin, size_t end,
          std::vector<std::string_view>* pieces) {
  pieces->push_back(text.substr(t.offset[begin], t.offset[end] - t.offset[begin]));
}

}  // namespace

PreTokenizer PreTokenizerFromName(std::string_view name) {
  if (name == "default" || name == "gpt-2" || name == "gpt2") return PreTokenizer::kGpt2;
  if (name == "smollm") return PreTokenizer::kSmolLM;
  if (name == "llama3" || name == "llama-bpe") return PreTokenizer::kLlama3;
  if (name == "qwen2") return PreTokenizer::kQwen2;
  throw Error(detail::Concat("unsupported tokenizer pre-tokenizer (tokenizer.ggml.pre) '", name,
                             "'; supported: default, gpt-2, smollm, llama3, llama-bpe, qwen2"));
}

const char* PreTokenizerName(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::kGpt2:
      return "gpt-2";
    case PreTokenizer::kSmolLM:
      return "smollm";
    case PreTokenizer::kLlama3:
      return "llama3";
    case PreTokenizer::kQwen2:
      return "qwen2";
  }
  return "?";
}

void PreTokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>* pieces) {
  const Codepoints t(text);
  const size_t n = t.size();
  switch (kind) {
    case PreTokenizer::kGpt2:
      for (size_t pos = 0; pos < n;) {
        const size_t e = MatchGpt2(t, pos, n);
        Emit(t, text, pos, e, pieces);
        pos = e;
      }
      break;
    case PreTokenizer::kSmolLM:
      for (size_t pos = 0; pos < n;) {
        if (t.cls[pos] == CodepointClass::kNumber) {
          Emit(t, text, pos, pos + 1, pieces);
          ++pos;
          continue;
        }
        size_t run_end = pos;
        while (run_end < n && t.cls[run_end] != CodepointClass::kNumber) ++run_end;
        while (pos < run_end) {
          const size_t e = MatchGpt2(t, pos, run_end);
          Emit(t, text, pos, e, pieces);
          pos = e;
        }
      }
      break;
    case PreTokenizer::kLlama3:
    case PreTokenizer::kQwen2: {
      const size_t max_digits = kind == PreTokenizer::kLlama3 ? 3 : 1;
      for (size_t pos = 0; pos < n;) {
        const size_t e = MatchLlama3(t, pos, n, max_digits);
        Emit(t, text, pos, e, pieces);
        pos = e;
      }
      break;
    }
  }
}

}  // namespace sift
