#include "haystack.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>

namespace sift::bench {
namespace {

// The corpus prefix kept for prompts of up to ~20K tokens (the essays take about 7.5 characters
// per SmolLM2 token); longer prompts double it as often as needed (kCharsPerToken each).
constexpr size_t kMaxChars = 160000;
constexpr size_t kCharsPerToken = 8;

size_t CharCap(int64_t min_tokens) {
  size_t cap = kMaxChars;
  while (cap < static_cast<size_t>(std::max<int64_t>(min_tokens, 0)) * kCharsPerToken) cap *= 2;
  return cap;
}

std::string Collapse(const std::string& in) {
  std::string out;
  out.reserve(in.size());
  bool space = false;
  for (char c : in) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      space = true;
      continue;
    }
    if (space && !out.empty()) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

std::string ReadEssays(const std::string& dir, size_t max_chars) {
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return "";
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".txt") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  std::string all;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream os;
    os << in.rdbuf();
    const std::string text = Collapse(os.str());
    if (text.empty()) continue;
    if (!all.empty()) all.push_back(' ');
    all += text;
    if (all.size() >= max_chars) break;
  }
  return all;
}

std::vector<std::string> DistinctWords(const std::string& text) {
  std::set<std::string> words;
  std::string w;
  bool clean = true;
  auto flush = [&] {
    if (clean && w.size() >= 4 && w.size() <= 12) words.insert(w);
    w.clear();
    clean = true;
  };
  for (char c : text) {
    if (c == ' ') {
      flush();
    } else if (std::islower(static_cast<unsigned char>(c))) {
      w.push_back(c);
    } else if (c == '.' || c == ',' || c == ';' || c == ':') {
      // punctuation ends the word but keeps it
      flush();
      clean = false;  // ignore what follows up to the next space
    } else {
      clean = false;
    }
  }
  flush();
  return {words.begin(), words.end()};
}

}  // namespace

std::string Haystack::Window(int64_t start, int64_t n) const {
  const int64_t size = static_cast<int64_t>(tokens.size());
  start = std::clamp<int64_t>(start, 0, size);
  n = std::clamp<int64_t>(n, 0, size - start);
  return tokenizer->Decode(
      std::vector<TokenId>(tokens.begin() + start, tokens.begin() + start + n));
}

std::shared_ptr<const Haystack> LoadHaystack(const std::string& dir, const Tokenizer& tokenizer,
                                             bool noise_only, int64_t min_tokens) {
  static std::mutex mu;
  static std::map<std::tuple<std::string, const Tokenizer*, size_t>,
                  std::shared_ptr<const Haystack>>
      cache;
  const std::string key = noise_only ? std::string("\x01noise") : dir;
  const size_t max_chars = CharCap(min_tokens);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find({key, &tokenizer, max_chars});
  if (it != cache.end()) return it->second;
  auto h = std::make_shared<Haystack>();
  h->tokenizer = &tokenizer;
  if (!noise_only) h->text = ReadEssays(dir, max_chars);
  h->essays = !h->text.empty();
  if (!h->essays) {
    while (h->text.size() < max_chars / 2) {
      if (!h->text.empty()) h->text.push_back(' ');
      h->text += kNoiseBlock;
    }
  }
  if (h->text.size() > max_chars) {
    const size_t cut = h->text.rfind(' ', max_chars);
    h->text.resize(cut == std::string::npos ? max_chars : cut);
  }
  h->tokens = tokenizer.Encode(h->text, /*parse_special=*/false);
  h->words = DistinctWords(h->text);
  cache[{key, &tokenizer, max_chars}] = h;
  return h;
}

uint64_t Rng::Below(uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = engine_();
  } while (x >= limit);
  return x % n;
}

uint64_t Fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string InsertAt(const std::string& text, std::vector<std::pair<size_t, std::string>> pieces) {
  std::stable_sort(pieces.begin(), pieces.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string out;
  size_t from = 0;
  for (const auto& [at, piece] : pieces) {
    const size_t pos = std::min(at, text.size());
    out.append(text, from, pos - from);
    out += piece;
    from = pos;
  }
  out.append(text, from, std::string::npos);
  return out;
}

size_t SentenceOffset(const std::string& text, int depth_percent) {
  if (depth_percent >= 100) return text.size();
  if (depth_percent <= 0) return 0;
  size_t pos = static_cast<size_t>(static_cast<double>(text.size()) * depth_percent / 100.0);
  while (pos > 0 && !(text[pos - 1] == ' ' && pos >= 2 && text[pos - 2] == '.')) --pos;
  return pos;
}

}  // namespace sift::bench
