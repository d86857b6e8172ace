// SDK kit sift_kit_prefill (plugin_api/kits/prefill), linked by every prefill plugin
// (prefill_full, prefill_partial, prefill_streaming, prefill_skip).
//
// The input checks every prefill stage makes before touching the model: a non-empty prompt
// that fits the model's context and holds only in-vocabulary token ids.
//
// Pure functions. Return INVALID_ARGUMENT with reason empty_prompt, prompt_too_long or
// bad_token (the reasons docs/protocol.md lists), else OK.
#ifndef SIFT_KITS_PREFILL_PROMPT_CHECK_H_
#define SIFT_KITS_PREFILL_PROMPT_CHECK_H_

#include <vector>

#include "sift/model.h"
#include "sift/status.h"

namespace sift::plugins {

// Non-empty, in-vocabulary and no longer than the model's context.
Status CheckPrompt(const Model& model, const std::vector<TokenId>& tokens);

// Non-empty and in-vocabulary, any length: for scoring passes that are meant to run past the
// trained context (ILRe's streaming prefill).
Status CheckPromptTokens(const Model& model, const std::vector<TokenId>& tokens);

}  // namespace sift::plugins

#endif  // SIFT_KITS_PREFILL_PROMPT_CHECK_H_
