#include "progress.h"

#include <cstdio>

namespace sift::bench {

std::string FormatSeconds(double s) {
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%.0fs", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%dh%02dm", static_cast<int>(s) / 3600,
                  static_cast<int>(s) % 3600 / 60);
  }
  return buf;
}

Progress::Progress(std::string suite, int64_t total, bool quiet)
    : suite_(std::move(suite)),
      total_(total),
      quiet_(quiet),
      start_(std::chrono::steady_clock::now()) {}

void Progress::Begin(const std::string& what) { what_ = what; }

void Progress::End(const std::string& result) {
  ++done_;
  if (quiet_) return;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta =
      done_ > 0 ? elapsed / static_cast<double>(done_) * static_cast<double>(total_ - done_) : 0;
  std::fprintf(stderr, "[%s %lld/%lld] %s: %s  (elapsed %s, ETA %s)\n", suite_.c_str(),
               static_cast<long long>(done_), static_cast<long long>(total_), what_.c_str(),
               result.c_str(), FormatSeconds(elapsed).c_str(), FormatSeconds(eta).c_str());
  std::fflush(stderr);
}

}  // namespace sift::bench
