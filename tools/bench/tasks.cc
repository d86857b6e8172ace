#include "tasks.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <functional>
#include <set>

#include "haystack.h"
#include "sift/error.h"

namespace sift::bench {
namespace {

// Our own short word lists (key ids and RULER-style "adjective-noun" keys).
const std::vector<std::string> kKeyWords = {
    "dog",   "cat",   "yellow", "red",   "blue",  "cup",   "tree",  "green", "fish", "bird",
    "stone", "river", "lamp",   "book",  "chair", "cloud", "apple", "horse", "sand", "moon",
    "salt",  "wind",  "glass",  "paper", "brick", "rope",  "coin",  "bread", "wolf", "silver"};
const std::vector<std::string> kAdjectives = {
    "ancient", "brave",   "calm",   "damp",   "eager",   "fancy",  "gentle", "hollow", "icy",
    "jolly",   "keen",    "lively", "mellow", "narrow",  "odd",    "proud",  "quiet",  "rapid",
    "shiny",   "tidy",    "upbeat", "vivid",  "wary",    "young",  "zesty",  "bitter", "clever",
    "dusty",   "fragile", "gloomy", "humble", "lucky",   "modest", "noisy",  "plain",  "rusty",
    "silent",  "tender",  "wicked", "wooden", "curious", "frozen", "golden", "hungry", "loyal"};
const std::vector<std::string> kNouns = {
    "anchor", "basket",  "candle", "desert", "engine",  "falcon",  "garden",  "harbor",   "island",
    "jacket", "kettle",  "ladder", "meadow", "needle",  "orchard", "pencil",  "quarry",   "rocket",
    "saddle", "tunnel",  "umpire", "valley", "wagon",   "yogurt",  "zipper",  "bucket",   "cabin",
    "dragon", "feather", "goblet", "hammer", "lantern", "mirror",  "nickel",  "oyster",   "parrot",
    "ribbon", "spider",  "throne", "violin", "walnut",  "blanket", "compass", "fountain", "piano"};

constexpr char kNeedle[] =
    "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny "
    "day.";

enum class Kind { kPasskey, kNeedle, kNiah, kVt, kCwe, kFwe };
enum class HayKind { kEssay, kNoise, kNeedles };
enum class ValueKind { kWords, kNumbers, kUuids };

struct NiahSpec {
  HayKind hay;
  ValueKind key, value;
  int num_k, num_v, num_q;
};

struct TaskSpec {
  std::string name;
  Kind kind;
  int64_t max_tokens;
  NiahSpec niah{};
};

const std::vector<TaskSpec>& Specs() {
  using H = HayKind;
  using V = ValueKind;
  static const std::vector<TaskSpec> specs = {
      {"passkey", Kind::kPasskey, 32},
      {"needle", Kind::kNeedle, 64},
      {"niah_single_1", Kind::kNiah, 128, {H::kNoise, V::kWords, V::kNumbers, 1, 1, 1}},
      {"niah_single_2", Kind::kNiah, 128, {H::kEssay, V::kWords, V::kNumbers, 1, 1, 1}},
      {"niah_single_3", Kind::kNiah, 128, {H::kEssay, V::kWords, V::kUuids, 1, 1, 1}},
      {"niah_multikey_1", Kind::kNiah, 128, {H::kEssay, V::kWords, V::kNumbers, 4, 1, 1}},
      {"niah_multikey_2", Kind::kNiah, 128, {H::kNeedles, V::kWords, V::kNumbers, 1, 1, 1}},
      {"niah_multikey_3", Kind::kNiah, 128, {H::kNeedles, V::kUuids, V::kUuids, 1, 1, 1}},
      {"niah_multivalue", Kind::kNiah, 128, {H::kEssay, V::kWords, V::kNumbers, 1, 4, 1}},
      {"niah_multiquery", Kind::kNiah, 128, {H::kEssay, V::kWords, V::kNumbers, 4, 1, 4}},
      {"vt", Kind::kVt, 30},
      {"cwe", Kind::kCwe, 120},
      {"fwe", Kind::kFwe, 50},
  };
  return specs;
}

const TaskSpec& FindSpec(const std::string& task) {
  for (const TaskSpec& s : Specs()) {
    if (s.name == task) return s;
  }
  std::string known;
  for (const TaskSpec& s : Specs()) known += (known.empty() ? "" : ", ") + s.name;
  throw Error("sift-bench: unknown task '" + task + "' (known: " + known + ")");
}

std::string Uuid(Rng& rng) {
  uint64_t hi = rng.Next(), lo = rng.Next();
  hi = (hi & ~0xF000ull) | 0x4000ull;                  // version 4
  lo = (lo & ~(0xC000ull << 48)) | (0x8000ull << 48);  // variant 10
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%08llx-%04llx-%04llx-%04llx-%012llx",
                static_cast<unsigned long long>(hi >> 32),
                static_cast<unsigned long long>((hi >> 16) & 0xFFFF),
                static_cast<unsigned long long>(hi & 0xFFFF),
                static_cast<unsigned long long>(lo >> 48),
                static_cast<unsigned long long>(lo & 0xFFFFFFFFFFFFull));
  return buf;
}

std::string Draw(ValueKind kind, Rng& rng) {
  switch (kind) {
    case ValueKind::kWords:
      return kAdjectives[rng.Below(kAdjectives.size())] + "-" + kNouns[rng.Below(kNouns.size())];
    case ValueKind::kNumbers:
      return std::to_string(rng.Range(1000000, 9999999));
    case ValueKind::kUuids:
      return Uuid(rng);
  }
  return "";
}

// Fitted prompt parts for one haystack size.
struct Built {
  std::string context, question;
  std::vector<std::string> needles;
};

// Largest size n in [0, max_n] whose prompt fits (total <= length); binary search on a total
// that grows with n (streams can wobble by a token or two; the final check enforces the limit).
Built Fit(const std::function<Built(int64_t)>& build, const Tokenizer& tokenizer, int64_t length,
          int64_t max_tokens, int64_t max_n, int64_t* prompt_tokens) {
  auto total = [&](const Built& b) {
    return PromptTokens(tokenizer, b.context, b.question) + max_tokens;
  };
  Built best = build(0);
  int64_t best_total = total(best);
  if (best_total > length) {
    throw Error("sift-bench: length " + std::to_string(length) + " is too small for the task (" +
                std::to_string(best_total) + " tokens with an empty haystack)");
  }
  int64_t lo = 0, hi = max_n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    Built b = build(mid);
    const int64_t t = total(b);
    if (t <= length) {
      lo = mid;
      best = std::move(b);
      best_total = t;
    } else {
      hi = mid - 1;
    }
  }
  *prompt_tokens = best_total - max_tokens;
  return best;
}

