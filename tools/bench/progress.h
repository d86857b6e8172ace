// Progress of a long sift-bench run on stderr: "[k/N] what ... elapsed, ETA" after each step
// (ETA = mean time per step so far x steps left).
// THREADING: one thread. ERRORS: none.
#ifndef SIFT_TOOLS_BENCH_PROGRESS_H_
#define SIFT_TOOLS_BENCH_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace sift::bench {

class Progress {
 public:
  Progress(std::string suite, int64_t total, bool quiet = false);
  // Announces the step about to run (k = steps done so far + 1).
  void Begin(const std::string& what);
  // Marks it done with a short result ("score 1.00", "ttft 812 ms").
  void End(const std::string& result);

 private:
  std::string suite_, what_;
  int64_t total_, done_ = 0;
  bool quiet_;
  std::chrono::steady_clock::time_point start_;
};

std::string FormatSeconds(double s);

}  // namespace sift::bench

#endif  // SIFT_TOOLS_BENCH_PROGRESS_H_
