#include "daemon/protocol.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace sift::daemon {
namespace {

using json = nlohmann::json;

Status Invalid(const std::string& reason, const std::string& message) {
  return Status(StatusCode::kInvalidArgument, reason, message);
}

// A short rendering of a JSON value for error messages.
std::string Show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

Status BadField(const std::string& field, const std::string& expected, const json& got) {
  return Invalid("bad_field", "field '" + field + "': expected " + expected + ", got " + Show(got));
}

bool AsInt(const json& v, int64_t* out) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return false;
    }
    *out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) {
      *out = static_cast<int64_t>(d);
      return true;
    }
  }
  return false;
}

// Reads an optional integer in [lo, hi].
Status GetInt(const json& obj, const char* key, const std::string& path, int64_t lo, int64_t hi,
              int64_t* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::Ok();
  int64_t v = 0;
  if (!AsInt(*it, &v) || v < lo || v > hi) {
    return BadField(path, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
                    *it);
  }
  *out = v;
  return Status::Ok();
}

Status GetDouble(const json& obj, const char* key, const std::string& path, double lo, double hi,
                 bool lo_open, double* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::Ok();
  const bool in_range = it->is_number() && std::isfinite(it->get<double>()) &&
                        (lo_open ? it->get<double>() > lo : it->get<double>() >= lo) &&
                        it->get<double>() <= hi;
  if (!in_range) {
    char range[64];
    std::snprintf(range, sizeof(range), "a number in %c%g, %g]", lo_open ? '(' : '[', lo, hi);
    return BadField(path, range, *it);
  }
  *out = it->get<double>();
  return Status::Ok();
}

Status GetBool(const json& obj, const char* key, bool* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean()) return BadField(key, "true or false", *it);
  *out = it->get<bool>();
  return Status::Ok();
}

Status GetString(const json& obj, const char* key, std::string* out, bool* present) {
  auto it = obj.find(key);
  *present = it != obj.end() && !it->is_null();
  if (!*present) return Status::Ok();
  if (!it->is_string()) return BadField(key, "a string", *it);
  *out = it->get<std::string>();
  return Status::Ok();
}

Status GetTokenList(const json& v, const std::string& path, std::vector<int32_t>* out) {
  if (!v.is_array()) return BadField(path, "an array of token ids", v);
  out->clear();
  out->reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t t = 0;
    if (!AsInt(v[i], &t) || t < 0 || t > std::numeric_limits<int32_t>::max()) {
      return BadField(path + "[" + std::to_string(i) + "]", "a token id (integer >= 0)", v[i]);
    }
    out->push_back(static_cast<int32_t>(t));
  }
  return Status::Ok();
}

// "messages": a non-empty array of {role, content} with a known role.
Status ParseMessages(const json& m, std::vector<ChatTurn>* messages) {
  if (!m.is_array() || m.empty()) {
    return BadField("messages", "a non-empty array of {role, content}", m);
  }
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string path = "messages[" + std::to_string(i) + "]";
    if (!m[i].is_object() || !m[i].contains("role") || !m[i]["role"].is_string() ||
        !m[i].contains("content") || !m[i]["content"].is_string()) {
      return BadField(path, "an object {\"role\": string, \"content\": string}", m[i]);
    }
    ChatTurn turn{m[i]["role"].get<std::string>(), m[i]["content"].get<std::string>()};
    if (turn.role != "system" && turn.role != "user" && turn.role != "assistant") {
      return BadField(path + ".role", "\"system\", \"user\" or \"assistant\"", m[i]["role"]);
    }
    messages->push_back(std::move(turn));
  }
  return Status::Ok();
}

