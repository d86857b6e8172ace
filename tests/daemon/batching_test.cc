// Continuous batching through the real siftd (model from $SIFT_MODEL, this build's plugins, the
// repository's pipelines), over loopback TCP:
//   - every shipped pipeline, all at once on a batching daemon, answers exactly as one request at
//     a time on a daemon without batching (fp32 dtype and activations; prefill in slices on the
//     batching one);
//   - requests join, leave, are cancelled and pass their deadline in the middle of a batch while
//     the others go on to their full length;
//   - a running stream gets tokens while another request's long prompt is prefilled, and a short
//     request that arrives then is answered before that prefill ends;
//   - admission by KV memory: a request that can never fit is refused at once, one that does not
//     fit yet waits for the running one and then runs; /metrics shows it;
//   - with --int8-activations, batched requests answer as they do alone; by default the daemon
//     picks int8 activations exactly where the CPU has AVX-512 VNNI, and --activations fp32
//     overrides it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client.h"
#include "support/http_get.h"
#include "support/siftd_process.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using sift::client::SiftClient;
using sift::testing::HttpGet;
using sift::testing::MetricValue;
using Daemon = sift::testing::SiftdProcess;

// About 330 tokens with the question: long enough for every pipeline to compress.
std::string Context() {
  std::string text;
  const char* facts[] = {
      "The lighthouse on Kestrel Point was built in 1874 from granite quarried nearby.",
      "Its keeper, Agnes Moore, kept a logbook of every ship that passed in a storm.",
      "The lamp burned whale oil until 1902 and kerosene until the station was electrified.",
      "In the winter of 1911 the supply boat could not land for forty-one days.",
      "The keeper's cat, named Pilot, is buried beside the oil house under a flat stone.",
      "Visitors climb one hundred and twelve steps to reach the gallery at the top.",
  };
  for (int round = 0; round < 3; ++round) {
    for (const char* f : facts) text += std::string(f) + " ";
  }
  text += "The secret code written inside the lamp room door is 5821. ";
  for (int round = 0; round < 2; ++round) {
    for (const char* f : facts) text += std::string(f) + " ";
  }
  return text;
}

bool PluginsBuilt() {
  return fs::exists(std::string(SIFT_BINARY_DIR) + "/plugins/prefill_full.so") &&
         fs::exists(std::string(SIFT_BINARY_DIR) + "/plugins/decode_local.so");
}

#define SKIP_WITHOUT_DAEMON() \
  SIFT_SKIP_WITHOUT_MODEL();  \
  if (!PluginsBuilt()) GTEST_SKIP() << "plugins prefill_full/decode_local not built"

// How much longer the tests wait for siftd: $SIFT_TEST_TIME_SCALE, default 1 (tools/tsan.sh sets
// 20: a siftd built with ThreadSanitizer computes about ten times slower).
int TimeScale() {
  const char* scale = std::getenv("SIFT_TEST_TIME_SCALE");
  return scale != nullptr ? std::max(1, std::atoi(scale)) : 1;
}
std::chrono::seconds Budget(int seconds) { return std::chrono::seconds(seconds * TimeScale()); }

std::unique_ptr<SiftClient> Connect(zmq::context_t& ctx, const Daemon& d) {
  sift::client::ClientOptions o;
  o.endpoint = d.endpoint();
  return std::make_unique<SiftClient>(ctx, o);
}

// Every reply for `id` up to its terminal.
std::vector<json> Replies(SiftClient& c, const std::string& id, int timeout_ms = 120000) {
  std::vector<json> out;
  const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms) * TimeScale();
  json h;
  while (Clock::now() < end) {
    if (!c.Recv(&h, 100) || h.value("id", json()) != json(id)) continue;
    out.push_back(h);
    if (h["type"] == "final" || h["type"] == "error") return out;
  }
  ADD_FAILURE() << "no terminal message for " << id;
  return out;
}

