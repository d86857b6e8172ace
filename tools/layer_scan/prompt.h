// Prompts for the layer scan and the cost runs: a bench task sample (tools/bench/tasks.h)
// tokenised exactly as siftd does for context + question (daemon/request_builder.h), plus the
// token spans of its needle sentence and of the answer inside it.
//
// THREADING: pure functions. ERRORS: sift::Error when the prompt cannot be built.
#ifndef SIFT_TOOLS_LAYER_SCAN_PROMPT_H_
#define SIFT_TOOLS_LAYER_SCAN_PROMPT_H_

#include <cstdint>
#include <vector>

#include "sift/tokenizer.h"
#include "tasks.h"

namespace sift::layer_scan {

struct ScanPrompt {
  bench::Sample sample;
  std::vector<TokenId> tokens;
  int64_t question_begin = 0;
  // Token ranges [begin, end) covering the first needle sentence and the first answer inside
  // it; -1 when not found.
  int64_t needle_begin = -1, needle_end = -1;
  int64_t answer_begin = -1, answer_end = -1;
};

ScanPrompt BuildPrompt(const Tokenizer& tokenizer, const bench::TaskOptions& options,
                       int64_t index);

// Fraction of [begin, end) contained in the sorted index list `kept`.
double Coverage(const std::vector<int64_t>& kept, int64_t begin, int64_t end);

}  // namespace sift::layer_scan

#endif  // SIFT_TOOLS_LAYER_SCAN_PROMPT_H_
