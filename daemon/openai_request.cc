#include "daemon/openai_request.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "daemon/json_limits.h"

namespace sift::daemon {
namespace {

using json = nlohmann::json;

constexpr std::string_view kModelPrefix = "sift/";
// Chat without a limit generates as much as the daemon allows: the largest max_tokens SIFT/1
// takes, which the front end lowers to --max-tokens-limit and the request builder to what the
// context leaves.
constexpr int64_t kChatDefaultMaxTokens = 1 << 20;

Status Fail(const std::string& reason, const std::string& field, const std::string& message,
            std::string* param) {
  *param = field;
  return Status(StatusCode::kInvalidArgument, reason, message);
}

Status Unsupported(const std::string& field, const std::string& message, std::string* param) {
  return Fail("unsupported", field, "unsupported value for '" + field + "': " + message, param);
}

std::string Show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

Status BadField(const std::string& field, const std::string& expected, const json& got,
                std::string* param) {
  return Fail("bad_field", field,
              "field '" + field + "': expected " + expected + ", got " + Show(got), param);
}

// The member `key` unless absent or null.
const json* Get(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

bool IsZero(const json& v) { return v.is_number() && v.get<double>() == 0; }

// Features sift does not have, refused when set to anything but their "off" value.
Status RefuseUnsupported(const json& body, std::string* param) {
  if (const json* n = Get(body, "n"); n && !(n->is_number_integer() && n->get<int64_t>() == 1)) {
    return Unsupported("n", "one choice per request (n = 1); send separate requests", param);
  }
  if (const json* v = Get(body, "best_of");
      v && !(v->is_number_integer() && v->get<int64_t>() == 1)) {
    return Unsupported("best_of", "one candidate per request (best_of = 1)", param);
  }
  for (const char* key : {"logprobs", "top_logprobs"}) {
    if (const json* v = Get(body, key); v && !(v->is_boolean() && !v->get<bool>()) && !IsZero(*v)) {
      return Unsupported(key, "log-probabilities are not returned", param);
    }
  }
  if (const json* v = Get(body, "logit_bias"); v && !(v->is_object() && v->empty())) {
    return Unsupported("logit_bias", "the sampler has no logit bias", param);
  }
  for (const char* key : {"tools", "functions"}) {
    if (const json* v = Get(body, key); v && !(v->is_array() && v->empty())) {
      return Unsupported(key, "no tool or function calling", param);
    }
  }
  for (const char* key : {"tool_choice", "function_call"}) {
    if (const json* v = Get(body, key); v && *v != "none" && *v != "auto") {
      return Unsupported(key, "no tool or function calling", param);
    }
  }
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    if (const json* v = Get(body, key); v && !IsZero(*v)) {
      return Unsupported(key, "the sampler has no penalties (0 is accepted)", param);
    }
  }
  if (const json* v = Get(body, "response_format");
      v && !(v->is_object() && v->value("type", json()) == "text")) {
    return Unsupported("response_format", "only {\"type\": \"text\"}", param);
  }
  if (const json* v = Get(body, "echo"); v && *v != false) {
    return Unsupported("echo", "the prompt is not echoed", param);
  }
  if (const json* v = Get(body, "suffix"); v && *v != "") {
    return Unsupported("suffix", "no insertion (suffix)", param);
  }
  for (const char* key : {"audio", "prediction"}) {
    if (Get(body, key)) return Unsupported(key, "text in, text out only", param);
  }
  if (const json* v = Get(body, "modalities"); v && *v != json::array({"text"})) {
    return Unsupported("modalities", "text only", param);
  }
  return Status::Ok();
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts.
Status ContentText(const json& content, const std::string& path, std::string* out,
                   std::string* param) {
  if (content.is_string()) {
    *out = content.get<std::string>();
    return Status::Ok();
  }
  if (!content.is_array()) {
    return BadField(path, "a string or an array of text parts", content, param);
  }
  out->clear();
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string where = path + "[" + std::to_string(i) + "]";
    if (!part.is_object() || !part.contains("type")) {
      return BadField(where, "a content part {\"type\": \"text\", \"text\": string}", part, param);
    }
    if (part["type"] != "text") {
      return Unsupported(where, "only text content parts (got type " + Show(part["type"]) + ")",
                         param);
    }
    const json* text = Get(part, "text");
    if (!text || !text->is_string()) {
      return BadField(where + ".text", "a string", text ? *text : json(), param);
    }
    *out += text->get<std::string>();
  }
  return Status::Ok();
}

Status ChatInput(const json& body, json* header, std::string* param) {
  const json* messages = Get(body, "messages");
  if (!messages) return Fail("missing_field", "messages", "'messages' is required", param);
  if (!messages->is_array() || messages->empty()) {
    return BadField("messages", "a non-empty array of {role, content}", *messages, param);
  }
  json out = json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string path = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return BadField(path, "an object {role, content}", m, param);
    const json* role = Get(m, "role");
    if (!role || !role->is_string()) {
      return BadField(path + ".role", "\"system\", \"developer\", \"user\" or \"assistant\"",
                      role ? *role : json(), param);
    }
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";
    if (r == "tool" || r == "function") {
      return Unsupported(path + ".role", "no tool or function messages", param);
    }
    if (r != "system" && r != "user" && r != "assistant") {
      return BadField(path + ".role", "\"system\", \"developer\", \"user\" or \"assistant\"", *role,
                      param);
    }
    if (const json* calls = Get(m, "tool_calls"); calls && !(calls->is_array() && calls->empty())) {
      return Unsupported(path + ".tool_calls", "no tool or function calling", param);
    }
    std::string text;
    const json* content = Get(m, "content");
    if (!content) {
      if (r != "assistant") return BadField(path + ".content", "a string", json(), param);
    } else {
      SIFT_RETURN_IF_ERROR(ContentText(*content, path + ".content", &text, param));
    }
    out.push_back({{"role", r}, {"content", std::move(text)}});
  }
  (*header)["messages"] = std::move(out);
  return Status::Ok();
}

bool AllOf(const json& array, bool (json::*test)() const noexcept) {
  return std::all_of(array.begin(), array.end(), [&](const json& v) { return (v.*test)(); });
}

Status CompletionInput(const json& body, json* header, std::string* param) {
  const json* prompt = Get(body, "prompt");
  if (!prompt) return Fail("missing_field", "prompt", "'prompt' is required", param);
  if (prompt->is_string()) {
    (*header)["prompt"] = *prompt;
    return Status::Ok();
  }
  const char* expected = "a string, an array of token ids, or an array holding one of those";
  if (!prompt->is_array() || prompt->empty()) return BadField("prompt", expected, *prompt, param);
  if (AllOf(*prompt, &json::is_number)) {
    (*header)["tokens"] = *prompt;
    return Status::Ok();
  }
  if (prompt->size() > 1) {
    return Unsupported("prompt", "one prompt per request (no batches); send separate requests",
                       param);
  }
  const json& only = (*prompt)[0];
  if (only.is_string()) {
    (*header)["prompt"] = only;
  } else if (only.is_array() && !only.empty() && AllOf(only, &json::is_number)) {
    (*header)["tokens"] = only;
  } else {
    return BadField("prompt", expected, *prompt, param);
  }
  return Status::Ok();
}

// The sift extension object.
Status SiftExtension(const json& body, json* header, json* sampling, std::string* param) {
  const json* ext = Get(body, "sift");
  if (!ext) return Status::Ok();
  if (!ext->is_object()) return BadField("sift", "an object", *ext, param);
  static const char* const kKeys[] = {"params",     "deadline_ms",    "top_k",
                                      "ignore_eos", "stop_token_ids", "question_tokens",
                                      "return_kept"};
  for (auto it = ext->begin(); it != ext->end(); ++it) {
    const std::string& key = it.key();
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys)) {
      return Fail("bad_field", "sift." + key,
                  "unknown field 'sift." + key +
                      "'; the sift extension takes params, deadline_ms, top_k, ignore_eos, "
                      "stop_token_ids, question_tokens and return_kept",
                  param);
    }
    if (it.value().is_null()) continue;
    if (key == "top_k") {
      (*sampling)["top_k"] = it.value();
    } else {
      (*header)[key] = it.value();
    }
  }
  return Status::Ok();
}