std::string JoinKeys(const std::vector<std::string>& keys) {
  if (keys.size() == 1) return keys[0];
  std::string s;
  for (size_t i = 0; i + 1 < keys.size(); ++i) s += keys[i] + ", ";
  return s + "and " + keys.back();
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string PostProcess(const std::string& in) {
  auto strip = [](const std::string& s) {
    size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
    return s.substr(b, e - b);
  };
  std::string s = strip(in);
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20) c = '\n';
  }
  return strip(s);
}

// A task's prompt for a haystack of size n (tokens, noise blocks, list items: the task's unit)
// and the largest n worth trying; MakeSample fits n to the length.
struct Builder {
  std::function<Built(int64_t)> build;
  int64_t max_n = 0;
};

// What every task builder reads. The builders draw from the sample's one random stream in a
// fixed order (the draws are part of the determinism contract of tasks.h).
struct TaskInput {
  const TaskOptions& options;
  const TaskSpec& spec;
  const Tokenizer& tokenizer;
  int64_t index;
  int depth;   // needle depth in percent, or -1
  int digits;  // passkey digits
};

Builder PasskeyBuilder(const TaskInput& in, Rng& rng, Sample* sample) {
  const auto hay = LoadHaystack(in.options.haystack_dir, in.tokenizer, false, in.options.length);
  std::string id;
  for (int i = 0; i < 3; ++i) id += kKeyWords[rng.Below(kKeyWords.size())] + "-";
  id += std::to_string(rng.Range(10, 99));
  std::string value;
  for (int i = 0; i < in.digits; ++i) value.push_back(static_cast<char>('0' + rng.Below(10)));
  const std::string needle = "The " + id + " magic passkey is " + value + ".";
  sample->answers = {value};
  auto build = [hay, needle, id, depth = in.depth](int64_t n) {
    const std::string text = hay->Prefix(n);
    Built b;
    b.context = InsertAt(text, {{SentenceOffset(text, depth), "\n" + needle + "\n"}});
    // ILRe's answer prefix ("\n\nThe <id> magic passkey is") would sit in the user turn
    // here (no assistant prefill in the protocol); the instruct model then continues it as
    // prose instead of answering, so it is left out: the model writes it itself.
    b.question = "# What's the " + id + " magic passkey?";
    b.needles = {needle};
    return b;
  };
  return {build, in.options.length};
}

