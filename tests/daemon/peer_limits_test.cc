// What one peer can do to everyone else (issue 28's table, one test or more per row), against
// the real siftd started as a process (tests/support/siftd_process.h) with the real model:
// connection slots of the OpenAI port (per-peer limit, idle timeout, API key first), the
// server-side cap on generated tokens and ignore_eos, tiny top_p, bodies between the ZeroMQ
// header limit and the HTTP body limit, half-closing HTTP clients, CURVE key files, log lines
// of unauthenticated peers, and the paths a `list` discloses.
//
// Other clients are distinct loopback addresses (127.0.0.2, ...: the whole of 127.0.0.0/8
// reaches the loopback interface), so the per-peer limits see them as other peers.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <zmq_addon.hpp>

#include "client.h"
#include "support/hang_report.h"
#include "support/siftd_process.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using sift::client::SiftClient;
using sift::testing::ReadAll;
using Daemon = sift::testing::SiftdProcess;

constexpr char kKey[] = "sk-peer-limits-test";

bool HaveModel(std::string* why) {
  if (sift::testing::ModelPath().empty()) {
    *why = "SIFT_MODEL not set";
    return false;
  }
  for (const char* p : {"prefill_full", "decode_local"}) {
    if (!fs::exists(std::string(SIFT_BINARY_DIR) + "/plugins/" + p + ".so")) {
      *why = std::string("plugin ") + p + " not built";
      return false;
    }
  }
  return true;
}

#define REQUIRE_MODEL()                                  \
  do {                                                   \
    std::string why_skip;                                \
    if (!HaveModel(&why_skip)) GTEST_SKIP() << why_skip; \
  } while (0)

// ---- raw sockets ----