// The OpenAI name of a SIFT/1 field named in a parser message.
std::string OpenAiName(const std::string& sift, const std::string& max_name) {
  auto starts = [&](std::string_view prefix) { return sift.rfind(prefix, 0) == 0; };
  if (starts("sampling.top_k")) return "sift.top_k";
  if (starts("sampling.")) return sift.substr(9);
  if (starts("max_tokens")) return max_name;
  if (starts("tokens")) return "prompt" + sift.substr(6);
  for (std::string_view ext : {"params", "deadline_ms", "ignore_eos", "stop_token_ids",
                               "question_tokens", "return_kept"}) {
    if (starts(ext)) return "sift." + sift;
  }
  return sift;
}

// Rewrites the first quoted field name of a SIFT/1 parser message into its OpenAI name.
Status Rename(const Status& status, const std::string& max_name, std::string* param) {
  std::string message = status.message();
  const size_t open = message.find('\'');
  const size_t close = open == std::string::npos ? open : message.find('\'', open + 1);
  if (close == std::string::npos) {
    param->clear();
    return status;
  }
  const std::string name = OpenAiName(message.substr(open + 1, close - open - 1), max_name);
  message.replace(open + 1, close - open - 1, name);
  *param = name;
  return Status(status.code(), status.reason(), message);
}

}  // namespace

