// The siftd client protocol "SIFT/1": frames, message schemas, error codes (docs/protocol.md).
//
// Every message, in both directions, is a multipart ZeroMQ message
//   [magic "SIFT/1"] [header: UTF-8 JSON object] [binary frame 0] [binary frame 1] ...
// sent by a DEALER client to the daemon's ROUTER (which adds and strips the routing id).
// Client messages: generate, cancel, ping, list. Replies: accepted, chunk, heartbeat, final,
// error (a generate ends with exactly one final or error), pong, listing.
//
// This file parses client messages into plain structs (checking every field's type and range)
// and builds reply headers. It knows nothing about sockets, models or threads, so the daemon,
// the command-line client and the tests share it.
//
// THREADING: pure functions and value types.
// ERRORS:    parsing returns a Status (INVALID_ARGUMENT with a reason slug) and never throws.
#ifndef SIFT_DAEMON_PROTOCOL_H_
#define SIFT_DAEMON_PROTOCOL_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/json_limits.h"
#include "sift/status.h"

namespace sift::daemon {

inline constexpr std::string_view kMagic = "SIFT/1";
inline constexpr size_t kMaxIdBytes = 256;
inline constexpr size_t kMaxStopStrings = 16;
// The smallest positive sampling temperature (0 = greedy). Below it logits / temperature
// overflows float and sampling degenerates; such values are refused, not rounded.
inline constexpr double kMinTemperature = 1e-3;
// The smallest top_p the sampler is given. A positive top_p below it (down to ~7e-46, which
// rounds to 0 in float and would keep no token at all) is raised to it: the nucleus always
// holds the most probable token, whose probability is at least 1 / vocabulary size (> 1e-9
// for any vocabulary the protocol allows), so every top_p in (0, 1e-9] keeps exactly that token.
inline constexpr double kMinTopP = 1e-9;
// How much of an unparsed header is scanned for its "id" (to echo it in an error).
inline constexpr size_t kIdScanBytes = 64 << 10;

// Wire names of status codes: "CANCELLED", "INVALID_ARGUMENT", ...
const char* WireCode(StatusCode code);
// Whether a client may retry the same request later (RESOURCE_EXHAUSTED, UNAVAILABLE).
bool IsRetryable(StatusCode code);

enum class MessageType { kGenerate, kCancel, kPing, kList };
const char* MessageTypeName(MessageType type);

// How a generate message gives its input (exactly one per request).
enum class InputKind {
  kContextQuestion,  // "context" + "question": chat-templated; the question is its own span
  kMessages,         // "messages": chat-templated; the last message is the question
  kPrompt,           // "prompt": raw text, no template; the last question_tokens are the question
  kTokens,           // "tokens": raw token ids (JSON array or a binary int32 frame)
};
const char* InputKindName(InputKind kind);

struct ChatTurn {
  std::string role;
  std::string content;
};

struct GenerateRequest {
  std::string id;
  std::string pipeline;
  InputKind input = InputKind::kPrompt;
  std::string context, question, system;  // kContextQuestion ("system" optional)
  std::vector<ChatTurn> messages;         // kMessages
  std::string prompt;                     // kPrompt
  std::vector<int32_t> tokens;            // kTokens
  int64_t question_tokens = -1;           // kPrompt/kTokens question span; -1 = daemon default
  // Sampling and limits.
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
  int64_t max_tokens = 128;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  // Per-request stage parameter overrides: {"<stage label or plugin>": {"key": value}}.
  nlohmann::json params = nlohmann::json::object();
  bool stream = true;
  int64_t deadline_ms = 0;   // relative to arrival at the daemon; 0 = none
  bool return_kept = false;  // the final carries `kept` (kept_report.h)
};

struct ClientMessage {
  MessageType type = MessageType::kPing;
  std::string id;  // generate/cancel: required; ping/list: optional, echoed
  bool has_id = false;
  nlohmann::json nonce;  // ping: echoed
  GenerateRequest generate;
};

// Parses the frames of one client message (routing id already removed). The header is parsed
// within `limits` (json_limits.h: size, NUL bytes, depth, value counts checked while parsing).
// On failure `out->id` / `out->has_id` are still set when the header carried a usable id, so
// the error can echo it. Reasons: bad_frames, bad_magic, unsupported_version, bad_json,
// header_too_large, too_deep, too_many_values, bad_header, unknown_type, missing_field,
// bad_field, bad_input.
Status ParseClientMessage(const std::vector<std::string_view>& frames, ClientMessage* out,
                          const JsonLimits& limits = {});

// The top-level string "id" of a header frame, found by a streaming scan of its first
// kIdScanBytes that builds no document (for answering a message that is rejected unparsed,
// e.g. because it is too large). Returns false if there is none.
bool ExtractId(std::string_view header, std::string* id);

// ---- replies (headers; callers add the magic frame) ----

struct StageReport {
  std::string stage;   // label in the pipeline
  std::string plugin;  // name@version
  std::string kind;    // prefill, filter, select, reuse, decode
  double ms = 0;
};

// Everything a `final` carries besides the text.
struct FinalReport {
  std::string text;
  std::string finish_reason;  // stop, length, context_full, cancelled
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache
  int64_t tokens_before = 0;  // prompt tokens entering the pipeline
  int64_t tokens_kept = 0;    // KV entries kept per layer and head (mean) after compression
  int64_t kv_bytes = 0;
  int64_t kv_bytes_full = 0;
  double queue_ms = 0, prefill_ms = 0, ttft_ms = 0, decode_ms = 0, e2e_ms = 0;
  std::vector<StageReport> stages;
  uint64_t catalog_generation = 0;
  nlohmann::json kept;  // KeptReport when the request asked for it (return_kept); null: omitted
};

// Milliseconds to 3 decimals, as replies and the request_done log line carry them.
double RoundMs(double ms);

nlohmann::json AcceptedHeader(const std::string& id, const std::string& pipeline,
                              int64_t queue_position);
nlohmann::json ChunkHeader(const std::string& id, int64_t seq, const std::string& text,
                           const std::vector<int32_t>& token_ids);
// state: "queued" or "running"; progress may be null.
nlohmann::json HeartbeatHeader(const std::string& id, const std::string& state, double elapsed_ms,
                               const nlohmann::json& progress);
nlohmann::json FinalHeader(const std::string& id, const std::string& pipeline,
                           const FinalReport& report);
// `id` null when the message had no usable id. retry_after_ms < 0: omitted.
nlohmann::json ErrorHeader(const nlohmann::json& id, const Status& status,
                           const nlohmann::json& details = nullptr, int64_t retry_after_ms = -1);
nlohmann::json ErrorHeader(const ClientMessage& message, const Status& status,
                           const nlohmann::json& details = nullptr, int64_t retry_after_ms = -1);

// A request's last message, typed from the worker to the wire: a `final` (report set) or an
// `error` (status). The front end records metrics and the request_done line from these fields
// and serialises Header() once; nothing parses the JSON back.
struct Terminal {
  std::string id;
  std::string pipeline;
  std::optional<FinalReport> report;  // set: a `final`
  Status status;                      // otherwise: the error
  nlohmann::json details;             // the error's details (null: none)

  static Terminal Final(std::string id, std::string pipeline, FinalReport report);
  static Terminal Error(std::string id, Status status, nlohmann::json details = nullptr);
  bool ok() const { return report.has_value(); }
  nlohmann::json Header() const;  // FinalHeader or ErrorHeader
};

// JSON text of a header; invalid UTF-8 (e.g. a partial character) becomes U+FFFD.
std::string Serialize(const nlohmann::json& header);

// ---- client side helpers (the sift CLI, tests) ----

// Parses a reply's frames (magic, header, ...) into its header; bad_magic / bad_json on failure.
Status ParseReply(const std::vector<std::string_view>& frames, nlohmann::json* header);
// True for `final` and `error` replies that end a generate.
bool IsTerminal(const nlohmann::json& header);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_PROTOCOL_H_
