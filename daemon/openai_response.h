// OpenAI response formatting: bodies, streamed chunks and server-sent-event framing, errors in
// OpenAI's JSON shape with their HTTP status, and the model list (docs/openai.md).
//
// Everything is built from the SIFT/1 reply headers the front end produces (protocol.h): a
// `final` becomes a completion (its `usage` plus sift's cost report, the final's `stats`, under
// usage.sift), `chunk`s become deltas, an `error` becomes {"error": {message, type, param,
// code, sift}} with a status from ErrorStatus.
//
// THREADING: pure functions.
#ifndef SIFT_DAEMON_OPENAI_RESPONSE_H_
#define SIFT_DAEMON_OPENAI_RESPONSE_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "daemon/openai_request.h"
#include "sift/status.h"

namespace sift::daemon {

// What every body of one request shares.
struct OpenAiReply {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kChat;
  std::string id;     // "chatcmpl-..." or "cmpl-..."
  std::string model;  // as the client named it
  int64_t created = 0;
  bool include_usage = false;  // streamed: "usage": null on every chunk, then a usage chunk
};

// OpenAI's finish_reason for a SIFT/1 one: stop -> stop; length, context_full -> length.
std::string OpenAiFinishReason(const std::string& sift_finish_reason);
// {prompt_tokens, completion_tokens, total_tokens, sift: {pipeline, finish_reason, ...stats}}.
nlohmann::json OpenAiUsage(const nlohmann::json& final_header);

// A whole (non-streamed) chat.completion or text_completion from a `final`.
nlohmann::json CompletionBody(const OpenAiReply& reply, const nlohmann::json& final_header);
// Streamed: a piece of text (chat: with_role adds "role": "assistant" to the delta, as the first
// chunk of a chat stream does); the last choice chunk (finish_reason); the usage chunk.
nlohmann::json DeltaChunk(const OpenAiReply& reply, const std::string& text, bool with_role);
nlohmann::json FinishChunk(const OpenAiReply& reply, const nlohmann::json& final_header);
nlohmann::json UsageChunk(const OpenAiReply& reply, const nlohmann::json& final_header);

// Server-sent events: "data: <json>\n\n" (one line: JSON text has no raw newlines).
std::string SseData(const nlohmann::json& body);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
inline constexpr std::string_view kSseKeepAlive = ": keep-alive\n\n";
// HTTP/1.1 chunked transfer coding of the stream's body (Beast's chunk encoder), as the bytes
// that go on the wire, so that several events can leave in one write: HttpChunk frames one
// piece ("" for empty input: an empty chunk would end the body), HttpLastChunk ends the body.
std::string HttpChunk(std::string_view data);
std::string HttpLastChunk();

struct OpenAiError {
  int status = 500;
  nlohmann::json body;          // {"error": {...}}
  int64_t retry_after_ms = -1;  // >= 0: send Retry-After (429, 503)
};
// HTTP status of a SIFT/1 status: INVALID_ARGUMENT 400 (message_too_large 413), NOT_FOUND 404,
// ALREADY_EXISTS 409, RESOURCE_EXHAUSTED 429 (queue_full) or 503, DEADLINE_EXCEEDED 504,
// CANCELLED 499, UNIMPLEMENTED 501, UNAVAILABLE 503, anything else 500.
int ErrorStatus(StatusCode code, const std::string& reason);
OpenAiError MakeError(const Status& status, const std::string& param,
                      const nlohmann::json& details = nullptr, int64_t retry_after_ms = -1);
// From a SIFT/1 `error` reply header.
OpenAiError ErrorFromHeader(const nlohmann::json& error_header);
// An error outside SIFT/1 (HTTP level: 401, 404 path, 405, 413, 431, ...).
OpenAiError HttpLevelError(int status, const std::string& code, const std::string& message);

// GET /v1/models from a `listing` body (CatalogBackend::List): the valid pipelines.
nlohmann::json ModelsBody(const nlohmann::json& listing, int64_t created);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_OPENAI_RESPONSE_H_
