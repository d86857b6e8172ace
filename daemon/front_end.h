// FrontEnd: the client-facing ZeroMQ ROUTER and the one I/O thread that owns it.
//
// The I/O thread receives every client message, answers ping/list itself, checks and admits
// generate requests into the scheduler's bounded queue (accepted), routes cancels, and sends
// everything workers produce (chunks, finals, errors), which reaches it through a thread-safe
// outbox that wakes its poll loop. It also paces heartbeats (every heartbeat_ms without other
// traffic, carrying the latest stage progress), expires deadlines of queued requests, and
// records request metrics and a log line per terminal message.
//
// Socket rules (option names as in libzmq's zmq_setsockopt(3)): ROUTER_MANDATORY=1 so an unknown or
// vanished client is an error (EHOSTUNREACH: its requests are cancelled) rather than a silent drop;
// finite SNDHWM / RCVHWM; sends never block (a client that stops reading gets a bounded backlog,
// then is treated as gone); LINGER set explicitly so shutdown neither hangs nor loses terminal
// messages; ZMTP heartbeats detect dead TCP peers; an oversize message gets an error. The socket
// files of ipc:// endpoints are removed when the front end is destroyed.
//
// Connection identity: requests belong to the connection that sent them, not merely to a
// routing id. A socket monitor reports each closed connection (by file descriptor, matched to
// the descriptor its messages arrived on: ZMQ_SRCFD), and its requests are cancelled before
// anything else is sent, so a later peer presenting the same routing id never receives the
// rest of another connection's stream. Clients may not choose their routing id: ZeroMQ's own
// are 0x00 + 4 bytes and never reused, so a message whose routing id is anything else (or was
// declared by the peer, or belonged to a connection that has closed or to another live one)
// is refused with routing_id_not_allowed. (A peer presenting an id that a live connection
// holds is not even attached by ZeroMQ until that connection closes.)
//
// Drain (SIGTERM): new generates get UNAVAILABLE / shutting_down; admitted requests (queued
// and running) finish; after drain_timeout_ms the rest are cancelled with UNAVAILABLE. The
// I/O thread exits once every admitted request has had its terminal message.
//
// THREADING: Start/Wait on the owner's thread; BeginDrain/DrainNow and the ReplySink methods
//            from any thread; everything else runs on the I/O thread.
// ERRORS:    Start returns a Status (bind failure, bad endpoint, CURVE misconfiguration).
#ifndef SIFT_DAEMON_FRONT_END_H_
#define SIFT_DAEMON_FRONT_END_H_

#include <sys/types.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>
#include <zmq.hpp>

#include "daemon/backend.h"
#include "daemon/curve.h"
#include "daemon/json_limits.h"
#include "daemon/metrics.h"
#include "daemon/peer_log_limiter.h"
#include "daemon/scheduler.h"

namespace sift::daemon {

// A client on another transport (the OpenAI-compatible HTTP port, openai_server.h). Its
// generates go through the front end's admission, queue, deadlines, metrics, log and drain
// exactly like a ZeroMQ client's, and it receives the same reply headers (accepted, chunk,
// heartbeat, final, error), on the I/O thread: Deliver must be quick (hand the header to the
// client's own thread) and must not call into the front end. After a final or error for its
// request the front end forgets it.
class ExternalClient {
 public:
  virtual ~ExternalClient() = default;
  virtual void Deliver(const nlohmann::json& header) = 0;
};

struct FrontEndOptions {
  std::vector<std::string> endpoints = {"tcp://127.0.0.1:7700"};
  CurveConfig curve;  // required for non-loopback endpoints
  int workers = 1;
  int64_t queue_size = 64;
  int hwm = 10000;                       // SNDHWM / RCVHWM per client pipe (messages)
  int linger_ms = 2000;                  // how long close waits to deliver final messages
  int64_t max_message_bytes = 64 << 20;  // larger: INVALID_ARGUMENT / message_too_large
  JsonLimits header_limits;              // the header frame: size, depth, values (json_limits.h)
  int64_t max_client_inflight = 32;      // admitted requests per connection; 0 = no limit
  int heartbeat_ms = 1000;               // application heartbeat when a request is quiet
  int zmq_heartbeat_ms = 5000;           // ZMTP PING interval (timeout = 3x)
  int drain_timeout_ms = 30000;
  int64_t default_deadline_ms = 0;  // applied when a request has none; 0 = none
  int64_t max_tokens_limit = 4096;  // a request's max_tokens is lowered to this
  bool allow_ignore_eos = false;    // false: ignore_eos is refused (ignore_eos_not_allowed)
  size_t client_backlog = 10000;    // messages held for a client that is not reading
};

class FrontEnd final : public ReplySink {
 public:
  FrontEnd(FrontEndOptions options, Backend& backend, Metrics& metrics);
  ~FrontEnd() override;
  FrontEnd(const FrontEnd&) = delete;
  FrontEnd& operator=(const FrontEnd&) = delete;

