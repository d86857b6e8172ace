// PeerLogLimiter: log lines that a peer can cause before it has authenticated (a refused CURVE
// handshake, a refused API key, a malformed HTTP request) are written at most once per interval
// per peer address, so an unauthenticated peer cannot grow the log without bound. The lines a
// peer causes within the interval are withheld, counted in /metrics
// (sift_log_suppressed_total{event}) and reported as "suppressed": n on the peer's next line.
//
// At most max_peers addresses are remembered; when the table is full, entries older than the
// interval are dropped, and if none is, every further new address shares one entry ("*"), so
// the table is bounded however many addresses a peer uses.
//
// THREADING: Log is safe from any thread (one mutex).
// ERRORS:    none.
#ifndef SIFT_DAEMON_PEER_LOG_LIMITER_H_
#define SIFT_DAEMON_PEER_LOG_LIMITER_H_

#include <chrono>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

#include "daemon/log.h"
#include "daemon/metrics.h"

namespace sift::daemon {

inline constexpr int kPeerLogIntervalMs = 10000;

class PeerLogLimiter {
 public:
  // `metrics` may be null (nothing counted); it must outlive the limiter.
  explicit PeerLogLimiter(Metrics* metrics, int interval_ms = kPeerLogIntervalMs,
                          size_t max_peers = 4096);
  // Writes `fields` + {"peer": peer} as event `event` at `level`, unless a line for this
  // peer was written less than the interval ago (then it is counted and withheld).
  // Returns whether it was written.
  bool Log(LogLevel level, const std::string& event, const std::string& peer,
           nlohmann::json fields);

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    Clock::time_point last;
    int64_t suppressed = 0;
  };
  Metrics* metrics_;
  const std::chrono::milliseconds interval_;
  const size_t max_peers_;
  std::mutex mu_;
  std::unordered_map<std::string, Entry> peers_;
};

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_PEER_LOG_LIMITER_H_
