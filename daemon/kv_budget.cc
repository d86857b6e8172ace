#include "daemon/kv_budget.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <fstream>

namespace sift::daemon {

KvBudget::Outcome KvBudget::Reserve(int64_t bytes, const std::function<bool()>& cancelled,
                                    int poll_ms) {
  if (bytes > capacity_) return Outcome::kNeverFits;
  Outcome outcome = Outcome::kReserved;
  uint64_t ticket = 0;
  {
    MutexLock lock(mu_);
    ticket = next_ticket_++;
    queue_.push_back(ticket);
  }
  for (;;) {
    int64_t missing = 0;  // > 0: at the front, short of this many bytes; ask the reclaimer
    {
      MutexLock lock(mu_);
      while (queue_.front() != ticket || used_ + bytes > capacity_) {
        if (reclaimer_ && queue_.front() == ticket && missing == 0) {
          missing = used_ + bytes - capacity_;
          break;
        }
        if (cancelled && cancelled()) {
          outcome = Outcome::kCancelled;
          break;
        }
        cv_.wait_for(mu_, std::chrono::milliseconds(poll_ms));
      }
      if (missing == 0 || outcome == Outcome::kCancelled) {
        queue_.erase(std::find(queue_.begin(), queue_.end(), ticket));
        if (outcome == Outcome::kReserved) {
          used_ += bytes;
          ++holders_;
          peak_ = std::max(peak_, used_);
        }
        break;
      }
    }
    // Cached prompts give way, without this budget's lock (they release through ReleaseCached).
    if (reclaimer_(missing) == 0) {
      MutexLock lock(mu_);
      if (cancelled && cancelled()) {
        queue_.erase(std::find(queue_.begin(), queue_.end(), ticket));
        outcome = Outcome::kCancelled;
        break;
      }
      cv_.wait_for(mu_, std::chrono::milliseconds(poll_ms));  // nothing cached: wait for requests
    }
  }
  cv_.notify_all();  // the next waiter may be at the front now, and may fit as well
  return outcome;
}

bool KvBudget::TryReserveCached(int64_t bytes) {
  MutexLock lock(mu_);
  if (!queue_.empty() || used_ + bytes > capacity_) return false;
  used_ += bytes;
  cached_ += bytes;
  peak_ = std::max(peak_, used_);
  return true;
}

void KvBudget::ReleaseCached(int64_t bytes) {
  {
    MutexLock lock(mu_);
    used_ -= bytes;
    cached_ -= bytes;
  }
  cv_.notify_all();
}

int64_t KvBudget::cached() const {
  MutexLock lock(mu_);
  return cached_;
}

void KvBudget::Resize(int64_t from, int64_t to) {
  {
    MutexLock lock(mu_);
    used_ += to - from;
    if (from == 0 && to > 0) ++holders_;
    if (from > 0 && to == 0) --holders_;
    peak_ = std::max(peak_, used_);
  }
  if (to < from) cv_.notify_all();
}

int64_t KvBudget::used() const {
  MutexLock lock(mu_);
  return used_;
}

int64_t KvBudget::waiting() const {
  MutexLock lock(mu_);
  return static_cast<int64_t>(queue_.size());
}

int64_t KvBudget::holders() const {
  MutexLock lock(mu_);
  return holders_;
}

int64_t KvBudget::peak_used() const {
  MutexLock lock(mu_);
  return peak_;
}

bool ParseKvBudget(const std::string& text, int64_t memory_bytes, int64_t* bytes,
                   std::string* error) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  double scale = -1;
  if (used == 0 || !std::isfinite(value) || value <= 0) {
    scale = -1;
  } else if (unit == "%") {
    scale = memory_bytes > 0 && value <= 100 ? memory_bytes / 100.0 : -1;
  } else if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit.size() == 1 || unit.substr(1) == "B" || unit.substr(1) == "iB") {
    const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0])));
    const std::string units = "KMGT";
    const size_t at = units.find(u);
    if (at != std::string::npos) scale = std::pow(1024.0, static_cast<double>(at + 1));
  }
  if (scale <= 0 || value * scale < 1 || value * scale > 9e18) {
    *error = "--kv-budget '" + text +
             "': expected bytes with an optional K/M/G/T suffix (e.g. 512M) or a percentage of "
             "the machine's memory (e.g. 50%), above zero";
    return false;
  }
  *bytes = static_cast<int64_t>(value * scale);
  return true;
}

int64_t PhysicalMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemTotal:") return kib * 1024;
  }
  return 0;
}

}  // namespace sift::daemon
