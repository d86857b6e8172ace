// LiveRequest: one admitted generate request, shared by the front end (I/O thread), the
// scheduler's queue and the worker that runs it.
//
// Lifecycle: the front end admits it (accepted), the scheduler queues it, a worker runs it and
// sends chunks and exactly one terminal message (final or error) through a ReplySink; the front
// end forgets it when that terminal goes out. A request removed from the queue before any
// worker took it (cancel, deadline, client gone, shutdown) is terminated by the front end
// instead; the queue decides who owns the terminal (Scheduler::Remove).
//
// Cancellation is one atomic word: the first cause wins (client cancel, client gone, shutdown,
// deadline); the deadline is also checked against the clock on every Cancelled() call.
//
// THREADING: the immutable fields are set before the request is shared; `cancel_cause`,
//            `running` and `terminal_sent` are atomics; progress is guarded by its mutex;
//            fields marked "I/O thread" are touched only by the front end's thread.
#ifndef SIFT_DAEMON_LIVE_REQUEST_H_
#define SIFT_DAEMON_LIVE_REQUEST_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "daemon/protocol.h"
#include "sift/status.h"

namespace sift::daemon {

using Clock = std::chrono::steady_clock;

inline double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

enum class CancelCause : int {
  kNone = 0,
  kClient = 1,      // a `cancel` message
  kClientGone = 2,  // the client's connection went away (EHOSTUNREACH) or stopped reading
  kShutdown = 3,    // the daemon's drain timed out
  kDeadline = 4,    // deadline_ms passed
};

struct LiveRequest {
  // ---- set at admission, then immutable ----
  std::string identity;  // ZeroMQ routing id of the client's DEALER
  std::string key;       // identity + '\0' + id: the front end's map key
  GenerateRequest request;
  std::shared_ptr<const void> pipeline;  // the backend's resolved pipeline (a catalog snapshot)
  uint64_t catalog_generation = 0;
  Clock::time_point received;
  Clock::time_point deadline = Clock::time_point::max();
  size_t message_bytes = 0;  // size of the generate message (large ones trigger malloc_trim)

  // ---- shared state ----
  std::atomic<int> cancel_cause{0};
  std::atomic<bool> running{false};        // a worker took it
  std::atomic<bool> terminal_sent{false};  // final or error produced (exactly once)

  // ---- I/O thread only ----
  Clock::time_point last_sent;  // last message to the client (heartbeat pacing)

  // Records the first cause; later causes are ignored. Returns true if this call set it.
  bool Cancel(CancelCause cause) {
    int expected = 0;
    return cancel_cause.compare_exchange_strong(expected, static_cast<int>(cause));
  }
  CancelCause cause() const { return static_cast<CancelCause>(cancel_cause.load()); }
  bool DeadlinePassed(Clock::time_point now = Clock::now()) const { return now >= deadline; }
  bool Cancelled() const { return cancel_cause.load() != 0 || DeadlinePassed(); }
  // The terminal status for a cancelled request (CANCELLED / DEADLINE_EXCEEDED / UNAVAILABLE).
  Status CancelStatus() const;

  // Latest progress reported by a stage (for heartbeats): {"what","done","total"} or null.
  void SetProgress(const std::string& what, int64_t done, int64_t total);
  nlohmann::json Progress() const;

 private:
  mutable std::mutex progress_mu_;
  nlohmann::json progress_;
};

// Where a worker sends a request's replies (the front end's outbox). Exactly one terminal per
// request: SendTerminal returns false (and sends nothing) if one was already sent. Chunks and
// heartbeats are JSON headers; the terminal is typed (protocol.h), so the front end records its
// metrics from the fields and serialises it once.
class ReplySink {
 public:
  virtual ~ReplySink() = default;
  virtual void Send(const std::shared_ptr<LiveRequest>& request, nlohmann::json header) = 0;
  virtual bool SendTerminal(const std::shared_ptr<LiveRequest>& request, Terminal terminal) = 0;
};

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_LIVE_REQUEST_H_
