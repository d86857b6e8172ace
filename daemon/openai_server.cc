#include "daemon/openai_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include "daemon/api_keys.h"
#include "daemon/listen_address.h"
#include "daemon/log.h"
#include "daemon/openai_request.h"
#include "daemon/openai_response.h"
#include "daemon/peer_log_limiter.h"

namespace sift::daemon {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;
using error_code = boost::system::error_code;

constexpr uint32_t kHeaderLimit = 16 * 1024;
constexpr size_t kMaxPendingWriteBytes = 8 << 20;  // a stream the client does not read
constexpr int kLingerMs = 1000;  // after a closing error response: drain unread input this long
constexpr int kHalfCloseProbeMs = 200;  // a non-streamed request whose client sent its FIN
constexpr char kServerName[] = "siftd";
constexpr char kDeadlineHeader[] = "X-Sift-Deadline-Ms";

Status BadOption(const std::string& message) {
  return Status(StatusCode::kInvalidArgument, "bad_openai_option", message);
}

Status ParseAddress(const std::string& text, tcp::endpoint* endpoint) {
  return ParseListenAddress(text, "--openai", "bad_openai_address", endpoint);
}

std::string RandomId(const char* prefix) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return id;
}

std::string_view Sv(beast::string_view s) { return {s.data(), s.size()}; }

// %XX escapes of a path segment (clients may send "sift%2Ffull").
std::string PercentDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Deliveries from the front end go through this gate, so none reaches a stopped server.
struct Hub {
  std::mutex mu;
  bool open = true;
};

}  // namespace

class OpenAiSession;

class OpenAiServerImpl {
 public:
  OpenAiServerImpl(OpenAiServerOptions options, FrontEnd& front_end, Backend& backend,
                   Metrics& metrics)
      : options_(std::move(options)),
        front_end_(front_end),
        backend_(backend),
        metrics_(metrics),
        hub_(std::make_shared<Hub>()),
        log_limiter_(&metrics),
        created_(UnixNow()),
        acceptor_(io_),
        accept_retry_(io_),
        work_(asio::make_work_guard(io_)) {
    metrics_.DeclareCounter("sift_openai_requests_total",
                            "OpenAI-compatible HTTP requests by endpoint and HTTP status "
                            "(499: the client went away first).");
    metrics_.DeclareGauge("sift_openai_connections", "Open connections on the OpenAI HTTP port.",
                          [this] { return static_cast<double>(connections_.load()); });
    metrics_.DeclareCounter("sift_openai_connections_refused_total",
                            "Connections refused with 503 at accept, by reason "
                            "(too_many_connections, too_many_connections_from_peer).");
  }
  ~OpenAiServerImpl() {
    Stop(0);
    metrics_.DeclareGauge("sift_openai_connections", "Detached (OpenAI port stopped).");
  }

  Status Start();
  void Stop(int grace_ms);
  std::string address() const { return address_; }

  // ---- used by sessions (on their strands) ----
  const OpenAiServerOptions& options() const { return options_; }
  const ApiKeys& keys() const { return keys_; }
  FrontEnd& front_end() { return front_end_; }
  Backend& backend() { return backend_; }
  const std::shared_ptr<Hub>& hub() const { return hub_; }
  int64_t created() const { return created_; }
  bool stopping() const { return stopping_.load(); }
  void Count(const char* endpoint, int status) {
    metrics_.Add("sift_openai_requests_total",
                 {{"endpoint", endpoint}, {"status", std::to_string(status)}});
  }
  void Register(const std::shared_ptr<OpenAiSession>& session);
  void Unregister(OpenAiSession* session);
  // A connection slot for a new connection from `ip`: "" when taken, else the refusal reason
  // (too_many_connections, too_many_connections_from_peer). ReleaseSlot gives it back.
  std::string TakeSlot(const std::string& ip);
  void ReleaseSlot(const std::string& ip);
  // Log lines a peer causes before it is authenticated: at most one per interval per peer.
  PeerLogLimiter& log_limiter() { return log_limiter_; }

 private:
  void Accept();
  // Posts fn(session) to every session's strand.
  template <typename Fn>
  void ForEachSession(Fn fn);
  bool WaitForConnections(int ms);

  // Declared before io_: sessions destroyed with the io_context's pending handlers still
  // unregister themselves here.
  OpenAiServerOptions options_;
  FrontEnd& front_end_;
  Backend& backend_;
  Metrics& metrics_;
  ApiKeys keys_;
  std::shared_ptr<Hub> hub_;
  PeerLogLimiter log_limiter_;
  std::string address_;
  const int64_t created_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> connections_{0};  // open sockets, refused ones included
  std::mutex slots_mu_;
  int slots_ = 0;                                  // connections holding a slot
  std::unordered_map<std::string, int> per_peer_;  // slots by client IP address
  std::mutex sessions_mu_;
  std::unordered_map<OpenAiSession*, std::weak_ptr<OpenAiSession>> sessions_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;