// A TCP connection to "host:port" from `source` (a loopback address: another peer), or -1.
int Dial(const std::string& address, const char* source = "127.0.0.1") {
  const size_t colon = address.rfind(':');
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &to.sin_addr);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &from.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& bytes) {
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Everything the server sends until it closes the connection or `timeout_ms` passes;
// `closed` says which.
std::string ReadUntilClosed(int fd, int timeout_ms, bool* closed = nullptr) {
  std::string out;
  const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[65536];
  if (closed) *closed = false;
  while (Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    const int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count());
    if (::poll(&p, 1, std::max(left, 1)) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (closed) *closed = true;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

int StatusOf(const std::string& response) {
  if (response.rfind("HTTP/1.", 0) != 0 || response.size() < 12) return -1;
  return std::stoi(response.substr(9, 3));
}

json BodyOf(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  if (at == std::string::npos) return json();
  return json::parse(response.substr(at + 4), nullptr, false);
}

std::string Post(const std::string& path, const std::string& body, const std::string& key = kKey,
                 bool close = true) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
         (key.empty() ? "" : "Authorization: Bearer " + key + "\r\n") +
         (close ? "Connection: close\r\n" : "") + "Content-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

std::string Get(const std::string& path, const std::string& key = kKey) {
  return "GET " + path + " HTTP/1.1\r\nHost: x\r\n" +
         (key.empty() ? "" : "Authorization: Bearer " + key + "\r\n") + "Connection: close\r\n\r\n";
}

// One request on a fresh connection from `source`; the whole response.
std::string Exchange(const std::string& address, const std::string& request,
                     const char* source = "127.0.0.1", int timeout_ms = 120000) {
  const int fd = Dial(address, source);
  if (fd < 0) return "";
  SendAll(fd, request);
  std::string r = ReadUntilClosed(fd, timeout_ms);
  ::close(fd);
  return r;
}

// A Prometheus sample's value from the operations port ("" labels: the unlabelled series);
// the sum over series whose labels contain `labels`; -1 when the port gave no answer.
double Metric(const Daemon& d, const std::string& name, const std::string& labels = "") {
  const std::string response = Exchange(d.http(), Get("/metrics", ""), "127.0.0.1", 10000);
  const size_t at = response.find("\r\n\r\n");
  if (at == std::string::npos) return -1;  // no answer: the caller says so
  const std::string text = response.substr(at + 4);
  double sum = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0 || line.size() <= name.size()) continue;
    const char next = line[name.size()];
    if (next != ' ' && next != '{') continue;
    if (!labels.empty() && line.find(labels) == std::string::npos) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

size_t Count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

std::string Completion(int max_tokens, bool stream = false, const std::string& extra = "") {
  return R"({"model":"full","prompt":"Colours: red, green,","temperature":0,"max_tokens":)" +
         std::to_string(max_tokens) + (stream ? R"(,"stream":true)" : "") + extra + "}";
}

// ---- one daemon with the OpenAI port for rows 1, 2, 4, 5 and 7 (HTTP) ----

class OpenAiPeerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    if (!HaveModel(&why)) return;
    daemon_ = new Daemon();
    keys_ = (fs::temp_directory_path() / ("peer-keys-" + std::to_string(::getpid()))).string();
    std::ofstream(keys_) << kKey << "\n";
    start_error_ = daemon_->Start(
        {"--openai", "127.0.0.1:0", "--openai-api-keys", keys_, "--openai-max-connections-per-peer",
         "8", "--openai-idle-timeout-ms", "1000", "--workers", "1", "--max-batch", "0",
         "--max-tokens-limit", "12", "--n-ctx", "512"});
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
    fs::remove(keys_);
  }
  void SetUp() override {
    REQUIRE_MODEL();
    ASSERT_NE(daemon_, nullptr);
    ASSERT_EQ(start_error_, "");
  }
  void TearDown() override {
    if (daemon_ != nullptr && start_error_.empty()) {
      EXPECT_GT(daemon_->pid(), 0) << "siftd died:\n" << daemon_->log();
    }
  }
  static std::string Address() { return daemon_->ready()["openai"].get<std::string>(); }

  static inline Daemon* daemon_ = nullptr;
  static inline std::string keys_;
  static inline std::string start_error_;
};

// Row 1: one peer holding many idle connections. Beyond its 8 it gets 503 at once and takes no
// slot; another peer is served within a second all along; the idle ones are closed after the
// idle timeout (1 s here), not the request timeout (30 s).
TEST_F(OpenAiPeerTest, OnePeerCannotTakeEveryConnectionSlot) {
  std::vector<int> idle;
  int refused = 0;
  for (int i = 0; i < 64; ++i) {
    const int fd = Dial(Address());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  // Another peer, while the first holds its 8 (the idle timeout is 1 s: ask at once).
  const auto start = Clock::now();
  const std::string other = Exchange(Address(), Get("/v1/models"), "127.0.0.2", 5000);
  const double took_s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(StatusOf(other), 200) << other.substr(0, 300);
  EXPECT_LT(took_s, 1.0);
  for (size_t i = 8; i < idle.size(); ++i) {
    const std::string r = ReadUntilClosed(idle[i], 5000);
    if (StatusOf(r) == 503 && r.find("too_many_connections_from_peer") != std::string::npos) {
      ++refused;
    }
  }
  EXPECT_EQ(refused, 56);
  // The 8 idle connections are closed by the idle timeout.
  for (size_t i = 0; i < 8; ++i) {
    bool closed = false;
    ReadUntilClosed(idle[i], 10000, &closed);
    EXPECT_TRUE(closed) << i;
  }
  for (int fd : idle) ::close(fd);
  EXPECT_GE(Metric(*daemon_, "sift_openai_connections_refused_total",
                   "reason=\"too_many_connections_from_peer\""),
            56);
  // And the peer itself is served again, once its closed connections have given their slots
  // back.
  int status = 0;
  for (int i = 0; i < 50 && status != 200; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    status = StatusOf(Exchange(Address(), Get("/v1/models")));
  }
  EXPECT_EQ(status, 200);
}

// Row 1 (keys) and row 7 (HTTP): a request without a valid API key is refused as soon as its
// header is read, and the log lines such a peer causes are rate-limited (one per 10 s per
// peer) and counted.
TEST_F(OpenAiPeerTest, UnauthenticatedRequestsAreRefusedAndTheirLogLinesLimited) {
  const std::string log_before = daemon_->log();
  const double suppressed_before =
      Metric(*daemon_, "sift_log_suppressed_total", "event=\"openai_bad_request\"");
  for (int i = 0; i < 40; ++i) {
    const std::string r =
        Exchange(Address(), Post("/v1/completions", Completion(2), "sk-wrong"), "127.0.0.3", 5000);
    ASSERT_EQ(StatusOf(r), 401) << r.substr(0, 300);
  }
  const std::string log = daemon_->log().substr(log_before.size());
  EXPECT_LE(Count(log, "\"openai_bad_request\""), 2u) << log.substr(0, 2000);
  EXPECT_GE(Count(log, "\"openai_bad_request\""), 1u);
  EXPECT_GE(Metric(*daemon_, "sift_log_suppressed_total", "event=\"openai_bad_request\"") -
                suppressed_before,
            38);
}

// Row 2: the server-side cap (--max-tokens-limit 12 here) on both ports: a chat without
// max_tokens, a max_tokens of 1,048,576 and ignore_eos all stop at 12 tokens.
TEST_F(OpenAiPeerTest, GeneratedTokensAreCappedOnBothPorts) {
  const std::string chat =
      R"({"model":"full","messages":[{"role":"user","content":"Count to one thousand."}],)"
      R"("temperature":0,"sift":{"ignore_eos":true}})";
  json r = BodyOf(Exchange(Address(), Post("/v1/chat/completions", chat)));
  ASSERT_TRUE(r.is_object()) << r.dump();
  EXPECT_EQ(r["usage"]["completion_tokens"], 12) << r.dump();
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  r = BodyOf(Exchange(
      Address(),
      Post("/v1/completions", Completion(1048576, false, R"(,"sift":{"ignore_eos":true})"))));
  EXPECT_EQ(r["usage"]["completion_tokens"], 12) << r.dump();

  zmq::context_t ctx(1);
  sift::client::ClientOptions o;
  o.endpoint = daemon_->endpoint();
  SiftClient c(ctx, o);
  c.Send({{"type", "generate"},
          {"id", "big"},
          {"pipeline", "full"},
          {"prompt", "Colours: red, green,"},
          {"max_tokens", 1048576},
          {"ignore_eos", true},
          {"stream", false}});
  json h;
  while (c.Recv(&h, 120000) && h["type"] != "final" && h["type"] != "error") {
  }
  ASSERT_EQ(h["type"], "final") << h.dump();
  EXPECT_EQ(h["usage"]["completion_tokens"], 12) << h.dump();
}

// Row 3: top_p in (0, ~7e-46] rounds to 0 in float; it now means what it says (the most
// probable token only), so sampling at temperature 1 gives the greedy text for every seed.
TEST_F(OpenAiPeerTest, TinyTopPKeepsTheMostProbableToken) {
  const std::string greedy =
      BodyOf(Exchange(Address(), Post("/v1/completions", Completion(8))))["choices"][0]["text"];
  ASSERT_FALSE(greedy.empty());
  for (const char* top_p : {"1e-46", "7e-46", "1e-300", "1e-12"}) {
    for (int seed : {1, 2}) {
      const std::string body = R"({"model":"full","prompt":"Colours: red, green,","max_tokens":8,)"
                               R"("temperature":1,"top_p":)" +
                               std::string(top_p) + R"(,"seed":)" + std::to_string(seed) + "}";
      const json r = BodyOf(Exchange(Address(), Post("/v1/completions", body)));
      ASSERT_TRUE(r.contains("choices")) << top_p << " " << r.dump();
      EXPECT_EQ(r["choices"][0]["text"], greedy) << "top_p " << top_p << " seed " << seed;
    }
  }
}

// Row 4: bodies up to --openai-max-body-bytes (16 MiB) are translated whatever the ZeroMQ
// header limit (8 MiB); beyond it, 413.
TEST_F(OpenAiPeerTest, BodiesUpToTheHttpLimitAreNotHeldToTheZeroMqLimit) {
  // 12 MiB in a stage-parameter override for a stage the pipeline does not have: translated
  // and admitted, then refused by the pipeline (400, naming the override), not as too large.
  const std::string big(12 << 20, 'a');
  const std::string body =
      R"({"model":"full","prompt":"Hi","max_tokens":2,"sift":{"params":{"no_such_stage":{"x":")" +
      big + R"("}}}})";
  const std::string r = Exchange(Address(), Post("/v1/completions", body));
  EXPECT_NE(StatusOf(r), 413) << r.substr(0, 400);
  EXPECT_EQ(r.find("header_too_large"), std::string::npos) << r.substr(0, 400);
  EXPECT_EQ(StatusOf(r), 400) << r.substr(0, 400);
  EXPECT_NE(r.find("no_such_stage"), std::string::npos) << r.substr(0, 400);
  // One byte past 16 MiB: 413 from Content-Length, before the body is read.
  const std::string over =
      R"({"model":"full","prompt":")" + std::string((16 << 20) + 1 - 28, 'a') + R"("})";
  ASSERT_EQ(over.size(), (16u << 20) + 1);
  const std::string r413 = Exchange(Address(), Post("/v1/completions", over));
  EXPECT_EQ(StatusOf(r413), 413) << r413.substr(0, 400);
  EXPECT_NE(r413.find("request_too_large"), std::string::npos);
}

