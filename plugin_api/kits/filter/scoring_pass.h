// SDK kit sift_kit_filter (plugin_api/kits/filter), linked by the scoring prefills
// (prefill_partial, prefill_streaming).
//
// What a scoring-only first pass (prefill_partial, prefill_streaming) leaves in the request:
// the statistics the following filter asked for, and nothing else computed from the prompt (no
// cache, logits, hidden state or kept indices). The filter then replaces the prompt
// (replace_prompt.h) and a prefill stage runs on the kept tokens.
//
// THREADING: touches only `state`. ERRORS: none.
#ifndef SIFT_KITS_FILTER_SCORING_PASS_H_
#define SIFT_KITS_FILTER_SCORING_PASS_H_

#include <chrono>
#include <cstdint>
#include <map>

#include "sift/request_state.h"

namespace sift::plugins {

// Stores `stats` as state.layer_stats, clears the rest, sets prompt_length if unset and adds the
// time since `start` to stats.prefill_ms.
void FinishScoringPass(RequestState& state, std::map<int64_t, AttentionStats> stats,
                       std::chrono::steady_clock::time_point start);

}  // namespace sift::plugins

#endif  // SIFT_KITS_FILTER_SCORING_PASS_H_