  friend class OpenAiSession;
};

// One connection: reads requests one after the other (keep-alive), runs at most one
// completion at a time, and writes its response (whole, or as a server-sent-event stream).
class OpenAiSession : public std::enable_shared_from_this<OpenAiSession> {
 public:
  // `ip` is the peer's address; `refusal` "" when the connection holds a slot, else why not.
  OpenAiSession(tcp::socket socket, OpenAiServerImpl& server, std::string ip, std::string refusal)
      : socket_(std::move(socket)),
        server_(server),
        read_timer_(socket_.get_executor()),
        write_timer_(socket_.get_executor()),
        probe_timer_(socket_.get_executor()),
        ip_(std::move(ip)),
        refusal_(std::move(refusal)) {
    error_code ec;
    socket_.set_option(tcp::no_delay(true), ec);
    const tcp::endpoint peer = socket_.remote_endpoint(ec);
    if (!ec) peer_ = peer.address().to_string() + ":" + std::to_string(peer.port());
  }
  ~OpenAiSession() {
    server_.Unregister(this);
    if (refusal_.empty()) server_.ReleaseSlot(ip_);
    server_.connections_.fetch_sub(1);
  }

  // The session's strand (every handler of this connection runs on it).
  asio::any_io_executor executor() { return socket_.get_executor(); }

  void Start() {
    server_.Register(shared_from_this());
    if (!refusal_.empty()) {
      close_after_response_ = true;
      const bool per_peer = refusal_ == "too_many_connections_from_peer";
      const int limit =
          per_peer ? server_.options().max_connections_per_peer : server_.options().max_connections;
      RespondError("other", HttpLevelError(503, refusal_,
                                           std::string("too many open connections") +
                                               (per_peer ? " from your address (" : " (") +
                                               std::to_string(limit) + "); retry later"));
      return;
    }
    ReadHeader();
  }

  // Server stop: an idle connection closes now, a busy one after its response (force: now).
  void Shutdown(bool force) {
    close_after_response_ = true;
    if (force || idle_) Close();
  }

  // A SIFT/1 reply header for this connection's request (from the front end).
  void OnReply(const json& header);

 private:
  struct Write {
    // kBytes: bytes as they go on the wire (stream pieces, already chunk-framed); consecutive
    // ones are sent with one write.
    enum Kind { kResponse, kStreamHeader, kBytes } kind = kBytes;
    std::shared_ptr<http::response<http::string_body>> response;
    std::shared_ptr<http::response<http::empty_body>> header;
    std::shared_ptr<http::response_serializer<http::empty_body>> serializer;
    std::string data;
    bool ends_response = false;
  };

  // ---- reading ----
  void ReadHeader();
  void OnHeader(const error_code& ec);
  void ReadBody();
  void OnBody(const error_code& ec);
  void Dispatch();
  void HandleModels(const std::string& path);
  void HandleCompletion(OpenAiEndpoint endpoint);
  void ArmReadTimer(int ms);
  // A request-level problem found while reading: answer it and close the connection.
  void RejectAndClose(int status, const std::string& code, const std::string& message);

  // ---- writing ----
  void RespondJson(int status, const json& body, int64_t retry_after_ms = -1);
  void RespondText(int status, std::string body);  // Prometheus text
  // One whole response; retry_after_ms >= 0 adds Retry-After and retry-after-ms.
  void Respond(int status, const char* content_type, std::string body, int64_t retry_after_ms);
  void RespondError(const char* endpoint, const OpenAiError& error);
  void StartStream();
  void StreamData(std::string data);
  void EndStream();
  void Queue(Write write);
  void DoWrite();
  void OnWrite(const error_code& ec);
  void ResponseDone();
  template <typename Body>
  void SetCommonHeaders(http::response<Body>& response);

  // ---- connection ----
  void Watch();
  void OnWatch(const error_code& ec);
  void OnHalfClose();
  void Probe();
  void ClientGone(const char* why);
  void GracefulClose();
  void Close();

  tcp::socket socket_;
  OpenAiServerImpl& server_;
  asio::steady_timer read_timer_;
  asio::steady_timer write_timer_;
  asio::steady_timer probe_timer_;
  const std::string ip_;       // the peer's address (its slot, its log limit)
  const std::string refusal_;  // "": holds a slot; else the 503's reason
  std::string peer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  uint64_t read_generation_ = 0;
  uint64_t write_generation_ = 0;
  bool idle_ = true;  // waiting for a request's first bytes (or between requests)
  bool closed_ = false;
  bool close_after_response_ = false;
  bool keep_alive_ = true;
  unsigned version_ = 11;
  const char* endpoint_ = "other";  // metrics label of the current request

