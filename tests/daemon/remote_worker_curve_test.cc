// A remote stage on another host, over CURVE (issue 27): siftd in one network namespace, `siftd
// --worker` in another, joined by a veth pair, real TCP between them. The test process talks to
// siftd over an ipc:// socket (a file, reachable from any namespace).
//   - a pipeline whose decode stage runs on the worker answers, with the single-process answer;
//   - a wrong worker key, or a worker that does not list this daemon's key, refuse: the request
//     gets UNAVAILABLE (worker_unavailable) naming CURVE, the worker logs auth_denied;
//   - a worker killed mid-request gives that request UNAVAILABLE while another pipeline keeps
//     answering;
//   - a pipeline pointing at a non-loopback worker without a key is refused at load.
// Needs root (network namespaces); skipped with the reason where they cannot be created.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client.h"
#include "support/siftd_process.h"
#include "support/temp_dir.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using sift::client::ClientOptions;
using sift::client::SiftClient;
namespace fs = std::filesystem;

const std::string kDaemonIp = "10.213.0.1", kWorkerIp = "10.213.0.2";

int Sh(const std::string& cmd) {
  const int rc = std::system((cmd + " >/dev/null 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Two namespaces joined by a veth pair: "<a>" (siftd, 10.213.0.1) and "<b>" (workers, .2).
class Namespaces {
 public:
  Namespaces() {
    const std::string id = std::to_string(::getpid());
    a_ = "sift-a-" + id;
    b_ = "sift-b-" + id;
    const std::string va = "sa" + id, vb = "sb" + id;
    const std::vector<std::string> steps = {
        "ip netns add " + a_,
        "ip netns add " + b_,
        "ip link add " + va + " type veth peer name " + vb,
        "ip link set " + va + " netns " + a_,
        "ip link set " + vb + " netns " + b_,
        "ip -n " + a_ + " addr add " + kDaemonIp + "/24 dev " + va,
        "ip -n " + b_ + " addr add " + kWorkerIp + "/24 dev " + vb,
        "ip -n " + a_ + " link set " + va + " up",
        "ip -n " + b_ + " link set " + vb + " up",
        "ip -n " + a_ + " link set lo up",
        "ip -n " + b_ + " link set lo up"};
    for (const std::string& step : steps) {
      if (Sh(step) != 0) {
        error_ = "`" + step + "` failed (network namespaces need root and iproute2)";
        return;
      }
    }
  }
  ~Namespaces() {
    Sh("ip netns del " + a_);  // deleting a namespace removes its end of the veth pair
    Sh("ip netns del " + b_);
  }
  const std::string& error() const { return error_; }
  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }

 private:
  std::string a_, b_, error_;
};

// A siftd started inside a network namespace, its stderr in a file.
class NsProcess {
 public:
  NsProcess(const std::string& netns, std::vector<std::string> args, const std::string& log)
      : log_(log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      const int ns = ::open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
      if (ns < 0 || ::setns(ns, CLONE_NEWNET) != 0) ::_exit(126);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      args.insert(args.begin(), std::string(SIFT_BINARY_DIR) + "/bin/siftd");
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~NsProcess() { Kill(SIGKILL); }
  void Kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  std::string log() const { return sift::testing::ReadAll(log_); }
  // Waits until the log has `text`; false after `timeout_s` or when the process exited.
  bool WaitFor(const std::string& text, int timeout_s = 120) {
    const auto end = Clock::now() + std::chrono::seconds(timeout_s);
    while (Clock::now() < end) {
      if (log().find(text) != std::string::npos) return true;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return log().find(text) != std::string::npos;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

 private:
  pid_t pid_ = -1;
  std::string log_;
};

std::string MakeKeys(const std::string& prefix) {
  Sh(std::string(SIFT_BINARY_DIR) + "/bin/siftd --make-curve-keys " + prefix);
  std::ifstream in(prefix + ".pub");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] != '#') return line;
  }
  return "";
}

json Generate(const std::string& id, const std::string& pipeline, int max_tokens) {
  return {{"type", "generate"},       {"id", id},
          {"pipeline", pipeline},     {"prompt", "The three primary colours are"},
          {"max_tokens", max_tokens}, {"ignore_eos", true}};
}

// Every reply for `ids` up to each one's terminal message, whatever their order.
std::map<std::string, std::vector<json>> Replies(SiftClient& c, const std::vector<std::string>& ids,
                                                 int timeout_s = 120) {
  std::map<std::string, std::vector<json>> out;
  size_t done = 0;
  const auto end = Clock::now() + std::chrono::seconds(timeout_s);
  json h;
  while (done < ids.size() && Clock::now() < end) {
    if (!c.Recv(&h, 100) || !h.contains("id") || !h["id"].is_string()) continue;
    const std::string id = h["id"].get<std::string>();
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) continue;
    out[id].push_back(h);
    if (h["type"] == "final" || h["type"] == "error") ++done;
  }
  for (const std::string& id : ids) {
    if (out[id].empty() ||
        (out[id].back()["type"] != "final" && out[id].back()["type"] != "error")) {
      ADD_FAILURE() << "no terminal message for " << id;
    }
  }
  return out;
}

class RemoteWorkerCurveTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (sift::testing::ModelPath().empty()) {
      skip_ = "SIFT_MODEL is not set (tools/setup.sh sets it)";
      return;
    }
    ns_ = new Namespaces();
    if (!ns_->error().empty()) {
      skip_ = ns_->error();
      return;
    }
    dir_ = new sift::testing::TempDir();
    const std::string d = dir_->path();
    daemon_pub_ = MakeKeys(d + "/daemon");
    worker_pub_ = MakeKeys(d + "/worker");
    other_pub_ = MakeKeys(d + "/other");
    std::ofstream(d + "/daemons.pub") << daemon_pub_ << "\n";
    std::ofstream(d + "/others.pub") << other_pub_ << "\n";
    fs::create_directories(d + "/pipelines");
    auto remote = [&](const std::string& name, int port, const std::string& key) {
      std::ofstream(d + "/pipelines/" + name + ".toml")
          << "name = \"" << name << "\"\n[[stage]]\nplugin = \"prefill_full\"\n"
          << "[[stage]]\nname = \"decode\"\nplugin = \"decode_local\"\n"
          << "endpoint = \"tcp://" << kWorkerIp << ":" << port << "\"\n"
          << (key.empty() ? "" : "worker_key = \"" + key + "\"\n");
    };
    remote("remote", 7801, worker_pub_);
    remote("wrongkey", 7801, other_pub_);   // the worker is not who this key says
    remote("unlisted", 7802, worker_pub_);  // that worker does not list the daemon's key
    remote("plain", 7801, "");              // non-loopback without a key: refused at load
    std::ofstream(d + "/pipelines/full.toml")
        << "name = \"full\"\n[[stage]]\nplugin = \"prefill_full\"\n[[stage]]\nplugin = "
           "\"decode_local\"\n";
    const std::string model = sift::testing::ModelPath();
    const std::string plugins = std::string(SIFT_BINARY_DIR) + "/plugins";
    worker_ = new NsProcess(ns_->b(),
                            {"--worker", "--bind", "tcp://" + kWorkerIp + ":7801", "--model", model,
                             "--plugins", plugins, "--threads", "1", "--curve-secret-key",
                             d + "/worker.key", "--curve-client-keys", d + "/daemons.pub"},
                            d + "/worker.log");
    unlisting_ = new NsProcess(ns_->b(),
                               {"--worker", "--bind", "tcp://" + kWorkerIp + ":7802", "--model",
                                model, "--plugins", plugins, "--threads", "1", "--curve-secret-key",
                                d + "/worker.key", "--curve-client-keys", d + "/others.pub"},
                               d + "/unlisting.log");
    endpoint_ = "ipc://" + d + "/siftd.sock";
    daemon_ = new NsProcess(ns_->a(),
                            {"--model",
                             model,
                             "--plugins",
                             plugins,
                             "--pipelines",
                             d + "/pipelines",
                             "--staging-dir",
                             d,
                             "--bind",
                             endpoint_,
                             "--http",
                             "off",
                             "--threads",
                             "1",
                             "--allow-ignore-eos",
                             "true",
                             "--hop-curve-secret-key",
                             d + "/daemon.key",
                             "--log-format",
                             "json"},
                            d + "/siftd.log");
    if (!worker_->WaitFor("\"event\":\"worker_ready\"") ||
        !unlisting_->WaitFor("\"event\":\"worker_ready\"") ||
        !daemon_->WaitFor("\"event\":\"ready\"")) {
      start_error_ = "worker:\n" + worker_->log() + "\nsiftd:\n" + daemon_->log();
    }
  }
  static void TearDownTestSuite() {
    delete daemon_;
    delete unlisting_;
    delete worker_;
    delete dir_;
    delete ns_;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_EQ(start_error_, "");
    ClientOptions o;
    o.endpoint = endpoint_;
    client_ = std::make_unique<SiftClient>(ctx_, o);
  }

  static inline Namespaces* ns_ = nullptr;
  static inline sift::testing::TempDir* dir_ = nullptr;
  static inline NsProcess *worker_ = nullptr, *unlisting_ = nullptr, *daemon_ = nullptr;
  static inline std::string skip_, start_error_, endpoint_, daemon_pub_, worker_pub_, other_pub_;
  zmq::context_t ctx_{1};
  std::unique_ptr<SiftClient> client_;
};

