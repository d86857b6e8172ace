#include "daemon/front_end.h"

#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <zmq_addon.hpp>

#include "daemon/log.h"

namespace sift::daemon {
namespace {

constexpr int kHandshakeMs = 5000;

using json = nlohmann::json;

constexpr int kHousekeepingMs = 20;
constexpr int kMaxFrames = 64;
constexpr int kRecvBatch = 256;
constexpr int kDrainGraceMs = 5000;  // after drain_timeout_ms, for cancelled work to report
constexpr int kSummaryMs = 10000;    // a "summary" log line this often, when there was traffic
// Messages at least this large make the I/O thread return freed memory to the system
// (malloc_trim) soon after, at most once per kTrimIntervalMs.
constexpr size_t kTrimThresholdBytes = size_t{1} << 20;
constexpr int kTrimIntervalMs = 200;
// Routing ids of closed connections remembered (to refuse them when presented again). Older
// ones are forgotten: their requests were cancelled when they closed, so nothing is left to
// take, and a connection presenting one is then served as a new client.
constexpr size_t kMaxRetiredIds = 65536;

std::string Hex(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

FrontEnd::FrontEnd(FrontEndOptions options, Backend& backend, Metrics& metrics)
    : options_(std::move(options)),
      backend_(backend),
      metrics_(metrics),
      scheduler_(backend, *this, options_.workers, options_.queue_size),
      context_(1) {
  metrics_.DeclareCounter("sift_requests_total",
                          "Generate requests by pipeline and outcome (ok or an error code).");
  metrics_.DeclareCounter("sift_auth_denied_total",
                          "CURVE handshakes refused (unknown client key or no CURVE).");
  metrics_.DeclareHistogram("sift_request_ttft_seconds",
                            "Time from arrival to the first generated token.",
                            Metrics::LatencyBuckets());
  metrics_.DeclareHistogram("sift_request_e2e_seconds",
                            "Time from arrival to the final message (successful requests).",
                            Metrics::LatencyBuckets());
  metrics_.DeclareHistogram("sift_request_queue_seconds",
                            "Time a request waited in the admission queue.",
                            Metrics::LatencyBuckets());
  metrics_.DeclareHistogram("sift_stage_seconds", "Time spent in one pipeline stage.",
                            Metrics::LatencyBuckets());
  metrics_.DeclareCounter("sift_prompt_tokens_total", "Prompt tokens of successful requests.");
  metrics_.DeclareCounter("sift_generated_tokens_total", "Generated tokens.");
  metrics_.DeclareCounter("sift_tokens_before_total",
                          "Prompt tokens entering the pipelines' compression stages.");
  metrics_.DeclareCounter("sift_tokens_kept_total",
                          "KV entries kept (per layer and head, mean) after compression.");
  metrics_.DeclareCounter("sift_admission_rejections_total",
                          "Generate requests refused before admission, by reason.");
  metrics_.DeclareCounter("sift_protocol_errors_total", "Malformed client messages, by reason.");
  metrics_.DeclareCounter("sift_messages_total", "Client messages received, by type.");
  metrics_.DeclareCounter("sift_clients_gone_total",
                          "Clients that went away with requests in flight, by cause.");
  metrics_.DeclareGauge("sift_queue_depth", "Requests waiting in the admission queue.",
                        [this] { return static_cast<double>(scheduler_.queued()); });
  metrics_.DeclareGauge("sift_queue_capacity", "Size of the admission queue.",
                        [this] { return static_cast<double>(scheduler_.capacity()); });
  metrics_.DeclareGauge("sift_requests_running", "Requests a worker is running.",
                        [this] { return static_cast<double>(scheduler_.running()); });
  metrics_.DeclareGauge("sift_requests_live", "Admitted requests without a terminal message.",
                        [this] { return static_cast<double>(live_count_.load()); });
  metrics_.DeclareGauge("sift_draining", "1 while the daemon drains for shutdown.",
                        [this] { return draining_.load() ? 1.0 : 0.0; });
}

FrontEnd::~FrontEnd() {
  BeginDrain();
  DrainNow();
  Wait();
  // Detach the scrape-time callbacks that read this object.
  for (const char* name : {"sift_queue_depth", "sift_queue_capacity", "sift_requests_running",
                           "sift_requests_live", "sift_draining"}) {
    metrics_.DeclareGauge(name, "Detached (front end stopped).");
  }
  if (monitor_) monitor_.close();
  if (router_) router_.close();
  if (zap_) zap_.close();
  // ZeroMQ leaves the socket files of ipc:// endpoints behind; remove the ones this front end
  // created (unless something else has been bound at that path since).
  for (const IpcFile& f : ipc_files_) {
    struct stat now;
    if (::lstat(f.path.c_str(), &now) == 0 && now.st_dev == f.dev && now.st_ino == f.ino) {
      ::unlink(f.path.c_str());
    }
  }
  for (int fd : wake_pipe_) {
    if (fd >= 0) ::close(fd);
  }
}

Status FrontEnd::Start() {
  if (::pipe2(wake_pipe_, O_NONBLOCK | O_CLOEXEC) != 0) {
    return Status(StatusCode::kInternal, "pipe", "cannot create the wake-up pipe");
  }
  for (const std::string& endpoint : options_.endpoints) {
    if (!IsLoopbackEndpoint(endpoint) && !options_.curve.enabled) {
      return Status(StatusCode::kFailedPrecondition, "insecure_bind",
                    "refusing to bind " + endpoint +
                        ": non-loopback endpoints need CURVE keys (--curve-secret-key and "
                        "--curve-client-keys; see docs/operations.md)");
    }
  }
  try {
    if (options_.curve.enabled) {
      // The ZAP handler must exist before the first CURVE handshake.
      zap_ = zmq::socket_t(context_, zmq::socket_type::rep);
      zap_.set(zmq::sockopt::linger, 0);
      zap_.bind("inproc://zeromq.zap.01");
    }
    router_ = zmq::socket_t(context_, zmq::socket_type::router);
    router_.set(zmq::sockopt::router_mandatory, 1);
    // Closed connections, by file descriptor (see "Connection identity" in the header).
    static std::atomic<int> monitors{0};
    const std::string monitor_endpoint =
        "inproc://siftd-front-monitor-" + std::to_string(monitors++);
    if (zmq_socket_monitor(router_.handle(), monitor_endpoint.c_str(),
                           ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0) {
      throw zmq::error_t();
    }
    monitor_ = zmq::socket_t(context_, zmq::socket_type::pair);
    monitor_.set(zmq::sockopt::linger, 0);
    monitor_.connect(monitor_endpoint);
    router_.set(zmq::sockopt::sndhwm, options_.hwm);
    router_.set(zmq::sockopt::rcvhwm, options_.hwm);
    router_.set(zmq::sockopt::linger, options_.linger_ms);
    // A connection that has not completed its ZMTP (and CURVE) handshake within this is
    // dropped: an idle or unauthenticated peer cannot hold a socket for long.
    router_.set(zmq::sockopt::handshake_ivl, kHandshakeMs);
    // Hard cap per frame; messages between max_message_bytes and this get a clear error.
    router_.set(zmq::sockopt::maxmsgsize,
                std::max<int64_t>(options_.max_message_bytes * 4, options_.max_message_bytes));
    if (options_.zmq_heartbeat_ms > 0) {
      router_.set(zmq::sockopt::heartbeat_ivl, options_.zmq_heartbeat_ms);
      router_.set(zmq::sockopt::heartbeat_timeout, options_.zmq_heartbeat_ms * 3);
      router_.set(zmq::sockopt::heartbeat_ttl, options_.zmq_heartbeat_ms * 3);
    }
    if (options_.curve.enabled) {
      router_.set(zmq::sockopt::curve_server, 1);
      router_.set(zmq::sockopt::curve_secretkey, options_.curve.server_secret);
      router_.set(zmq::sockopt::zap_domain, "sift");
    }
    for (const std::string& endpoint : options_.endpoints) {
      router_.bind(endpoint);
      bound_.push_back(router_.get(zmq::sockopt::last_endpoint));
      struct stat st;
      const std::string& path = bound_.back();
      if (path.rfind("ipc://", 0) == 0 && path.size() > 6 && path[6] != '@' &&
          ::lstat(path.c_str() + 6, &st) == 0) {
        ipc_files_.push_back({path.substr(6), st.st_dev, st.st_ino});
      }
    }
  } catch (const zmq::error_t& e) {
    return Status(
        StatusCode::kUnavailable, "bind_failed",
        "cannot bind " +
            (bound_.size() < options_.endpoints.size() ? options_.endpoints[bound_.size()]
                                                       : std::string("the client socket")) +
            ": " + e.what());
  }
  scheduler_.Start();
  io_thread_ = std::thread([this] { IoLoop(); });
  return Status::Ok();
}

void FrontEnd::BeginDrain() {
  if (!draining_.exchange(true)) Wake();
}

void FrontEnd::DrainNow() {
  drain_now_.store(true);
  BeginDrain();
  Wake();
}

void FrontEnd::Wait() {
  if (io_thread_.joinable()) io_thread_.join();
}

void FrontEnd::Wake() {
  if (wake_pipe_[1] < 0) return;
  const char byte = 1;
  ssize_t ignored = ::write(wake_pipe_[1], &byte, 1);  // EAGAIN: already awake
  (void)ignored;
}

void FrontEnd::Push(OutItem item) {
  bool was_empty;
  {
    std::lock_guard<std::mutex> lock(out_mu_);
    was_empty = outbox_.empty();
    outbox_.push_back(std::move(item));
  }
  if (was_empty) Wake();
}

void FrontEnd::Send(const std::shared_ptr<LiveRequest>& request, json header) {
  if (request->terminal_sent.load()) return;
  Push({request, std::move(header), std::nullopt});
}

bool FrontEnd::SendTerminal(const std::shared_ptr<LiveRequest>& request, Terminal terminal) {
  if (request->terminal_sent.exchange(true)) return false;
  Push({request, json(), std::move(terminal)});
  return true;
}

// ---------------------------------------------------------------------------------------------
// I/O thread

void FrontEnd::IoLoop() {
  LogDebug("io_thread_started");
  auto next_housekeeping = Clock::now();
  for (;;) {
    std::vector<zmq::pollitem_t> items = {
        {router_.handle(), 0, ZMQ_POLLIN, 0},
        {nullptr, wake_pipe_[0], ZMQ_POLLIN, 0},
        {monitor_.handle(), 0, ZMQ_POLLIN, 0},
    };
    if (zap_) items.push_back({zap_.handle(), 0, ZMQ_POLLIN, 0});
    const int timeout_ms = backlog_.empty() ? kHousekeepingMs : 1;
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(timeout_ms));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) LogError("poll_failed", {{"error", e.what()}});
      continue;
    }
    if (items[1].revents & ZMQ_POLLIN) {
      char buf[256];
      while (::read(wake_pipe_[0], buf, sizeof(buf)) > 0) {
      }
    }
    PollConnectionEvents();
    ProcessOutbox();
    ProcessInbox();
    if (items[0].revents & ZMQ_POLLIN) {
      for (int i = 0; i < kRecvBatch; ++i) {
        std::vector<zmq::message_t> frames;
        std::optional<size_t> got;
        try {
          got = zmq::recv_multipart(router_, std::back_inserter(frames), zmq::recv_flags::dontwait);
        } catch (const zmq::error_t& e) {
          LogError("recv_failed", {{"error", e.what()}});
          break;
        }
        if (!got) break;
        try {
          HandleMessage(frames, Clock::now());
        } catch (const std::exception& e) {
          // A failing backend call (List, FindPipeline) must not take the I/O thread down.
          LogError("message_failed", {{"error", e.what()}});
          if (!frames.empty()) {
            Transmit(frames[0].to_string(),
                     ErrorHeader(nullptr, Status(StatusCode::kInternal, "internal", e.what())));
          }
        }
      }
    }
    if (zap_ && items.size() > 3 && (items[3].revents & ZMQ_POLLIN)) {
      if (ServeZapRequest(zap_, options_.curve, auth_log_)) {
        metrics_.Add("sift_auth_denied_total", {});
      }
    }
    FlushBacklogs();
    const auto now = Clock::now();
    if (now >= next_housekeeping || draining_.load()) {
      Housekeeping(now);
      next_housekeeping = now + std::chrono::milliseconds(kHousekeepingMs);
    }
    if (drain_started_ && DrainFinished()) break;
    if (drain_started_ && now >= drain_deadline_ + std::chrono::milliseconds(kDrainGraceMs)) {
      LogError("drain_gave_up", {{"live", live_.size()}, {"backlog_clients", backlog_.size()}});
      break;
    }
  }
  // Every worker is idle (or finishing a cancelled request): stop them, then deliver whatever
  // they produced last, then give up on anything still unsent.
  for (const auto& request : scheduler_.Stop()) {
    request->Cancel(CancelCause::kShutdown);
    TerminateFromIo(request, request->CancelStatus(), {{"stage", "queued"}});
  }
  ProcessOutbox();
  FlushBacklogs();
  CloseInbox();
  LogInfo("front_end_stopped", {{"undelivered_clients", backlog_.size()}});
  if (on_stopped_) on_stopped_();
}

bool FrontEnd::DrainFinished() const {
  if (!live_.empty() || !backlog_.empty()) return false;
  std::lock_guard<std::mutex> lock(out_mu_);
  return outbox_.empty();
}

void FrontEnd::ProcessOutbox() {
  std::deque<OutItem> items;
  {
    std::lock_guard<std::mutex> lock(out_mu_);
    items.swap(outbox_);
  }
  const auto now = Clock::now();
  for (OutItem& item : items) {
    LiveRequest& request = *item.request;
    if (item.terminal) {
      RecordTerminal(request, *item.terminal);
      item.header = item.terminal->Header();
      auto it = live_.find(request.key);
      if (it != live_.end() && it->second == item.request) EraseLive(request.key);
      if (request.message_bytes >= kTrimThresholdBytes) trim_pending_ = true;
    }
    if (request.cause() == CancelCause::kClientGone) continue;  // nobody to tell
    request.last_sent = now;
    Transmit(request.identity, item.header, &request);
  }
}

// The connection bookkeeping of a message's routing id (see "Connection identity" in the
// header); true when the client chose the id itself. ZeroMQ's own routing ids are 0x00 + 4
// bytes, never reused; any other id, or one that belonged to a connection that has closed or to
// another live connection, was chosen by the client.
bool FrontEnd::RoutingIdChosen(const std::string& identity, std::vector<zmq::message_t>& frames) {
  const int fd = frames.size() > 1 ? zmq_msg_get(frames[1].handle(), ZMQ_SRCFD) : -1;
  const char* declared = frames.size() > 1 ? zmq_msg_gets(frames[1].handle(), "Identity") : nullptr;
  PollConnectionEvents();
  bool chosen = (declared != nullptr && *declared != '\0') || identity.size() != 5 ||
                identity[0] != '\0' || retired_.count(identity) > 0;
  if (chosen || fd < 0) return chosen;
  auto known = peer_fd_.find(identity);
  if (known != peer_fd_.end() && known->second != fd) {
    // Its first connection must have closed (the event may still be queued).
    fd_peer_.erase(known->second);
    peer_fd_.erase(known);
    Retire(identity);
    ClientGone(identity, "replaced");
    return true;
  }
  auto stale = fd_peer_.find(fd);
  if (stale != fd_peer_.end() && stale->second != identity) {
    const std::string previous = stale->second;  // that descriptor's earlier connection
    fd_peer_.erase(stale);
    peer_fd_.erase(previous);
    Retire(previous);
    ClientGone(previous, "disconnected");
  }
  peer_fd_[identity] = fd;
  fd_peer_[fd] = identity;
  return false;
}

// Checks a message's frames and parses it into `message`; for a message refused before parsing,
// the id is still read from the header frame when it can be (for the error reply).
Status FrontEnd::ParseFrames(const std::vector<zmq::message_t>& frames, size_t total,
                             bool chosen_id, ClientMessage* message) const {
  auto extract_id = [&] {
    if (frames.size() >= 3) {
      message->has_id =
          ExtractId(std::string_view(static_cast<const char*>(frames[2].data()), frames[2].size()),
                    &message->id);
    }
  };
  if (chosen_id) {
    extract_id();
    return Status(StatusCode::kInvalidArgument, "routing_id_not_allowed",
                  "this connection set its own ZeroMQ routing id (ZMQ_ROUTING_ID); siftd "
                  "assigns every connection its own; do not set one");
  }
  if (frames.size() > kMaxFrames + 1) {
    return Status(StatusCode::kInvalidArgument, "bad_frames",
                  "at most " + std::to_string(kMaxFrames) + " frames per message");
  }
  if (static_cast<int64_t>(total) > options_.max_message_bytes) {
    extract_id();
    return Status(StatusCode::kInvalidArgument, "message_too_large",
                  "message of " + std::to_string(total) + " bytes exceeds the limit of " +
                      std::to_string(options_.max_message_bytes));
  }
  std::vector<std::string_view> views;
  for (size_t i = 1; i < frames.size(); ++i) {
    views.emplace_back(static_cast<const char*>(frames[i].data()), frames[i].size());
  }
  return ParseClientMessage(views, message, options_.header_limits);
}

void FrontEnd::HandleMessage(std::vector<zmq::message_t>& frames, Clock::time_point received) {
  if (frames.empty()) return;
  const std::string identity = frames[0].to_string();
  size_t total = 0;
  for (const auto& f : frames) total += f.size();
  if (total >= kTrimThresholdBytes) trim_pending_ = true;
  const bool chosen_id = RoutingIdChosen(identity, frames);
  ClientMessage message;
  const Status status = ParseFrames(frames, total, chosen_id, &message);
  if (!status.ok()) {
    metrics_.Add("sift_protocol_errors_total", {{"reason", status.reason()}});
    LogWarn("bad_message", {{"client", Hex(identity)},
                            {"reason", status.reason()},
                            {"message", status.message()},
                            {"req", message.has_id ? json(message.id) : json(nullptr)}});
    Reject(identity, message, status);
    return;
  }
  metrics_.Add("sift_messages_total", {{"type", MessageTypeName(message.type)}});
  switch (message.type) {
    case MessageType::kGenerate:
      HandleGenerate(identity, message, received, total);
      return;
    case MessageType::kCancel:
      HandleCancel(identity, message);
      return;
    case MessageType::kPing:
      HandlePing(identity, message);
      return;
    case MessageType::kList:
      HandleList(identity, message);
      return;
  }
}

void FrontEnd::HandlePing(const std::string& identity, const ClientMessage& message) {
  json pong = {{"type", "pong"},
               {"nonce", message.nonce},
               {"protocol", std::string(kMagic)},
               {"ready", !draining_.load()},
               {"draining", draining_.load()},
               {"queue_depth", scheduler_.queued()},
               {"queue_capacity", scheduler_.capacity()},
               {"running", scheduler_.running()},
               {"workers", scheduler_.workers()}};
  if (message.has_id) pong["id"] = message.id;
  json facts = backend_.Describe();
  if (facts.is_object()) pong.update(facts);
  Transmit(identity, pong);
}

void FrontEnd::HandleList(const std::string& identity, const ClientMessage& message) {
  json listing = backend_.List();
  if (!listing.is_object()) listing = json::object();
  listing["type"] = "listing";
  if (message.has_id) listing["id"] = message.id;
  Transmit(identity, listing);
}

// The admission checks before the queue: refused while draining, for ignore_eos the operator
// has not allowed, for an id in flight on the same connection, an unknown pipeline, or past the
// per-connection limit (each answered here, returning null). Otherwise the pipeline's handle on the
// current catalog snapshot.
std::shared_ptr<const void> FrontEnd::CheckAdmission(const std::string& identity,
                                                     const ClientMessage& message,
                                                     const std::string& key, uint64_t* generation) {
  const GenerateRequest& g = message.generate;
  if (draining_.load()) {
    metrics_.Add("sift_admission_rejections_total", {{"reason", "shutting_down"}});
    Reject(identity, message,
           Status(StatusCode::kUnavailable, "shutting_down",
                  "the daemon is draining for shutdown; retry on another instance"));
    return nullptr;
  }
  if (g.ignore_eos && !options_.allow_ignore_eos) {
    metrics_.Add("sift_admission_rejections_total", {{"reason", "ignore_eos_not_allowed"}});
    Reject(identity, message,
           Status(StatusCode::kInvalidArgument, "ignore_eos_not_allowed",
                  "ignore_eos is not allowed by this daemon (the operator enables it with "
                  "--allow-ignore-eos true)"));
    return nullptr;
  }
  if (live_.count(key)) {
    metrics_.Add("sift_admission_rejections_total", {{"reason", "duplicate_id"}});
    Reject(identity, message,
           Status(StatusCode::kAlreadyExists, "duplicate_id",
                  "request id '" + g.id +
                      "' is still in flight on this connection; this duplicate was ignored"));
    return nullptr;
  }
  std::shared_ptr<const void> pipeline = backend_.FindPipeline(g.pipeline, generation);
  if (!pipeline) {
    metrics_.Add("sift_admission_rejections_total", {{"reason", "unknown_pipeline"}});
    metrics_.Add("sift_requests_total", {{"pipeline", "(unknown)"}, {"outcome", "not_found"}});
    Reject(identity, message,
           Status(StatusCode::kNotFound, "unknown_pipeline",
                  "no valid pipeline named '" + g.pipeline +
                      "' (send {\"type\":\"list\"} for the pipelines this daemon serves)"),
           {{"pipeline", g.pipeline}});
    return nullptr;
  }
  if (options_.max_client_inflight > 0) {
    auto inflight = inflight_.find(identity);
    if (inflight != inflight_.end() && inflight->second >= options_.max_client_inflight) {
      metrics_.Add("sift_admission_rejections_total", {{"reason", "client_inflight_limit"}});
      Reject(identity, message,
             Status(StatusCode::kResourceExhausted, "client_inflight_limit",
                    "this connection already has " + std::to_string(inflight->second) +
                        " requests in flight (the limit per connection is " +
                        std::to_string(options_.max_client_inflight) +
                        "); wait for a terminal message before sending more"),
             {{"max_client_inflight", options_.max_client_inflight}}, RetryAfterMs());
      return nullptr;
    }
  }
  return pipeline;
}

void FrontEnd::HandleGenerate(const std::string& identity, ClientMessage& message,
                              Clock::time_point received, size_t message_bytes) {
  GenerateRequest& g = message.generate;
  std::string key = identity;
  key.push_back('\0');
  key += g.id;
  uint64_t generation = 0;
  std::shared_ptr<const void> pipeline = CheckAdmission(identity, message, key, &generation);
  if (!pipeline) return;
  auto request = std::make_shared<LiveRequest>();
  request->identity = identity;
  request->message_bytes = message_bytes;
  request->key = key;
  request->pipeline = std::move(pipeline);
  request->catalog_generation = generation;
  request->received = received;
  const int64_t deadline_ms = g.deadline_ms > 0 ? g.deadline_ms : options_.default_deadline_ms;
  if (deadline_ms > 0) request->deadline = received + std::chrono::milliseconds(deadline_ms);
  // The server-side cap: a client cannot make one request generate more than this.
  g.max_tokens = std::min(g.max_tokens, options_.max_tokens_limit);
  request->request = std::move(g);
  request->request.deadline_ms = deadline_ms;
  const std::string id = request->request.id;
  const std::string pipeline_name = request->request.pipeline;

  AddLive(request);
  const int64_t position = scheduler_.Push(request);
  if (position == 0) {
    EraseLive(key);
    metrics_.Add("sift_admission_rejections_total", {{"reason", "queue_full"}});
    metrics_.Add("sift_requests_total",
                 {{"pipeline", pipeline_name}, {"outcome", "resource_exhausted"}});
    LogWarn("queue_full",
            {{"req", id}, {"pipeline", pipeline_name}, {"queue_size", scheduler_.capacity()}});
    Reject(identity, message,
           Status(StatusCode::kResourceExhausted, "queue_full",
                  "the admission queue is full (" + std::to_string(scheduler_.capacity()) +
                      " requests); retry later"),
           {{"queue_size", scheduler_.capacity()}}, RetryAfterMs());
    return;
  }
  request->last_sent = Clock::now();
  LogDebug("accepted", {{"req", id}, {"pipeline", pipeline_name}, {"queue_position", position}});
  Transmit(identity, AcceptedHeader(id, pipeline_name, position));
}

void FrontEnd::HandleCancel(const std::string& identity, const ClientMessage& message) {
  std::string key = identity;
  key.push_back('\0');
  key += message.id;
  auto it = live_.find(key);
  if (it == live_.end()) {
    // Idempotent: the request already ended (its terminal was sent) or never existed.
    LogDebug("cancel_unknown", {{"req", message.id}});
    return;
  }
  std::shared_ptr<LiveRequest> request = it->second;
  request->Cancel(CancelCause::kClient);
  LogDebug("cancel", {{"req", message.id}, {"running", request->running.load()}});
  if (scheduler_.Remove(request)) {
    TerminateFromIo(request, request->CancelStatus(), {{"stage", "queued"}});
  }
  // Otherwise a worker has it: the stage sees Cancelled() and the worker sends the terminal.
}

void FrontEnd::Housekeeping(Clock::time_point now) {
  if (draining_.load() && !drain_started_) {
    drain_started_ = true;
    drain_deadline_ = now + std::chrono::milliseconds(options_.drain_timeout_ms);
    LogInfo("drain_started", {{"live", live_.size()},
                              {"queued", scheduler_.queued()},
                              {"timeout_ms", options_.drain_timeout_ms}});
  }
  if (drain_started_ && !drain_cancelled_ && (now >= drain_deadline_ || drain_now_.load())) {
    drain_cancelled_ = true;
    drain_deadline_ = std::min(drain_deadline_, now);
    LogWarn("drain_cancelling", {{"live", live_.size()}});
    std::vector<std::shared_ptr<LiveRequest>> all;
    for (auto& [key, request] : live_) all.push_back(request);
    for (auto& request : all) {
      request->Cancel(CancelCause::kShutdown);
      if (scheduler_.Remove(request)) {
        TerminateFromIo(request, request->CancelStatus(), {{"stage", "queued"}});
      }
    }
  }
  if (now >= next_summary_) {
    if (summary_ok_ + summary_failed_ > 0) {
      LogInfo("summary", {{"interval_s", kSummaryMs / 1000},
                          {"requests_ok", summary_ok_},
                          {"requests_failed", summary_failed_},
                          {"requests_per_s", (summary_ok_ + summary_failed_) * 1000.0 / kSummaryMs},
                          {"queue_depth", scheduler_.queued()},
                          {"running", scheduler_.running()},
                          {"live", live_.size()}});
    }
    summary_ok_ = summary_failed_ = 0;
    next_summary_ = now + std::chrono::milliseconds(kSummaryMs);
  }
  const auto heartbeat = std::chrono::milliseconds(options_.heartbeat_ms);
  std::vector<std::shared_ptr<LiveRequest>> expired;
  std::vector<std::shared_ptr<LiveRequest>> quiet;
  for (auto& [key, request] : live_) {
    if (!request->running.load() && request->DeadlinePassed(now)) {
      expired.push_back(request);
    } else if (options_.heartbeat_ms > 0 && now - request->last_sent >= heartbeat) {
      quiet.push_back(request);
    }
  }
  for (auto& request : expired) {
    request->Cancel(CancelCause::kDeadline);
    if (scheduler_.Remove(request)) {
      TerminateFromIo(request, request->CancelStatus(), {{"stage", "queued"}});
    }
  }
  for (auto& request : quiet) {
    // Heartbeats also probe the connection: a vanished client shows up as EHOSTUNREACH here.
    if (request->terminal_sent.load() || request->cause() == CancelCause::kClientGone) continue;
    request->last_sent = now;
    Transmit(request->identity,
             HeartbeatHeader(request->request.id, request->running.load() ? "running" : "queued",
                             MsBetween(request->received, now), request->Progress()),
             request.get());
  }
  MaybeTrim(now);
}

void FrontEnd::TerminateFromIo(const std::shared_ptr<LiveRequest>& request, const Status& status,
                               const json& details) {
  if (request->terminal_sent.exchange(true)) return;
  const Terminal terminal = Terminal::Error(request->request.id, status, details);
  RecordTerminal(*request, terminal);
  const json header = terminal.Header();
  auto it = live_.find(request->key);
  if (it != live_.end() && it->second == request) EraseLive(request->key);
  if (request->message_bytes >= kTrimThresholdBytes) trim_pending_ = true;
  if (request->cause() == CancelCause::kClientGone) return;
  Transmit(request->identity, header, request.get());
}

void FrontEnd::RecordTerminal(const LiveRequest& request, const Terminal& terminal) {
  const std::string& pipeline = request.request.pipeline;
  const bool ok = terminal.ok();
  std::string outcome = ok ? "ok" : Lower(WireCode(terminal.status.code()));
  if (!ok && request.cause() == CancelCause::kClientGone) outcome = "client_gone";
  metrics_.Add("sift_requests_total", {{"pipeline", pipeline}, {"outcome", outcome}});
  ++(ok ? summary_ok_ : summary_failed_);
  json line = {{"req", request.request.id},
               {"client", Hex(request.identity)},
               {"pipeline", pipeline},
               {"outcome", outcome}};
  if (ok) {
    const FinalReport& r = *terminal.report;
    metrics_.Observe("sift_request_ttft_seconds", {{"pipeline", pipeline}}, r.ttft_ms / 1000);
    metrics_.Observe("sift_request_e2e_seconds", {{"pipeline", pipeline}}, r.e2e_ms / 1000);
    metrics_.Observe("sift_request_queue_seconds", {{"pipeline", pipeline}}, r.queue_ms / 1000);
    metrics_.Add("sift_prompt_tokens_total", {{"pipeline", pipeline}},
                 static_cast<double>(r.prompt_tokens));
    metrics_.Add("sift_generated_tokens_total", {{"pipeline", pipeline}},
                 static_cast<double>(r.completion_tokens));
    metrics_.Add("sift_tokens_before_total", {{"pipeline", pipeline}},
                 static_cast<double>(r.tokens_before));
    metrics_.Add("sift_tokens_kept_total", {{"pipeline", pipeline}},
                 static_cast<double>(r.tokens_kept));
    for (const StageReport& s : r.stages) {
      metrics_.Observe("sift_stage_seconds",
                       {{"pipeline", pipeline}, {"stage", s.stage}, {"plugin", s.plugin}},
                       s.ms / 1000);
    }
    service_ms_ewma_ = 0.8 * service_ms_ewma_ + 0.2 * std::max(1.0, r.e2e_ms - r.queue_ms);
    line["e2e_ms"] = RoundMs(r.e2e_ms);
    line["ttft_ms"] = RoundMs(r.ttft_ms);
    line["queue_ms"] = RoundMs(r.queue_ms);
    line["prompt_tokens"] = r.prompt_tokens;
    line["cached_tokens"] = r.cached_tokens;
    line["completion_tokens"] = r.completion_tokens;
    line["tokens_kept"] = r.tokens_kept;
    line["finish_reason"] = r.finish_reason;
  } else {
    line["code"] = WireCode(terminal.status.code());
    line["reason"] = terminal.status.reason();
    line["ms"] = RoundMs(MsBetween(request.received, Clock::now()));
  }
  LogInfo("request_done", line);
}

void FrontEnd::Reject(const std::string& identity, const ClientMessage& message,
                      const Status& status, const json& details, int64_t retry_after_ms) {
  json header = ErrorHeader(message, status, details, retry_after_ms);
  if (message.has_id) {
    // An error answering a message that reuses the id of a live request is not that request's
    // terminal message; say so, so that clients keep waiting for the real one.
    std::string key = identity;
    key.push_back('\0');
    key += message.id;
    if (live_.count(key)) header["duplicate"] = true;
  }
  Transmit(identity, header);
}

int64_t FrontEnd::RetryAfterMs() const {
  const double estimate =
      service_ms_ewma_ * static_cast<double>(scheduler_.queued()) / scheduler_.workers();
  return static_cast<int64_t>(std::clamp(estimate, 50.0, 30000.0));
}

// ---- sending ----

void FrontEnd::Transmit(const std::string& identity, const json& header,
                        const LiveRequest* request) {
  // A closed connection's routing id may be presented by a new peer: learn about closed
  // connections right before sending, and never send to one.
  PollConnectionEvents();
  if (request != nullptr && request->cause() == CancelCause::kClientGone) return;
  if (DeliverExternal(identity, header)) return;
  std::string bytes = Serialize(header);
  auto it = backlog_.find(identity);
  if (it != backlog_.end()) {
    if (it->second.size() >= options_.client_backlog) {
      ClientGone(identity, "not_reading");
      return;
    }
    it->second.push_back(std::move(bytes));
    return;
  }
  switch (TrySend(identity, bytes)) {
    case SendResult::kSent:
      return;
    case SendResult::kWouldBlock:
      backlog_[identity].push_back(std::move(bytes));
      return;
    case SendResult::kGone:
      ClientGone(identity, "disconnected");
      return;
  }
}

FrontEnd::SendResult FrontEnd::TrySend(const std::string& identity, const std::string& bytes) {
  try {
    auto sent =
        router_.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    if (!sent) return SendResult::kWouldBlock;
    // A ROUTER's multipart message is atomic: once the routing frame is accepted, the rest is.
    router_.send(zmq::buffer(kMagic.data(), kMagic.size()), zmq::send_flags::sndmore);
    router_.send(zmq::buffer(bytes), zmq::send_flags::none);
    return SendResult::kSent;
  } catch (const zmq::error_t& e) {
    if (e.num() != EHOSTUNREACH) LogError("send_failed", {{"error", e.what()}});
    return SendResult::kGone;
  }
}

void FrontEnd::FlushBacklogs() {
  PollConnectionEvents();
  for (auto it = backlog_.begin(); it != backlog_.end();) {
    std::deque<std::string>& queue = it->second;
    SendResult result = SendResult::kSent;
    while (!queue.empty()) {
      result = TrySend(it->first, queue.front());
      if (result != SendResult::kSent) break;
      queue.pop_front();
    }
    if (result == SendResult::kGone) {
      const std::string identity = it->first;
      it = backlog_.erase(it);
      ClientGone(identity, "disconnected");
      it = backlog_.begin();  // ClientGone may have changed the map
      continue;
    }
    it = queue.empty() ? backlog_.erase(it) : std::next(it);
  }
}

void FrontEnd::ClientGone(const std::string& identity, const char* why) {
  backlog_.erase(identity);
  std::vector<std::shared_ptr<LiveRequest>> mine;
  for (auto& [key, request] : live_) {
    if (request->identity == identity) mine.push_back(request);
  }
  if (mine.empty()) return;
  metrics_.Add("sift_clients_gone_total", {{"cause", why}});
  LogInfo("client_gone", {{"client", Hex(identity)}, {"cause", why}, {"requests", mine.size()}});
  for (auto& request : mine) {
    request->Cancel(CancelCause::kClientGone);
    if (scheduler_.Remove(request)) {
      TerminateFromIo(request, request->CancelStatus(), {{"stage", "queued"}});
    }
    // Running requests stop at the stage's next Cancelled() check; their terminal is dropped.
  }
}

void FrontEnd::AddLive(const std::shared_ptr<LiveRequest>& request) {
  live_[request->key] = request;
  ++inflight_[request->identity];
  live_count_.store(static_cast<int64_t>(live_.size()));
}

void FrontEnd::EraseLive(const std::string& key) {
  auto it = live_.find(key);
  if (it == live_.end()) return;
  auto count = inflight_.find(it->second->identity);
  if (count != inflight_.end() && --count->second <= 0) inflight_.erase(count);
  live_.erase(it);
  live_count_.store(static_cast<int64_t>(live_.size()));
}

void FrontEnd::PollConnectionEvents() {
  if (!monitor_) return;
  while (true) {
    zmq::message_t event;
    zmq::message_t address;
    try {
      if (!monitor_.recv(event, zmq::recv_flags::dontwait)) return;
      if (event.more()) (void)monitor_.recv(address, zmq::recv_flags::none);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      LogError("monitor_failed", {{"error", e.what()}});
      return;
    }
    if (event.size() < 6) continue;
    uint16_t type = 0;
    uint32_t value = 0;
    std::memcpy(&type, event.data(), sizeof(type));
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, sizeof(value));
    // ACCEPTED on a descriptor still mapped means its previous connection closed unseen.
    if (type != ZMQ_EVENT_DISCONNECTED && type != ZMQ_EVENT_ACCEPTED) continue;
    auto it = fd_peer_.find(static_cast<int>(value));
    if (it == fd_peer_.end()) continue;
    const std::string identity = it->second;
    fd_peer_.erase(it);
    auto peer = peer_fd_.find(identity);
    if (peer != peer_fd_.end() && peer->second == static_cast<int>(value)) peer_fd_.erase(peer);
    Retire(identity);
    ClientGone(identity, "disconnected");
  }
}