  // The current completion.
  std::string request_id_;
  bool in_flight_ = false;  // submitted, no terminal reply yet
  uint64_t handle_ = 0;
  std::shared_ptr<OpenAiSession> hold_;  // keeps the session alive while in flight
  OpenAiReply reply_;
  bool stream_ = false;
  bool stream_started_ = false;
  bool role_sent_ = false;
  bool watching_ = false;
  bool read_after_watch_ = false;
  bool half_closed_ = false;  // the client sent its FIN after the request
  bool probe_sent_ = false;   // the one urgent byte of a half-closed connection

  std::deque<Write> writes_;
  size_t pending_bytes_ = 0;
  bool writing_ = false;
  std::array<char, 512> scratch_{};
};

namespace {

// The front end's view of one submitted completion.
class SessionClient final : public ExternalClient {
 public:
  SessionClient(const std::shared_ptr<OpenAiSession>& session, std::shared_ptr<Hub> hub)
      : session_(session), executor_(session->executor()), hub_(std::move(hub)) {}
  void Deliver(const json& header) override {
    std::lock_guard<std::mutex> lock(hub_->mu);
    if (!hub_->open) return;
    asio::post(executor_, [session = session_, header]() {
      if (auto s = session.lock()) s->OnReply(header);
    });
  }

