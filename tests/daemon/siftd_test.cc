// Integration tests: the real build/bin/siftd started as a process (model from $SIFT_MODEL,
// the plugins of this build, the repository's pipelines) and driven over loopback TCP on
// ephemeral ports: streaming, concurrency, cancel, deadline, clear errors (unknown pipeline,
// malformed JSON, prompt too long, bad override) with the daemon still serving, a vanished
// client, /health and /metrics, the `sift` CLI, the Python client example, and SIGTERM drain.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client.h"
#include "support/http_get.h"
#include "support/siftd_process.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using sift::client::SiftClient;

using Daemon = sift::testing::SiftdProcess;
using sift::testing::HttpGet;
using sift::testing::ReadAll;

std::string RunCommand(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int rc = ::pclose(p);
  *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

const char* kContext =
    "Maria keeps her bicycle in the blue shed behind the library. The shed's code is 4417.";

class SiftdTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (sift::testing::ModelPath().empty()) return;
    if (!fs::exists(std::string(SIFT_BINARY_DIR) + "/plugins/prefill_full.so") ||
        !fs::exists(std::string(SIFT_BINARY_DIR) + "/plugins/decode_local.so")) {
      return;
    }
    daemon_ = new Daemon();
    start_error_ = daemon_->Start({"--n-ctx", "256", "--heartbeat-ms", "200", "--workers", "1"});
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override {
    SIFT_SKIP_WITHOUT_MODEL();
    if (!daemon_) GTEST_SKIP() << "plugins prefill_full/decode_local not built";
    ASSERT_EQ(start_error_, "");
  }
  std::unique_ptr<SiftClient> Connect() {
    sift::client::ClientOptions o;
    o.endpoint = daemon_->endpoint();
    return std::make_unique<SiftClient>(ctx_, o);
  }
  static json Question(const std::string& id, int max_tokens = 6) {
    return {{"type", "generate"},
            {"id", id},
            {"pipeline", "full"},
            {"context", kContext},
            {"question", "What is the shed's code?"},
            {"max_tokens", max_tokens}};
  }
  // All replies for `id` up to its terminal message.
  static std::vector<json> Replies(SiftClient& c, const std::string& id, int timeout_ms = 60000) {
    std::vector<json> out;
    const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    json h;
    while (Clock::now() < end) {
      if (!c.Recv(&h, 100) || h.value("id", json()) != json(id)) continue;
      out.push_back(h);
      if ((h["type"] == "final" || h["type"] == "error") && !h.value("duplicate", false)) {
        return out;
      }
    }
    ADD_FAILURE() << "no terminal message for " << id;
    return out;
  }
  void ExpectServing() {
    auto c = Connect();
    c->Send({{"type", "ping"}, {"nonce", 1}});
    json h;
    ASSERT_TRUE(c->Recv(&h, 5000));
    EXPECT_EQ(h["type"], "pong");
    EXPECT_EQ(h["ready"], true);
  }

  static inline Daemon* daemon_ = nullptr;
  static inline std::string start_error_;
  zmq::context_t ctx_{1};
};

TEST_F(SiftdTest, StreamingGenerate) {
  auto c = Connect();
  c->Send(Question("s1", 8));
  auto r = Replies(*c, "s1");
  ASSERT_GE(r.size(), 2u);
  EXPECT_EQ(r.front()["type"], "accepted");
  const json& f = r.back();
  ASSERT_EQ(f["type"], "final") << f.dump();
  std::string streamed;
  int64_t seq = 0;
  for (const json& h : r) {
    if (h["type"] != "chunk") continue;
    EXPECT_EQ(h["seq"], seq++);
    streamed += h["text"].get<std::string>();
  }
  EXPECT_GE(seq, 1);
  EXPECT_EQ(streamed, f["text"]);
  EXPECT_GE(f["usage"]["completion_tokens"].get<int>(), 1);
  EXPECT_LE(f["usage"]["completion_tokens"].get<int>(), 8);
  const json& s = f["stats"];
  EXPECT_EQ(s["tokens_before"], f["usage"]["prompt_tokens"]);
  EXPECT_EQ(s["tokens_kept"], s["tokens_before"]);  // full KV
  EXPECT_GT(s["kv_bytes"].get<int64_t>(), 0);
  EXPECT_GT(s["ttft_ms"].get<double>(), 0);
  EXPECT_GE(s["e2e_ms"].get<double>(), s["ttft_ms"].get<double>());
  ASSERT_EQ(s["stages"].size(), 2u);
  EXPECT_EQ(s["stages"][0]["kind"], "prefill");
  EXPECT_EQ(s["stages"][1]["kind"], "decode");
}