// "tokens": {"frame": N}, the ids as int32 little-endian in binary frame N.
Status ParseTokenFrame(const json& t, const std::vector<std::string_view>& frames,
                       std::vector<int32_t>* tokens) {
  int64_t frame = -1;
  SIFT_RETURN_IF_ERROR(GetInt(t, "frame", "tokens.frame", 0, 1 << 20, &frame));
  const size_t index = 2 + static_cast<size_t>(frame);
  if (frame < 0 || index >= frames.size()) {
    return Invalid("bad_input", "'tokens.frame' names binary frame " + std::to_string(frame) +
                                    " but the message has " + std::to_string(frames.size() - 2) +
                                    " binary frames");
  }
  const std::string_view bytes = frames[index];
  if (bytes.size() % 4 != 0) {
    return Invalid("bad_input", "binary token frame size " + std::to_string(bytes.size()) +
                                    " is not a multiple of 4 (int32 little-endian)");
  }
  tokens->resize(bytes.size() / 4);
  for (size_t i = 0; i < tokens->size(); ++i) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + 4 * i);
    const uint32_t u =
        uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
    std::memcpy(&(*tokens)[i], &u, 4);
    if ((*tokens)[i] < 0) {
      return Invalid("bad_input", "binary token frame: negative id at index " + std::to_string(i));
    }
  }
  return Status::Ok();
}

Status ParseInput(const json& h, const std::vector<std::string_view>& frames, GenerateRequest* g) {
  const bool has_question = h.contains("question") && !h["question"].is_null();
  const bool has_context = h.contains("context") && !h["context"].is_null();
  const bool has_messages = h.contains("messages") && !h["messages"].is_null();
  const bool has_prompt = h.contains("prompt") && !h["prompt"].is_null();
  const bool has_tokens = h.contains("tokens") && !h["tokens"].is_null();
  const int kinds = int(has_question) + int(has_messages) + int(has_prompt) + int(has_tokens);
  if (kinds == 0) {
    return Invalid(has_context ? "bad_input" : "missing_field",
                   has_context ? "'context' needs a 'question'"
                               : "generate needs an input: 'context' + 'question', 'messages', "
                                 "'prompt' or 'tokens'");
  }
  if (kinds > 1 || (has_context && !has_question)) {
    return Invalid("bad_input",
                   "give exactly one input: 'context' + 'question', 'messages', 'prompt' or "
                   "'tokens'");
  }
  bool present = false;
  if (has_question) {
    g->input = InputKind::kContextQuestion;
    SIFT_RETURN_IF_ERROR(GetString(h, "question", &g->question, &present));
    SIFT_RETURN_IF_ERROR(GetString(h, "context", &g->context, &present));
    SIFT_RETURN_IF_ERROR(GetString(h, "system", &g->system, &present));
    if (g->question.empty()) return Invalid("bad_input", "'question' is empty");
  } else if (has_messages) {
    g->input = InputKind::kMessages;
    SIFT_RETURN_IF_ERROR(ParseMessages(h["messages"], &g->messages));
  } else if (has_prompt) {
    g->input = InputKind::kPrompt;
    SIFT_RETURN_IF_ERROR(GetString(h, "prompt", &g->prompt, &present));
    if (g->prompt.empty()) return Invalid("bad_input", "'prompt' is empty");
  } else {
    g->input = InputKind::kTokens;
    const json& t = h["tokens"];
    SIFT_RETURN_IF_ERROR(t.is_object() ? ParseTokenFrame(t, frames, &g->tokens)
                                       : GetTokenList(t, "tokens", &g->tokens));
    if (g->tokens.empty()) return Invalid("bad_input", "'tokens' is empty");
  }
  return GetInt(h, "question_tokens", "question_tokens", 0, 1 << 24, &g->question_tokens);
}