Builder NeedleBuilder(const TaskInput& in, Rng& rng, Sample* sample) {
  const auto hay = LoadHaystack(in.options.haystack_dir, in.tokenizer, false, in.options.length);
  sample->answers = {"sandwich", "dolores park"};
  // One fixed needle: sample 0 is the classic NIAH prompt (the haystack from its start);
  // further samples at the same depth take the haystack from another point of the corpus,
  // or they would repeat sample 0's prompt exactly.
  const int64_t room = static_cast<int64_t>(hay->tokens.size()) - in.options.length;
  const int64_t start = in.index == 0 || room <= 0 ? 0 : rng.Range(1, room);
  auto build = [hay, depth = in.depth, start](int64_t n) {
    const std::string text = hay->Window(start, n);
    Built b;
    b.context = InsertAt(text, {{SentenceOffset(text, depth), std::string(kNeedle) + " "}});
    b.question =
        "What is the best thing to do in San Francisco? Don't give information outside the "
        "document or repeat your findings";
    b.needles = {kNeedle};
    return b;
  };
  return {build, in.options.length};
}

// The drawn part of a RULER NIAH sample: keys, needle sentences (shuffled), the fixed text.
struct NiahDraw {
  std::vector<std::string> keys, needles;
  std::string type;             // "numbers", "uuids" or "words"
  std::string intro, question;  // before the haystack; the question with its answer prefix
  std::vector<int> depths;      // one per needle (text haystacks)
};

// RULER's template text: the intro before the haystack and the question with its answer prefix.
void NiahText(const NiahSpec& ns, const std::string& query, NiahDraw* d) {
  const bool single = ns.num_q * ns.num_v == 1;
  const std::string t = single ? d->type.substr(0, d->type.size() - 1) : d->type;
  d->intro = single ? "A special magic " + t +
                          " is hidden within the following text. Make sure to memorize it. I "
                          "will quiz you about the " +
                          t + " afterwards.\n"
                    : "Some special magic " + t +
                          " are hidden within the following text. Make sure to memorize it. I "
                          "will quiz you about the " +
                          t + " afterwards.\n";
  d->question = single ? "What is the special magic " + t + " for " + query +
                             " mentioned in the provided text? The special magic " + t + " for " +
                             query + " mentioned in the provided text is"
                       : "What are all the special magic " + t + " for " + query +
                             " mentioned in the provided text? The special magic " + t + " for " +
                             query + " mentioned in the provided text are";
}