TEST_F(SiftdTest, ConcurrentClientsEachGetOneTerminalPerRequest) {
  constexpr int kClients = 4, kRequests = 2;
  std::vector<std::thread> threads;
  std::atomic<int> finals{0}, extra{0};
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto c = Connect();
      std::set<std::string> open;
      for (int j = 0; j < kRequests; ++j) {
        json g = {{"type", "generate"}, {"id", "c" + std::to_string(j)},
                  {"pipeline", "full"}, {"prompt", "Colours: red, green,"},
                  {"max_tokens", 2},    {"stream", j == 0}};
        c->Send(g);
        open.insert(g["id"]);
      }
      json h;
      while (!open.empty() && c->Recv(&h, 60000)) {
        if (h["type"] == "final" && open.erase(h["id"].get<std::string>())) finals++;
        if (h["type"] == "error") extra++;
      }
      if (c->Recv(&h, 300) && h["type"] != "heartbeat") extra++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(finals.load(), kClients * kRequests);
  EXPECT_EQ(extra.load(), 0);
}

TEST_F(SiftdTest, CancelWhileGenerating) {
  auto c = Connect();
  c->Send({{"type", "generate"},
           {"id", "long"},
           {"pipeline", "full"},
           {"prompt", "Count: one, two,"},
           {"max_tokens", 200},
           {"ignore_eos", true}});
  json h;
  while (c->Recv(&h, 30000) && h["type"] != "chunk") {
  }
  ASSERT_EQ(h["type"], "chunk");
  c->Send({{"type", "cancel"}, {"id", "long"}});
  json t = Replies(*c, "long").back();
  EXPECT_EQ(t["type"], "error");
  EXPECT_EQ(t["code"], "CANCELLED");
  EXPECT_EQ(t["reason"], "client_cancel");
  EXPECT_GE(t["details"]["completion_tokens"].get<int>(), 1);
  EXPECT_LT(t["details"]["completion_tokens"].get<int>(), 200);
  ExpectServing();
}

TEST_F(SiftdTest, DeadlineExceeded) {
  auto c = Connect();
  const auto start = Clock::now();
  c->Send({{"type", "generate"},
           {"id", "dl"},
           {"pipeline", "full"},
           {"prompt", "Count: one, two,"},
           {"max_tokens", 200},
           {"ignore_eos", true},
           {"deadline_ms", 400}});
  json t = Replies(*c, "dl").back();
  EXPECT_EQ(t["code"], "DEADLINE_EXCEEDED") << t.dump();
  EXPECT_EQ(t["reason"], "deadline");
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
  ExpectServing();
}