// The names of the pipelines the daemon serves.
std::vector<std::string> Pipelines(zmq::context_t& ctx, const Daemon& d) {
  auto c = Connect(ctx, d);
  c->Send({{"type", "list"}, {"id", "l"}});
  json h;
  std::vector<std::string> names;
  if (!c->Recv(&h, 10000)) return names;
  for (const json& p : h.value("pipelines", json::array())) {
    // (a pipeline the loaded model cannot run, e.g. spts without its proxies, says so)
    if (p.value("ok", true) && p.value("available", true) && p.contains("name")) {
      names.push_back(p["name"]);
    }
  }
  return names;
}

json Question(const std::string& id, const std::string& pipeline, int max_tokens) {
  return {{"type", "generate"},
          {"id", id},
          {"pipeline", pipeline},
          {"context", Context()},
          {"question", "What is the secret code written inside the lamp room door?"},
          {"max_tokens", max_tokens},
          {"temperature", 0}};
}

TEST(BatchingTest, EveryPipelineBatchedEqualsOneAtATime) {
  SKIP_WITHOUT_DAEMON();
  Daemon batched, alone;
  // fp32 dtype and activations: exact up to summation order. With int8 activations (the default
  // on AVX-512 VNNI CPUs) a prompt's last rows take the int8 block product or the dequantised copy
  // depending on where its chunks end and what the prefix cache held, and a near tie may flip
  // (seen once in CI for streamingllm); Int8ActivationsServeThroughTheBatch covers that mode.
  const std::vector<std::string> exact = {"--dtype", "fp32", "--activations", "fp32"};
  std::vector<std::string> batched_flags = exact, alone_flags = exact;
  batched_flags.insert(batched_flags.end(), {"--workers", "16", "--prefill-chunk", "96"});
  alone_flags.insert(alone_flags.end(), {"--workers", "1", "--max-batch", "0"});
  ASSERT_EQ(batched.Start(batched_flags), "");
  ASSERT_EQ(alone.Start(alone_flags), "");
  zmq::context_t ctx(1);
  const std::vector<std::string> pipelines = Pipelines(ctx, alone);
  ASSERT_GE(pipelines.size(), 9u);

  // One at a time on the daemon without batching.
  std::map<std::string, std::string> expected;
  {
    auto c = Connect(ctx, alone);
    for (const std::string& p : pipelines) {
      c->Send(Question(p, p, 20));
      const json t = Replies(*c, p).back();
      ASSERT_EQ(t["type"], "final") << p << ": " << t.dump();
      expected[p] = t["text"];
    }
  }
  // All at once on the batching daemon (the last prefill waits for all the others: the timeout
  // allows for a loaded 2-core machine).
  std::map<std::string, std::string> got;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (const std::string& p : pipelines) {
    threads.emplace_back([&, p] {
      auto c = Connect(ctx, batched);
      c->Send(Question(p, p, 20));
      const json t = Replies(*c, p, 600000).back();
      std::lock_guard<std::mutex> lock(mu);
      got[p] = t["type"] == "final" ? t["text"].get<std::string>() : t.dump();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& p : pipelines) EXPECT_EQ(got[p], expected[p]) << "pipeline " << p;
  const std::string metrics = HttpGet(batched.http(), "/metrics");
  EXPECT_GT(MetricValue(metrics, "sift_batch_max_rows"), 1) << "no step ever held two requests";
}

// --int8-activations through the real daemon: /metrics says which products run, and concurrent
// requests of a full and a compressing pipeline, batched, answer as each does alone on the same
// daemon (one row's int8 product is the same alone and in a batch:
// tests/model/batch_engine_test.cc).
TEST(BatchingTest, Int8ActivationsServeThroughTheBatch) {
  SKIP_WITHOUT_DAEMON();
  Daemon d;
  // No prefix cache: the second request of a context prefills it as the first did.
  ASSERT_EQ(d.Start({"--int8-activations", "--workers", "4", "--prefill-chunk", "96",
                     "--prefix-cache", "off"}),
            "");
  const std::string metrics = HttpGet(d.http(), "/metrics");
  const size_t info = metrics.find("sift_engine_info{");
  ASSERT_NE(info, std::string::npos) << metrics;
  const std::string labels = metrics.substr(info, metrics.find('\n', info) - info);
  EXPECT_NE(labels.find("activations=\"int8\""), std::string::npos) << labels;
  EXPECT_NE(labels.find("-int8"), std::string::npos) << labels;  // the kernels: avx512vnni-int8...
  zmq::context_t ctx(1);
  const std::vector<std::string> pipelines = {"full", "snapkv"};
  std::map<std::string, std::string> alone, together;
  {
    auto c = Connect(ctx, d);
    for (const std::string& p : pipelines) {
      c->Send(Question(p, p, 24));
      const json t = Replies(*c, p).back();
      ASSERT_EQ(t["type"], "final") << p << ": " << t.dump();
      alone[p] = t["text"];
    }
  }
  std::mutex mu;
  std::vector<std::thread> threads;
  for (const std::string& p : pipelines) {
    threads.emplace_back([&, p] {
      auto c = Connect(ctx, d);
      c->Send(Question(p + "-2", p, 24));
      const json t = Replies(*c, p + "-2", 300000).back();
      std::lock_guard<std::mutex> lock(mu);
      together[p] = t["type"] == "final" ? t["text"].get<std::string>() : t.dump();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& p : pipelines) {
    EXPECT_FALSE(alone[p].empty()) << p;
    EXPECT_EQ(together[p], alone[p]) << "pipeline " << p;
  }
}

// The flags of /proc/cpuinfo's first processor, space-separated with a space at each end.
std::string CpuFlags() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) == 0) return " " + line.substr(line.find(':') + 1) + " ";
  }
  return " ";
}

