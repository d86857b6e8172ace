// libFuzzer target: the OpenAI request translation (daemon/openai_request.h), a body of POST
// /v1/chat/completions or /v1/completions through the bounded JSON parser (json_limits.h) into
// the SIFT/1 generate header and back through its parser (protocol.h), and what the HTTP port
// does with the result: the error body of a refusal, the reply fields of an accepted request.
//
// Input: the first byte picks the endpoint (odd: chat, even: completions), the rest is the
// body. The seed corpus (tests/fuzz/corpus/openai_request) is bodies with a leading 'c' (chat)
// or 'p' (completions).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/openai_request.h"
#include "daemon/openai_response.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sift::daemon;
  if (size == 0) return 0;
  const OpenAiEndpoint endpoint =
      data[0] % 2 == 1 ? OpenAiEndpoint::kChat : OpenAiEndpoint::kCompletions;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  // The deadline header's value, from the input's length (0: no header).
  const int64_t deadline_ms = static_cast<int64_t>(size % 3) * 1000;
  OpenAiRequest request;
  std::string param;
  const sift::Status status =
      ParseOpenAiRequest(endpoint, body, "chatcmpl-fuzz", deadline_ms, &request, &param);
  if (!status.ok()) {
    if (status.code() != sift::StatusCode::kInvalidArgument) __builtin_trap();
    const OpenAiError error = MakeError(status, param);
    if (error.status != 400) __builtin_trap();
    (void)error.body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return 0;
  }
  const GenerateRequest& g = request.generate;
  // What the parser promises of an accepted request.
  if (g.id != "chatcmpl-fuzz" || g.pipeline.empty()) __builtin_trap();
  if (g.max_tokens < 1 || g.max_tokens > (1 << 20)) __builtin_trap();
  if (!(g.top_p >= kMinTopP && g.top_p <= 1)) __builtin_trap();
  if (g.temperature != 0 && !(g.temperature >= kMinTemperature && g.temperature <= 100)) {
    __builtin_trap();
  }
  if (deadline_ms > 0 && (g.deadline_ms <= 0 || g.deadline_ms > deadline_ms)) __builtin_trap();
  if (request.endpoint != endpoint) __builtin_trap();
  // The reply the port would build around it.
  OpenAiReply reply{endpoint, g.id, request.model, 0, request.include_usage};
  nlohmann::json final_header = {
      {"type", "final"}, {"id", g.id}, {"text", "x"}, {"finish_reason", "stop"}};
  (void)CompletionBody(reply, final_header).dump();
  return 0;
}
