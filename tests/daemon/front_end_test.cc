// Tests of the ZeroMQ front end, admission queue and workers over real loopback TCP, with a
// fake backend (no model): protocol errors, streaming, cancel, deadlines, queue full, client
// gone, drain, heartbeats, concurrency, CURVE.
#include "daemon/front_end.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "client.h"
#include "daemon/curve.h"
#include "daemon/log.h"

namespace sift::daemon {
namespace {

using json = nlohmann::json;
using client::SiftClient;

class FakeBackend : public Backend {
 public:
  std::shared_ptr<const void> FindPipeline(const std::string& name, uint64_t* gen) override {
    static const std::set<std::string> known = {"echo", "slow", "block", "throw", "silent"};
    *gen = 7;
    if (!known.count(name)) return nullptr;
    return std::make_shared<std::string>(name);
  }
  json List() override { return {{"pipelines", {{{"name", "echo"}, {"ok", true}}}}}; }
  json Describe() override { return {{"model", "fake"}, {"catalog_generation", 7}}; }

  void Execute(const std::shared_ptr<LiveRequest>& r, ReplySink& sink) override {
    const std::string& name = *static_cast<const std::string*>(r->pipeline.get());
    const GenerateRequest& g = r->request;
    started.fetch_add(1);
    if (name == "echo") {
      std::istringstream words(g.input == InputKind::kPrompt ? g.prompt : g.question);
      std::string w, text;
      int64_t seq = 0;
      while (words >> w) {
        text += w + " ";
        if (g.stream) sink.Send(r, ChunkHeader(g.id, seq++, w + " ", {1}));
      }
      FinalReport report;
      report.text = text;
      report.finish_reason = "stop";
      report.e2e_ms = MsBetween(r->received, Clock::now());
      sink.SendTerminal(r, Terminal::Final(g.id, g.pipeline, report));
    } else if (name == "slow" || name == "block") {
      for (int i = 0; i < 1000; ++i) {
        if (r->Cancelled()) {
          cancelled.fetch_add(1);
          sink.SendTerminal(r, Terminal::Error(g.id, r->CancelStatus()));
          return;
        }
        r->SetProgress("layers", i, 1000);
        if (name == "block") {
          std::unique_lock<std::mutex> lock(mu);
          if (cv.wait_for(lock, std::chrono::milliseconds(10), [&] { return released; })) break;
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }
      FinalReport report;
      report.finish_reason = "length";
      sink.SendTerminal(r, Terminal::Final(g.id, g.pipeline, report));
    } else if (name == "throw") {
      throw std::runtime_error("boom");
    }
    // "silent": no terminal at all; the scheduler must supply one.
  }

  void Release() {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
    cv.notify_all();
  }

  std::atomic<int> started{0};
  std::atomic<int> cancelled{0};
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
};

class FrontEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogLevel(LogLevel::kError);
    options_.endpoints = {"tcp://127.0.0.1:*"};
    options_.heartbeat_ms = 100;
    options_.linger_ms = 0;
  }
  void TearDown() override {
    backend_.Release();
    front_end_.reset();
    SetLogLevel(LogLevel::kInfo);
  }
  void StartServer() {
    front_end_ = std::make_unique<FrontEnd>(options_, backend_, metrics_);
    Status st = front_end_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  std::unique_ptr<SiftClient> Connect() {
    client::ClientOptions o;
    o.endpoint = front_end_->endpoints()[0];
    return std::make_unique<SiftClient>(context_, o);
  }
  static json Generate(const std::string& id, const std::string& pipeline,
                       const std::string& prompt = "a b c") {
    return {{"type", "generate"}, {"id", id}, {"pipeline", pipeline}, {"prompt", prompt}};
  }
  // Reads replies until `id` gets a terminal message (heartbeats skipped unless kept).
  static std::vector<json> Until(SiftClient& c, const std::string& id, int timeout_ms = 5000,
                                 bool keep_heartbeats = false) {
    std::vector<json> out;
    const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    json h;
    while (Clock::now() < end) {
      if (!c.Recv(&h, 50)) continue;
      if (h.value("type", "") == "heartbeat" && !keep_heartbeats) continue;
      out.push_back(h);
      if (h.value("id", json()) == json(id) && IsTerminal(h) && !h.value("duplicate", false)) {
        return out;
      }
    }
    ADD_FAILURE() << "no terminal for " << id;
    return out;
  }
  static json Last(const std::vector<json>& v) { return v.empty() ? json() : v.back(); }
  // Terminal messages of several requests, whatever their order.
  static std::map<std::string, json> Terminals(SiftClient& c, std::set<std::string> ids) {
    std::map<std::string, json> out;
    json h;
    while (!ids.empty() && c.Recv(&h, 5000)) {
      if (!IsTerminal(h) || h.value("duplicate", false)) continue;
      const std::string id = h.value("id", "");
      if (ids.erase(id)) out[id] = h;
    }
    EXPECT_TRUE(ids.empty()) << "missing terminals";
    return out;
  }

  FrontEndOptions options_;
  FakeBackend backend_;
  Metrics metrics_;
  zmq::context_t context_{1};
  std::unique_ptr<FrontEnd> front_end_;
};

TEST_F(FrontEndTest, PingAndList) {
  StartServer();
  auto c = Connect();
  c->Send({{"type", "ping"}, {"nonce", 42}, {"id", "p1"}});
  json h;
  ASSERT_TRUE(c->Recv(&h, 2000));
  EXPECT_EQ(h["type"], "pong");
  EXPECT_EQ(h["nonce"], 42);
  EXPECT_EQ(h["id"], "p1");
  EXPECT_EQ(h["model"], "fake");
  EXPECT_EQ(h["ready"], true);
  c->Send({{"type", "list"}});
  ASSERT_TRUE(c->Recv(&h, 2000));
  EXPECT_EQ(h["type"], "listing");
  EXPECT_EQ(h["pipelines"][0]["name"], "echo");
}

TEST_F(FrontEndTest, MalformedMessagesGetErrorsAndServingContinues) {
  StartServer();
  auto c = Connect();
  json h;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"HELLO", "{}"}, "bad_magic"},
      {{"SIFT/1"}, "bad_frames"},
      {{"SIFT/1", "{\"type\":"}, "bad_json"},
      {{"SIFT/1", "{\"type\":\"dance\",\"id\":\"d1\"}"}, "unknown_type"},
      {{"SIFT/1", "{\"type\":\"generate\",\"id\":\"g1\",\"pipeline\":\"echo\"}"}, "missing_field"},
  };
  for (const auto& [frames, reason] : cases) {
    c->SendRaw(frames);
    ASSERT_TRUE(c->Recv(&h, 2000)) << reason;
    EXPECT_EQ(h["type"], "error");
    EXPECT_EQ(h["code"], "INVALID_ARGUMENT");
    EXPECT_EQ(h["reason"], reason);
  }
  EXPECT_EQ(h["id"], "g1");  // the id is echoed when the header had one
  c->Send(Generate("ok1", "echo"));
  EXPECT_EQ(Last(Until(*c, "ok1"))["type"], "final");
  EXPECT_EQ(metrics_.Value("sift_protocol_errors_total", {{"reason", "bad_json"}}), 1);
}

