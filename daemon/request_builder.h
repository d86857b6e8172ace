// Request builder: turns a parsed generate message into the sift::RequestState the pipeline
// runs on (token ids, question span, generation options), checking the context limit.
//
// Input modes and the question span (tokens[question_begin:]) — docs/protocol.md "Prompts":
//   context + question  chat template with one user message "{context}\n\n{question}" (after an
//                       optional system message); the question span starts at the question's
//                       first token and runs to the end (it includes the template's closing
//                       tokens and the assistant header). The two halves are tokenised
//                       separately so that the boundary is exact.
//   messages            chat template over all messages; the last message's content (plus the
//                       template tail) is the question span, split the same way.
//   prompt              raw text, no template (BOS added if the model wants one); the question
//                       span is the last `question_tokens` tokens (request field, default from
//                       --question-tokens, 32), or the whole prompt if shorter.
//   tokens              raw ids, used as given; question span as for `prompt`.
// If a chat template rewrites the question text (e.g. Llama 3 trims surrounding whitespace),
// the prompt is tokenised whole and the question span falls back to the last
// `question_tokens` tokens.
//
// THREADING: pure functions; the tokenizer is thread-safe.
// ERRORS:    INVALID_ARGUMENT with reasons prompt_too_long (details n_prompt_tokens, n_ctx),
//            empty_prompt, bad_token (details index, token, vocab_size).
#ifndef SIFT_DAEMON_REQUEST_BUILDER_H_
#define SIFT_DAEMON_REQUEST_BUILDER_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "daemon/protocol.h"
#include "sift/model.h"
#include "sift/request_state.h"
#include "sift/status.h"
#include "sift/tokenizer.h"

namespace sift::daemon {

struct BuildOptions {
  int64_t n_ctx = 0;             // context limit; 0 = the model's context_length
  int64_t question_tokens = 32;  // default question span for prompt / tokens input
};

struct TokenizedPrompt {
  std::vector<TokenId> tokens;
  int64_t question_begin = 0;
  bool exact_split = false;  // the question span is the question's own tokens
};

// Tokenises the request's input (no length checks).
Status TokenizePrompt(const Tokenizer& tokenizer, const GenerateRequest& request,
                      int64_t default_question_tokens, TokenizedPrompt* out,
                      nlohmann::json* details);

// Fills state's input and generation options. `max_tokens_clamped` is set when max_tokens was
// lowered to fit the context (a `length` finish then reports `context_full`).
Status BuildRequestState(const Model& model, const GenerateRequest& request,
                         const BuildOptions& options, RequestState* state, bool* max_tokens_clamped,
                         nlohmann::json* details);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_REQUEST_BUILDER_H_