Status ParseGenerate(const json& h, const std::vector<std::string_view>& frames,
                     GenerateRequest* g) {
  bool present = false;
  SIFT_RETURN_IF_ERROR(GetString(h, "pipeline", &g->pipeline, &present));
  if (!present) return Invalid("missing_field", "generate needs 'pipeline'");
  if (g->pipeline.empty()) return Invalid("bad_field", "field 'pipeline': empty");
  SIFT_RETURN_IF_ERROR(ParseInput(h, frames, g));

  auto s = h.find("sampling");
  if (s != h.end() && !s->is_null()) {
    if (!s->is_object()) return BadField("sampling", "an object", *s);
    SIFT_RETURN_IF_ERROR(
        GetDouble(*s, "temperature", "sampling.temperature", 0, 100, false, &g->temperature));
    if (g->temperature > 0 && g->temperature < kMinTemperature) {
      char range[96];
      std::snprintf(range, sizeof(range), "0 (greedy) or a number in [%g, 100]", kMinTemperature);
      return BadField("sampling.temperature", range, (*s)["temperature"]);
    }
    SIFT_RETURN_IF_ERROR(GetInt(*s, "top_k", "sampling.top_k", 0, 1 << 24, &g->top_k));
    SIFT_RETURN_IF_ERROR(GetDouble(*s, "top_p", "sampling.top_p", 0, 1, true, &g->top_p));
    g->top_p = std::max(g->top_p, kMinTopP);  // same meaning, representable in float
    int64_t seed = 0;
    SIFT_RETURN_IF_ERROR(GetInt(*s, "seed", "sampling.seed", 0, INT64_MAX, &seed));
    g->seed = static_cast<uint64_t>(seed);
  }
  SIFT_RETURN_IF_ERROR(GetInt(h, "max_tokens", "max_tokens", 1, 1 << 20, &g->max_tokens));
  auto stop = h.find("stop");
  if (stop != h.end() && !stop->is_null()) {
    json list = stop->is_string() ? json::array({*stop}) : *stop;
    if (!list.is_array() || list.size() > kMaxStopStrings) {
      return BadField("stop", "a string or an array of at most 16 strings", *stop);
    }
    for (const json& v : list) {
      if (!v.is_string() || v.get<std::string>().empty() || v.get<std::string>().size() > 1024) {
        return BadField("stop", "non-empty strings of at most 1024 bytes", v);
      }
      g->stop.push_back(v.get<std::string>());
    }
  }
  auto stop_ids = h.find("stop_token_ids");
  if (stop_ids != h.end() && !stop_ids->is_null()) {
    SIFT_RETURN_IF_ERROR(GetTokenList(*stop_ids, "stop_token_ids", &g->stop_token_ids));
  }
  SIFT_RETURN_IF_ERROR(GetBool(h, "ignore_eos", &g->ignore_eos));
  auto params = h.find("params");
  if (params != h.end() && !params->is_null()) {
    if (!params->is_object()) return BadField("params", "an object {stage: {key: value}}", *params);
    for (auto it = params->begin(); it != params->end(); ++it) {
      if (!it.value().is_object()) {
        return BadField("params." + it.key(), "an object of parameter overrides", it.value());
      }
    }
    g->params = *params;
  }
  SIFT_RETURN_IF_ERROR(GetBool(h, "stream", &g->stream));
  SIFT_RETURN_IF_ERROR(GetBool(h, "return_kept", &g->return_kept));
  return GetInt(h, "deadline_ms", "deadline_ms", 0, 7LL * 24 * 3600 * 1000, &g->deadline_ms);
}

// Stops at the top-level "id" member; skips everything else without storing it.
class IdScanner : public json::json_sax_t {
 public:
  explicit IdScanner(std::string* id) : id_(id) {}
  bool found() const { return found_; }

  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(json::number_integer_t) override { return Value(); }
  bool number_unsigned(json::number_unsigned_t) override { return Value(); }
  bool number_float(json::number_float_t, const std::string&) override { return Value(); }
  bool binary(json::binary_t&) override { return Value(); }
  bool string(std::string& value) override {
    if (depth_ == 1 && id_key_) {
      *id_ = value;
      found_ = true;
      return false;  // stop parsing
    }
    return Value();
  }
  bool start_object(std::size_t) override { return Open(); }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override { return Close(); }
  bool key(std::string& key) override {
    id_key_ = depth_ == 1 && key == "id";
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  bool Value() {
    id_key_ = false;
    return true;
  }
  bool Open() {
    ++depth_;
    id_key_ = false;
    return true;
  }
  bool Close() {
    --depth_;
    return true;
  }
  std::string* id_;
  int depth_ = 0;
  bool id_key_ = false;
  bool found_ = false;
};

}  // namespace

bool ExtractId(std::string_view header, std::string* id) {
  header = header.substr(0, kIdScanBytes);
  std::string value;
  IdScanner scanner(&value);
  json::sax_parse(header.begin(), header.end(), &scanner, json::input_format_t::json,
                  /*strict=*/false);
  if (!scanner.found() || value.empty() || value.size() > kMaxIdBytes) return false;
  *id = value;
  return true;
}

const char* WireCode(StatusCode code) { return StatusCodeName(code); }

bool IsRetryable(StatusCode code) {
  return code == StatusCode::kResourceExhausted || code == StatusCode::kUnavailable;
}