void FrontEnd::Retire(const std::string& identity) {
  if (!retired_.insert(identity).second) return;
  retired_order_.push_back(identity);
  while (retired_order_.size() > kMaxRetiredIds) {
    retired_.erase(retired_order_.front());
    retired_order_.pop_front();
  }
}

void FrontEnd::MaybeTrim(Clock::time_point now) {
  if (!trim_pending_ || now - last_trim_ < std::chrono::milliseconds(kTrimIntervalMs)) return;
  trim_pending_ = false;
  last_trim_ = now;
  ::malloc_trim(0);
}

// ---------------------------------------------------------------------------------------------
// External clients (ExternalClient): each submission is a client of its own, named by an
// identity no ZeroMQ peer can have (ROUTER-made ids are 5 bytes; ids a client chooses are
// refused).

namespace {

const std::string kExternalPrefix("\0sift-external:", 15);

bool IsExternal(const std::string& identity) {
  return identity.size() > kExternalPrefix.size() &&
         identity.compare(0, kExternalPrefix.size(), kExternalPrefix) == 0;
}

void DeliverTo(ExternalClient& client, const json& header) {
  try {
    client.Deliver(header);
  } catch (const std::exception& e) {
    LogError("external_deliver_failed", {{"error", e.what()}});
  }
}

}  // namespace

