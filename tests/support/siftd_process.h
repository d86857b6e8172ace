// SiftdProcess: the real build/bin/siftd started as a child process for integration tests
// (model from $SIFT_MODEL unless given, this build's plugins, the repository's pipelines, a
// staging folder and ephemeral loopback ports, each unless the same flag is given in `extra`);
// endpoint() and http() come from its --ready-file. The destructor kills it and removes its
// temporary folder.
//
// Header-only; needs SIFT_BINARY_DIR / SIFT_SOURCE_DIR (sift_add_test defines both).
#ifndef SIFT_TESTS_SUPPORT_SIFTD_PROCESS_H_
#define SIFT_TESTS_SUPPORT_SIFTD_PROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/model_path.h"

namespace sift::testing {

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

class SiftdProcess {
 public:
  // Returns "" on success, else why it could not start. `model` "" = $SIFT_MODEL.
  std::string Start(const std::vector<std::string>& extra, const std::string& model = "") {
    dir_ = std::filesystem::temp_directory_path() /
           ("siftd-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::create_directories(dir_);
    ready_ = (dir_ / "ready.json").string();
    log_ = (dir_ / "siftd.log").string();
    std::vector<std::string> args = {std::string(SIFT_BINARY_DIR) + "/bin/siftd",
                                     "--model",
                                     model.empty() ? ModelPath() : model,
                                     "--pipelines",
                                     std::string(SIFT_SOURCE_DIR) + "/pipelines",
                                     "--plugins",
                                     std::string(SIFT_BINARY_DIR) + "/plugins",
                                     "--staging-dir",
                                     (dir_ / "staging").string(),
                                     "--bind",
                                     "tcp://127.0.0.1:*",
                                     "--http",
                                     "127.0.0.1:0",
                                     "--ready-file",
                                     ready_,
                                     "--threads",
                                     Threads()};
    // The tests decode fixed counts (ignore_eos), which siftd refuses by default.
    args.insert(args.end(), {"--allow-ignore-eos", "true"});
    std::filesystem::create_directories(dir_ / "staging");
    // A flag given in `extra` replaces its default (program_options refuses duplicates).
    for (size_t i = 1; i + 1 < args.size();) {
      if (std::find(extra.begin(), extra.end(), args[i]) != extra.end()) {
        args.erase(args.begin() + static_cast<std::ptrdiff_t>(i),
                   args.begin() + static_cast<std::ptrdiff_t>(i) + 2);
      } else {
        i += args[i].rfind("--", 0) == 0 ? 2 : 1;
      }
    }
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 2);
      ::dup2(fd, 1);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return "siftd exited during start-up:\n" + ReadAll(log_);
      }
      if (std::filesystem::exists(ready_)) {
        ready_json_ = nlohmann::json::parse(ReadAll(ready_), nullptr, false);
        if (!ready_json_.is_discarded()) return "";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return "siftd did not become ready:\n" + ReadAll(log_);
  }

  // Sends `sig` and waits for the exit; returns the exit status (-1 on timeout: killed).
  int Stop(int sig = SIGTERM, int timeout_ms = 30000) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, sig);
    return Wait(timeout_ms);
  }
  int Wait(int timeout_ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    int status = 0;
    while (std::chrono::steady_clock::now() < end) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return -1;
  }
  ~SiftdProcess() {
    if (pid_ > 0) Stop(SIGKILL, 5000);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string endpoint() const { return ready_json_["endpoints"][0]; }
  std::string http() const { return ready_json_["http"]; }
  std::string log() const { return ReadAll(log_); }
  // The test's own folder (removed with the process) and the default staging folder in it.
  std::string dir() const { return dir_.string(); }
  std::string staging() const { return (dir_ / "staging").string(); }
  const nlohmann::json& ready() const { return ready_json_; }
  pid_t pid() const { return pid_; }

 private:
  // siftd's --threads: 2, or $SIFT_TEST_SIFTD_THREADS (tools/tsan.sh sets 1: OpenMP's workers are
  // invisible to ThreadSanitizer).
  static std::string Threads() {
    const char* t = std::getenv("SIFT_TEST_SIFTD_THREADS");
    return t != nullptr && *t != '\0' ? t : "2";
  }
  static inline int counter_ = 0;
  std::filesystem::path dir_;
  std::string ready_, log_;
  nlohmann::json ready_json_;
  pid_t pid_ = -1;
};

}  // namespace sift::testing

#endif  // SIFT_TESTS_SUPPORT_SIFTD_PROCESS_H_
