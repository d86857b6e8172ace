// HangReport: makes a test that hangs say where. Past `after` it writes to stderr the step the
// test last named (Step) and the backtrace of the thread that made the report, then again every
// `after`. It fails nothing itself, but the signal that takes the backtrace interrupts the call
// the thread is blocked in (EINTR), which that call may then report as its error. For tests
// that once hung in CI without a trace; pick `after` well past their slowest normal run.
//
// OWNERSHIP: one per test, on the test's thread; the destructor stops the reporting thread.
// THREADING: Step() from the test's thread; the report interrupts that thread with SIGUSR2 to
//            write its backtrace (glibc backtrace_symbols_fd: function names where exported).
#ifndef SIFT_TESTS_SUPPORT_HANG_REPORT_H_
#define SIFT_TESTS_SUPPORT_HANG_REPORT_H_

#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace sift::testing {

class HangReport {
 public:
  explicit HangReport(std::chrono::seconds after) : owner_(pthread_self()) {
    void* frames[4];
    backtrace(frames, 4);  // loads the unwinder now, not inside the signal handler
    struct sigaction action {};
    action.sa_handler = [](int) {
      void* frames[64];
      const int n = backtrace(frames, 64);
      backtrace_symbols_fd(frames, n, STDERR_FILENO);
    };
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &action, nullptr);
    thread_ = std::thread([this, after] {
      const auto start = std::chrono::steady_clock::now();
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, after, [this] { return done_; })) {
        const auto s = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::steady_clock::now() - start)
                           .count();
        std::fprintf(stderr, "[hang report] still running after %lld s, at: %s\n",
                     static_cast<long long>(s), step_.c_str());
        std::fflush(stderr);
        pthread_kill(owner_, SIGUSR2);
      }
    });
  }
  ~HangReport() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
    signal(SIGUSR2, SIG_DFL);
  }
  HangReport(const HangReport&) = delete;
  HangReport& operator=(const HangReport&) = delete;

  void Step(std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    step_ = std::move(what);
  }

 private:
  const pthread_t owner_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string step_ = "start";  // guarded by mu_
  bool done_ = false;           // guarded by mu_
  std::thread thread_;
};

}  // namespace sift::testing

#endif  // SIFT_TESTS_SUPPORT_HANG_REPORT_H_