uint64_t FrontEnd::SubmitExternal(GenerateRequest request, Clock::time_point received,
                                  std::shared_ptr<ExternalClient> client) {
  const uint64_t handle = next_external_.fetch_add(1);
  PushInbox(
      {kExternalPrefix + std::to_string(handle), std::move(request), received, std::move(client)});
  return handle;
}

void FrontEnd::ExternalGone(uint64_t handle) {
  PushInbox({kExternalPrefix + std::to_string(handle), GenerateRequest(), Clock::now(), nullptr});
}

void FrontEnd::PushInbox(InItem item) {
  bool was_empty;
  {
    std::lock_guard<std::mutex> lock(in_mu_);
    if (!inbox_closed_) {
      was_empty = inbox_.empty();
      inbox_.push_back(std::move(item));
      if (was_empty) Wake();
      return;
    }
  }
  // The I/O thread has stopped: nothing will serve this request.
  if (item.client) {
    DeliverTo(*item.client,
              ErrorHeader(item.request.id,
                          Status(StatusCode::kUnavailable, "shutting_down",
                                 "the daemon is shutting down; retry on another instance")));
  }
}

void FrontEnd::ProcessInbox() {
  std::deque<InItem> items;
  {
    std::lock_guard<std::mutex> lock(in_mu_);
    items.swap(inbox_);
  }
  for (InItem& item : items) {
    if (!item.client) {
      ClientGone(item.identity, "disconnected");
      external_.erase(item.identity);
      continue;
    }
    external_[item.identity] = std::move(item.client);
    metrics_.Add("sift_messages_total", {{"type", "generate"}});
    ClientMessage message;
    message.type = MessageType::kGenerate;
    message.id = item.request.id;
    message.has_id = true;
    message.generate = std::move(item.request);
    try {
      // 0 bytes: the HTTP body was read and freed on the OpenAI server's thread (no malloc_trim
      // on its account here).
      HandleGenerate(item.identity, message, item.received, 0);
    } catch (const std::exception& e) {
      LogError("message_failed", {{"error", e.what()}});
      Transmit(item.identity,
               ErrorHeader(message.id, Status(StatusCode::kInternal, "internal", e.what())));
    }
  }
}

void FrontEnd::CloseInbox() {
  std::deque<InItem> items;
  {
    std::lock_guard<std::mutex> lock(in_mu_);
    inbox_closed_ = true;
    items.swap(inbox_);
  }
  const Status status(StatusCode::kUnavailable, "shutting_down",
                      "the daemon is shutting down; retry on another instance");
  for (InItem& item : items) {
    if (item.client) DeliverTo(*item.client, ErrorHeader(item.request.id, status));
  }
  // Clients whose request never got its terminal (the drain gave up on it).
  for (auto& [identity, client] : external_) DeliverTo(*client, ErrorHeader(nullptr, status));
  external_.clear();
}

bool FrontEnd::DeliverExternal(const std::string& identity, const json& header) {
  if (!IsExternal(identity)) return false;
  auto it = external_.find(identity);
  if (it == external_.end()) return true;  // gone or already answered: nobody to tell
  DeliverTo(*it->second, header);
  if (IsTerminal(header)) external_.erase(it);
  return true;
}

}  // namespace sift::daemon