// Row 5: a complete request followed by a half-close (shutdown(SHUT_WR), as `nc -N`) is
// answered, whole and streamed; a client that closes for good still has its request cancelled.
TEST_F(OpenAiPeerTest, HalfClosedClientsAreAnswered) {
  const double gone_before = Metric(*daemon_, "sift_requests_total", "outcome=\"client_gone\"");
  for (bool stream : {false, true}) {
    const int fd = Dial(Address());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(
        fd, Post("/v1/completions", Completion(12, stream, R"(,"sift":{"ignore_eos":true})"), kKey,
                 /*close=*/false)));
    ASSERT_EQ(::shutdown(fd, SHUT_WR), 0);
    bool closed = false;
    const std::string r = ReadUntilClosed(fd, 120000, &closed);
    ::close(fd);
    EXPECT_TRUE(closed);
    ASSERT_EQ(StatusOf(r), 200) << stream << " " << r.substr(0, 300);
    if (!stream) {
      const json body = BodyOf(r);
      ASSERT_TRUE(body.is_object()) << r;  // nothing else (a probe byte) in the body
      EXPECT_EQ(body["usage"]["completion_tokens"], 12);
    } else {
      EXPECT_NE(r.find("data: [DONE]"), std::string::npos) << r;
    }
  }
  EXPECT_EQ(Metric(*daemon_, "sift_requests_total", "outcome=\"client_gone\""), gone_before);
  // A client that closes (not half-closes) while its whole response is being prepared: queued
  // behind two other clients' requests (one worker, no batch: a batch would run it at once and
  // could finish it before the close is seen), it is cancelled.
  int busy[2];
  for (int i = 0; i < 2; ++i) {
    busy[i] = Dial(Address(), i == 0 ? "127.0.0.4" : "127.0.0.5");
    SendAll(busy[i],
            Post("/v1/completions", Completion(12, false, R"(,"sift":{"ignore_eos":true})")));
  }
  const int fd = Dial(Address());
  SendAll(fd, Post("/v1/completions", Completion(12, false, R"(,"sift":{"ignore_eos":true})")));
  // Closed once the daemon holds its request in the queue (under load a fixed 50 ms could pass
  // before it had even read it: nothing to cancel then), waiting at most 5 s.
  const auto queued_by = Clock::now() + std::chrono::seconds(5);
  while (Metric(*daemon_, "sift_queue_depth") < 2 && Clock::now() < queued_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::close(fd);
  for (int b : busy) {
    EXPECT_EQ(StatusOf(ReadUntilClosed(b, 120000)), 200);
    ::close(b);
  }
  const auto end = Clock::now() + std::chrono::seconds(60);
  while (Metric(*daemon_, "sift_requests_total", "outcome=\"client_gone\"") <= gone_before &&
         Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GT(Metric(*daemon_, "sift_requests_total", "outcome=\"client_gone\""), gone_before);
}

// Row 8: `list` and GET /v1/models name files, not where they are.
TEST_F(OpenAiPeerTest, ListingsDiscloseNoPaths) {
  zmq::context_t ctx(1);
  sift::client::ClientOptions o;
  o.endpoint = daemon_->endpoint();
  SiftClient c(ctx, o);
  c.Send({{"type", "list"}, {"id", "l"}});
  json h;
  ASSERT_TRUE(c.Recv(&h, 30000));
  ASSERT_EQ(h["type"], "listing");
  ASSERT_FALSE(h["plugins"].empty());
  for (const char* section : {"pipelines", "plugins"}) {
    for (const json& e : h[section]) {
      EXPECT_EQ(e["file"].get<std::string>().find('/'), std::string::npos) << e.dump();
    }
  }
  EXPECT_EQ(h["model"]["path"].get<std::string>().find('/'), std::string::npos);
  const std::string listing = h.dump();
  const std::string models = Exchange(Address(), Get("/v1/models"));
  ASSERT_EQ(StatusOf(models), 200);
  for (const std::string& dir :
       {std::string(SIFT_SOURCE_DIR), std::string(SIFT_BINARY_DIR), daemon_->dir(),
        fs::path(sift::testing::ModelPath()).parent_path().string()}) {
    EXPECT_EQ(listing.find(dir), std::string::npos) << dir;
    EXPECT_EQ(models.find(dir), std::string::npos) << dir;
  }
}

// Row 2: ignore_eos only where the operator allows it (--allow-ignore-eos; off by default).
TEST(IgnoreEosTest, RefusedUnlessTheOperatorAllowsIt) {
  REQUIRE_MODEL();
  Daemon d;
  ASSERT_EQ(d.Start({"--allow-ignore-eos", "false", "--openai", "127.0.0.1:0"}), "");
  zmq::context_t ctx(1);
  sift::client::ClientOptions o;
  o.endpoint = d.endpoint();
  SiftClient c(ctx, o);
  c.Send({{"type", "generate"},
          {"id", "e"},
          {"pipeline", "full"},
          {"prompt", "Hi"},
          {"max_tokens", 2},
          {"ignore_eos", true}});
  json h;
  ASSERT_TRUE(c.Recv(&h, 30000));
  EXPECT_EQ(h["type"], "error");
  EXPECT_EQ(h["reason"], "ignore_eos_not_allowed") << h.dump();
  const std::string r =
      Exchange(d.ready()["openai"],
               Post("/v1/completions", Completion(2, false, R"(,"sift":{"ignore_eos":true})"), ""));
  EXPECT_EQ(StatusOf(r), 400) << r.substr(0, 300);
  EXPECT_NE(r.find("ignore_eos_not_allowed"), std::string::npos) << r;
  // Without it the request runs.
  EXPECT_EQ(StatusOf(Exchange(d.ready()["openai"], Post("/v1/completions", Completion(2), ""))),
            200);
}

// ---- CURVE (rows 6 and 7) ----

// Runs a shell command (stderr with stdout); its exit status (-1: it did not exit) and output.
int RunShell(const std::string& command, std::string* output) {
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  char buf[4096];
  output->clear();
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) output->append(buf, n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Runs build/bin/`tool` with `args`, bounded: a tool that never exits fails the call instead of
// holding the test.
int RunTool(const std::string& tool, const std::vector<std::string>& args, std::string* output) {
  std::string command = "timeout -k 5 120 " + std::string(SIFT_BINARY_DIR) + "/bin/" + tool;
  for (const std::string& a : args) command += " '" + a + "'";
  return RunShell(command, output);
}

int RunSiftd(const std::vector<std::string>& args, std::string* output) {
  return RunTool("siftd", args, output);
}

std::string FirstKey(const std::string& file) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] != '#') return line;
  }
  return "";
}

class CurveKeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("curve-keys-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// Row 6: --make-curve-keys never overwrites a pair.
TEST_F(CurveKeysTest, MakeCurveKeysRefusesToOverwrite) {
  std::string out;
  ASSERT_EQ(RunSiftd({"--make-curve-keys", Path("server")}, &out), 0) << out;
  const std::string secret = ReadAll(Path("server.key"));
  const std::string pub = ReadAll(Path("server.pub"));
  EXPECT_NE(RunSiftd({"--make-curve-keys", Path("server")}, &out), 0);
  EXPECT_NE(out.find("already exists"), std::string::npos) << out;
  EXPECT_EQ(ReadAll(Path("server.key")), secret);
  EXPECT_EQ(ReadAll(Path("server.pub")), pub);
  // Only one of the pair there: still refused, and the other file is not created.
  fs::remove(Path("server.key"));
  EXPECT_NE(RunSiftd({"--make-curve-keys", Path("server")}, &out), 0);
  EXPECT_FALSE(fs::exists(Path("server.key")));
}

// Row 6: a public key given as the server's secret key is refused at start, with the reason.
TEST_F(CurveKeysTest, APublicKeyIsNotAcceptedAsTheSecretKey) {
  REQUIRE_MODEL();
  std::string out;
  ASSERT_EQ(RunSiftd({"--make-curve-keys", Path("server")}, &out), 0) << out;
  ASSERT_EQ(RunSiftd({"--make-curve-keys", Path("alice")}, &out), 0) << out;
  std::ofstream(Path("clients")) << FirstKey(Path("alice.pub")) << "\n";
  // The public key file itself, a copy of its key alone under another name (it equals the
  // server.pub beside the .key name), and a client's public key.
  std::ofstream(Path("copy.key")) << FirstKey(Path("server.pub")) << "\n";
  fs::copy_file(Path("server.pub"), Path("copy.pub"));
  std::ofstream(Path("alice_as_secret")) << FirstKey(Path("alice.pub")) << "\n";
  for (const std::string& secret :
       {Path("server.pub"), Path("copy.key"), Path("alice_as_secret")}) {
    const int rc = RunSiftd(
        {"--model", sift::testing::ModelPath(), "--curve-secret-key", secret, "--curve-client-keys",
         Path("clients"), "--http", "off", "--bind", "tcp://127.0.0.1:*"},
        &out);
    EXPECT_NE(rc, 0) << secret;
    EXPECT_NE(out.find("not a public key"), std::string::npos) << secret << "\n" << out;
  }
  // The secret key starts (checked by the rate-limit test below with a running daemon).
}

// Row 7: 100 CURVE handshakes with an unknown key from one address give at most a couple of
// auth_denied lines; each refusal is counted.
TEST_F(CurveKeysTest, RefusedHandshakesAreLoggedOncePerInterval) {
  REQUIRE_MODEL();
  // It hung once in CI until ctest's timeout (8 s normally), with no trace: past 120 s it says
  // at which step, with a backtrace.
  sift::testing::HangReport report(std::chrono::seconds(120));
  std::string out;
  report.Step("siftd --make-curve-keys");
  ASSERT_EQ(RunSiftd({"--make-curve-keys", Path("server")}, &out), 0) << out;
  ASSERT_EQ(RunSiftd({"--make-curve-keys", Path("alice")}, &out), 0) << out;
  std::ofstream(Path("clients")) << FirstKey(Path("alice.pub")) << "\n";
  report.Step("starting siftd");
  Daemon d;
  ASSERT_EQ(
      d.Start({"--curve-secret-key", Path("server.key"), "--curve-client-keys", Path("clients")}),
      "");
  const auto start = Clock::now();
  {
    // Never terminated: zmq_ctx_term can wait forever after refused CURVE handshakes on a loaded
    // machine (libzmq issue 2733), which once held this test until ctest's timeout. The sockets
    // close with linger 0; the process exit takes the rest.
    zmq::context_t& ctx = *new zmq::context_t(1);
    for (int i = 0; i < 100; ++i) {
      report.Step("refused handshake " + std::to_string(i));
      char pub[41], sec[41];
      ASSERT_EQ(zmq_curve_keypair(pub, sec), 0);
      sift::client::ClientOptions o;
      o.endpoint = d.endpoint();
      o.server_public_key = FirstKey(Path("server.pub"));
      o.public_key = pub;
      o.secret_key = sec;
      o.send_timeout_ms = 200;
      SiftClient c(ctx, o);
      try {
        c.Send({{"type", "ping"}});
      } catch (const std::runtime_error&) {
        // Refused before the ping was queued (the test thread was slow): refused all the same.
      }
      json h;
      EXPECT_FALSE(c.Recv(&h, 20));
      // Keep the client until its handshake has reached the daemon's ZAP handler: closed
      // sooner (a loaded machine), it would never be refused, only dropped.
      const auto refused = Clock::now() + std::chrono::seconds(5);
      double denied = 0;
      while ((denied = Metric(d, "sift_auth_denied_total")) < i + 1 && Clock::now() < refused) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      // The operations port must keep answering while handshakes are refused; stop at once
      // (with the daemon's log) instead of waiting out every remaining handshake.
      ASSERT_GE(denied, 0) << "no /metrics answer after " << i << " handshakes\n" << d.log();
    }
  }
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GE(Metric(d, "sift_auth_denied_total"), 100);
  // One line per 10 s interval (kPeerLogIntervalMs) at most: two when the loop is quick.
  EXPECT_LE(Count(d.log(), "\"auth_denied\""), 2u + static_cast<size_t>(elapsed_s / 10.0));
  EXPECT_GE(Metric(d, "sift_log_suppressed_total", "event=\"auth_denied\""),
            100.0 - static_cast<double>(Count(d.log(), "\"auth_denied\"")));
  {
    // The authorised client is still served (and closed while siftd still runs).
    report.Step("authorised client");
    zmq::context_t ctx(1);
    sift::client::ClientOptions o;
    o.endpoint = d.endpoint();
    o.server_public_key = FirstKey(Path("server.pub"));
    o.public_key = FirstKey(Path("alice.pub"));
    o.secret_key = FirstKey(Path("alice.key"));
    SiftClient c(ctx, o);
    c.Send({{"type", "ping"}, {"nonce", 1}});
    json h;
    ASSERT_TRUE(c.Recv(&h, 30000));
    EXPECT_EQ(h["type"], "pong");
    report.Step("closing the authorised client's context");
  }
  // And the refused peers do not keep siftd from stopping when asked.
  report.Step("stopping siftd");
  EXPECT_EQ(d.Stop(SIGTERM, 30000), 0) << d.log();
  report.Step("done");
}

// The sift CLI says why a handshake failed instead of asking whether siftd runs: a key the
// server does not know, no CURVE against a CURVE server, the wrong server key. Exit status 3.
TEST_F(CurveKeysTest, TheCliSaysWhyTheHandshakeFailed) {
  REQUIRE_MODEL();
  std::string out;
  for (const char* name : {"server", "alice", "bob"}) {
    ASSERT_EQ(RunSiftd({"--make-curve-keys", Path(name)}, &out), 0) << out;
  }
  std::ofstream(Path("clients")) << FirstKey(Path("alice.pub")) << "\n";
  Daemon d;
  ASSERT_EQ(
      d.Start({"--curve-secret-key", Path("server.key"), "--curve-client-keys", Path("clients")}),
      "");
  // `sift ping` with this server key and client secret key ("" "": no CURVE); its exit status.
  auto ping = [&](const std::string& server, const std::string& secret) {
    std::vector<std::string> args;
    if (!server.empty()) {
      args = {"--curve-server-key", Path(server), "--curve-secret-key", Path(secret)};
    }
    args.insert(args.end(), {"-e", d.endpoint(), "ping"});
    return RunTool("sift", args, &out);
  };
  EXPECT_EQ(ping("server.pub", "alice.key"), 0) << out;
  EXPECT_EQ(ping("server.pub", "bob.key"), 3);
  EXPECT_NE(out.find("the server refused this client's key"), std::string::npos) << out;
  EXPECT_EQ(ping("", ""), 3);
  EXPECT_NE(out.find("use different security"), std::string::npos) << out;
  EXPECT_EQ(ping("bob.pub", "alice.key"), 3);
  EXPECT_NE(out.find("closed the connection during the handshake"), std::string::npos) << out;
  EXPECT_EQ(out.find("is siftd running"), std::string::npos) << out;
}

// A client whose CURVE handshake was refused has no connection left and never makes another:
// ZeroMQ would block its next send forever (libzmq issue 2329; this test's loop above once hung
// there in CI). SiftClient::Send fails after send_timeout_ms instead, naming the likely cause.
TEST_F(CurveKeysTest, ARefusedClientsSendFailsInsteadOfBlocking) {
  REQUIRE_MODEL();
  sift::testing::HangReport report(std::chrono::seconds(120));
  std::string out;
  ASSERT_EQ(RunSiftd({"--make-curve-keys", Path("server")}, &out), 0) << out;
  ASSERT_EQ(RunSiftd({"--make-curve-keys", Path("alice")}, &out), 0) << out;
  std::ofstream(Path("clients")) << FirstKey(Path("alice.pub")) << "\n";
  Daemon d;
  ASSERT_EQ(
      d.Start({"--curve-secret-key", Path("server.key"), "--curve-client-keys", Path("clients")}),
      "");
  zmq::context_t& ctx = *new zmq::context_t(1);  // never terminated: see the test above
  char pub[41], sec[41];
  ASSERT_EQ(zmq_curve_keypair(pub, sec), 0);
  sift::client::ClientOptions o;
  o.endpoint = d.endpoint();
  o.server_public_key = FirstKey(Path("server.pub"));
  o.public_key = pub;
  o.secret_key = sec;
  o.send_timeout_ms = 300;
  SiftClient c(ctx, o);
  c.Send({{"type", "ping"}});  // queued: the handshake has not been refused yet
  const auto refused = Clock::now() + std::chrono::seconds(30);
  while (Metric(d, "sift_auth_denied_total") < 1 && Clock::now() < refused) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GE(Metric(d, "sift_auth_denied_total"), 1) << d.log();
  // The client drops its connection a moment after siftd refused it; from then on every send
  // fails after the timeout.
  std::string error;
  report.Step("sending after the refusal");
  for (int i = 0; i < 100 && error.empty(); ++i) {
    const auto t0 = Clock::now();
    try {
      c.Send({{"type", "ping"}, {"nonce", i}});
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } catch (const std::runtime_error& e) {
      error = e.what();
      EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(250));
    }
  }
  EXPECT_NE(error.find("CURVE"), std::string::npos) << error;
  EXPECT_NE(error.find(d.endpoint()), std::string::npos) << error;

  // The Python client (tools/python/sift_client.py) likewise raises SiftTimeout.
  report.Step("the Python client");
  if (!fs::exists("/usr/bin/python3") ||
      std::system("/usr/bin/python3 -c 'import zmq' > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no /usr/bin/python3 with pyzmq";
  }
  ASSERT_EQ(zmq_curve_keypair(pub, sec), 0);
  const std::string script = Path("refused.py");
  std::ofstream(script) << "import sys, time\n"
                        << "sys.path.insert(0, '" << SIFT_SOURCE_DIR << "/tools/python')\n"
                        << "from sift_client import SiftClient, SiftTimeout\n"
                        << "c = SiftClient('" << d.endpoint() << "', server_public_key='"
                        << FirstKey(Path("server.pub")) << "', secret_key='" << sec
                        << "', send_timeout_s=0.3)\n"
                        << "t0 = time.time()\n"
                        << "try:\n"
                        << "    c.ping()\n"
                        << "except SiftTimeout as e:\n"
                        << "    print('ping: %.1f s:' % (time.time() - t0), e)\n"
                        << "end = time.time() + 30\n"
                        << "while time.time() < end:\n"
                        << "    try:\n"
                        << "        c.send({'type': 'ping'})\n"
                        << "        time.sleep(0.02)\n"
                        << "    except SiftTimeout as e:\n"
                        << "        print('refused:', e)\n"
                        << "        sys.exit(0)\n"
                        << "print('never refused')\n"
                        << "sys.exit(1)\n";
  std::string py;
  EXPECT_EQ(RunShell("timeout -k 5 60 /usr/bin/python3 " + script, &py), 0) << py;
  EXPECT_NE(py.find("refused: cannot send to " + d.endpoint()), std::string::npos) << py;
  EXPECT_NE(py.find("CURVE"), std::string::npos) << py;
  EXPECT_NE(py.find("the server refused this client's key"), std::string::npos) << py;
}

}  // namespace