 private:
  std::weak_ptr<OpenAiSession> session_;
  asio::any_io_executor executor_;
  std::shared_ptr<Hub> hub_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Reading

void OpenAiSession::ArmReadTimer(int ms) {
  const uint64_t generation = ++read_generation_;
  read_timer_.expires_after(std::chrono::milliseconds(ms));
  read_timer_.async_wait([self = shared_from_this(), generation](const error_code& ec) {
    if (ec || generation != self->read_generation_ || self->closed_) return;
    LogDebug("openai_read_timeout", {{"peer", self->peer_}});
    self->ClientGone("read_timeout");
    self->Close();
  });
}

void OpenAiSession::ReadHeader() {
  if (closed_) return;
  if (close_after_response_ || server_.stopping()) {
    GracefulClose();
    return;
  }
  idle_ = true;
  endpoint_ = "other";
  request_id_.clear();
  buffer_.shrink_to_fit();  // a large body's buffer is not kept by an idle connection
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(static_cast<uint64_t>(server_.options().max_body_bytes));
  // The short limit: a connection that sends nothing (or only a slow header, or no valid API
  // key) gives its slot back after idle_timeout_ms, not after the request timeout.
  ArmReadTimer(server_.options().idle_timeout_ms);
  http::async_read_header(
      socket_, buffer_, *parser_,
      [self = shared_from_this()](const error_code& ec, size_t) { self->OnHeader(ec); });
}

void OpenAiSession::OnHeader(const error_code& ec) {
  if (closed_) return;
  idle_ = false;
  if (ec) {
    ++read_generation_;
    read_timer_.cancel();
    if (ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset) {
      Close();
    } else if (ec == http::error::header_limit) {
      RejectAndClose(431, "header_too_large",
                     "the request header exceeds " + std::to_string(kHeaderLimit) + " bytes");
    } else if (ec == http::error::body_limit) {  // Content-Length over the limit
      RejectAndClose(413, "request_too_large",
                     "the request body exceeds " +
                         std::to_string(server_.options().max_body_bytes) + " bytes");
    } else {
      RejectAndClose(400, "bad_http", "malformed HTTP request: " + ec.message());
    }
    return;
  }
  const auto& request = parser_->get();
  const bool health = server_.options().health && Sv(request.target()) == "/health";
  if (!health && !server_.keys().empty() &&
      !server_.keys().Authorizes(Sv(request[http::field::authorization]))) {
    ++read_generation_;
    read_timer_.cancel();
    RejectAndClose(401, "invalid_api_key",
                   "missing or incorrect API key (send Authorization: Bearer <key>)");
    return;
  }
  const auto length = parser_->content_length();
  if (length && *length > static_cast<uint64_t>(server_.options().max_body_bytes)) {
    ++read_generation_;
    read_timer_.cancel();
    RejectAndClose(413, "request_too_large",
                   "the request body has " + std::to_string(*length) + " bytes; the limit is " +
                       std::to_string(server_.options().max_body_bytes));
    return;
  }
  if (parser_->is_done()) {
    ++read_generation_;
    read_timer_.cancel();
    Dispatch();
    return;
  }
  if (beast::iequals(request[http::field::expect], "100-continue")) {
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    asio::async_write(socket_, asio::buffer(kContinue),
                      [self = shared_from_this()](const error_code& wec, size_t) {
                        if (wec) {
                          self->Close();
                          return;
                        }
                        self->ReadBody();
                      });
    return;
  }
  ReadBody();
}

void OpenAiSession::ReadBody() {
  if (closed_) return;
  ArmReadTimer(server_.options().timeout_ms);
  http::async_read(socket_, buffer_, *parser_,
                   [self = shared_from_this()](const error_code& ec, size_t) { self->OnBody(ec); });
}

void OpenAiSession::OnBody(const error_code& ec) {
  if (closed_) return;
  ++read_generation_;
  read_timer_.cancel();
  if (ec == http::error::body_limit) {
    RejectAndClose(
        413, "request_too_large",
        "the request body exceeds " + std::to_string(server_.options().max_body_bytes) + " bytes");
  } else if (ec == asio::error::eof || ec == http::error::partial_message ||
             ec == asio::error::connection_reset || ec == asio::error::operation_aborted) {
    Close();
  } else if (ec) {
    RejectAndClose(400, "bad_http", "malformed HTTP request body: " + ec.message());
  } else {
    Dispatch();
  }
}

void OpenAiSession::RejectAndClose(int status, const std::string& code,
                                   const std::string& message) {
  // Before (or instead of) authentication: rate-limited per peer address.
  server_.log_limiter().Log(
      LogLevel::kWarn, "openai_bad_request", ip_,
      {{"connection", peer_}, {"status", status}, {"code", code}, {"message", message}});
  close_after_response_ = true;
  RespondError(endpoint_, HttpLevelError(status, code, message));
}

void OpenAiSession::Dispatch() {
  const auto& request = parser_->get();
  keep_alive_ = request.keep_alive();
  version_ = request.version();
  std::string path(Sv(request.target()));
  const size_t query = path.find('?');
  if (query != std::string::npos) path.resize(query);
  const http::verb method = request.method();
  auto allow = [&](http::verb verb, const char* allowed) {
    if (method == verb) return true;
    RespondError(endpoint_, HttpLevelError(405, "method_not_allowed",
                                           std::string("use ") + allowed + " for " + path));
    return false;
  };
  if (path == "/v1/chat/completions") {
    endpoint_ = "chat";
    if (allow(http::verb::post, "POST")) HandleCompletion(OpenAiEndpoint::kChat);
  } else if (path == "/v1/completions") {
    endpoint_ = "completions";
    if (allow(http::verb::post, "POST")) HandleCompletion(OpenAiEndpoint::kCompletions);
  } else if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) {
    endpoint_ = "models";
    if (allow(http::verb::get, "GET")) HandleModels(path);
  } else if (path == "/metrics" && server_.options().metrics) {
    endpoint_ = "metrics";
    if (allow(http::verb::get, "GET")) RespondText(200, server_.options().metrics());
  } else if (path == "/health" && server_.options().health) {
    endpoint_ = "health";
    if (allow(http::verb::get, "GET")) {
      const auto [status, word] = server_.options().health();
      RespondJson(status, {{"status", word}});
    }
  } else {
    RespondError(endpoint_,
                 HttpLevelError(404, "not_found",
                                "no route " + path +
                                    "; this server offers POST /v1/chat/completions, POST "
                                    "/v1/completions, GET /v1/models, GET /health and GET "
                                    "/metrics"));
  }
}

void OpenAiSession::HandleModels(const std::string& path) {
  json models = ModelsBody(server_.backend().List(), server_.created());
  if (path == "/v1/models") {
    RespondJson(200, models);
    return;
  }
  const std::string id = PercentDecode(path.substr(std::string("/v1/models/").size()));
  for (const json& m : models["data"]) {
    if (m["id"] == id || "sift/" + m["id"].get<std::string>() == id) {
      RespondJson(200, m);
      return;
    }
  }
  RespondError(endpoint_, MakeError(Status(StatusCode::kNotFound, "unknown_pipeline",
                                           "The model '" + id + "' does not exist"),
                                    "model"));
}

void OpenAiSession::HandleCompletion(OpenAiEndpoint endpoint) {
  const auto received = Clock::now();
  const auto& request = parser_->get();
  request_id_ = RandomId(endpoint == OpenAiEndpoint::kChat ? "chatcmpl-" : "cmpl-");
  int64_t deadline_ms = 0;
  const auto header = request.find(kDeadlineHeader);
  if (header != request.end()) {
    const std::string text(Sv(header->value()));
    if (text.empty() || text.size() > 12 || text.find_first_not_of("0123456789") != text.npos ||
        std::stoll(text) <= 0) {
      RespondError(endpoint_,
                   MakeError(Status(StatusCode::kInvalidArgument, "bad_field",
                                    std::string(kDeadlineHeader) +
                                        ": expected a positive integer (milliseconds), got '" +
                                        text.substr(0, 40) + "'"),
                             kDeadlineHeader));
      return;
    }
    deadline_ms = std::stoll(text);
  }
  OpenAiRequest parsed;
  std::string param;
  const Status status =
      ParseOpenAiRequest(endpoint, request.body(), request_id_, deadline_ms, &parsed, &param);
  if (!status.ok()) {
    LogWarn("openai_bad_request", {{"peer", peer_},
                                   {"req", request_id_},
                                   {"status", 400},
                                   {"code", status.reason()},
                                   {"message", status.message()}});
    RespondError(endpoint_, MakeError(status, param));
    return;
  }
  reply_ = OpenAiReply{endpoint, request_id_, parsed.model, UnixNow(), parsed.include_usage};
  stream_ = parsed.stream;
  stream_started_ = false;
  role_sent_ = false;
  in_flight_ = true;
  hold_ = shared_from_this();
  parser_.reset();  // the body is not needed any more
  handle_ = server_.front_end().SubmitExternal(
      std::move(parsed.generate), received,
      std::make_shared<SessionClient>(shared_from_this(), server_.hub()));
  Watch();
}

// ---------------------------------------------------------------------------------------------
// Replies from the front end

void OpenAiSession::OnReply(const json& header) {
  if (!in_flight_ || closed_) return;
  const std::string type = header.value("type", "");
  if (type == "accepted") return;
  if (type == "heartbeat") {
    // Keeps proxies and clients from timing out a quiet stream; for a non-streamed request
    // there is nothing to say until the end.
    if (stream_) {
      StartStream();
      StreamData(std::string(kSseKeepAlive));
    }
    return;
  }
  if (type == "chunk") {
    if (!stream_) return;
    StartStream();
    StreamData(SseData(DeltaChunk(reply_, header.value("text", ""), !role_sent_)));
    role_sent_ = true;
    return;
  }
  if (type != "final" && type != "error") return;
  in_flight_ = false;
  hold_.reset();
  if (type == "final") {
    if (!stream_) {
      server_.Count(endpoint_, 200);
      RespondJson(200, CompletionBody(reply_, header));
      return;
    }
    StartStream();
    if (!role_sent_ && reply_.endpoint == OpenAiEndpoint::kChat) {
      StreamData(SseData(DeltaChunk(reply_, "", true)));
    }
    StreamData(SseData(FinishChunk(reply_, header)));
    if (reply_.include_usage) StreamData(SseData(UsageChunk(reply_, header)));
    StreamData(std::string(kSseDone));
    EndStream();
    return;
  }
  const OpenAiError error = ErrorFromHeader(header);
  if (!stream_started_) {
    RespondError(endpoint_, error);
    return;
  }
  // The stream has begun (200 sent): the error travels as an event, then the stream ends.
  StreamData(SseData(error.body));
  StreamData(std::string(kSseDone));
  EndStream();
}

// ---------------------------------------------------------------------------------------------
// Writing

template <typename Body>
void OpenAiSession::SetCommonHeaders(http::response<Body>& response) {
  response.set(http::field::server, kServerName);
  if (!request_id_.empty()) response.set("x-request-id", request_id_);
  response.keep_alive(keep_alive_ && !close_after_response_ && !server_.stopping());
}

void OpenAiSession::RespondText(int status, std::string body) {
  Respond(status, "text/plain; version=0.0.4; charset=utf-8", std::move(body), -1);
}

void OpenAiSession::RespondJson(int status, const json& body, int64_t retry_after_ms) {
  Respond(status, "application/json",
          body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n", retry_after_ms);
}

void OpenAiSession::Respond(int status, const char* content_type, std::string body,
                            int64_t retry_after_ms) {
  auto response = std::make_shared<http::response<http::string_body>>();
  response->version(version_);
  response->result(static_cast<unsigned>(status));
  SetCommonHeaders(*response);
  response->set(http::field::content_type, content_type);
  if (retry_after_ms >= 0) {
    response->set(http::field::retry_after,
                  std::to_string(std::max<int64_t>(1, (retry_after_ms + 999) / 1000)));
    response->set("retry-after-ms", std::to_string(retry_after_ms));
  }
  response->body() = std::move(body);
  response->prepare_payload();
  Write write;
  write.kind = Write::kResponse;
  write.response = std::move(response);
  write.ends_response = true;
  Queue(std::move(write));
}

void OpenAiSession::RespondError(const char* endpoint, const OpenAiError& error) {
  server_.Count(endpoint, error.status);
  RespondJson(error.status, error.body, error.retry_after_ms);
}

void OpenAiSession::StartStream() {
  if (stream_started_) return;
  stream_started_ = true;
  server_.Count(endpoint_, 200);
  auto header = std::make_shared<http::response<http::empty_body>>();
  header->version(version_);
  header->result(http::status::ok);
  if (version_ < 11) close_after_response_ = true;  // no chunked encoding: the close ends it
  SetCommonHeaders(*header);
  header->set(http::field::content_type, "text/event-stream");
  header->set(http::field::cache_control, "no-cache");
  header->set("x-accel-buffering", "no");
  header->chunked(version_ >= 11);
  Write write;
  write.kind = Write::kStreamHeader;
  write.serializer = std::make_shared<http::response_serializer<http::empty_body>>(*header);
  write.header = std::move(header);
  Queue(std::move(write));
}

// HTTP/1.1: chunked transfer coding (HttpChunk); HTTP/1.0 streams are raw bytes ended by
// closing.
void OpenAiSession::StreamData(std::string data) {
  if (data.empty()) return;
  Write write;
  write.data = version_ >= 11 ? HttpChunk(data) : std::move(data);
  Queue(std::move(write));
}

void OpenAiSession::EndStream() {
  Write write;
  if (version_ >= 11) write.data = HttpLastChunk();
  write.ends_response = true;
  Queue(std::move(write));
}

void OpenAiSession::Queue(Write write) {
  if (closed_) return;
  pending_bytes_ += write.data.size();
  if (pending_bytes_ > kMaxPendingWriteBytes) {
    LogWarn("openai_not_reading", {{"peer", peer_}, {"req", request_id_}});
    ClientGone("not_reading");
    Close();
    return;
  }
  writes_.push_back(std::move(write));
  if (!writing_) DoWrite();
}

void OpenAiSession::DoWrite() {
  if (closed_ || writes_.empty()) {
    writing_ = false;
    return;
  }
  writing_ = true;
  const uint64_t generation = ++write_generation_;
  write_timer_.expires_after(std::chrono::milliseconds(server_.options().timeout_ms));
  write_timer_.async_wait([self = shared_from_this(), generation](const error_code& ec) {
    if (ec || generation != self->write_generation_ || self->closed_) return;
    LogInfo("openai_write_timeout", {{"peer", self->peer_}, {"req", self->request_id_}});
    self->ClientGone("not_reading");
    self->Close();
  });
  if (writes_.front().kind == Write::kBytes) {
    // Everything queued behind it goes with it (the final's finish, usage and [DONE] events).
    std::string merged;
    bool ends = false;
    while (!writes_.empty() && writes_.front().kind == Write::kBytes && !ends) {
      merged += writes_.front().data;
      ends = writes_.front().ends_response;
      writes_.pop_front();
    }
    Write combined;
    combined.data = std::move(merged);
    combined.ends_response = ends;
    writes_.push_front(std::move(combined));
  }
  Write& w = writes_.front();
  auto done = [self = shared_from_this()](const error_code& ec, size_t) { self->OnWrite(ec); };
  switch (w.kind) {
    case Write::kResponse:
      http::async_write(socket_, *w.response, std::move(done));
      break;
    case Write::kStreamHeader:
      http::async_write_header(socket_, *w.serializer, std::move(done));
      break;
    case Write::kBytes:
      asio::async_write(socket_, asio::buffer(w.data), std::move(done));
      break;
  }
}

void OpenAiSession::OnWrite(const error_code& ec) {
  ++write_generation_;
  write_timer_.cancel();
  if (closed_) return;
  if (ec) {
    ClientGone("disconnected");
    Close();
    return;
  }
  const bool ends = writes_.front().ends_response;
  pending_bytes_ -= writes_.front().data.size();
  writes_.pop_front();
  if (ends) ResponseDone();
  DoWrite();
}

void OpenAiSession::ResponseDone() {
  if (in_flight_) return;  // an error answered before submission never gets here in flight
  const bool keep = keep_alive_ && !close_after_response_ && !server_.stopping();
  if (!keep) {
    close_after_response_ = true;
    if (watching_) {
      read_after_watch_ = true;
      error_code ignored;
      socket_.cancel(ignored);
      return;
    }
    GracefulClose();
    return;
  }
  if (watching_) {
    // Stop watching for a disconnect; the next request is read when the wait has ended.
    read_after_watch_ = true;
    error_code ignored;
    socket_.cancel(ignored);
    return;
  }
  ReadHeader();
}

// ---------------------------------------------------------------------------------------------
// Connection

// While a completion runs nothing is read; a readable socket then means the client closed it
// (or sent its next request early: then the watch ends and the bytes wait for ReadHeader).
void OpenAiSession::Watch() {
  if (closed_ || watching_ || half_closed_) return;
  watching_ = true;
  socket_.async_wait(tcp::socket::wait_read,
                     [self = shared_from_this()](const error_code& ec) { self->OnWatch(ec); });
}

void OpenAiSession::OnWatch(const error_code& ec) {
  watching_ = false;
  if (closed_) return;
  if (ec == asio::error::operation_aborted) {
    if (read_after_watch_ && writes_.empty()) {
      read_after_watch_ = false;
      ReadHeader();
    }
    return;
  }
  if (!ec) {
    error_code aec;
    const size_t available = socket_.available(aec);
    if (!aec && available > 0) {
      if (read_after_watch_ && writes_.empty()) {
        read_after_watch_ = false;
        ReadHeader();
      }
      return;  // pipelined bytes: read after this response
    }
    int error = 0;
    socklen_t length = sizeof(error);
    if (!aec && ::getsockopt(socket_.native_handle(), SOL_SOCKET, SO_ERROR, &error, &length) == 0 &&
        error == 0) {
      OnHalfClose();  // end of input, no error: a FIN
      return;
    }
  }
  ClientGone("disconnected");
  Close();
}

// The client sent its FIN after a complete request: a half-close (answered, then the
// connection closes) or a close (nobody to answer). Nothing more is read; a write tells them
// apart (a closed socket answers data with a reset), so a request whose response has not begun
// is probed.
void OpenAiSession::OnHalfClose() {
  half_closed_ = true;
  close_after_response_ = true;
  LogDebug("openai_half_close", {{"peer", peer_}, {"req", request_id_}});
  if (read_after_watch_) {  // the response was already written
    read_after_watch_ = false;
    if (writes_.empty()) GracefulClose();
    return;
  }
  Probe();
}

// One urgent byte (MSG_OOB), once: a reader that has not asked for urgent data inline never
// sees it (a second one could turn the first into ordinary data, so there is no second); a
// socket its client closed answers it with a reset. Then every kHalfCloseProbeMs, while the
// request runs and nothing has been written, the socket is checked for that reset.
void OpenAiSession::Probe() {
  if (closed_ || !in_flight_ || stream_started_ || writing_) return;
  const int fd = socket_.native_handle();
  bool gone = false;
  if (!probe_sent_) {
    probe_sent_ = true;
    const char byte = 0;
    gone = ::send(fd, &byte, 1, MSG_OOB | MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN &&
           errno != EWOULDBLOCK;
  } else {
    int error = 0;
    socklen_t length = sizeof(error);
    tcp_info info{};
    socklen_t info_length = sizeof(info);
    gone = (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error != 0) ||
           (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &info_length) == 0 &&
            info.tcpi_state == TCP_CLOSE);
  }
  if (gone) {
    ClientGone("disconnected");
    Close();
    return;
  }
  probe_timer_.expires_after(std::chrono::milliseconds(kHalfCloseProbeMs));
  probe_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
    if (!ec) self->Probe();
  });
}