// The sift_engine_info labels of a running daemon.
std::string EngineInfo(const Daemon& d) {
  const std::string metrics = HttpGet(d.http(), "/metrics");
  const size_t info = metrics.find("sift_engine_info{");
  if (info == std::string::npos) return metrics;
  return metrics.substr(info, metrics.find('\n', info) - info);
}

// --activations auto (the default) chooses int8 where the packed AVX-512 VNNI kernel runs (the
// CPU has AVX-512 F, BW, VL and VNNI; read here from /proc/cpuinfo, not from the library), fp32
// elsewhere; --activations fp32 always gives the exact products.
TEST(BatchingTest, DefaultActivationsFollowTheCpu) {
  SKIP_WITHOUT_DAEMON();
  const std::string flags = CpuFlags();
  bool vnni = true;
  for (const char* f : {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"}) {
    vnni = vnni && flags.find(std::string(" ") + f + " ") != std::string::npos;
  }
  {
    Daemon d;
    ASSERT_EQ(d.Start({"--workers", "1"}), "");
    const std::string labels = EngineInfo(d);
    EXPECT_NE(labels.find(vnni ? "activations=\"int8\"" : "activations=\"fp32\""),
              std::string::npos)
        << labels;
    EXPECT_EQ(labels.find("avx512vnni-int8 packed") != std::string::npos, vnni) << labels;
    EXPECT_NE(d.log().find(vnni ? "int8 (auto)" : "fp32 (auto)"), std::string::npos) << d.log();
  }
  {
    Daemon d;
    ASSERT_EQ(d.Start({"--workers", "1", "--activations", "fp32"}), "");
    const std::string labels = EngineInfo(d);
    EXPECT_NE(labels.find("activations=\"fp32\""), std::string::npos) << labels;
    EXPECT_NE(labels.find("-fp32"), std::string::npos) << labels;
    EXPECT_EQ(labels.find("packed"), std::string::npos) << labels;
  }
  // int8 at the AVX2 level (SIFT_CPU_ISA, inherited by the daemon): the blocks' own int8 kernel,
  // and no packed copy that nothing would read.
  if (flags.find(" avx2 ") == std::string::npos) return;
  ::setenv("SIFT_CPU_ISA", "avx2", 1);
  Daemon d;
  const std::string started = d.Start({"--workers", "1", "--activations", "int8"});
  ::unsetenv("SIFT_CPU_ISA");
  ASSERT_EQ(started, "");
  const std::string labels = EngineInfo(d);
  EXPECT_NE(labels.find("avx2-int8"), std::string::npos) << labels;
  EXPECT_EQ(labels.find("packed"), std::string::npos) << labels;
}

// A daemon that prefills a long prompt in one forward (--prefill-chunk 0) and runs a decode step at
// every layer boundary of it (--decode-interval-ms 0), reporting progress every `heartbeat_ms`.
std::string StartForLongPrefills(Daemon& d, const char* heartbeat_ms) {
  return d.Start({"--workers", "4", "--n-ctx", "2048", "--prefill-chunk", "0",
                  "--decode-interval-ms", "0", "--heartbeat-ms", heartbeat_ms});
}

// About 1,500 tokens.
std::string LongPrompt() {
  std::string prompt;
  for (int i = 0; i < 150; ++i) prompt += "The quick brown fox jumps over the lazy dog. ";
  return prompt;
}

// A long prompt prefilled in one forward (--prefill-chunk 0) does not hold a running stream: with
// --decode-interval-ms 0 the stream gets a decode step at every layer boundary of that prefill.
// The stream's tokens that came during the prefill are those after the long request's first
// heartbeat reporting prefill progress and before its first token.
TEST(BatchingTest, StreamsGoOnWhileALongPromptPrefills) {
  SKIP_WITHOUT_DAEMON();
  Daemon d;
  ASSERT_EQ(StartForLongPrefills(d, "200"), "");
  zmq::context_t ctx(1);
  auto c = Connect(ctx, d);
  c->Send({{"type", "generate"},
           {"id", "stream"},
           {"pipeline", "full"},
           {"prompt", "Count: one, two,"},
           {"max_tokens", 1500},
           {"ignore_eos", true},
           {"stream", true}});
  const std::string prompt = LongPrompt();
  bool sent = false, prefilling = false, long_streamed = false;
  int during_prefill = 0;
  std::set<std::string> done;
  json h;
  const auto end = Clock::now() + Budget(300);
  while (done.size() < 2 && Clock::now() < end) {
    if (!c->Recv(&h, 100)) continue;
    const std::string id = h.value("id", ""), type = h.value("type", "");
    if (type == "final" || type == "error") done.insert(id);
    if (id == "stream" && type == "chunk") {
      if (!sent) {
        c->Send({{"type", "generate"},
                 {"id", "long"},
                 {"pipeline", "full"},
                 {"prompt", prompt},
                 {"max_tokens", 2},
                 {"stream", true}});
        sent = true;
      }
      if (prefilling && !long_streamed) ++during_prefill;
    }
    if (id == "long" && type == "heartbeat" && h.contains("progress") &&
        h["progress"].value("done", 0) > 0) {
      prefilling = true;
    }
    if (id == "long" && (type == "chunk" || type == "final" || type == "error")) {
      if (!long_streamed) c->Send({{"type", "cancel"}, {"id", "stream"}});
      long_streamed = true;
    }
  }
  ASSERT_EQ(done.size(), 2u);
  EXPECT_TRUE(prefilling) << "no heartbeat reported the long prompt's prefill";
  // About one token per layer boundary (30 layers); without yields inside the forward, none.
  EXPECT_GE(during_prefill, 5);
}

// A short request that arrives while a long prompt is prefilled is answered before that prefill
// ends: its own prefill starts inside the long one's, at a layer boundary (BatchEngine orders its
// tasks by prompt length), and its tokens come from the decode steps run there.
TEST(BatchingTest, AShortPromptIsAnsweredWhileALongOneIsPrefilled) {
  SKIP_WITHOUT_DAEMON();
  Daemon d;
  ASSERT_EQ(StartForLongPrefills(d, "100"), "");
  zmq::context_t ctx(1);
  auto c = Connect(ctx, d);
  const std::string prompt = LongPrompt();
  c->Send({{"type", "generate"},
           {"id", "long"},
           {"pipeline", "full"},
           {"prompt", prompt},
           {"max_tokens", 2},
           {"stream", true}});
  bool sent = false, short_answered = false, prefilling_after = false, long_streamed = false;
  std::set<std::string> done;
  json h, short_final;
  const auto end = Clock::now() + Budget(300);
  while (done.size() < 2 && Clock::now() < end) {
    if (!c->Recv(&h, 100)) continue;
    const std::string id = h.value("id", ""), type = h.value("type", "");
    if (type == "final" || type == "error") done.insert(id);
    const bool progress = type == "heartbeat" && h.contains("progress");
    if (id == "long" && progress && h["progress"].value("done", 0) > 0 && !sent) {
      c->Send({{"type", "generate"},
               {"id", "short"},
               {"pipeline", "full"},
               {"prompt", "The capital of France is"},
               {"max_tokens", 4},
               {"ignore_eos", true}});
      sent = true;
    }
    if (id == "short" && (type == "final" || type == "error")) {
      short_final = h;
      short_answered = !long_streamed;
    }
    if (id == "long" && progress && short_answered && !long_streamed &&
        h["progress"].value("done", 0) < h["progress"].value("total", 0)) {
      prefilling_after = true;
    }
    if (id == "long" && (type == "chunk" || type == "final")) long_streamed = true;
  }
  ASSERT_EQ(done.size(), 2u);
  ASSERT_TRUE(sent) << "no heartbeat reported the long prompt's prefill";
  EXPECT_EQ(short_final.value("type", ""), "final") << short_final.dump();
  EXPECT_TRUE(short_answered) << "the short request ended after the long one's first token";
  EXPECT_TRUE(prefilling_after) << "no heartbeat after the short answer showed the long prompt "
                                   "still being prefilled";
  const std::string metrics = HttpGet(d.http(), "/metrics");
  EXPECT_GE(MetricValue(metrics, "sift_batch_tasks_nested"), 1) << metrics;
}

class BatchFlowTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (sift::testing::ModelPath().empty() || !PluginsBuilt()) return;
    daemon_ = new Daemon();
    start_error_ = daemon_->Start({"--workers", "16", "--n-ctx", "512"});
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override {
    SKIP_WITHOUT_DAEMON();
    ASSERT_EQ(start_error_, "");
  }
  static inline Daemon* daemon_ = nullptr;
  static inline std::string start_error_;
  zmq::context_t ctx_{1};
};

