#include "daemon/plugin_preflight.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "daemon/plugin_loader.h"
#include "sift/model.h"

extern char** environ;

namespace sift::daemon {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kResultFd = 3;
constexpr size_t kStderrTail = 2048;

struct Pipe {
  int read = -1, write = -1;
  bool Open() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return false;
    read = fds[0];
    write = fds[1];
    return true;
  }
  void CloseRead() {
    if (read >= 0) ::close(read);
    read = -1;
  }
  void CloseWrite() {
    if (write >= 0) ::close(write);
    write = -1;
  }
  ~Pipe() {
    CloseRead();
    CloseWrite();
  }
};

std::string SignalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    std::string what = "killed by " + SignalName(sig);
    if (sig == SIGBUS || sig == SIGSEGV) what += " (a truncated, corrupt or crashing library)";
    if (sig == SIGABRT) what += " (the library called abort())";
    return what;
  }
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  return "ended with wait status " + std::to_string(status);
}

// The last line(s) the child wrote to stderr, on one line, for the error message.
std::string Tail(const std::string& err) {
  std::string t = err.size() > 300 ? "..." + err.substr(err.size() - 300) : err;
  for (char& c : t) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!t.empty() && t.back() == ' ') t.pop_back();
  return t.empty() ? "" : "; its last output: " + t;
}

// One child over files[first...]: fills results from `first` on; returns the index of the
// first file without a verdict (== files.size() when all are judged).
size_t RunChild(const std::vector<std::string>& files, size_t first,
                const PreflightOptions& options, std::vector<PreflightResult>* results) {
  auto not_judged = [&](size_t from, const std::string& why) {
    for (size_t i = from; i < files.size(); ++i) {
      (*results)[i].ok = false;
      (*results)[i].not_judged = true;
      (*results)[i].error = files[i] + ": the plugin pre-flight check could not run: " + why;
    }
    return files.size();
  };
  Pipe out, err;
  if (!out.Open() || !err.Open()) return not_judged(first, "cannot create pipes");
  std::vector<std::string> args = options.command;
  args.insert(args.end(), files.begin() + static_cast<std::ptrdiff_t>(first), files.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, err.write, 1);
  posix_spawn_file_actions_adddup2(&actions, err.write, 2);
  posix_spawn_file_actions_adddup2(&actions, out.write, kResultFd);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    return not_judged(first, std::string("cannot start ") + argv[0] + ": " + std::strerror(rc));
  out.CloseWrite();
  err.CloseWrite();

  bool ready = false;
  size_t next = first;
  std::string lines, stderr_text;
  Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(options.startup_timeout_ms);
  bool timed_out = false;
  while (out.read >= 0 || err.read >= 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[2] = {{out.read, POLLIN, 0}, {err.read, POLLIN, 0}};
    const int n = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    char buf[4096];
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t got = ::read(err.read, buf, sizeof(buf));
      if (got > 0) {
        stderr_text.append(buf, static_cast<size_t>(got));
        if (stderr_text.size() > 2 * kStderrTail)
          stderr_text.erase(0, stderr_text.size() - kStderrTail);
      } else {
        err.CloseRead();
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t got = ::read(out.read, buf, sizeof(buf));
      if (got <= 0) {
        out.CloseRead();
        continue;
      }
      lines.append(buf, static_cast<size_t>(got));
      size_t nl;
      while ((nl = lines.find('\n')) != std::string::npos) {
        const json line = json::parse(lines.substr(0, nl), nullptr, false);
        lines.erase(0, nl + 1);
        if (!line.is_object()) continue;
        if (line.value("event", "") == "ready") {
          ready = true;
        } else if (ready && next < files.size() && line.value("file", "") == files[next]) {
          PreflightResult& r = (*results)[next];
          r.ok = line.value("ok", false);
          r.name = line.value("name", "");
          r.error = r.ok ? "" : line.value("error", files[next] + ": refused");
          ++next;
        } else {
          continue;
        }
        deadline = Clock::now() + std::chrono::milliseconds(options.file_timeout_ms);
      }
    }
  }
  int status = 0;
  if (timed_out) ::kill(pid, SIGKILL);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (next == files.size()) return next;
  if (!ready) {
    return not_judged(next, timed_out ? "it did not start within " +
                                            std::to_string(options.startup_timeout_ms) + " ms"
                                      : DescribeExit(status) + Tail(stderr_text));
  }
  PreflightResult& r = (*results)[next];
  r.ok = false;
  r.error = files[next] + ": refused by the pre-flight check (loading it in a child process): " +
            (timed_out ? "no answer within " + std::to_string(options.file_timeout_ms) +
                             " ms (hangs while loading)"
                       : DescribeExit(status)) +
            Tail(stderr_text);
  return next + 1;
}

}  // namespace

std::vector<PreflightResult> RunPreflight(const std::vector<std::string>& files,
                                          const PreflightOptions& options) {
  std::vector<PreflightResult> results(files.size());
  if (options.command.empty()) {
    for (PreflightResult& r : results) r.ok = true;
    return results;
  }
  size_t next = 0;
  while (next < files.size()) next = RunChild(files, next, options, &results);
  return results;
}

PreflightOptions SelfPreflight(const std::string& model, const std::string& dtype,
                               const std::string& device, int file_timeout_ms) {
  PreflightOptions p;
  // /proc/self/exe is resolved in the spawned process before exec: this very executable, even
  // when the file on disk has been replaced since.
  p.command = {"/proc/self/exe", "--model",   model, "--dtype",     dtype,   "--device",
               device,           "--threads", "1",   "--log-level", "error", "--preflight"};
  p.file_timeout_ms = file_timeout_ms;
  return p;
}

int RunPreflightChild(const std::vector<std::string>& files, const std::string& model_path,
                      const std::string& dtype, const std::string& device) {
  FILE* out = ::fcntl(kResultFd, F_GETFD) != -1 ? ::fdopen(kResultFd, "w") : stdout;
  if (out == nullptr) return 2;
  auto write_line = [out](const json& line) {
    const std::string text = line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    std::fwrite(text.data(), 1, text.size(), out);
    std::fflush(out);
  };
  std::shared_ptr<const Model> model;
  if (!model_path.empty()) {
    try {
      ModelOptions mo;
      mo.dtype = ParseDtype(dtype);
      mo.device = at::Device(device);
      mo.threads = 1;
      ConfigureThreads(1);
      model = Model::Load(model_path, mo);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "siftd --preflight: cannot load the model %s: %s\n", model_path.c_str(),
                   e.what());
      std::fflush(stderr);
      std::_Exit(3);
    }
  }
  write_line({{"event", "ready"}});
  for (const std::string& file : files) {
    LoadOutcome outcome;
    try {
      outcome = PluginLoader::Open(file, file, "", model.get(), /*check_name=*/false);
    } catch (const std::exception& e) {
      outcome.error = file + ": " + e.what();
    }
    json line = {{"file", file}, {"ok", outcome.plugin != nullptr}};
    if (outcome.plugin != nullptr) {
      line["name"] = outcome.plugin->name();
      line["version"] = outcome.plugin->version();
    } else {
      line["error"] = outcome.error;
    }
    write_line(line);
  }
  std::fflush(stderr);
  // No static destructors: LibTorch-linked libraries must never be unloaded (plugin_loader.h).
  std::_Exit(0);
}

}  // namespace sift::daemon