void OpenAiSession::ClientGone(const char* why) {
  if (!in_flight_) return;
  in_flight_ = false;
  hold_.reset();
  if (!stream_started_) server_.Count(endpoint_, 499);  // a started stream counted its 200
  LogInfo("openai_client_gone", {{"peer", peer_}, {"req", request_id_}, {"cause", why}});
  server_.front_end().ExternalGone(handle_);
}

void OpenAiSession::GracefulClose() {
  if (closed_) return;
  // Half-close, then read (and drop) what the client still sends for a moment, so that unread
  // input does not turn the close into a reset that loses the response.
  idle_ = false;
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  ArmReadTimer(kLingerMs);
  struct Drain {
    std::shared_ptr<OpenAiSession> self;
    void operator()(const error_code& ec, size_t) {
      if (ec || self->closed_) {
        self->Close();
        return;
      }
      self->socket_.async_read_some(asio::buffer(self->scratch_), std::move(*this));
    }
  };
  socket_.async_read_some(asio::buffer(scratch_), Drain{shared_from_this()});
}

void OpenAiSession::Close() {
  if (closed_) return;
  ClientGone("closed");
  closed_ = true;
  hold_.reset();
  ++read_generation_;
  ++write_generation_;
  error_code ignored;
  read_timer_.cancel();
  write_timer_.cancel();
  probe_timer_.cancel();
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  // writes_ stays: a cancelled write may still refer to its buffers until its handler runs.
}