json Long(const std::string& id, int max_tokens) {
  return {{"type", "generate"},
          {"id", id},
          {"pipeline", "full"},
          {"prompt", "Count: one, two,"},
          {"max_tokens", max_tokens},
          {"ignore_eos", true},
          {"stream", true}};
}

// Four long streams; once two of them run, a short request joins and leaves, one stream is
// cancelled and one passes its deadline; the other two still produce every token.
TEST_F(BatchFlowTest, JoinLeaveCancelAndDeadlineMidBatch) {
  auto c = Connect(ctx_, *daemon_);
  // a and b are long enough to outlast the other three requests' prefills even under TSan, where a
  // prefill takes many decode steps (one per layer boundary).
  c->Send(Long("a", 200));
  c->Send(Long("b", 200));
  c->Send(Long("cancel-me", 48));
  json deadline = Long("deadline", 400);
  deadline["deadline_ms"] = 1500;
  c->Send(deadline);
  // Once a and b stream, a short request joins. (Not "all four": under a slow build, such as
  // ThreadSanitizer's, the deadline can pass before that request's first token.)
  std::set<std::string> streaming;
  std::map<std::string, json> terminal;
  std::map<std::string, int> chunks;
  json h;
  const auto end = Clock::now() + Budget(120);
  bool joined = false, cancelled = false, short_left_while_running = false;
  while (terminal.size() < 5 && Clock::now() < end) {
    if (!c->Recv(&h, 100)) continue;
    const std::string id = h.value("id", "");
    if (h["type"] == "chunk") {
      streaming.insert(id);
      ++chunks[id];
    }
    if (h["type"] == "final" || h["type"] == "error") {
      terminal[id] = h;
      if (id == "short") short_left_while_running = !terminal.count("a") && !terminal.count("b");
    }
    if (!joined && streaming.count("a") && streaming.count("b")) {
      c->Send({{"type", "generate"},
               {"id", "short"},
               {"pipeline", "full"},
               {"prompt", "Colours: red, green,"},
               {"max_tokens", 3},
               {"ignore_eos", true}});
      joined = true;
    }
    if (!cancelled && chunks["cancel-me"] >= 5) {
      c->Send({{"type", "cancel"}, {"id", "cancel-me"}});
      cancelled = true;
    }
  }
  std::string seen;
  for (const auto& [id, n] : chunks) seen += id + ": " + std::to_string(n) + " chunks; ";
  for (const auto& [id, t] : terminal) seen += id + " ended: " + t.value("type", "") + "; ";
  ASSERT_EQ(terminal.size(), 5u) << (joined ? "" : "the short request was never sent; ") << seen;
  EXPECT_EQ(terminal["a"]["type"], "final");
  EXPECT_EQ(terminal["a"]["usage"]["completion_tokens"], 200);
  EXPECT_EQ(terminal["b"]["usage"]["completion_tokens"], 200);
  EXPECT_EQ(terminal["short"]["type"], "final");
  EXPECT_EQ(terminal["short"]["usage"]["completion_tokens"], 3);
  EXPECT_EQ(terminal["cancel-me"]["code"], "CANCELLED") << terminal["cancel-me"].dump();
  EXPECT_LT(terminal["cancel-me"]["details"]["completion_tokens"].get<int>(), 48);
  EXPECT_EQ(terminal["deadline"]["code"], "DEADLINE_EXCEEDED") << terminal["deadline"].dump();
  // The short request finished while the long ones still ran: it joined and left mid-batch (in
  // steps of at least a, b and itself; the deadline's and cancel-me's rows depend on timing).
  EXPECT_TRUE(short_left_while_running) << seen;
  const std::string metrics = HttpGet(daemon_->http(), "/metrics");
  EXPECT_GE(MetricValue(metrics, "sift_batch_max_rows"), 3);
  EXPECT_EQ(MetricValue(metrics, "sift_batch_decoding"), 0);
  EXPECT_EQ(MetricValue(metrics, "sift_kv_reserved_bytes"), 0);
}

