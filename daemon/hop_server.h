// HopServer: the executor side of the stage-hop protocol (hop_protocol.h).
//
// A ROUTER socket receives `run` and `cancel` messages; each run goes to an executor thread
// (an elastic pool: a new thread when all are busy, so the server adds no hidden concurrency
// limit; the caller's admission control bounds it). The executor runs the handler with a
// StageContext that relays Progress and Emit back to the caller as messages and reports
// Cancelled() once the caller sent `cancel` or disappeared. Executors talk to the caller only
// through the server loop (an inproc PUSH/PULL back channel), because a ZeroMQ socket belongs
// to one thread. The loop also sends a heartbeat per running hop every kHeartbeatMs.
//
// Used twice: in process (LocalStageHost, inproc, the payload is a handle) and by
// `siftd --worker` (tcp, the payload is a serialised state).
//
// OWNERSHIP: the server owns its sockets and executor threads.
// THREADING: construct on any thread, then call Serve() on exactly one thread.
// ERRORS:    the constructor throws sift::Error when it cannot bind; a handler that throws is
//            answered with INTERNAL; sends to a vanished caller cancel its hop.
#ifndef SIFT_DAEMON_HOP_SERVER_H_
#define SIFT_DAEMON_HOP_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "daemon/curve.h"
#include "daemon/hop_protocol.h"
#include "sift/stage.h"

namespace sift::daemon {

class HopServer {
 public:
  struct Reply {
    Reply() = default;
    explicit Reply(Status s) : status(std::move(s)) {}
    Status status;
    nlohmann::json extra = nlohmann::json::object();  // merged into the done header
    std::vector<zmq::message_t> payload;
  };
  // Runs one hop on an executor thread. `context` relays to the caller.
  using Handler = std::function<Reply(HopMessage& request, StageContext& context)>;

  // Binds `endpoint` ("inproc://..." or "tcp://host:port"; "tcp://host:*" picks a free port).
  // With `curve` enabled the port is a CURVE server: only callers whose public key is in
  // curve->client_keys complete the handshake (refusals are logged as auth_denied, at most
  // once per peer address per 10 s). At most one CURVE HopServer per process.
  HopServer(const std::string& endpoint, Handler handler, const CurveConfig* curve = nullptr);
  ~HopServer();
  HopServer(const HopServer&) = delete;
  HopServer& operator=(const HopServer&) = delete;

  // The bound endpoint, with the real port when "*" was asked for.
  const std::string& endpoint() const;

  // Serves until `stop` becomes true (checked every 100 ms). On stop, running hops are
  // cancelled and their replies are still delivered before Serve returns.
  void Serve(const std::atomic<bool>& stop);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_HOP_SERVER_H_