// ---------------------------------------------------------------------------------------------
// Server

void OpenAiServerImpl::Register(const std::shared_ptr<OpenAiSession>& session) {
  std::lock_guard<std::mutex> lock(sessions_mu_);
  sessions_[session.get()] = session;
}

void OpenAiServerImpl::Unregister(OpenAiSession* session) {
  std::lock_guard<std::mutex> lock(sessions_mu_);
  sessions_.erase(session);
}

std::string OpenAiServerImpl::TakeSlot(const std::string& ip) {
  std::lock_guard<std::mutex> lock(slots_mu_);
  if (slots_ >= options_.max_connections) return "too_many_connections";
  int& mine = per_peer_[ip];
  if (mine >= options_.max_connections_per_peer) return "too_many_connections_from_peer";
  ++mine;
  ++slots_;
  return "";
}

void OpenAiServerImpl::ReleaseSlot(const std::string& ip) {
  std::lock_guard<std::mutex> lock(slots_mu_);
  --slots_;
  auto it = per_peer_.find(ip);
  if (it != per_peer_.end() && --it->second <= 0) per_peer_.erase(it);
}

template <typename Fn>
void OpenAiServerImpl::ForEachSession(Fn fn) {
  std::vector<std::shared_ptr<OpenAiSession>> all;
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    for (auto& [raw, weak] : sessions_) {
      if (auto s = weak.lock()) all.push_back(std::move(s));
    }
  }
  for (auto& s : all) asio::post(s->executor(), [s, fn] { fn(*s); });
}

