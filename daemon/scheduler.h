// Scheduler: the bounded admission queue and the fixed pool of worker threads that run
// requests (one request per worker at a time, FIFO).
//
// Admission never blocks and never drops silently: Push() fails when the queue holds
// `queue_size` requests, and the front end answers RESOURCE_EXHAUSTED / queue_full.
// Remove() takes a still-queued request out (cancel, deadline, client gone, shutdown); it
// returns true exactly when no worker will ever see that request, which makes the caller
// responsible for its terminal message. Once a worker pops a request, the worker owns it.
//
// THREADING: every method is safe from any thread. Workers call Backend::Execute.
// ERRORS:    an exception escaping Execute becomes the request's INTERNAL error; a request
//            for which Execute produced no terminal gets INTERNAL / no_terminal.
#ifndef SIFT_DAEMON_SCHEDULER_H_
#define SIFT_DAEMON_SCHEDULER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "daemon/backend.h"
#include "daemon/live_request.h"
#include "sift/thread_annotations.h"

namespace sift::daemon {

class Scheduler {
 public:
  Scheduler(Backend& backend, ReplySink& sink, int workers, int64_t queue_size);
  ~Scheduler();  // Stop()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void Start();
  // Queues a request; returns its 1-based position, or 0 if the queue is full or stopped.
  int64_t Push(std::shared_ptr<LiveRequest> request);
  // Removes a queued request; true if it was still queued (the caller now owns its terminal).
  bool Remove(const std::shared_ptr<LiveRequest>& request);
  // Stops taking requests, lets each worker finish its current one, joins the threads.
  // Requests still queued are returned (their terminal is the caller's).
  std::vector<std::shared_ptr<LiveRequest>> Stop();

  int64_t queued() const;
  int64_t running() const { return running_.load(); }
  int64_t capacity() const { return queue_size_; }
  int workers() const { return num_workers_; }

 private:
  void WorkerLoop(int index);

  Backend& backend_;
  ReplySink& sink_;
  const int num_workers_;
  const int64_t queue_size_;
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  std::deque<std::shared_ptr<LiveRequest>> queue_ SIFT_GUARDED_BY(mu_);
  bool stopping_ SIFT_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> running_{0};
  std::vector<std::thread> threads_;
};

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_SCHEDULER_H_
