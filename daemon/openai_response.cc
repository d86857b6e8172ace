#include "daemon/openai_response.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/chunk_encode.hpp>

namespace sift::daemon {
namespace {

using json = nlohmann::json;

const char* ObjectName(OpenAiEndpoint endpoint, bool chunk) {
  if (endpoint == OpenAiEndpoint::kChat) return chunk ? "chat.completion.chunk" : "chat.completion";
  return "text_completion";
}

json Envelope(const OpenAiReply& reply, bool chunk, json choices) {
  json body = {{"id", reply.id},
               {"object", ObjectName(reply.endpoint, chunk)},
               {"created", reply.created},
               {"model", reply.model},
               {"choices", std::move(choices)}};
  if (chunk && reply.include_usage) body["usage"] = nullptr;
  return body;
}

json Choice(const OpenAiReply& reply, const std::string& text, bool chunk, bool with_role,
            const json& finish_reason) {
  json choice = {{"index", 0}};
  if (reply.endpoint == OpenAiEndpoint::kChat) {
    json message = json::object();
    if (with_role || !chunk) message["role"] = "assistant";
    if (!chunk || with_role || !text.empty()) message["content"] = text;
    choice[chunk ? "delta" : "message"] = std::move(message);
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason;
  return choice;
}

const char* ErrorType(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 429:
      return "rate_limit_error";
    case 504:
      return "timeout_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

// What the pipeline kept (return_kept) as the response's top-level `sift.kept`.
void AddKept(const json& final_header, json* body) {
  const auto it = final_header.find("kept");
  if (it != final_header.end() && !it->is_null()) (*body)["sift"] = {{"kept", *it}};
}

std::string StringOr(const json& h, const char* key, const char* fallback) {
  const auto it = h.find(key);  // end() for anything but an object
  return it != h.end() && it->is_string() ? it->get<std::string>() : fallback;
}

}  // namespace

std::string OpenAiFinishReason(const std::string& sift_finish_reason) {
  if (sift_finish_reason == "length" || sift_finish_reason == "context_full") return "length";
  return "stop";
}

json OpenAiUsage(const json& final_header) {
  const json usage = final_header.value("usage", json::object());
  const int64_t prompt = usage.value("prompt_tokens", int64_t{0});
  const int64_t completion = usage.value("completion_tokens", int64_t{0});
  json report = final_header.value("stats", json::object());
  if (!report.is_object()) report = json::object();
  report["pipeline"] = final_header.value("pipeline", "");
  report["finish_reason"] = final_header.value("finish_reason", "");
  const int64_t cached = usage.value("cached_tokens", int64_t{0});
  report["cached_tokens"] = cached;
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}},
          {"sift", std::move(report)}};
}

json CompletionBody(const OpenAiReply& reply, const json& final_header) {
  const std::string finish = OpenAiFinishReason(final_header.value("finish_reason", ""));
  json body =
      Envelope(reply, /*chunk=*/false,
               json::array({Choice(reply, final_header.value("text", ""), false, false, finish)}));
  body["usage"] = OpenAiUsage(final_header);
  AddKept(final_header, &body);
  return body;
}

json DeltaChunk(const OpenAiReply& reply, const std::string& text, bool with_role) {
  return Envelope(reply, true, json::array({Choice(reply, text, true, with_role, nullptr)}));
}

json FinishChunk(const OpenAiReply& reply, const json& final_header) {
  json body =
      Envelope(reply, true,
               json::array({Choice(reply, "", true, false,
                                   OpenAiFinishReason(final_header.value("finish_reason", "")))}));
  AddKept(final_header, &body);
  return body;
}

json UsageChunk(const OpenAiReply& reply, const json& final_header) {
  json body = Envelope(reply, true, json::array());
  body["usage"] = OpenAiUsage(final_header);
  return body;
}