// A KV budget of about one request: the second waits for the first (visible in /metrics) and
// then runs; a request larger than the whole budget is refused at once.
TEST(KvBudgetTest, WaitsWhileFullAndRefusesWhatCanNeverFit) {
  SKIP_WITHOUT_DAEMON();
  Daemon d;
  // SmolLM2 bf16: 30 layers x 3 KV heads x (2 x 64 x 2 + 8) bytes = 23,760 bytes per token.
  // ~20 prompt tokens + 120 generated = ~3.3 MB per request; 5 MB holds one.
  ASSERT_EQ(d.Start({"--workers", "8", "--kv-budget", "5M"}), "");
  zmq::context_t ctx(1);
  auto c = Connect(ctx, d);
  c->Send(Long("first", 120));
  c->Send(Long("second", 120));
  bool saw_waiting = false;
  std::map<std::string, json> terminal;
  json h;
  const auto end = Clock::now() + Budget(120);
  while (terminal.size() < 2 && Clock::now() < end) {
    if (!saw_waiting) {
      const std::string m = HttpGet(d.http(), "/metrics");
      saw_waiting = MetricValue(m, "sift_requests_waiting_kv") >= 1 &&
                    MetricValue(m, "sift_kv_reserved_bytes") > 0 &&
                    MetricValue(m, "sift_kv_reserved_bytes") <= 5 * 1024 * 1024;
    }
    if (c->Recv(&h, 20) && (h["type"] == "final" || h["type"] == "error")) {
      terminal[h["id"]] = h;
    }
  }
  EXPECT_TRUE(saw_waiting) << "the second request never waited for KV budget";
  ASSERT_EQ(terminal.size(), 2u);
  EXPECT_EQ(terminal["first"]["type"], "final") << terminal["first"].dump();
  EXPECT_EQ(terminal["second"]["type"], "final") << terminal["second"].dump();
  // Whichever got the budget first, the other started only when it had finished: its queue time
  // (which includes the wait for KV budget) covers the first one's run.
  const double q1 = terminal["first"]["stats"]["queue_ms"],
               q2 = terminal["second"]["stats"]["queue_ms"];
  const json& ran = q1 < q2 ? terminal["first"] : terminal["second"];
  EXPECT_GT(std::max(q1, q2), 0.8 * ran["stats"]["e2e_ms"].get<double>());

  const auto start = Clock::now();
  c->Send(Long("huge", 400));  // ~9.7 MB
  const json t = Replies(*c, "huge").back();
  EXPECT_EQ(t["code"], "RESOURCE_EXHAUSTED") << t.dump();
  EXPECT_EQ(t["reason"], "kv_budget");
  EXPECT_NE(t["message"].get<std::string>().find("--kv-budget"), std::string::npos);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
}