// Keys, values, needles, the queried keys (their values are the answers) and the depths.
NiahDraw DrawNiah(const NiahSpec& ns, int depth, Rng& rng, Sample* sample) {
  NiahDraw d;
  const int num_k = std::max(ns.num_k, ns.num_q);
  while (static_cast<int>(d.keys.size()) < num_k) {
    std::string k = Draw(ns.key, rng);
    if (std::find(d.keys.begin(), d.keys.end(), k) == d.keys.end()) d.keys.push_back(k);
  }
  d.type = ns.value == ValueKind::kNumbers ? "numbers"
           : ns.value == ValueKind::kUuids ? "uuids"
                                           : "words";
  std::vector<std::vector<std::string>> values(d.keys.size());
  for (size_t k = 0; k < d.keys.size(); ++k) {
    for (int v = 0; v < ns.num_v; ++v) {
      values[k].push_back(Draw(ns.value, rng));
      d.needles.push_back("One of the special magic " + d.type + " for " + d.keys[k] +
                          " is: " + values[k].back() + ".");
    }
  }
  rng.Shuffle(d.needles);
  std::vector<size_t> order(d.keys.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  rng.Shuffle(order);
  std::vector<std::string> query_keys;
  for (int q = 0; q < ns.num_q; ++q) {
    query_keys.push_back(d.keys[order[q]]);
    for (const std::string& v : values[order[q]]) sample->answers.push_back(v);
  }
  NiahText(ns, JoinKeys(query_keys), &d);
  // Depths of the needles: the requested one (single needle) or RULER's 40 linear depths
  // drawn without replacement.
  if (depth >= 0) {
    d.depths = {depth};
  } else {
    std::vector<int> grid;
    for (int i = 0; i < 40; ++i) grid.push_back(static_cast<int>(std::lround(i * 100.0 / 39)));
    rng.Shuffle(grid);
    d.depths.assign(grid.begin(), grid.begin() + d.needles.size());
  }
  return d;
}

// niah_multikey_2/3: the haystack is distractor needles with fresh keys and values; the real
// ones at random list slots.
Builder NiahNeedlesBuilder(const TaskInput& in, const NiahDraw& d, Rng& rng) {
  const NiahSpec ns = in.spec.niah;
  const uint64_t distractor_seed = rng.Next();
  const uint64_t slot_seed = rng.Next();
  auto build = [=](int64_t n) {
    Rng drng(distractor_seed);
    std::vector<std::string> items;
    for (int64_t i = 0; i < n; ++i) {
      std::string k = Draw(ns.key, drng);
      if (std::find(d.keys.begin(), d.keys.end(), k) != d.keys.end()) continue;
      items.push_back("One of the special magic " + d.type + " for " + k +
                      " is: " + Draw(ns.value, drng) + ".");
    }
    Rng srng(slot_seed);
    for (const std::string& nd : d.needles) {
      items.insert(items.begin() + static_cast<int64_t>(srng.Below(items.size() + 1)), nd);
    }
    Built b;
    for (size_t i = 0; i < items.size(); ++i) b.context += (i ? "\n" : "") + items[i];
    b.context = d.intro + b.context;
    b.question = d.question;
    b.needles = d.needles;
    return b;
  };
  return {build, in.options.length / 10};
}

// The other NIAH tasks: the needles inserted into essay or noise text at their depths.
Builder NiahTextBuilder(const TaskInput& in, const NiahDraw& d) {
  const auto hay = LoadHaystack(in.options.haystack_dir, in.tokenizer,
                                in.spec.niah.hay == HayKind::kNoise, in.options.length);
  auto build = [hay, d](int64_t n) {
    const std::string text = hay->Prefix(n);
    std::vector<std::pair<size_t, std::string>> pieces;
    for (size_t i = 0; i < d.needles.size(); ++i) {
      pieces.push_back({SentenceOffset(text, d.depths[i]), d.needles[i] + " "});
    }
    Built b;
    b.context = d.intro + InsertAt(text, pieces);
    b.question = d.question;
    b.needles = d.needles;
    return b;
  };
  return {build, in.options.length};
}

Builder NiahBuilder(const TaskInput& in, Rng& rng, Sample* sample) {
  const NiahDraw d = DrawNiah(in.spec.niah, in.depth, rng, sample);
  return in.spec.niah.hay == HayKind::kNeedles ? NiahNeedlesBuilder(in, d, rng)
                                               : NiahTextBuilder(in, d);
}

// Variable tracking: a chain of 4 hops hidden between noise blocks.
Builder VtBuilder(const TaskInput& in, Rng& rng, Sample* sample) {
  const int hops = 4;
  std::vector<std::string> names;
  while (static_cast<int>(names.size()) < hops + 1) {
    std::string v;
    for (int i = 0; i < 5; ++i) v.push_back(static_cast<char>('A' + rng.Below(26)));
    if (std::find(names.begin(), names.end(), v) == names.end()) names.push_back(v);
  }
  const std::string value = std::to_string(rng.Range(10000, 99999));
  std::vector<std::string> chain = {"VAR " + names[0] + " = " + value};
  for (int j = 1; j <= hops; ++j) chain.push_back("VAR " + names[j] + " = VAR " + names[j - 1]);
  sample->answers = names;
  const uint64_t pos_seed = rng.Next();
  auto build = [=](int64_t n) {
    std::vector<std::string> items(static_cast<size_t>(n), kNoiseBlock);
    std::vector<int64_t> slots;
    Rng prng(pos_seed);
    for (size_t j = 0; j < chain.size(); ++j) slots.push_back(prng.Range(0, n));
    std::sort(slots.begin(), slots.end());
    for (size_t j = 0; j < chain.size(); ++j) {
      items.insert(items.begin() + slots[j] + static_cast<int64_t>(j), chain[j]);
    }
    Built b;
    b.context =
        "Memorize and track the chain(s) of variable assignment hidden in the "
        "following text.\n\n";
    for (size_t i = 0; i < items.size(); ++i) b.context += (i ? "\n" : "") + items[i];
    b.question = "Question: Find all variables that are assigned the value " + value +
                 " in the text above. Answer: According to the chain(s) of variable "
                 "assignment in the text above, 5 variables are assigned the value " +
                 value + ", they are: ";
    b.needles = chain;
    return b;
  };
  return {build, in.options.length / 20};
}

// The common-words pool: the haystack's words, or (no essays) synthetic pronounceable words.
std::vector<std::string> CommonWordPool(const Haystack& hay) {
  std::vector<std::string> pool = hay.words;
  if (pool.size() < 2000) {
    const std::string cons = "bcdfghklmnprstvz", vow = "aeiou";
    Rng wrng(42);
    std::set<std::string> made(pool.begin(), pool.end());
    while (made.size() < 2000) {
      std::string w;
      for (int i = 0; i < 3; ++i) {
        w.push_back(cons[wrng.Below(cons.size())]);
        w.push_back(vow[wrng.Below(vow.size())]);
      }
      made.insert(w);
    }
    pool.assign(made.begin(), made.end());
  }
  return pool;
}

// Common words extraction: 10 words repeated more often than the rest of a numbered list.
Builder CweBuilder(const TaskInput& in, Rng& rng, Sample* sample) {
  const auto hay = LoadHaystack(in.options.haystack_dir, in.tokenizer, false, in.options.length);
  std::vector<std::string> pool = CommonWordPool(*hay);
  rng.Shuffle(pool);
  const int freq_cw = in.options.length >= 4096 ? 30 : 6;
  const int freq_ucw = in.options.length >= 4096 ? 3 : 1;
  sample->answers.assign(pool.begin(), pool.begin() + 10);
  const uint64_t shuffle_seed = rng.Next();
  auto build = [=](int64_t n) {
    std::vector<std::string> list;
    for (int64_t i = 0; i < std::max<int64_t>(n, 10); ++i) {
      for (int r = 0; r < (i < 10 ? freq_cw : freq_ucw); ++r) list.push_back(pool[i]);
    }
    Rng srng(shuffle_seed);
    srng.Shuffle(list);
    Built b;
    b.context =
        "Below is a numbered list of words. In these words, some appear more often "
        "than others. Memorize the ones that appear most often.\n";
    for (size_t i = 0; i < list.size(); ++i) {
      b.context += (i ? " " : "") + std::to_string(i + 1) + ". " + list[i];
    }
    b.question =
        "Question: What are the 10 most common words in the above list? Answer: The "
        "top 10 words that appear most often in the list are:";
    return b;
  };
  return {build, std::min<int64_t>(static_cast<int64_t>(pool.size()), in.options.length / 2)};
}

// Frequent words extraction: coded words with Zipf frequencies; the top three are the answers.
Builder FweBuilder(const TaskInput& in, Rng& rng, Sample* sample) {
  const int64_t vocab_size = std::max<int64_t>(8, (in.options.length - in.spec.max_tokens) / 50);
  std::set<std::string> seen;
  std::vector<std::string> vocab;
  while (static_cast<int64_t>(vocab.size()) < vocab_size) {
    std::string w;
    for (int i = 0; i < 6; ++i) w.push_back(static_cast<char>('a' + rng.Below(26)));
    if (seen.insert(w).second) vocab.push_back(w);
  }
  vocab[0] = "...";
  sample->answers.assign(vocab.begin() + 1, vocab.begin() + 4);
  const uint64_t shuffle_seed = rng.Next();
  const double zeta2 = M_PI * M_PI / 6.0;
  auto build = [=](int64_t n) {
    std::vector<std::string> words;
    for (int64_t k = 1; k <= vocab_size; ++k) {
      const auto count =
          static_cast<int64_t>(static_cast<double>(n) / (static_cast<double>(k * k) * zeta2));
      for (int64_t c = 0; c < count; ++c) words.push_back(vocab[k - 1]);
    }
    Rng srng(shuffle_seed);
    srng.Shuffle(words);
    Built b;
    b.context =
        "Read the following coded text and track the frequency of each coded word. "
        "Find the three most frequently appeared coded words. ";
    for (size_t i = 0; i < words.size(); ++i) b.context += (i ? " " : "") + words[i];
    b.question =
        "Question: Do not provide any explanation. Please ignore the dots '....'. "
        "What are the three most frequently appeared words in the above coded "
        "text? Answer: According to the coded text above, the three most "
        "frequently appeared words are:";
    return b;
  };
  return {build, in.options.length};
}

Builder TaskBuilder(const TaskInput& in, Rng& rng, Sample* sample) {
  switch (in.spec.kind) {
    case Kind::kPasskey:
      return PasskeyBuilder(in, rng, sample);
    case Kind::kNeedle:
      return NeedleBuilder(in, rng, sample);
    case Kind::kNiah:
      return NiahBuilder(in, rng, sample);
    case Kind::kVt:
      return VtBuilder(in, rng, sample);
    case Kind::kCwe:
      return CweBuilder(in, rng, sample);
    case Kind::kFwe:
      return FweBuilder(in, rng, sample);
  }
  throw Error("sift-bench: task kind without a builder");
}

}  // namespace

