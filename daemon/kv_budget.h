// KvBudget: admission by KV-cache memory. A running request holds a reservation of the bytes its
// cache may reach; a request whose reservation does not fit waits, first come first served, until
// enough is released; one that could never fit (more than the whole budget) is refused at once.
//
// What a request reserves (daemon/request_runner.cc, once its stages have planned): first the
// peak of its pipeline, the whole prompt's KV plus max_tokens more (every prefill stage holds at
// most the whole prompt, before a select stage compresses it), or less where the prefill hands
// each layer to the select stage as it completes (RequestPlan::kv_peak_entries); then, when it
// joins the decode batch, what it will hold from there on: the cache its pipeline left plus
// max_tokens more per layer. The difference goes back to the budget, so compressed requests make
// room for others.
//
// Cached prompts (sift/prefix_cache.h) are charged here too, without waiting (TryReserveCached),
// and give way to requests: a request that does not fit asks the reclaimer (set_reclaimer) to
// evict cached entries before it waits.
//
// THREADING: every method is safe from any thread; Reserve blocks the calling thread. The
//            reclaimer is called without this budget's lock held (it may ReleaseCached).
// ERRORS:    none thrown; Reserve reports kNeverFits and kCancelled.
#ifndef SIFT_DAEMON_KV_BUDGET_H_
#define SIFT_DAEMON_KV_BUDGET_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>

#include "sift/thread_annotations.h"

namespace sift::daemon {

class KvBudget {
 public:
  explicit KvBudget(int64_t capacity_bytes) : capacity_(capacity_bytes) {}
  KvBudget(const KvBudget&) = delete;
  KvBudget& operator=(const KvBudget&) = delete;

  enum class Outcome { kReserved, kNeverFits, kCancelled };
  // Waits until `bytes` fit and no earlier waiter is still waiting, then holds them. `cancelled`
  // is polled while waiting (every `poll_ms`).
  Outcome Reserve(int64_t bytes, const std::function<bool()>& cancelled, int poll_ms = 20);
  // Changes a held reservation from `from` to `to` bytes without waiting (growing may pass the
  // capacity; the request is already running).
  void Resize(int64_t from, int64_t to);
  void Release(int64_t bytes) { Resize(bytes, 0); }
  // Cached prompts: holds `bytes` if they fit now and no request is waiting (never waits), and
  // gives them back. Counted in used() and cached(), not in holders().
  bool TryReserveCached(int64_t bytes);
  void ReleaseCached(int64_t bytes);
  // Called by a request at the head of the queue that does not fit, with the bytes it lacks;
  // returns the bytes it released (siftd: PrefixCache::Reclaim). Set before any Reserve.
  void set_reclaimer(std::function<int64_t(int64_t)> reclaimer) {
    reclaimer_ = std::move(reclaimer);
  }

  int64_t capacity() const { return capacity_; }
  int64_t used() const;
  int64_t waiting() const;    // requests blocked in Reserve
  int64_t holders() const;    // reservations held
  int64_t peak_used() const;  // the most bytes held at once so far
  int64_t cached() const;     // bytes held by cached prompts (part of used())

 private:
  const int64_t capacity_;
  std::function<int64_t(int64_t)> reclaimer_;  // set once before use
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  int64_t used_ SIFT_GUARDED_BY(mu_) = 0;
  int64_t holders_ SIFT_GUARDED_BY(mu_) = 0;
  int64_t peak_ SIFT_GUARDED_BY(mu_) = 0;
  int64_t cached_ SIFT_GUARDED_BY(mu_) = 0;
  uint64_t next_ticket_ SIFT_GUARDED_BY(mu_) = 0;
  std::deque<uint64_t> queue_ SIFT_GUARDED_BY(mu_);  // tickets of the waiters, oldest first
};

// A held reservation, released when destroyed.
class KvReservation {
 public:
  KvReservation() = default;
  KvReservation(KvBudget* budget, int64_t bytes) : budget_(budget), bytes_(bytes) {}
  ~KvReservation() { Reset(); }
  KvReservation(KvReservation&& other) noexcept : budget_(other.budget_), bytes_(other.bytes_) {
    other.budget_ = nullptr;
    other.bytes_ = 0;
  }
  KvReservation& operator=(KvReservation&& other) noexcept {
    if (this != &other) {
      Reset();
      budget_ = other.budget_;
      bytes_ = other.bytes_;
      other.budget_ = nullptr;
      other.bytes_ = 0;
    }
    return *this;
  }
  void Resize(int64_t bytes) {
    if (budget_ != nullptr) budget_->Resize(bytes_, bytes);
    bytes_ = bytes;
  }
  void Reset() {
    if (budget_ != nullptr) budget_->Release(bytes_);
    budget_ = nullptr;
    bytes_ = 0;
  }
  int64_t bytes() const { return bytes_; }

 private:
  KvBudget* budget_ = nullptr;
  int64_t bytes_ = 0;
};

// Parses --kv-budget: bytes with an optional K/M/G/T suffix (powers of 1024, e.g. "512M"), or a
// percentage of `memory_bytes` ("50%"). Returns false with `error` set on anything else or on 0.
bool ParseKvBudget(const std::string& text, int64_t memory_bytes, int64_t* bytes,
                   std::string* error);
// The machine's physical memory (MemTotal of /proc/meminfo), or 0 when unknown.
int64_t PhysicalMemoryBytes();

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_KV_BUDGET_H_