std::string SseData(const json& body) {
  return "data: " + body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string HttpChunk(std::string_view data) {
  if (data.empty()) return "";
  return boost::beast::buffers_to_string(
      boost::beast::http::make_chunk(boost::asio::const_buffer(data.data(), data.size())));
}

std::string HttpLastChunk() {
  return boost::beast::buffers_to_string(boost::beast::http::make_chunk_last());
}

int ErrorStatus(StatusCode code, const std::string& reason) {
  switch (code) {
    case StatusCode::kInvalidArgument:
      return reason == "message_too_large" ? 413 : 400;
    case StatusCode::kFailedPrecondition:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
      return 409;
    case StatusCode::kResourceExhausted:
      return reason == "queue_full" ? 429 : 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    case StatusCode::kCancelled:
      return 499;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

OpenAiError MakeError(const Status& status, const std::string& param, const json& details,
                      int64_t retry_after_ms) {
  OpenAiError e;
  e.status = ErrorStatus(status.code(), status.reason());
  e.retry_after_ms = retry_after_ms;
  if (e.retry_after_ms < 0 && (e.status == 429 || e.status == 503) &&
      status.reason() != "shutting_down") {
    e.retry_after_ms = 1000;
  }
  json sift = {{"code", StatusCodeName(status.code())}, {"reason", status.reason()}};
  if (details.is_object() && !details.empty()) sift["details"] = details;
  std::string message = status.message();
  std::string code = status.reason();
  if (status.reason() == "unknown_pipeline") {
    code = "model_not_found";
    message += " (GET /v1/models lists the pipelines this daemon serves)";
  }
  e.body = {{"error",
             {{"message", message},
              {"type", ErrorType(e.status)},
              {"param", param.empty() ? json(nullptr) : json(param)},
              {"code", code},
              {"sift", std::move(sift)}}}};
  if (status.reason() == "unknown_pipeline") e.body["error"]["param"] = "model";
  return e;
}

OpenAiError ErrorFromHeader(const json& h) {
  StatusCode code = StatusCode::kInternal;
  // The header comes from this daemon's front end; still, a malformed one (a remote worker of
  // another build) gives a 500, never an exception.
  const std::string wire = StringOr(h, "code", "INTERNAL");
  for (StatusCode c :
       {StatusCode::kCancelled, StatusCode::kInvalidArgument, StatusCode::kDeadlineExceeded,
        StatusCode::kNotFound, StatusCode::kAlreadyExists, StatusCode::kResourceExhausted,
        StatusCode::kFailedPrecondition, StatusCode::kUnimplemented, StatusCode::kInternal,
        StatusCode::kUnavailable}) {
    if (wire == StatusCodeName(c)) code = c;
  }
  const Status status(code, StringOr(h, "reason", "internal"), StringOr(h, "message", ""));
  const auto retry = h.find("retry_after_ms");
  const int64_t retry_after_ms =
      retry != h.end() && retry->is_number_integer() ? retry->get<int64_t>() : -1;
  const auto details = h.find("details");
  return MakeError(status, "", details != h.end() ? *details : json(), retry_after_ms);
}

OpenAiError HttpLevelError(int status, const std::string& code, const std::string& message) {
  OpenAiError e;
  e.status = status;
  e.body = {
      {"error",
       {{"message", message}, {"type", ErrorType(status)}, {"param", nullptr}, {"code", code}}}};
  if (status == 503) e.retry_after_ms = 1000;
  return e;
}

json ModelsBody(const json& listing, int64_t created) {
  json data = json::array();
  const json model = listing.value("model", json::object());
  if (listing.contains("pipelines") && listing["pipelines"].is_array()) {
    for (const json& p : listing["pipelines"]) {
      if (!p.is_object() || !p.value("ok", false)) continue;
      json stages = json::array();
      if (p.contains("stages") && p["stages"].is_array()) {
        for (const json& s : p["stages"]) {
          stages.push_back({{"name", s.value("name", "")},
                            {"kind", s.value("kind", "")},
                            {"plugin", s.value("plugin", "")},
                            {"version", s.value("version", "")}});
        }
      }
      data.push_back({{"id", p.value("name", "")},
                      {"object", "model"},
                      {"created", created},
                      {"owned_by", "sift"},
                      {"sift",
                       {{"pipeline", p.value("name", "")},
                        {"description", p.value("description", "")},
                        {"model", model.value("name", "")},
                        {"model_path", model.value("path", "")},
                        {"n_ctx", model.value("n_ctx", 0)},
                        {"stages", std::move(stages)}}}});
      // Cannot run on the loaded model (daemon/pipeline_availability.h): said here too.
      if (p.contains("available")) data.back()["sift"]["available"] = p["available"];
      if (p.contains("unavailable")) data.back()["sift"]["unavailable"] = p["unavailable"];
    }
  }
  return {{"object", "list"}, {"data", std::move(data)}};
}

}  // namespace sift::daemon