// Prefills that select layer by layer work in steps, and the loop runs the steps of requests of
// one size side by side; each answers as it does alone.
TEST(BatchingTest, PrefillsSelectingByLayerRunSideBySide) {
  SKIP_WITHOUT_DAEMON();
  Daemon d;
  ASSERT_EQ(d.Start({}), "");
  zmq::context_t ctx(1);
  auto c = Connect(ctx, d);
  const std::vector<std::string> ids = {"a", "b", "c"};
  for (const std::string& id : ids) {
    json q = Question(id, "snapkv", 8);
    // 64-token chunks: ~6 steps per layer, so the requests overlap while they prefill.
    q["params"] = {{"prefill", {{"select_by_layer", true}, {"chunk_size", 64}}},
                   {"select", {{"budget", 40}, {"floor", 0}}}};
    c->Send(q);
  }
  std::map<std::string, json> terminal;
  json h;
  const auto end = Clock::now() + Budget(120);
  while (terminal.size() < ids.size() && Clock::now() < end) {
    if (c->Recv(&h, 100) && (h["type"] == "final" || h["type"] == "error")) {
      terminal[h["id"]] = h;
    }
  }
  ASSERT_EQ(terminal.size(), ids.size());
  for (const std::string& id : ids) {
    ASSERT_EQ(terminal[id]["type"], "final") << terminal[id].dump();
    EXPECT_EQ(terminal[id]["text"], terminal["a"]["text"]) << id;
  }
  const std::string metrics = HttpGet(d.http(), "/metrics");
  EXPECT_GE(MetricValue(metrics, "sift_batch_tasks_interleaved"), 1) << metrics;
}

