// sift-bench task generators and scorers: passkey (ILRe App. A.1), needle in a haystack
// (Kamradt, github.com/gkamradt/LLMTest_NeedleInAHaystack) and RULER-style synthetic tasks
// (RULER, Hsieh et al., arXiv:2404.06654, github.com/NVIDIA/RULER). Library `sift_bench_tasks`
// (links sift_base only, no daemon), shared by sift-bench and analysis tools.
//
// A Sample is what a client sends to siftd as `context` + `question` (the daemon renders the
// chat template with one user message "{context}\n\n{question}"), plus the scorer's references.
//
// LENGTH CONTRACT: MakeSample sizes the haystack with the real tokenizer and chat template so
// that  tokens(chat prompt) + max_tokens <= length  (never over). Haystacks that are token
// streams (essay / noise text: passkey, needle, niah_single_*, multikey_1, multivalue,
// multiquery) come within kStreamSlack tokens of `length`; haystacks built from whole units
// (distractor needles, variable-tracking noise blocks, word lists) within kUnitSlack tokens.
// A `length` too small for the task's fixed text throws sift::Error.
//
// DETERMINISM: a sample depends only on (options, index) and the haystack files: the random
// stream is std::mt19937_64 seeded from a hash of (seed, task, length, depth, key_digits,
// index) and drawn through our own integer mapping (no std distributions), so results are the
// same on every platform. The haystack is the folder's *.txt files sorted by name, joined with
// whitespace collapsed; with no folder (or none readable) RULER's "noise" sentences are used.
//
// DIFFERENCES FROM THE ORIGINALS (say so in reports): RULER's answer prefix cannot be placed in
// the assistant turn through the `context + question` protocol, so it ends the question text
// (passkey: ILRe's answer prefix is dropped, as SmolLM2 continues it as prose instead of
// answering); key words / word pools are our own lists (or words of the haystack), not wonderwords;
// no few-shot examples for vt / cwe; the essay haystack is the 49-essay subset. The needle task is
// scored without an LLM judge: 1 if the output has "sandwich" and "dolores park", 0.5 if one.
//
// THREADING: MakeSample / Score are thread-safe (the tokenized haystack is cached per folder and
//            tokenizer under a mutex). ERRORS: sift::Error for unknown tasks or impossible sizes.
#ifndef SIFT_TOOLS_BENCH_TASKS_H_
#define SIFT_TOOLS_BENCH_TASKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sift/tokenizer.h"

namespace sift::bench {

inline constexpr int64_t kStreamSlack = 8;
inline constexpr int64_t kUnitSlack = 64;

struct Sample {
  std::string task, id;              // e.g. "passkey", "passkey/4096/d25/3"
  int64_t length = 0;                // target: prompt tokens (chat template) + max_tokens
  int depth_percent = -1;            // needle depth when the task has one needle, else -1
  std::string context, question;     // sent as siftd's `context` + `question`
  std::vector<std::string> answers;  // references for the scorer
  std::vector<std::string> needles;  // needle sentences, verbatim substrings of `context`
  int64_t max_tokens = 0;            // answer budget
  int64_t prompt_tokens = 0;         // tokens of the rendered chat prompt (as siftd counts them)
};

struct TaskOptions {
  std::string task;        // one of TaskNames()
  int64_t length = 0;      // see the length contract above
  int depth_percent = -1;  // 0..100 for single-needle tasks; -1 = the task's own choice
  uint64_t seed = 0;
  std::string haystack_dir;  // folder of .txt files; "" or missing = RULER noise haystack
  int key_digits = 0;        // passkey digits; 0 = 6
};

// passkey, needle, niah_single_1, niah_single_2, niah_single_3, niah_multikey_1,
// niah_multikey_2, niah_multikey_3, niah_multivalue, niah_multiquery, vt, cwe, fwe.
std::vector<std::string> TaskNames();
// Whether the task places one needle at a controllable depth (depth_percent is honoured).
bool TaskHasDepth(const std::string& task);
// The folder used when none is given: the World English Bible corpus committed in the source tree
// (tools/bench/corpus/world-english-bible), or "" where the source tree is not there.
std::string DefaultHaystackDir();

// Deterministic from (options, index); uses the tokenizer + chat template to fit `length`.
Sample MakeSample(const TaskOptions& options, const Tokenizer& tokenizer, int64_t index);

// The task's own rule, in [0, 1]: passkey: the passkey appears as a whole digit run; needle: see
// above; RULER tasks: string_match_all (fraction of references contained, case-insensitive,
// after RULER's post-processing).
double Score(const Sample& sample, const std::string& output);

// Tokens of the chat prompt siftd builds for context + question (no system message).
int64_t PromptTokens(const Tokenizer& tokenizer, const std::string& context,
                     const std::string& question);

}  // namespace sift::bench

#endif  // SIFT_TOOLS_BENCH_TASKS_H_