TEST_F(SiftdTest, ClearErrorsAndTheDaemonKeepsServing) {
  auto c = Connect();
  json g = Question("np");
  g["pipeline"] = "no-such-pipeline";
  c->Send(g);
  json e = Replies(*c, "np").back();
  EXPECT_EQ(e["code"], "NOT_FOUND");
  EXPECT_EQ(e["reason"], "unknown_pipeline");

  c->SendRaw({"SIFT/1", "{\"type\": \"generate\", \"id\": \"bad\", "});
  json h;
  ASSERT_TRUE(c->Recv(&h, 5000));
  EXPECT_EQ(h["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(h["reason"], "bad_json");

  c->Send({{"type", "teleport"}, {"id", "tp"}});
  ASSERT_TRUE(c->Recv(&h, 5000));
  EXPECT_EQ(h["reason"], "unknown_type");

  // --n-ctx 256: a longer prompt is refused before any compute, with the numbers.
  std::string long_prompt;
  for (int i = 0; i < 200; ++i) long_prompt += "word" + std::to_string(i) + " ";
  c->Send({{"type", "generate"}, {"id", "big"}, {"pipeline", "full"}, {"prompt", long_prompt}});
  e = Replies(*c, "big").back();
  EXPECT_EQ(e["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(e["reason"], "prompt_too_long");
  EXPECT_GT(e["details"]["n_prompt_tokens"].get<int>(), 256);
  EXPECT_EQ(e["details"]["n_ctx"], 256);

  g = Question("ov");
  g["params"] = {{"prefill", {{"no_such_parameter", 3}}}};
  c->Send(g);
  e = Replies(*c, "ov").back();
  EXPECT_EQ(e["code"], "INVALID_ARGUMENT") << e.dump();
  EXPECT_NE(e["message"].get<std::string>().find("no_such_parameter"), std::string::npos);

  c->Send(Question("ok", 2));
  EXPECT_EQ(Replies(*c, "ok").back()["type"], "final");
}

TEST_F(SiftdTest, VanishedClientIsCancelled) {
  {
    auto c = Connect();
    c->Send({{"type", "generate"},
             {"id", "v"},
             {"pipeline", "full"},
             {"prompt", "Count: one, two,"},
             {"max_tokens", 200},
             {"ignore_eos", true}});
    json h;
    while (c->Recv(&h, 30000) && h["type"] != "chunk") {
    }
  }  // socket closed mid-generation
  const auto end = Clock::now() + std::chrono::seconds(20);
  bool seen = false;
  while (!seen && Clock::now() < end) {
    seen =
        HttpGet(daemon_->http(), "/metrics").find("sift_clients_gone_total") != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(seen);
  // The worker is free again: a new request does not wait for 200 tokens.
  auto c = Connect();
  c->Send(Question("after", 2));
  json f = Replies(*c, "after").back();
  EXPECT_EQ(f["type"], "final");
  EXPECT_LT(f["stats"]["queue_ms"].get<double>(), 5000);
}

TEST_F(SiftdTest, HealthAndMetrics) {
  auto c = Connect();
  c->Send(Question("m", 2));
  Replies(*c, "m");
  const std::string health = HttpGet(daemon_->http(), "/health");
  EXPECT_EQ(health.substr(0, 4), "200\n") << health;
  EXPECT_NE(health.find("\"ready\""), std::string::npos);
  EXPECT_EQ(HttpGet(daemon_->http(), "/health/live").substr(0, 3), "200");
  EXPECT_EQ(HttpGet(daemon_->http(), "/nope").substr(0, 3), "404");
  const std::string metrics = HttpGet(daemon_->http(), "/metrics");
  for (const char* want : {"sift_requests_total{pipeline=\"full\",outcome=\"ok\"}",
                           "sift_request_ttft_seconds_bucket", "sift_request_e2e_seconds_count",
                           "sift_queue_depth", "sift_tokens_kept_total{pipeline=\"full\"}",
                           "sift_stage_seconds_bucket", "sift_catalog_generation 1"}) {
    EXPECT_NE(metrics.find(want), std::string::npos) << want;
  }
}

TEST_F(SiftdTest, CommandLineClient) {
  const std::string ctx_file = ::testing::TempDir() + "/sift-cli-context.txt";
  std::ofstream(ctx_file) << kContext;
  const std::string sift = std::string(SIFT_BINARY_DIR) + "/bin/sift -e " + daemon_->endpoint();
  int status = 0;
  std::string out = RunCommand(
      sift + " generate --context-file " + ctx_file + " --question 'What is the code?' -n 4 --json",
      &status);
  EXPECT_EQ(status, 0) << out;
  json f = json::parse(out, nullptr, false);
  ASSERT_FALSE(f.is_discarded()) << out;
  EXPECT_EQ(f["type"], "final");
  out = RunCommand(sift + " generate --context-file " + ctx_file + " --question 'Code?' -n 3",
                   &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("ttft"), std::string::npos) << out;
  out = RunCommand(sift + " list", &status);
  EXPECT_EQ(status, 0);
  EXPECT_NE(out.find("prefill_full"), std::string::npos) << out;
  out = RunCommand(sift + " ping --count 2", &status);
  EXPECT_EQ(status, 0);
  EXPECT_NE(out.find("pong 1"), std::string::npos) << out;
  out = RunCommand(sift + " generate -p nope --prompt hi", &status);
  EXPECT_EQ(status, 1);
  EXPECT_NE(out.find("NOT_FOUND/unknown_pipeline"), std::string::npos) << out;
}

// Ctrl-C on `sift generate` sends a cancel, prints the daemon's CANCELLED answer and exits 130
// (the interrupted wait once ended it with "Interrupted system call", exit 2, no cancel sent).
TEST_F(SiftdTest, CtrlCOnTheCommandLineClientCancelsTheRequest) {
  const std::string out_file = ::testing::TempDir() + "/sift-ctrl-c.out";
  const std::string err_file = ::testing::TempDir() + "/sift-ctrl-c.err";
  const std::string sift = std::string(SIFT_BINARY_DIR) + "/bin/sift";
  const std::string endpoint = daemon_->endpoint();
  fs::remove(out_file);  // an earlier run's output would be taken for this one's
  fs::remove(err_file);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 1);
    ::dup2(::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 2);
    // A greedy answer of about 200 tokens (this prompt does not end early).
    ::execl(sift.c_str(), sift.c_str(), "-e", endpoint.c_str(), "generate", "--message",
            "user:Write a very long story about a dragon and a knight, with many chapters.",
            "--max-tokens", "200", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_GT(pid, 0);
  // Interrupt once the answer streams.
  const auto streaming = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < streaming &&
         (!fs::exists(out_file) || fs::file_size(out_file) == 0)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGINT);
  int status = -1;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (::waitpid(pid, &status, WNOHANG) == 0 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (::waitpid(pid, &status, WNOHANG) == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  const std::string err = ReadAll(err_file);
  ASSERT_TRUE(WIFEXITED(status)) << "wait status " << status << "\n" << err;
  EXPECT_EQ(WEXITSTATUS(status), 130) << err;
  EXPECT_NE(err.find("CANCELLED/client_cancel"), std::string::npos) << err;
  EXPECT_EQ(err.find("partial_text"), std::string::npos) << err;  // it is on stdout already
  EXPECT_GT(fs::file_size(out_file), 0u);
  EXPECT_NE(daemon_->log().find("\"reason\":\"client_cancel\""), std::string::npos);
}

TEST_F(SiftdTest, PythonClientExample) {
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  int status = 0;
  const std::string out =
      RunCommand("/usr/bin/python3 " + std::string(SIFT_SOURCE_DIR) +
                     "/tools/python/example.py --max-tokens 6 --endpoint " + daemon_->endpoint(),
                 &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("final: finish="), std::string::npos) << out;
  EXPECT_NE(out.find("stream closed -> CANCELLED client_cancel"), std::string::npos) << out;
  EXPECT_NE(out.find("still serving: True"), std::string::npos) << out;
}

// Its own daemon: SIGTERM drains (the running request finishes, new ones are refused), the
// process exits 0.
TEST(SiftdDrainTest, SigtermDrainsGracefully) {
  SIFT_SKIP_WITHOUT_MODEL();
  if (!fs::exists(std::string(SIFT_BINARY_DIR) + "/plugins/decode_local.so")) {
    GTEST_SKIP() << "plugins not built";
  }
  Daemon d;
  ASSERT_EQ(d.Start({"--heartbeat-ms", "200"}), "");
  zmq::context_t ctx(1);
  sift::client::ClientOptions o;
  o.endpoint = d.endpoint();
  SiftClient c(ctx, o);
  c.Send({{"type", "generate"},
          {"id", "inflight"},
          {"pipeline", "full"},
          {"prompt", "Count: one, two,"},
          {"max_tokens", 400},  // long enough (~1 s or more) to still run when "late" arrives
          {"ignore_eos", true}});
  json h;
  while (c.Recv(&h, 30000) && h["type"] != "chunk") {
  }
  ASSERT_EQ(h["type"], "chunk");
  ::kill(d.pid(), SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  c.Send({{"type", "generate"}, {"id", "late"}, {"pipeline", "full"}, {"prompt", "Hi"}});
  std::map<std::string, json> terminal;
  while (terminal.size() < 2 && c.Recv(&h, 30000)) {
    if (h["type"] == "final" || h["type"] == "error") terminal[h["id"]] = h;
  }
  EXPECT_EQ(terminal["inflight"]["type"], "final") << terminal["inflight"].dump();
  EXPECT_EQ(terminal["late"]["code"], "UNAVAILABLE");
  EXPECT_EQ(terminal["late"]["reason"], "shutting_down");
  EXPECT_EQ(d.Wait(30000), 0) << d.log();
  EXPECT_NE(d.log().find("\"event\":\"stopped\""), std::string::npos);
}

}  // namespace