// A compressing request whose prefill selects layer by layer (prefill_full's select_by_layer)
// reserves what it holds at most, not the whole prompt in every layer: under a budget smaller
// than its full KV it is served, while the same request prefilled whole is refused.
TEST(KvBudgetTest, SelectingLayerByLayerFitsWhereTheWholePromptDoesNot) {
  SKIP_WITHOUT_DAEMON();
  Daemon d;
  // ~350 prompt tokens + 8 generated, 23,760 bytes per token: ~8.5 MB whole. By layer, keeping
  // 40 entries per layer: ~350 + 30 x 40 entries + 31 x 8 of headroom, 792 bytes each: ~1.4 MB.
  ASSERT_EQ(d.Start({"--kv-budget", "3M"}), "");
  zmq::context_t ctx(1);
  auto c = Connect(ctx, d);
  auto ask = [&](const std::string& id, bool by_layer) {
    json q = Question(id, "snapkv", 8);
    q["params"] = {{"select", {{"budget", 40}, {"floor", 0}}}};
    if (by_layer) q["params"]["prefill"] = {{"select_by_layer", true}};
    c->Send(q);
    return Replies(*c, id).back();
  };
  const json whole = ask("whole", false);
  EXPECT_EQ(whole["type"], "error") << whole.dump();
  EXPECT_EQ(whole["reason"], "kv_budget") << whole.dump();
  EXPECT_GT(whole["details"]["kv_bytes"].get<int64_t>(), 3 << 20);

  const json by_layer = ask("by_layer", true);
  ASSERT_EQ(by_layer["type"], "final") << by_layer.dump();
  const json& stats = by_layer["stats"];
  EXPECT_LT(stats["kv_bytes"].get<int64_t>(), stats["kv_bytes_full"].get<int64_t>() / 4)
      << stats.dump();

  // The same answer as the whole prompt's selection, from a daemon without a budget.
  Daemon unlimited;
  ASSERT_EQ(unlimited.Start({}), "");
  c = Connect(ctx, unlimited);
  const json reference = ask("reference", false);
  ASSERT_EQ(reference["type"], "final") << reference.dump();
  EXPECT_EQ(by_layer["text"], reference["text"]);
  EXPECT_EQ(by_layer["stats"]["tokens_kept"], reference["stats"]["tokens_kept"]);
}

}  // namespace