Status OpenAiServerImpl::Start() {
  SIFT_RETURN_IF_ERROR(OpenAiServer::CheckOptions(options_));
  if (!options_.api_keys_file.empty()) SIFT_RETURN_IF_ERROR(keys_.Load(options_.api_keys_file));
  tcp::endpoint endpoint;
  SIFT_RETURN_IF_ERROR(ParseAddress(options_.address, &endpoint));
  error_code ec;
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status(StatusCode::kUnavailable, "openai_bind_failed",
                  "cannot listen on " + options_.address + ": " + ec.message());
  }
  const tcp::endpoint bound = acceptor_.local_endpoint(ec);
  const std::string host = bound.address().is_v6() ? "[" + bound.address().to_string() + "]"
                                                   : bound.address().to_string();
  address_ = host + ":" + std::to_string(bound.port());
  Accept();
  thread_ = std::thread([this] {
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        LogError("openai_handler_failed", {{"error", e.what()}});
      }
    }
  });
  LogInfo("openai_listening", {{"address", address_}, {"api_keys", keys_.size()}});
  return Status::Ok();
}

void OpenAiServerImpl::Accept() {
  acceptor_.async_accept(asio::make_strand(io_), [this](const error_code& ec, tcp::socket socket) {
    if (!acceptor_.is_open()) return;
    if (ec) {
      // Out of file descriptors and the like: try again shortly instead of spinning.
      LogWarn("openai_accept_failed", {{"error", ec.message()}});
      accept_retry_.expires_after(std::chrono::milliseconds(100));
      accept_retry_.async_wait([this](const error_code& wec) {
        if (!wec) Accept();
      });
      return;
    }
    connections_.fetch_add(1);
    error_code pec;
    const tcp::endpoint peer = socket.remote_endpoint(pec);
    const std::string ip = pec ? std::string("?") : peer.address().to_string();
    std::string refusal = TakeSlot(ip);
    if (!refusal.empty()) {
      metrics_.Add("sift_openai_connections_refused_total", {{"reason", refusal}});
      log_limiter_.Log(LogLevel::kWarn, "openai_connection_refused", ip, {{"reason", refusal}});
    }
    std::make_shared<OpenAiSession>(std::move(socket), *this, ip, std::move(refusal))->Start();
    Accept();
  });
}