  // Binds every endpoint and starts the workers and the I/O thread.
  Status Start();
  // Actual bound endpoints (a "*" port resolved), valid after Start.
  const std::vector<std::string>& endpoints() const { return bound_; }
  const std::string& curve_public_key() const { return options_.curve.server_public; }

  void BeginDrain();
  void DrainNow();  // cancel everything now (second signal)
  bool draining() const { return draining_.load(); }
  // Blocks until the I/O thread has exited (after a drain) and the workers are joined.
  void Wait();
  // Called on the I/O thread right before it exits.
  void set_on_stopped(std::function<void()> fn) { on_stopped_ = std::move(fn); }

  // From any thread: admits `request` (already validated, e.g. by ParseClientMessage) for
  // `client`, as its own client connection; returns a handle for ExternalGone. Once the I/O
  // thread has stopped, the client gets UNAVAILABLE / shutting_down at once.
  uint64_t SubmitExternal(GenerateRequest request, Clock::time_point received,
                          std::shared_ptr<ExternalClient> client);
  // From any thread: that client went away; its request is cancelled (client_gone).
  void ExternalGone(uint64_t handle);

  int64_t live_requests() const { return live_count_.load(); }
  Scheduler& scheduler() { return scheduler_; }

  // ReplySink (worker threads).
  void Send(const std::shared_ptr<LiveRequest>& request, nlohmann::json header) override;
  bool SendTerminal(const std::shared_ptr<LiveRequest>& request, Terminal terminal) override;

 private:
  struct OutItem {
    std::shared_ptr<LiveRequest> request;
    nlohmann::json header;             // a chunk or heartbeat (unused for a terminal)
    std::optional<Terminal> terminal;  // set: the request's last message
  };
  enum class SendResult { kSent, kWouldBlock, kGone };

