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

// Starts `options.command` over files[first...] with stdin on /dev/null, stdout and stderr on
// `err` and the result lines on `out` (fd 3); 0 on success, else the posix_spawn error.
int SpawnChild(const std::vector<std::string>& files, size_t first, const PreflightOptions& options,
               const Pipe& out, const Pipe& err, pid_t* pid) {
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
  const int rc = ::posix_spawn(pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc;
}

// What one child has reported so far.
struct ChildReport {
  bool ready = false;      // its "ready" line (the model is loaded)
  size_t next = 0;         // the first file without a verdict
  bool timed_out = false;  // it missed the start-up or a per-file deadline
  std::string stderr_text;
};

// Reads the child's result lines (one JSON object each) and its stderr until both pipes close or
// a deadline passes: options.startup_timeout_ms for the "ready" line, then file_timeout_ms for
// each verdict. Fills results from report->next on.
class ChildReader {
 public:
  ChildReader(const std::vector<std::string>& files, const PreflightOptions& options,
              std::vector<PreflightResult>* results, ChildReport* report)
      : files_(files), options_(options), results_(results), report_(report) {}

  void Run(Pipe& out, Pipe& err) {
    Clock::time_point deadline =
        Clock::now() + std::chrono::milliseconds(options_.startup_timeout_ms);
    while (out.read >= 0 || err.read >= 0) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        report_->timed_out = true;
        break;
      }
      pollfd fds[2] = {{out.read, POLLIN, 0}, {err.read, POLLIN, 0}};
      const int n = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
      if (n < 0 && errno != EINTR) break;
      if (n <= 0) continue;
      if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) ReadStderr(err);
      if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) && ReadResults(out)) {
        deadline = Clock::now() + std::chrono::milliseconds(options_.file_timeout_ms);
      }
    }
  }

 private:
  void ReadStderr(Pipe& err) {
    char buf[4096];
    const ssize_t got = ::read(err.read, buf, sizeof(buf));
    if (got <= 0) {
      err.CloseRead();
      return;
    }
    std::string& text = report_->stderr_text;
    text.append(buf, static_cast<size_t>(got));
    if (text.size() > 2 * kStderrTail) text.erase(0, text.size() - kStderrTail);
  }

  // True when a line moved the child on (ready, or a verdict): the next deadline starts then.
  bool ReadResults(Pipe& out) {
    char buf[4096];
    const ssize_t got = ::read(out.read, buf, sizeof(buf));
    if (got <= 0) {
      out.CloseRead();
      return false;
    }
    lines_.append(buf, static_cast<size_t>(got));
    bool progressed = false;
    size_t nl;
    while ((nl = lines_.find('\n')) != std::string::npos) {
      const json line = json::parse(lines_.substr(0, nl), nullptr, false);
      lines_.erase(0, nl + 1);
      if (line.is_object() && Apply(line)) progressed = true;
    }
    return progressed;
  }

  bool Apply(const json& line) {
    if (line.value("event", "") == "ready") {
      report_->ready = true;
      return true;
    }
    const size_t next = report_->next;
    if (!report_->ready || next >= files_.size() || line.value("file", "") != files_[next]) {
      return false;
    }
    PreflightResult& r = (*results_)[next];
    r.ok = line.value("ok", false);
    r.name = line.value("name", "");
    r.error = r.ok ? "" : line.value("error", files_[next] + ": refused");
    ++report_->next;
    return true;
  }

  const std::vector<std::string>& files_;
  const PreflightOptions& options_;
  std::vector<PreflightResult>* results_;
  ChildReport* report_;
  std::string lines_;
};

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
  pid_t pid = -1;
  const int rc = SpawnChild(files, first, options, out, err, &pid);
  if (rc != 0) {
    return not_judged(first, "cannot start " + options.command[0] + ": " + std::strerror(rc));
  }
  out.CloseWrite();
  err.CloseWrite();

  ChildReport report;
  report.next = first;
  ChildReader(files, options, results, &report).Run(out, err);
  int status = 0;
  if (report.timed_out) ::kill(pid, SIGKILL);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const size_t next = report.next;
  if (next == files.size()) return next;
  if (!report.ready) {
    return not_judged(
        next, report.timed_out
                  ? "it did not start within " + std::to_string(options.startup_timeout_ms) + " ms"
                  : DescribeExit(status) + Tail(report.stderr_text));
  }
  PreflightResult& r = (*results)[next];
  r.ok = false;
  r.error = files[next] + ": refused by the pre-flight check (loading it in a child process): " +
            (report.timed_out ? "no answer within " + std::to_string(options.file_timeout_ms) +
                                    " ms (hangs while loading)"
                              : DescribeExit(status)) +
            Tail(report.stderr_text);
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