bool OpenAiServerImpl::WaitForConnections(int ms) {
  const auto end = Clock::now() + std::chrono::milliseconds(ms);
  while (connections_.load() > 0) {
    if (Clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void OpenAiServerImpl::Stop(int grace_ms) {
  if (!thread_.joinable()) return;
  stopping_.store(true);
  asio::post(io_, [this] {
    error_code ignored;
    acceptor_.close(ignored);
    accept_retry_.cancel();
  });
  ForEachSession([](OpenAiSession& s) { s.Shutdown(false); });
  WaitForConnections(grace_ms);
  {
    std::lock_guard<std::mutex> lock(hub_->mu);
    hub_->open = false;
  }
  ForEachSession([](OpenAiSession& s) { s.Shutdown(true); });
  WaitForConnections(1000);
  work_.reset();
  io_.stop();
  thread_.join();
  LogInfo("openai_stopped", {{"open_connections", connections_.load()}});
}

// ---------------------------------------------------------------------------------------------

OpenAiServer::OpenAiServer(OpenAiServerOptions options, FrontEnd& front_end, Backend& backend,
                           Metrics& metrics)
    : impl_(std::make_unique<OpenAiServerImpl>(std::move(options), front_end, backend, metrics)) {}

OpenAiServer::~OpenAiServer() = default;

Status OpenAiServer::CheckOptions(const OpenAiServerOptions& options) {
  tcp::endpoint endpoint;
  SIFT_RETURN_IF_ERROR(ParseAddress(options.address, &endpoint));
  if (!endpoint.address().is_loopback() && options.api_keys_file.empty()) {
    return Status(StatusCode::kFailedPrecondition, "insecure_bind",
                  "refusing to serve the OpenAI API on " + options.address +
                      ": a non-loopback address needs API keys (--openai-api-keys FILE; see "
                      "docs/openai.md)");
  }
  if (!options.api_keys_file.empty()) {
    ApiKeys keys;
    SIFT_RETURN_IF_ERROR(keys.Load(options.api_keys_file));
  }
  if (options.max_body_bytes < 1024) {
    return BadOption("--openai-max-body-bytes must be at least 1024");
  }
  if (options.max_connections < 1) return BadOption("--openai-max-connections must be >= 1");
  if (options.max_connections_per_peer < 1) {
    return BadOption("--openai-max-connections-per-peer must be >= 1");
  }
  if (options.timeout_ms < 100) return BadOption("--openai-timeout-ms must be >= 100");
  if (options.idle_timeout_ms < 100) return BadOption("--openai-idle-timeout-ms must be >= 100");
  return Status::Ok();
}

Status OpenAiServer::Start() { return impl_->Start(); }
std::string OpenAiServer::address() const { return impl_->address(); }
void OpenAiServer::Stop(int grace_ms) { impl_->Stop(grace_ms); }

}  // namespace sift::daemon