std::vector<std::string> TaskNames() {
  std::vector<std::string> names;
  for (const TaskSpec& s : Specs()) names.push_back(s.name);
  return names;
}

bool TaskHasDepth(const std::string& task) {
  const TaskSpec& s = FindSpec(task);
  return s.kind == Kind::kPasskey || s.kind == Kind::kNeedle ||
         (s.kind == Kind::kNiah && s.niah.hay != HayKind::kNeedles && s.niah.num_k == 1 &&
          s.niah.num_v == 1);
}

std::string DefaultHaystackDir() {
  // The public-domain corpus committed with the tools
  // (tools/bench/corpus/world-english-bible/README.md).
  const std::filesystem::path dir =
      std::filesystem::path(SIFT_SOURCE_DIR) / "tools" / "bench" / "corpus" / "world-english-bible";
  std::error_code ec;
  return std::filesystem::is_directory(dir, ec) ? dir.lexically_normal().string() : "";
}

int64_t PromptTokens(const Tokenizer& tokenizer, const std::string& context,
                     const std::string& question) {
  // Mirrors the daemon's request builder: user message "{context}\n\n{question}", the text up
  // to the question and the rest tokenized separately.
  static const std::string kMark = "\x01\x02sift-question\x02\x01";
  const ChatTemplate& chat = tokenizer.chat_template();
  const std::string prefix = context.empty() ? "" : context + "\n\n";
  const std::string marked = chat.Render({{"user", prefix + kMark}}, true);
  const size_t at = marked.find(kMark);
  const std::string full = chat.Render({{"user", prefix + question}}, true);
  if (at != std::string::npos) {
    const std::string head = marked.substr(0, at);
    const std::string tail = marked.substr(at + kMark.size());
    if (full.size() == head.size() + question.size() + tail.size() &&
        full.compare(0, head.size(), head) == 0) {
      return static_cast<int64_t>(tokenizer.Encode(head, true).size() +
                                  tokenizer.Encode(question + tail, true).size());
    }
  }
  return static_cast<int64_t>(tokenizer.Encode(full, true).size());
}