TEST_F(FrontEndTest, StreamingGenerate) {
  StartServer();
  auto c = Connect();
  c->Send(Generate("r1", "echo", "one two three"));
  auto replies = Until(*c, "r1");
  ASSERT_EQ(replies.size(), 5u);
  EXPECT_EQ(replies[0]["type"], "accepted");
  EXPECT_EQ(replies[0]["queue_position"], 1);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(replies[1 + i]["type"], "chunk");
    EXPECT_EQ(replies[1 + i]["seq"], i);
  }
  EXPECT_EQ(replies[4]["type"], "final");
  EXPECT_EQ(replies[4]["text"], "one two three ");
  EXPECT_EQ(metrics_.Value("sift_requests_total", {{"pipeline", "echo"}, {"outcome", "ok"}}), 1);
}

TEST_F(FrontEndTest, UnknownPipelineIsNotFound) {
  StartServer();
  auto c = Connect();
  c->Send(Generate("r1", "nope"));
  json h = Last(Until(*c, "r1"));
  EXPECT_EQ(h["code"], "NOT_FOUND");
  EXPECT_EQ(h["reason"], "unknown_pipeline");
}

TEST_F(FrontEndTest, DuplicateLiveIdIsRejected) {
  StartServer();
  auto c = Connect();
  c->Send(Generate("r1", "block"));
  c->Send(Generate("r1", "echo"));
  json h;
  std::vector<json> seen;
  while (seen.size() < 2 && c->Recv(&h, 2000)) {
    if (h["type"] != "heartbeat") seen.push_back(h);
  }
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0]["type"], "accepted");
  EXPECT_EQ(seen[1]["code"], "ALREADY_EXISTS");
  EXPECT_EQ(seen[1]["duplicate"], true);
  backend_.Release();
  EXPECT_EQ(Last(Until(*c, "r1"))["type"], "final");
  // The id is free again once the first request ended.
  c->Send(Generate("r1", "echo"));
  EXPECT_EQ(Last(Until(*c, "r1"))["type"], "final");
}

