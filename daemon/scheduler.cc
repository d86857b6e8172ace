#include "daemon/scheduler.h"

#include <algorithm>
#include <exception>
#include <new>

#include "daemon/log.h"

namespace sift::daemon {

Scheduler::Scheduler(Backend& backend, ReplySink& sink, int workers, int64_t queue_size)
    : backend_(backend),
      sink_(sink),
      num_workers_(std::max(1, workers)),
      queue_size_(std::max<int64_t>(1, queue_size)) {}

Scheduler::~Scheduler() { Stop(); }

void Scheduler::Start() {
  for (int i = 0; i < num_workers_; ++i) {
    threads_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

int64_t Scheduler::Push(std::shared_ptr<LiveRequest> request) {
  int64_t position = 0;
  {
    MutexLock lock(mu_);
    if (stopping_ || static_cast<int64_t>(queue_.size()) >= queue_size_) return 0;
    queue_.push_back(std::move(request));
    position = static_cast<int64_t>(queue_.size());
  }
  cv_.notify_one();
  return position;
}

bool Scheduler::Remove(const std::shared_ptr<LiveRequest>& request) {
  MutexLock lock(mu_);
  auto it = std::find(queue_.begin(), queue_.end(), request);
  if (it == queue_.end()) return false;
  queue_.erase(it);
  return true;
}

std::vector<std::shared_ptr<LiveRequest>> Scheduler::Stop() {
  std::vector<std::shared_ptr<LiveRequest>> left;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    left.assign(queue_.begin(), queue_.end());
    queue_.clear();
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  return left;
}

int64_t Scheduler::queued() const {
  MutexLock lock(mu_);
  return static_cast<int64_t>(queue_.size());
}

void Scheduler::WorkerLoop(int index) {
  for (;;) {
    std::shared_ptr<LiveRequest> request;
    {
      MutexLock lock(mu_);
      while (!stopping_ && queue_.empty()) cv_.wait(mu_);
      if (queue_.empty()) return;  // stopping
      request = std::move(queue_.front());
      queue_.pop_front();
      // Marked under the lock, so whoever sees running == false while holding it knows no
      // worker has the request.
      request->running.store(true);
      running_.fetch_add(1);
    }
    try {
      backend_.Execute(request, sink_);
    } catch (const std::bad_alloc&) {
      sink_.SendTerminal(
          request, Terminal::Error(request->request.id, Status(StatusCode::kResourceExhausted,
                                                               "out_of_memory", "out of memory")));
    } catch (const std::exception& e) {
      sink_.SendTerminal(request,
                         Terminal::Error(request->request.id,
                                         Status(StatusCode::kInternal, "internal", e.what())));
    } catch (...) {
      sink_.SendTerminal(request,
                         Terminal::Error(request->request.id,
                                         Status(StatusCode::kInternal, "internal",
                                                "unknown exception while running the request")));
    }
    if (!request->terminal_sent.load()) {
      LogError("no_terminal", {{"req", request->request.id}, {"worker", index}});
      sink_.SendTerminal(request, Terminal::Error(request->request.id,
                                                  Status(StatusCode::kInternal, "no_terminal",
                                                         "the request ended without a result")));
    }
    running_.fetch_sub(1);
  }
}

}  // namespace sift::daemon