Sample MakeSample(const TaskOptions& options, const Tokenizer& tokenizer, int64_t index) {
  const TaskSpec& spec = FindSpec(options.task);
  const bool has_depth = TaskHasDepth(options.task);
  if (options.depth_percent > 100) throw Error("sift-bench: depth_percent must be <= 100");
  Sample sample;
  sample.task = spec.name;
  sample.length = options.length;
  sample.max_tokens = spec.max_tokens;
  const int digits = options.key_digits > 0 ? options.key_digits : 6;
  Rng rng(Fnv1a(std::to_string(options.seed) + "|" + spec.name + "|" +
                std::to_string(options.length) + "|" + std::to_string(options.depth_percent) + "|" +
                std::to_string(spec.kind == Kind::kPasskey ? digits : 0) + "|" +
                std::to_string(index)));
  int depth = has_depth ? options.depth_percent : -1;
  if (spec.kind == Kind::kPasskey && depth < 0) depth = static_cast<int>(index % 20) * 5;
  if (has_depth && depth < 0) depth = static_cast<int>(rng.Range(0, 100));
  sample.depth_percent = depth;
  sample.id = spec.name + "/" + std::to_string(options.length) +
              (depth >= 0 ? "/d" + std::to_string(depth) : "") + "/" + std::to_string(index);

  const Builder builder =
      TaskBuilder({options, spec, tokenizer, index, depth, digits}, rng, &sample);
  Built b = Fit(builder.build, tokenizer, options.length, spec.max_tokens, builder.max_n,
                &sample.prompt_tokens);
  sample.context = std::move(b.context);
  sample.question = std::move(b.question);
  sample.needles = std::move(b.needles);
  return sample;
}

double Score(const Sample& sample, const std::string& output) {
  const std::string pred = Lower(PostProcess(output));
  if (sample.task == "passkey") {
    // A whole digit run equal to the passkey.
    for (size_t i = 0; i < pred.size();) {
      if (!std::isdigit(static_cast<unsigned char>(pred[i]))) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < pred.size() && std::isdigit(static_cast<unsigned char>(pred[j]))) ++j;
      for (const std::string& a : sample.answers) {
        if (pred.compare(i, j - i, a) == 0 && a.size() == j - i) return 1.0;
      }
      i = j;
    }
    return 0.0;
  }
  if (sample.answers.empty()) return 0.0;
  double hits = 0;
  for (const std::string& a : sample.answers) {
    if (pred.find(Lower(a)) != std::string::npos) hits += 1;
  }
  return hits / static_cast<double>(sample.answers.size());
}

}  // namespace sift::bench
