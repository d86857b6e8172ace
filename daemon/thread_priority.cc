#include "daemon/thread_priority.h"

#include <sys/resource.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

namespace sift::daemon {

int LowerOtherThreads(int nice, const std::string& keep) {
  std::error_code ec;
  std::filesystem::directory_iterator tasks("/proc/self/task", ec);
  if (ec) return -1;
  int changed = 0;
  for (const auto& entry : tasks) {
    std::string name;
    std::ifstream(entry.path() / "comm") >> name;
    if (name == keep) continue;
    const id_t tid = static_cast<id_t>(std::stol(entry.path().filename().string()));
    errno = 0;
    const int current = getpriority(PRIO_PROCESS, tid);
    if (errno != 0) continue;
    if (setpriority(PRIO_PROCESS, tid, current + nice) == 0) ++changed;
  }
  return changed;
}

}  // namespace sift::daemon
