// DaemonBackend (backend.h): SIFT/1 over ZeroMQ with the shared C++ client, and the spawned
// siftd's life cycle.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "backend.h"
#include "client.h"
#include "sift/error.h"

namespace sift::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

int64_t StatusField(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

class DaemonBackend final : public Backend {
 public:
  explicit DaemonBackend(const DaemonOptions& options) : options_(options) {
    endpoint_ = options.endpoint;
    if (options.spawn) Spawn();
    client::ClientOptions co;
    co.endpoint = endpoint_;
    client_ = std::make_unique<client::SiftClient>(context_, co);
    // The daemon answers a ping once it serves; fail early with a clear message otherwise.
    client_->Send({{"type", "list"}, {"id", "bench-list"}});
    json reply;
    if (!client_->Recv(&reply, 30000)) throw Error("no reply from siftd at " + endpoint_);
    listing_ = reply;
  }
  ~DaemonBackend() override {
    client_.reset();
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      for (int i = 0; i < 300 && ::waitpid(pid_, &status, WNOHANG) != pid_; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (i == 299) {
          ::kill(pid_, SIGKILL);
          ::waitpid(pid_, &status, 0);
        }
      }
    }
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  std::vector<RunResult> Run(const std::vector<BenchConfig>& configs, const Sample& sample,
                             const RunOptions& options) override {
    std::vector<RunResult> out;
    for (const BenchConfig& c : configs) out.push_back(RunOne(c, sample, options));
    return out;
  }

  std::string Describe() const override {
    return pid_ > 0 ? "spawned siftd (pid " + std::to_string(pid_) + ") at " + endpoint_
                    : "siftd at " + endpoint_;
  }
  pid_t DaemonPid() const override { return pid_; }

 private:
  void Spawn() {
    dir_ = (std::filesystem::temp_directory_path() / ("sift-bench-" + std::to_string(::getpid())))
               .string();
    std::filesystem::create_directories(dir_ + "/staging");
    const std::string ready = dir_ + "/ready.json";
    const std::string log = dir_ + "/siftd.log";
    std::vector<std::string> args = {options_.siftd,
                                     "--model",
                                     options_.model,
                                     "--pipelines",
                                     options_.pipelines_dir,
                                     "--plugins",
                                     options_.plugins_dir,
                                     "--staging-dir",
                                     dir_ + "/staging",
                                     "--bind",
                                     "tcp://127.0.0.1:*",
                                     "--http",
                                     "127.0.0.1:0",
                                     "--ready-file",
                                     ready};
    // Benchmarks decode fixed counts (ignore_eos) of any length: siftd's limits for untrusted
    // clients do not apply to its own benchmark.
    args.insert(args.end(), {"--allow-ignore-eos", "true", "--max-tokens-limit", "1048576"});
    // Every measured request prefills its whole prompt: repetitions of one prompt must not be
    // served from the prefix cache.
    args.insert(args.end(), {"--prefix-cache", "false"});
    args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());
    pid_ = ::fork();
    if (pid_ < 0) throw Error("fork failed");
    if (pid_ == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    const auto end = Clock::now() + std::chrono::seconds(180);
    while (Clock::now() < end) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw Error("siftd exited during start-up:\n" + ReadFile(log));
      }
      if (std::filesystem::exists(ready)) {
        const json r = json::parse(ReadFile(ready), nullptr, false);
        if (!r.is_discarded() && r.contains("endpoints") && !r["endpoints"].empty()) {
          endpoint_ = r["endpoints"][0].get<std::string>();
          return;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    throw Error("siftd did not become ready in 180 s:\n" + ReadFile(log));
  }

  RunResult RunOne(const BenchConfig& config, const Sample& sample, const RunOptions& options) {
    RunResult r;
    const std::string id = "b" + std::to_string(++counter_);
    json msg = {{"type", "generate"},
                {"id", id},
                {"pipeline", config.pipeline},
                {"context", sample.context},
                {"question", sample.question},
                {"sampling", {{"temperature", 0}}},
                {"max_tokens", options.max_tokens > 0 ? options.max_tokens : sample.max_tokens},
                {"params", config.overrides},
                {"stream", false}};
    if (options.ignore_eos) msg["ignore_eos"] = true;
    const auto start = Clock::now();
    client_->Send(msg);
    const auto end = start + std::chrono::milliseconds(options_.timeout_ms);
    json reply;
    while (Clock::now() < end) {
      if (!client_->Recv(&reply, 1000)) {
        if (pid_ > 0) {
          int status = 0;
          if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            throw Error("siftd died:\n" + ReadFile(dir_ + "/siftd.log"));
          }
        }
        continue;
      }
      if (reply.value("id", json()) != json(id)) continue;
      const std::string type = reply.value("type", "");
      if (type == "final") {
        r.ok = true;
        r.client_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
        r.text = reply.value("text", "");
        r.finish_reason = reply.value("finish_reason", "");
        r.prompt_tokens = reply["usage"].value("prompt_tokens", 0);
        r.completion_tokens = reply["usage"].value("completion_tokens", 0);
        r.stats = reply.value("stats", json::object());
        return r;
      }
      if (type == "error" && !reply.value("duplicate", false)) {
        r.error = reply.value("code", "") + "/" + reply.value("reason", "") + ": " +
                  reply.value("message", "");
        return r;
      }
    }
    client_->Send({{"type", "cancel"}, {"id", id}});
    r.error = "timeout after " + std::to_string(options_.timeout_ms) + " ms";
    return r;
  }

  DaemonOptions options_;
  zmq::context_t context_;
  std::unique_ptr<client::SiftClient> client_;
  std::string endpoint_, dir_;
  pid_t pid_ = -1;
  json listing_;
  int64_t counter_ = 0;
};

}  // namespace

std::unique_ptr<Backend> MakeDaemonBackend(const DaemonOptions& options) {
  return std::make_unique<DaemonBackend>(options);
}

int64_t PeakRssKb(pid_t pid) { return pid > 0 ? StatusField(pid, "VmHWM") : -1; }
int64_t CurrentRssKb(pid_t pid) { return pid > 0 ? StatusField(pid, "VmRSS") : -1; }

bool ResetPeakRss(pid_t pid) {
  if (pid <= 0) return false;
  std::ofstream out("/proc/" + std::to_string(pid) + "/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace sift::bench
