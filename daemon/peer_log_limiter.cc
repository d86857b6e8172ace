#include "daemon/peer_log_limiter.h"

#include <utility>

namespace sift::daemon {

PeerLogLimiter::PeerLogLimiter(Metrics* metrics, int interval_ms, size_t max_peers)
    : metrics_(metrics), interval_(interval_ms), max_peers_(max_peers) {
  if (metrics_ != nullptr) {
    metrics_->DeclareCounter("sift_log_suppressed_total",
                             "Log lines caused by unauthenticated peers and withheld (at most "
                             "one line per peer per 10 s), by event.");
  }
}

bool PeerLogLimiter::Log(LogLevel level, const std::string& event, const std::string& peer,
                         nlohmann::json fields) {
  const Clock::time_point now = Clock::now();
  int64_t suppressed = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::string key = peer;
    if (peers_.size() >= max_peers_ && !peers_.count(key)) {
      for (auto it = peers_.begin(); it != peers_.end();) {
        it = now - it->second.last >= interval_ ? peers_.erase(it) : std::next(it);
      }
      if (peers_.size() >= max_peers_) key = "*";
    }
    auto [it, fresh] = peers_.try_emplace(key);
    Entry& e = it->second;
    if (!fresh && now - e.last < interval_) {
      ++e.suppressed;
      if (metrics_ != nullptr) metrics_->Add("sift_log_suppressed_total", {{"event", event}});
      return false;
    }
    e.last = now;
    suppressed = std::exchange(e.suppressed, 0);
  }
  if (!fields.is_object()) fields = nlohmann::json::object();
  fields["peer"] = peer;
  if (suppressed > 0) fields["suppressed"] = suppressed;
  sift::daemon::Log(level, event, fields);
  return true;
}

}  // namespace sift::daemon
