// The caller side of a stage hop (hop_protocol.h): send `run`, relay what comes back to the
// request's StageContext, forward cancellation, return the `done` message.
//
// Cancellation: the request's context is polled every 20 ms; once Cancelled() (or once Emit
// returned false: the client is gone) a `cancel` goes to the executor, and the call still waits
// for `done` so the stage never runs on state its caller has released. A CANCELLED result is
// reported as the context's CancelStatus(), or as CANCELLED "client_gone".
//
// Liveness (remote hops only): the connection must be up within HopTimeouts::connect_ms (the
// run is queued only on a completed connection, ZMQ_IMMEDIATE), the executor must answer
// `started` within HopTimeouts::first_reply_ms and then send something (a heartbeat at least)
// every HopTimeouts::silence_ms; otherwise the hop fails UNAVAILABLE (worker_unavailable)
// naming the endpoint. In-process hops wait without limit (the executor is a thread of this
// process).
//
// Circuit breaker (remote hops only): after such a failure the endpoint is considered down
// for a back-off that starts at HopTimeouts::breaker_min_ms and doubles with each consecutive
// failure up to breaker_max_ms; meanwhile hops to it fail at once (UNAVAILABLE,
// worker_unavailable, "circuit open"), so requests of a pipeline with a dead worker do not hold
// an inference worker for the timeouts. The first hop after the back-off probes the endpoint;
// a success closes the circuit. State is per endpoint, shared by the whole process.
//
// CURVE (remote hops only): with `curve` enabled the connection is a CURVE client of the
// worker's key; a handshake the worker refuses (a wrong worker key, or this daemon's key not in
// its --curve-client-keys) never completes, so the hop fails UNAVAILABLE after connect_ms, and
// the message says to check the keys.
//
// THREADING: runs on the caller's thread; creates and closes its own socket.
#ifndef SIFT_DAEMON_HOP_CLIENT_H_
#define SIFT_DAEMON_HOP_CLIENT_H_

#include <string>
#include <vector>

#include "daemon/curve.h"
#include "daemon/hop_protocol.h"
#include "sift/stage.h"

namespace sift::daemon {

struct HopTimeouts {
  int first_reply_ms = 10000;
  int silence_ms = 10000;
  int connect_ms = 1000;
  int breaker_min_ms = 1000;
  int breaker_max_ms = 30000;
};

struct HopOutcome {
  Status status;
  HopMessage done;  // the `done` message (header and payload); empty when no done arrived
};

// `header` gets its "hop" id here. `timeouts` null = wait without limit (in process).
// `curve` null or not enabled = plain TCP.
HopOutcome CallHop(const std::string& endpoint, nlohmann::json header,
                   std::vector<zmq::message_t> payload, StageContext& context,
                   const HopTimeouts* timeouts, const CurveClientKeys* curve = nullptr);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_HOP_CLIENT_H_