TEST_F(FrontEndTest, QueueFullIsRetryable) {
  options_.workers = 1;
  options_.queue_size = 2;
  StartServer();
  auto c = Connect();
  c->Send(Generate("run", "block"));
  // Wait until the worker holds it, so the queue is empty.
  for (int i = 0; i < 200 && backend_.started.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  c->Send(Generate("q1", "echo"));
  c->Send(Generate("q2", "echo"));
  c->Send(Generate("over", "echo"));
  json over = Last(Until(*c, "over"));
  EXPECT_EQ(over["code"], "RESOURCE_EXHAUSTED");
  EXPECT_EQ(over["reason"], "queue_full");
  EXPECT_EQ(over["retryable"], true);
  EXPECT_GE(over["retry_after_ms"].get<int>(), 50);
  backend_.Release();
  for (auto& [id, h] : Terminals(*c, {"run", "q1", "q2"})) EXPECT_EQ(h["type"], "final") << id;
}

TEST_F(FrontEndTest, CancelQueuedAndRunning) {
  options_.workers = 1;
  StartServer();
  auto c = Connect();
  c->Send(Generate("running", "slow"));
  for (int i = 0; i < 200 && backend_.started.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  c->Send(Generate("queued", "echo"));
  c->Send({{"type", "cancel"}, {"id", "queued"}});
  json q = Last(Until(*c, "queued"));
  EXPECT_EQ(q["code"], "CANCELLED");
  EXPECT_EQ(q["reason"], "client_cancel");
  c->Send({{"type", "cancel"}, {"id", "running"}});
  json r = Last(Until(*c, "running"));
  EXPECT_EQ(r["code"], "CANCELLED");
  EXPECT_EQ(backend_.cancelled.load(), 1);
  // Cancelling again (or an unknown id) is a no-op: nothing more arrives.
  c->Send({{"type", "cancel"}, {"id", "running"}});
  json h;
  EXPECT_FALSE(c->Recv(&h, 300));
}

TEST_F(FrontEndTest, DeadlinesRunningAndQueued) {
  options_.workers = 1;
  StartServer();
  auto c = Connect();
  json slow = Generate("slow", "slow");
  slow["deadline_ms"] = 150;
  json queued = Generate("queued", "echo");
  queued["deadline_ms"] = 50;
  const auto start = Clock::now();
  c->Send(slow);
  c->Send(queued);
  auto t = Terminals(*c, {"queued", "slow"});
  json q = t["queued"], s = t["slow"];
  EXPECT_EQ(q["code"], "DEADLINE_EXCEEDED");
  EXPECT_EQ(q["details"]["stage"], "queued");
  EXPECT_EQ(s["code"], "DEADLINE_EXCEEDED");
  EXPECT_LT(MsBetween(start, Clock::now()), 1500);
}

TEST_F(FrontEndTest, HeartbeatsCarryProgress) {
  StartServer();
  auto c = Connect();
  json g = Generate("hb", "slow");
  g["deadline_ms"] = 450;
  c->Send(g);
  auto replies = Until(*c, "hb", 5000, /*keep_heartbeats=*/true);
  int heartbeats = 0;
  for (const json& h : replies) {
    if (h["type"] == "heartbeat") {
      ++heartbeats;
      EXPECT_EQ(h["state"], "running");
      EXPECT_EQ(h["progress"]["what"], "layers");
    }
  }
  EXPECT_GE(heartbeats, 2);
}

TEST_F(FrontEndTest, VanishedClientCancelsItsRequests) {
  options_.workers = 1;
  StartServer();
  {
    auto gone = Connect();
    gone->Send(Generate("r1", "slow"));
    gone->Send(Generate("r2", "echo"));  // queued behind r1
    json h;
    ASSERT_TRUE(gone->Recv(&h, 2000));
    EXPECT_EQ(h["type"], "accepted");
  }  // closes the socket
  for (int i = 0; i < 300 && backend_.cancelled.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(backend_.cancelled.load(), 1);
  for (int i = 0; i < 100 && front_end_->live_requests() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(front_end_->live_requests(), 0);
  EXPECT_EQ(backend_.started.load(), 1);  // r2 never ran
  auto c = Connect();
  c->Send(Generate("after", "echo"));
  EXPECT_EQ(Last(Until(*c, "after"))["type"], "final");
}

TEST_F(FrontEndTest, WorkerFailuresBecomeInternalErrors) {
  StartServer();
  auto c = Connect();
  c->Send(Generate("t", "throw"));
  json t = Last(Until(*c, "t"));
  EXPECT_EQ(t["code"], "INTERNAL");
  EXPECT_EQ(t["message"], "boom");
  c->Send(Generate("s", "silent"));
  EXPECT_EQ(Last(Until(*c, "s"))["reason"], "no_terminal");
}

TEST_F(FrontEndTest, OversizeMessageGetsClearError) {
  options_.max_message_bytes = 4096;
  StartServer();
  auto c = Connect();
  c->Send(Generate("big", "echo", std::string(10000, 'x')));
  json h = Last(Until(*c, "big"));
  EXPECT_EQ(h["reason"], "message_too_large");
}

TEST_F(FrontEndTest, ConcurrentClientsGetExactlyOneTerminalEach) {
  options_.workers = 2;
  options_.queue_size = 1000;
  StartServer();
  constexpr int kClients = 8, kRequests = 25;
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int ci = 0; ci < kClients; ++ci) {
    threads.emplace_back([&, ci] {
      client::ClientOptions o;
      o.endpoint = front_end_->endpoints()[0];
      SiftClient c(context_, o);
      for (int i = 0; i < kRequests; ++i) {
        c.Send(Generate("c" + std::to_string(ci) + "-" + std::to_string(i), "echo", "x y"));
      }
      std::map<std::string, int> terminals;
      json h;
      int total = 0;
      while (total < kRequests && c.Recv(&h, 5000)) {
        if (IsTerminal(h)) {
          ++terminals[h["id"]];
          ++total;
          if (h["type"] != "final") bad.fetch_add(1);
        }
      }
      if (total != kRequests || static_cast<int>(terminals.size()) != kRequests) bad.fetch_add(1);
      if (c.Recv(&h, 200)) bad.fetch_add(1);  // nothing after the last terminal
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_F(FrontEndTest, DrainFinishesAdmittedWorkAndRefusesNew) {
  options_.workers = 1;
  StartServer();
  auto c = Connect();
  c->Send(Generate("a", "block"));
  c->Send(Generate("b", "echo"));
  json h;
  ASSERT_TRUE(c->Recv(&h, 2000));
  ASSERT_TRUE(c->Recv(&h, 2000));  // both accepted
  front_end_->BeginDrain();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  c->Send(Generate("late", "echo"));
  EXPECT_EQ(Last(Until(*c, "late"))["code"], "UNAVAILABLE");
  backend_.Release();
  auto t = Terminals(*c, {"a", "b"});
  EXPECT_EQ(t["a"]["type"], "final");
  EXPECT_EQ(t["b"]["type"], "final");
  front_end_->Wait();
}

TEST_F(FrontEndTest, DrainTimeoutCancelsWithUnavailable) {
  options_.workers = 1;
  options_.drain_timeout_ms = 100;
  StartServer();
  auto c = Connect();
  c->Send(Generate("a", "block"));
  c->Send(Generate("b", "echo"));
  json h;
  ASSERT_TRUE(c->Recv(&h, 2000));
  ASSERT_TRUE(c->Recv(&h, 2000));  // both accepted
  front_end_->BeginDrain();
  auto t = Terminals(*c, {"a", "b"});
  json a = t["a"], b = t["b"];
  EXPECT_EQ(a["code"], "UNAVAILABLE");
  EXPECT_EQ(a["reason"], "shutting_down");
  EXPECT_EQ(b["code"], "UNAVAILABLE");
  front_end_->Wait();
}

TEST(FrontEndSecurityTest, RefusesNonLoopbackWithoutCurve) {
  SetLogLevel(LogLevel::kError);
  FakeBackend backend;
  Metrics metrics;
  FrontEndOptions o;
  o.endpoints = {"tcp://0.0.0.0:*"};
  FrontEnd fe(o, backend, metrics);
  Status st = fe.Start();
  EXPECT_EQ(st.reason(), "insecure_bind");
  EXPECT_TRUE(IsLoopbackEndpoint("tcp://127.0.0.1:5"));
  EXPECT_TRUE(IsLoopbackEndpoint("tcp://localhost:5"));
  EXPECT_TRUE(IsLoopbackEndpoint("ipc:///tmp/x"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://*:5"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://10.0.0.1:5"));
  EXPECT_FALSE(IsLoopbackEndpoint("tcp://127.0.0.1.evil:5"));
}

TEST(FrontEndSecurityTest, CurveClientsMustAuthenticate) {
  SetLogLevel(LogLevel::kError);
  char server_pub[41], server_sec[41], client_pub[41], client_sec[41], other_pub[41], other_sec[41];
  ASSERT_EQ(zmq_curve_keypair(server_pub, server_sec), 0);
  ASSERT_EQ(zmq_curve_keypair(client_pub, client_sec), 0);
  ASSERT_EQ(zmq_curve_keypair(other_pub, other_sec), 0);
  const std::string dir = ::testing::TempDir();
  const std::string secret_file = dir + "/server.key", clients_file = dir + "/clients";
  FILE* f = std::fopen(secret_file.c_str(), "w");
  std::fprintf(f, "%s\n", server_sec);
  std::fclose(f);
  f = std::fopen(clients_file.c_str(), "w");
  std::fprintf(f, "# authorised\n%s  alice\n", client_pub);
  std::fclose(f);

  FakeBackend backend;
  Metrics metrics;
  FrontEndOptions o;
  o.endpoints = {"tcp://127.0.0.1:*"};
  o.linger_ms = 0;
  ASSERT_TRUE(LoadCurveConfig(secret_file, clients_file, &o.curve).ok());
  EXPECT_EQ(o.curve.server_public, server_pub);
  FrontEnd fe(o, backend, metrics);
  ASSERT_TRUE(fe.Start().ok());
  // Never terminated: zmq_ctx_term can wait forever after a refused CURVE handshake on a loaded
  // machine (libzmq issue 2733); the sockets close with linger 0.
  zmq::context_t& ctx = *new zmq::context_t(1);
  client::ClientOptions co;
  co.endpoint = fe.endpoints()[0];
  co.server_public_key = server_pub;
  co.public_key = client_pub;
  co.secret_key = client_sec;
  SiftClient good(ctx, co);
  good.Send({{"type", "ping"}});
  json h;
  ASSERT_TRUE(good.Recv(&h, 3000));
  EXPECT_EQ(h["type"], "pong");
  co.public_key = other_pub;
  co.secret_key = other_sec;
  SiftClient intruder(ctx, co);
  intruder.Send({{"type", "ping"}});
  EXPECT_FALSE(intruder.Recv(&h, 500));
  client::ClientOptions plain;
  plain.endpoint = fe.endpoints()[0];
  SiftClient no_curve(ctx, plain);
  no_curve.Send({{"type", "ping"}});
  EXPECT_FALSE(no_curve.Recv(&h, 300));
}

}  // namespace
}  // namespace sift::daemon