  void Push(OutItem item);
  void Wake();
  void IoLoop();
  void ProcessOutbox();
  void HandleMessage(std::vector<zmq::message_t>& frames, Clock::time_point received);
  bool RoutingIdChosen(const std::string& identity, std::vector<zmq::message_t>& frames);
  Status ParseFrames(const std::vector<zmq::message_t>& frames, size_t total, bool chosen_id,
                     ClientMessage* message) const;
  void HandlePing(const std::string& identity, const ClientMessage& message);
  void HandleList(const std::string& identity, const ClientMessage& message);
  std::shared_ptr<const void> CheckAdmission(const std::string& identity,
                                             const ClientMessage& message, const std::string& key,
                                             uint64_t* generation);
  void HandleGenerate(const std::string& identity, ClientMessage& message,
                      Clock::time_point received, size_t message_bytes);
  void HandleCancel(const std::string& identity, const ClientMessage& message);
  void Housekeeping(Clock::time_point now);
  // Terminates a request the I/O thread owns (removed from the queue) with an error.
  void TerminateFromIo(const std::shared_ptr<LiveRequest>& request, const Status& status,
                       const nlohmann::json& details);
  void RecordTerminal(const LiveRequest& request, const Terminal& terminal);
  void Reject(const std::string& identity, const ClientMessage& message, const Status& status,
              const nlohmann::json& details = nullptr, int64_t retry_after_ms = -1);
  // Sends (or backlogs) a header to a client; `request`, when given, is not sent for once its
  // client is gone (checked after reading the connection events).
  void Transmit(const std::string& identity, const nlohmann::json& header,
                const LiveRequest* request = nullptr);
  SendResult TrySend(const std::string& identity, const std::string& bytes);
  void FlushBacklogs();
  void ClientGone(const std::string& identity, const char* why);
  // Reads the socket monitor: connections that closed cancel their requests (I/O thread).
  void PollConnectionEvents();
  void Retire(const std::string& identity);  // a closed connection's routing id
  void AddLive(const std::shared_ptr<LiveRequest>& request);
  void EraseLive(const std::string& key);
  // malloc_trim after large messages, at most every kTrimIntervalMs (I/O thread).
  void MaybeTrim(Clock::time_point now);
  int64_t RetryAfterMs() const;
  bool DrainFinished() const;
  // External clients (section at the end of front_end.cc).
  struct InItem {
    std::string identity;
    GenerateRequest request;
    Clock::time_point received;
    std::shared_ptr<ExternalClient> client;  // null: the client went away
  };
  void PushInbox(InItem item);
  void ProcessInbox();
  void CloseInbox();
  bool DeliverExternal(const std::string& identity, const nlohmann::json& header);

  FrontEndOptions options_;
  Backend& backend_;
  Metrics& metrics_;
  Scheduler scheduler_;
  std::vector<std::string> bound_;
  struct IpcFile {
    std::string path;
    dev_t dev;
    ino_t ino;
  };
  std::vector<IpcFile> ipc_files_;  // socket files of bound ipc:// endpoints (removed at exit)

  zmq::context_t context_;
  zmq::socket_t router_;
  zmq::socket_t zap_;
  zmq::socket_t monitor_;  // PAIR end of the ROUTER's socket monitor (disconnect events)
  PeerLogLimiter auth_log_{&metrics_};  // auth_denied lines: one per peer per interval
  std::thread io_thread_;
  std::function<void()> on_stopped_;

  // Outbox: filled by workers, emptied by the I/O thread; a byte on the pipe wakes it.
  mutable std::mutex out_mu_;
  std::deque<OutItem> outbox_;  // guarded by out_mu_
  int wake_pipe_[2] = {-1, -1};

  // Inbox of external clients' submissions: filled from any thread, emptied by the I/O thread.
  std::mutex in_mu_;
  std::deque<InItem> inbox_;   // guarded by in_mu_
  bool inbox_closed_ = false;  // guarded by in_mu_; set when the I/O thread exits
  std::atomic<uint64_t> next_external_{1};

  std::atomic<bool> draining_{false};
  std::atomic<bool> drain_now_{false};
  std::atomic<int64_t> live_count_{0};

  // ---- I/O thread only ----
  std::unordered_map<std::string, std::shared_ptr<LiveRequest>> live_;
  std::unordered_map<std::string, std::deque<std::string>> backlog_;
  std::unordered_map<std::string, std::shared_ptr<ExternalClient>> external_;
  std::unordered_map<std::string, int64_t> inflight_;  // live requests per routing id
  std::unordered_map<std::string, int> peer_fd_;       // routing id -> its connection's fd
  std::unordered_map<int, std::string> fd_peer_;       // and back
  std::unordered_set<std::string> retired_;            // routing ids of closed connections
  std::deque<std::string> retired_order_;              // oldest first (bounded)
  bool trim_pending_ = false;
  Clock::time_point last_trim_{};
  Clock::time_point drain_deadline_;
  bool drain_started_ = false;
  bool drain_cancelled_ = false;
  double service_ms_ewma_ = 100;  // worker time per request, for retry_after_ms
  // Periodic summary log line: terminals since the last one.
  Clock::time_point next_summary_ = Clock::now();
  int64_t summary_ok_ = 0, summary_failed_ = 0;
};

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_FRONT_END_H_