TEST_F(RemoteWorkerCurveTest, RemoteStageOverCurveGivesTheLocalAnswer) {
  client_->Send(Generate("remote", "remote", 12));
  client_->Send(Generate("local", "full", 12));
  auto r = Replies(*client_, {"remote", "local"});
  const json remote = r["remote"].back(), local = r["local"].back();
  ASSERT_EQ(remote["type"], "final") << remote.dump();
  ASSERT_EQ(local["type"], "final") << local.dump();
  EXPECT_EQ(remote["text"], local["text"]);
  EXPECT_EQ(remote["usage"]["completion_tokens"], 12) << remote.dump();
  // Streamed from the other namespace as it was generated, not only in the final.
  size_t tokens = 0;
  for (const json& m : r["remote"]) tokens += m["type"] == "chunk";
  EXPECT_GE(tokens, 1u);
  EXPECT_NE(worker_->log().find("\"curve\":true"), std::string::npos) << worker_->log();
}

TEST_F(RemoteWorkerCurveTest, WrongOrUnlistedKeysAreRefused) {
  for (const char* pipeline : {"wrongkey", "unlisted"}) {
    client_->Send(Generate(pipeline, pipeline, 4));
    const json e = Replies(*client_, {pipeline})[pipeline].back();
    EXPECT_EQ(e["type"], "error") << e.dump();
    EXPECT_EQ(e["code"], "UNAVAILABLE") << e.dump();
    EXPECT_EQ(e["reason"], "worker_unavailable") << e.dump();
    EXPECT_NE(e.value("message", "").find("CURVE"), std::string::npos) << e.dump();
  }
  // The worker that does not list the daemon's key says why; the other never saw a valid
  // handshake for its own key.
  EXPECT_TRUE(unlisting_->WaitFor("\"event\":\"auth_denied\"", 10)) << unlisting_->log();
  EXPECT_NE(unlisting_->log().find(daemon_pub_), std::string::npos) << unlisting_->log();
}

