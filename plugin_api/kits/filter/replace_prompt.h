// SDK kit sift_kit_filter (plugin_api/kits/filter), linked by the filter plugins (gemfilter,
// ilre).
//
// What a filter stage does to the request once it chose the tokens to keep: the prompt becomes
// the kept tokens in the given order (the re-prefill then runs them at fresh positions
// 0..k-1, policy (d) of the landscape notes), and everything computed from the old prompt is
// dropped (RequestState::ResetForNewTokens).
//
// THREADING: touches only `state`.
// ERRORS:    throws sift::Error for an index outside the prompt.
#ifndef SIFT_KITS_FILTER_REPLACE_PROMPT_H_
#define SIFT_KITS_FILTER_REPLACE_PROMPT_H_

#include <cstdint>
#include <vector>

#include "sift/request_state.h"

namespace sift::plugins {

// `kept`: indices into state.tokens, ascending. The new question span starts at the first kept
// index >= the old question_begin (so a kept question stays the question). prompt_length keeps
// the original length.
void ReplacePrompt(RequestState& state, const std::vector<int64_t>& kept);

}  // namespace sift::plugins

#endif  // SIFT_KITS_FILTER_REPLACE_PROMPT_H_