Status ParseOpenAiRequest(OpenAiEndpoint endpoint, std::string_view body, const std::string& id,
                          int64_t deadline_ms, OpenAiRequest* out, std::string* param) {
  *out = OpenAiRequest();
  out->endpoint = endpoint;
  param->clear();
  // The limits of SIFT/1 headers (json_limits.h) apart from the size, which the HTTP port
  // bounds (--openai-max-body-bytes) before the body is read.
  JsonLimits limits;
  limits.max_bytes = body.size();
  json b;
  std::string reason, why;
  if (!ParseBoundedJson(body, limits, &b, &reason, &why)) {
    return Fail(reason, "", "the request body is not acceptable JSON: " + why, param);
  }
  if (!b.is_object()) return Fail("bad_json", "", "the request body must be a JSON object", param);

  const json* model = Get(b, "model");
  if (!model) return Fail("missing_field", "model", "'model' is required (a pipeline)", param);
  if (!model->is_string()) return BadField("model", "a string (a pipeline name)", *model, param);
  out->model = model->get<std::string>();
  std::string pipeline = out->model;
  if (pipeline.rfind(kModelPrefix, 0) == 0) pipeline = pipeline.substr(kModelPrefix.size());
  if (pipeline.empty()) return BadField("model", "a pipeline name", *model, param);

  SIFT_RETURN_IF_ERROR(RefuseUnsupported(b, param));

  json header = {{"type", "generate"}, {"id", id}, {"pipeline", pipeline}};
  SIFT_RETURN_IF_ERROR(endpoint == OpenAiEndpoint::kChat ? ChatInput(b, &header, param)
                                                         : CompletionInput(b, &header, param));

  json sampling = {{"temperature", 1.0}};
  for (const char* key : {"temperature", "top_p", "seed"}) {
    if (const json* v = Get(b, key)) sampling[key] = *v;
  }
  std::string max_name = "max_tokens";
  if (const json* v = Get(b, "max_completion_tokens")) {
    max_name = "max_completion_tokens";
    header["max_tokens"] = *v;
  } else if (const json* v = Get(b, "max_tokens")) {
    header["max_tokens"] = *v;
  } else {
    header["max_tokens"] = endpoint == OpenAiEndpoint::kChat ? kChatDefaultMaxTokens
                                                             : kOpenAiCompletionsDefaultMaxTokens;
  }
  if (const json* v = Get(b, "stop")) header["stop"] = *v;
  if (const json* v = Get(b, "stream")) {
    if (!v->is_boolean()) return BadField("stream", "true or false", *v, param);
    out->stream = v->get<bool>();
  }
  if (const json* v = Get(b, "stream_options")) {
    if (!v->is_object()) return BadField("stream_options", "an object", *v, param);
    if (const json* u = Get(*v, "include_usage")) {
      if (!u->is_boolean()) {
        return BadField("stream_options.include_usage", "true or false", *u, param);
      }
      out->include_usage = u->get<bool>();
    }
  }
  SIFT_RETURN_IF_ERROR(SiftExtension(b, &header, &sampling, param));
  header["sampling"] = std::move(sampling);
  // Non-streamed requests get no chunks: the final carries the text.
  header["stream"] = out->stream;

  const std::string text = Serialize(header);
  ClientMessage message;
  // The translation of a body the HTTP port has already bounded (--openai-max-body-bytes): its
  // size is not held to --max-header-bytes, the ZeroMQ port's limit; the other limits apply.
  JsonLimits header_limits;
  header_limits.max_bytes = std::max(header_limits.max_bytes, text.size());
  const Status status = ParseClientMessage({kMagic, text}, &message, header_limits);
  if (!status.ok()) return Rename(status, max_name, param);
  out->generate = std::move(message.generate);
  if (deadline_ms > 0) {
    out->generate.deadline_ms = out->generate.deadline_ms > 0
                                    ? std::min(out->generate.deadline_ms, deadline_ms)
                                    : deadline_ms;
  }
  return Status::Ok();
}

}  // namespace sift::daemon