TEST_F(RemoteWorkerCurveTest, NonLoopbackWorkerWithoutAKeyIsRefusedAtLoad) {
  std::istringstream log(daemon_->log());
  std::string line;
  while (std::getline(log, line)) {
    if (line.find("\"pipeline_rejected\"") != std::string::npos &&
        line.find("plain.toml") != std::string::npos) {
      break;
    }
    line.clear();
  }
  ASSERT_FALSE(line.empty()) << daemon_->log();
  EXPECT_NE(line.find("is not a loopback address"), std::string::npos) << line;
  EXPECT_NE(line.find("worker_key"), std::string::npos) << line;
}

// Last: it kills the worker.
TEST_F(RemoteWorkerCurveTest, WorkerKilledMidRequestFailsOnlyThatRequest) {
  client_->Send(Generate("long", "remote", 400));
  // Kill the worker once the remote decode streams.
  const auto end = Clock::now() + std::chrono::seconds(120);
  json h;
  int tokens = 0;
  while (tokens < 3 && Clock::now() < end) {
    if (client_->Recv(&h, 100) && h.value("id", "") == "long" && h["type"] == "chunk") ++tokens;
    ASSERT_NE(h.value("type", ""), "final") << h.dump();
  }
  ASSERT_EQ(tokens, 3);
  worker_->Kill(SIGKILL);
  // Other pipelines keep answering while the dead worker's request times out.
  for (int i = 0; i < 3; ++i) client_->Send(Generate("full-" + std::to_string(i), "full", 4));
  auto r = Replies(*client_, {"long", "full-0", "full-1", "full-2"});
  const json e = r["long"].back();
  EXPECT_EQ(e["type"], "error") << e.dump();
  EXPECT_EQ(e["code"], "UNAVAILABLE") << e.dump();
  EXPECT_EQ(e["reason"], "worker_unavailable") << e.dump();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r["full-" + std::to_string(i)].back()["type"], "final");
  }
}

}  // namespace
