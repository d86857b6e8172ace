// Haystack text and random helpers for the task generators (tasks.cc). Internal to
// sift_bench_tasks; other tools use tasks.h.
//
// Haystack: the *.txt files of a folder, sorted by name, joined with every whitespace run
// collapsed to one space, tokenized once per (folder, tokenizer) and cached for the process; with
// no usable folder, RULER's noise block repeated. Prefix(n) is the text of its first n tokens.
//
// THREADING: LoadHaystack is thread-safe (cache under a mutex); Haystack is immutable.
// ERRORS: none (an unreadable folder falls back to noise).
#ifndef SIFT_TOOLS_BENCH_HAYSTACK_H_
#define SIFT_TOOLS_BENCH_HAYSTACK_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "sift/tokenizer.h"

namespace sift::bench {

inline constexpr char kNoiseBlock[] =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

struct Haystack {
  bool essays = false;             // false: the noise fallback
  std::string text;                // collapsed text (a bounded prefix of the corpus)
  std::vector<TokenId> tokens;     // tokens of `text`
  std::vector<std::string> words;  // distinct lowercase alphabetic words (>= 4 letters), sorted
  const Tokenizer* tokenizer = nullptr;
  // Text of the first n tokens (n clamped to the available tokens).
  std::string Prefix(int64_t n) const { return Window(0, n); }
  // Text of n tokens from token `start` on (both clamped to the available tokens).
  std::string Window(int64_t start, int64_t n) const;
};

// `noise_only` forces the noise haystack (RULER tasks whose haystack is "noise"). The text is a
// bounded prefix of the corpus, long enough for prompts of `min_tokens` (up to ~20K tokens the
// same prefix whatever min_tokens is, so shorter tasks keep their prompts); a corpus shorter than
// that gives what it has.
std::shared_ptr<const Haystack> LoadHaystack(const std::string& dir, const Tokenizer& tokenizer,
                                             bool noise_only, int64_t min_tokens = 0);

// Deterministic random stream (same numbers on every platform).
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  uint64_t Next() { return engine_(); }
  // Uniform in [0, n) (n > 0), by rejection.
  uint64_t Below(uint64_t n);
  // Uniform in [lo, hi].
  int64_t Range(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(Below(hi - lo + 1)); }
  template <typename T>
  void Shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[Below(i)]);
  }

 private:
  std::mt19937_64 engine_;
};

// FNV-1a 64 of a string (seeds).
uint64_t Fnv1a(const std::string& text);

// Inserts `pieces[i]` at char offsets `at[i]` of `text` (offsets into the original text).
std::string InsertAt(const std::string& text, std::vector<std::pair<size_t, std::string>> pieces);
// The char offset of the sentence start at or before depth_percent of `text` (Kamradt: moved
// back to just after a '.'); text.size() for 100.
size_t SentenceOffset(const std::string& text, int depth_percent);

}  // namespace sift::bench

#endif  // SIFT_TOOLS_BENCH_HAYSTACK_H_