const char* MessageTypeName(MessageType type) {
  switch (type) {
    case MessageType::kGenerate:
      return "generate";
    case MessageType::kCancel:
      return "cancel";
    case MessageType::kPing:
      return "ping";
    case MessageType::kList:
      return "list";
  }
  return "unknown";
}

const char* InputKindName(InputKind kind) {
  switch (kind) {
    case InputKind::kContextQuestion:
      return "context_question";
    case InputKind::kMessages:
      return "messages";
    case InputKind::kPrompt:
      return "prompt";
    case InputKind::kTokens:
      return "tokens";
  }
  return "unknown";
}

Status ParseClientMessage(const std::vector<std::string_view>& frames, ClientMessage* out,
                          const JsonLimits& limits) {
  *out = ClientMessage();
  if (frames.size() < 2) {
    return Invalid("bad_frames", "expected [\"SIFT/1\", JSON header, binary frames...], got " +
                                     std::to_string(frames.size()) + " frame(s)");
  }
  if (frames[0] != kMagic) {
    if (frames[0].size() >= 5 && frames[0].substr(0, 5) == "SIFT/") {
      return Invalid("unsupported_version", "protocol '" + std::string(frames[0].substr(0, 16)) +
                                                "' is not supported; this daemon speaks SIFT/1");
    }
    return Invalid("bad_magic", "the first frame must be \"SIFT/1\"");
  }
  json h;
  std::string reason, why;
  if (!ParseBoundedJson(frames[1], limits, &h, &reason, &why)) {
    if (reason != "bad_json" && reason != "nul_byte") {
      out->has_id = ExtractId(frames[1], &out->id);
      return Invalid(reason, "the header was refused: " + why + " (docs/protocol.md, limits)");
    }
    return Invalid("bad_json", "the header frame is not valid UTF-8 JSON: " + why);
  }
  if (!h.is_object()) return Invalid("bad_header", "the header must be a JSON object");
  auto id = h.find("id");
  if (id != h.end() && id->is_string() && !id->get<std::string>().empty() &&
      id->get<std::string>().size() <= kMaxIdBytes) {
    out->id = id->get<std::string>();
    out->has_id = true;
  }
  auto type = h.find("type");
  if (type == h.end()) return Invalid("missing_field", "the header needs 'type'");
  if (!type->is_string()) return BadField("type", "a string", *type);
  const std::string t = type->get<std::string>();
  if (t == "generate") {
    out->type = MessageType::kGenerate;
  } else if (t == "cancel") {
    out->type = MessageType::kCancel;
  } else if (t == "ping") {
    out->type = MessageType::kPing;
  } else if (t == "list") {
    out->type = MessageType::kList;
  } else {
    return Invalid("unknown_type", "unknown message type " + Show(*type) +
                                       "; expected generate, cancel, ping or list");
  }
  if (id != h.end() && !id->is_null() && !out->has_id) {
    return BadField("id", "a non-empty string of at most 256 bytes", *id);
  }
  switch (out->type) {
    case MessageType::kGenerate:
      if (!out->has_id) return Invalid("missing_field", "generate needs 'id'");
      out->generate.id = out->id;
      return ParseGenerate(h, frames, &out->generate);
    case MessageType::kCancel:
      if (!out->has_id) return Invalid("missing_field", "cancel needs 'id'");
      return Status::Ok();
    case MessageType::kPing:
      if (h.contains("nonce")) out->nonce = h["nonce"];
      return Status::Ok();
    case MessageType::kList:
      return Status::Ok();
  }
  return Status::Ok();
}

json AcceptedHeader(const std::string& id, const std::string& pipeline, int64_t queue_position) {
  return {
      {"type", "accepted"}, {"id", id}, {"pipeline", pipeline}, {"queue_position", queue_position}};
}

json ChunkHeader(const std::string& id, int64_t seq, const std::string& text,
                 const std::vector<int32_t>& token_ids) {
  return {{"type", "chunk"}, {"id", id}, {"seq", seq}, {"text", text}, {"token_ids", token_ids}};
}

json HeartbeatHeader(const std::string& id, const std::string& state, double elapsed_ms,
                     const json& progress) {
  json h = {{"type", "heartbeat"},
            {"id", id},
            {"state", state},
            {"elapsed_ms", std::round(elapsed_ms * 10) / 10}};
  if (!progress.is_null()) h["progress"] = progress;
  return h;
}

