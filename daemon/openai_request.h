// OpenAI request translation: the body of POST /v1/chat/completions or /v1/completions into
// the SIFT/1 GenerateRequest the front end admits (docs/openai.md).
//
// The body is mapped field by field onto a SIFT/1 `generate` header, which then goes through
// the same parser and checks as a ZeroMQ client's message (protocol.h ParseClientMessage), so
// both front ends accept exactly the same values; error messages name the OpenAI field.
//   model                         the pipeline ("sift/<pipeline>" also accepted)
//   messages / prompt             `messages` (chat template) / `prompt` or `tokens` (raw)
//   max_completion_tokens,        max_tokens; absent: chat generates as much as the daemon
//   max_tokens                    allows (--max-tokens-limit, or until the context is full),
//                                 completions 16 (OpenAI's defaults)
//   temperature, top_p, seed      sampling (temperature defaults to 1, as OpenAI's)
//   stop, stream,                 as in OpenAI's API
//   stream_options.include_usage
//   sift                          extension: {params, deadline_ms, top_k, ignore_eos,
//                                 stop_token_ids, question_tokens}
// `n` other than 1 and features sift does not have (tools, logprobs, penalties, logit_bias,
// response_format other than text, echo, best_of, suffix) are refused with the field named;
// other unknown fields are ignored, as most OpenAI-compatible servers do.
//
// THREADING: pure functions.
// ERRORS:    INVALID_ARGUMENT with a reason (bad_field, missing_field, bad_input, unsupported,
//            or json_limits.h's bad_json, too_deep, too_many_values, nul_byte) and the offending
//            OpenAI field in `param`; never throws.
#ifndef SIFT_DAEMON_OPENAI_REQUEST_H_
#define SIFT_DAEMON_OPENAI_REQUEST_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/protocol.h"
#include "sift/status.h"

namespace sift::daemon {

enum class OpenAiEndpoint { kChat, kCompletions };

inline constexpr int64_t kOpenAiCompletionsDefaultMaxTokens = 16;

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kChat;
  std::string model;         // as the client wrote it (echoed in responses)
  GenerateRequest generate;  // id, pipeline, input, sampling, limits, params, stream, deadline
  bool stream = false;
  bool include_usage = false;
};

// Parses `body`. `id` becomes the request id; `deadline_ms` (> 0) comes from the
// X-Sift-Deadline-Ms header and is combined with `sift.deadline_ms` (the smaller wins).
// On failure `param` names the OpenAI field at fault ("" when none).
Status ParseOpenAiRequest(OpenAiEndpoint endpoint, std::string_view body, const std::string& id,
                          int64_t deadline_ms, OpenAiRequest* out, std::string* param);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_OPENAI_REQUEST_H_