double RoundMs(double ms) { return std::round(ms * 1000) / 1000; }

json FinalHeader(const std::string& id, const std::string& pipeline, const FinalReport& r) {
  json stages = json::array();
  for (const StageReport& s : r.stages) {
    stages.push_back(
        {{"stage", s.stage}, {"plugin", s.plugin}, {"kind", s.kind}, {"ms", RoundMs(s.ms)}});
  }
  const double decode_s = r.decode_ms / 1000.0;
  json stats = {
      {"queue_ms", RoundMs(r.queue_ms)},
      {"prefill_ms", RoundMs(r.prefill_ms)},
      {"ttft_ms", RoundMs(r.ttft_ms)},
      {"decode_ms", RoundMs(r.decode_ms)},
      {"e2e_ms", RoundMs(r.e2e_ms)},
      {"decode_tok_s", decode_s > 0 && r.completion_tokens > 1
                           ? RoundMs((r.completion_tokens - 1) / decode_s)
                           : 0.0},
      {"tokens_before", r.tokens_before},
      {"tokens_kept", r.tokens_kept},
      {"kv_bytes", r.kv_bytes},
      {"kv_bytes_full", r.kv_bytes_full},
      {"stages", stages},
      {"catalog_generation", r.catalog_generation},
  };
  json header = {{"type", "final"},
                 {"id", id},
                 {"pipeline", pipeline},
                 {"text", r.text},
                 {"finish_reason", r.finish_reason},
                 {"usage",
                  {{"prompt_tokens", r.prompt_tokens},
                   {"cached_tokens", r.cached_tokens},
                   {"completion_tokens", r.completion_tokens},
                   {"total_tokens", r.prompt_tokens + r.completion_tokens}}},
                 {"stats", stats}};
  if (!r.kept.is_null()) header["kept"] = r.kept;
  return header;
}

json ErrorHeader(const json& id, const Status& status, const json& details,
                 int64_t retry_after_ms) {
  json h = {{"type", "error"},
            {"id", id},
            {"code", WireCode(status.code())},
            {"reason", status.reason()},
            {"message", status.message()},
            {"retryable", IsRetryable(status.code())}};
  if (retry_after_ms >= 0) h["retry_after_ms"] = retry_after_ms;
  if (details.is_object() && !details.empty()) h["details"] = details;
  return h;
}

json ErrorHeader(const ClientMessage& message, const Status& status, const json& details,
                 int64_t retry_after_ms) {
  return ErrorHeader(message.has_id ? json(message.id) : json(nullptr), status, details,
                     retry_after_ms);
}

Terminal Terminal::Final(std::string id, std::string pipeline, FinalReport report) {
  Terminal t;
  t.id = std::move(id);
  t.pipeline = std::move(pipeline);
  t.report = std::move(report);
  return t;
}

Terminal Terminal::Error(std::string id, Status status, json details) {
  Terminal t;
  t.id = std::move(id);
  t.status = std::move(status);
  t.details = std::move(details);
  return t;
}

json Terminal::Header() const {
  return report ? FinalHeader(id, pipeline, *report) : ErrorHeader(json(id), status, details);
}

std::string Serialize(const json& header) {
  return header.dump(-1, ' ', false, json::error_handler_t::replace);
}

Status ParseReply(const std::vector<std::string_view>& frames, json* header) {
  if (frames.size() < 2 || frames[0] != kMagic) {
    return Invalid("bad_magic", "reply does not start with \"SIFT/1\"");
  }
  std::string reason, why;
  JsonLimits limits;
  limits.max_bytes = size_t{1} << 30;  // replies can carry long texts; depth and NULs still checked
  limits.max_values = size_t{1} << 26;
  limits.max_containers = size_t{1} << 24;
  if (!ParseBoundedJson(frames[1], limits, header, &reason, &why) || !header->is_object()) {
    return Invalid("bad_json", "reply header is not a JSON object");
  }
  return Status::Ok();
}

bool IsTerminal(const json& header) {
  const std::string type = header.value("type", "");
  return type == "final" || type == "error";
}

}  // namespace sift::daemon
