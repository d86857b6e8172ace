// The prefix cache (issue 26) through the real siftd (model from $SIFT_MODEL, this build's
// plugins, fp32 dtype and activations so that "the same answer" means identical: with int8
// activations a cached remainder of a few rows rounds unlike a fresh prefill's larger product,
// docs/context-cache.md): a second question about one
// document reuses the document's KV and answers exactly as a daemon without the cache does; the
// query-aware selections reuse all but their observation window, H2O (column sums over every
// row) nothing; GemFilter's and ILRe's scoring passes reuse the document's first layers;
// StreamingLLM's rolling pipeline resumes questions and chat turns from rolling states; concurrent
// requests share one cached prefix; context-only selection caches its compressed context; a small
// KV budget evicts instead of growing; a hot-reloaded prefill plugin never serves its old
// generation's entries; a request cancelled after its reuse leaves the cache serving.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client.h"
#include "support/http_get.h"
#include "support/sift_request.h"
#include "support/siftd_process.h"
#include "support/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using Daemon = sift::testing::SiftdProcess;
using sift::client::SiftClient;
using sift::testing::HttpGet;
using sift::testing::MetricValue;
using sift::testing::SendAndAwait;

// A document of about 700 tokens: a ledger of deliveries, one fact per sentence. Another ship
// gives another document from its first sentence on.
std::string Document(const std::string& ship = "Marlow") {
  std::string text = "The " + ship + " harbour ledger for the week of the storm:\n";
  const char* goods[] = {"barrels of salt", "crates of apples", "bolts of wool", "sacks of flour",
                         "coils of rope"};
  for (int day = 1; day <= 28; ++day) {
    text += "On day " + std::to_string(day) + " the ship " + ship + " unloaded " +
            std::to_string(3 + (day * 7) % 40) + " " + goods[day % 5] + " at pier " +
            std::to_string(1 + day % 6) + ". ";
  }
  return text;
}

json Question(const std::string& question, const std::string& ship = "Marlow") {
  return json::array(
      {{{"role", "user"}, {"content", Document(ship) + "\n\nQuestion: " + question}}});
}

std::atomic<int> counter{0};  // request ids; Ask runs on several threads at once

// One greedy, unstreamed request (stage parameter overrides `params`, if any); the `final` or
// `error` reply ({"type": "timeout"} after 120 s). `prompt`: the request's messages, or its
// SIFT/1 context and question.
json Ask(const Daemon& d, const std::string& pipeline, const json& prompt, int max_tokens = 12,
         const json& params = nullptr) {
  json header = {{"type", "generate"},       {"id", pipeline + "-" + std::to_string(++counter)},
                 {"pipeline", pipeline},     {"sampling", {{"temperature", 0}}},
                 {"max_tokens", max_tokens}, {"stream", false}};
  if (prompt.is_array()) {
    header["messages"] = prompt;
  } else {
    header.update(prompt);
  }
  if (!params.is_null()) header["params"] = params;
  return SendAndAwait(d.endpoint(), header);
}

// The document as SIFT/1's context and a question: the question span is the question alone
// (with messages it is the whole last user message, which a filter always keeps).
json ContextAndQuestion(const std::string& question) {
  return {{"context", Document()}, {"question", question}};
}

int64_t Cached(const json& final) {
  return final.contains("usage") ? final["usage"].value("cached_tokens", int64_t{-1}) : -1;
}

double Metric(const Daemon& d, const std::string& name) {
  return MetricValue(HttpGet(d.http(), "/metrics"), name);
}

// Bytes of one token's KV on this daemon, from its start-up log line.
int64_t KvBytesPerToken(const Daemon& d) {
  std::smatch m;
  const std::string log = d.log();
  if (!std::regex_search(log, m, std::regex("\"kv_bytes_per_token\":([0-9]+)"))) return 0;
  return std::stoll(m[1]);
}

const char* kQuestions[] = {
    "What did the Marlow unload on day 9?", "At which pier did the Marlow unload on day 14?",
    "How many crates of apples came on day 21?", "What came on the last day of the ledger?"};

class ContextCacheTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (sift::testing::ModelPath().empty()) return;
    cached_ = new Daemon();
    fresh_ = new Daemon();
    const std::vector<std::string> flags = {"--dtype", "fp32",    "--activations",
                                            "fp32",    "--n-ctx", "2048"};
    std::vector<std::string> off = flags;
    off.insert(off.end(), {"--prefix-cache", "false"});
    start_error_ = cached_->Start(flags) + fresh_->Start(off);
  }
  static void TearDownTestSuite() {
    delete cached_;
    delete fresh_;
    cached_ = fresh_ = nullptr;
  }
  void SetUp() override {
    SIFT_SKIP_WITHOUT_MODEL();
    ASSERT_EQ(start_error_, "");
  }

  // A filter whose scoring pass (stage "pass1") files the document in the cache: after a first
  // question, a second one takes its prompt up to the question from the cache (one hit) and
  // answers as a fresh daemon does; with the pass's cache turned off it runs the whole document
  // again and answers alike. `params`: the request's stage overrides. Fills the second
  // question's final and the fresh daemon's.
  static void ExpectScoringPassReused(const std::string& pipeline, const json& params, json* second,
                                      json* reference) {
    const json first = Ask(*cached_, pipeline, ContextAndQuestion(kQuestions[0]), 12, params);
    ASSERT_EQ(first["type"], "final") << first.dump();
    EXPECT_EQ(Cached(first), 0);
    const double hits = Metric(*cached_, "sift_prefix_cache_hits_total");
    *second = Ask(*cached_, pipeline, ContextAndQuestion(kQuestions[1]), 12, params);
    ASSERT_EQ((*second)["type"], "final") << second->dump();
    const int64_t prompt = (*second)["usage"]["prompt_tokens"];
    EXPECT_GT(Cached(*second), prompt - 30) << second->dump();
    EXPECT_LT(Cached(*second), prompt);
    EXPECT_EQ(Metric(*cached_, "sift_prefix_cache_hits_total"), hits + 1);
    *reference = Ask(*fresh_, pipeline, ContextAndQuestion(kQuestions[1]), 12, params);
    ASSERT_EQ((*reference)["type"], "final") << reference->dump();
    EXPECT_EQ(Cached(*reference), 0);
    EXPECT_EQ((*second)["text"], (*reference)["text"]);
    json off = params;
    off["pass1"] = {{"prefix_cache", false}};
    const json no_cache = Ask(*cached_, pipeline, ContextAndQuestion(kQuestions[1]), 12, off);
    ASSERT_EQ(no_cache["type"], "final") << no_cache.dump();
    EXPECT_EQ(Cached(no_cache), 0);
    EXPECT_EQ(no_cache["text"], (*reference)["text"]);
  }

  static inline Daemon* cached_ = nullptr;  // --prefix-cache on (the default)
  static inline Daemon* fresh_ = nullptr;   // --prefix-cache false: every prompt prefilled whole
  static inline std::string start_error_;
};

TEST_F(ContextCacheTest, ASecondQuestionReusesTheDocumentAndAnswersAsAFreshDaemon) {
  const double hits = Metric(*cached_, "sift_prefix_cache_hits_total");
  const double reused = Metric(*cached_, "sift_prefix_cache_reused_tokens_total");
  const json first = Ask(*cached_, "full", Question(kQuestions[0]));
  ASSERT_EQ(first["type"], "final") << first.dump();
  const json second = Ask(*cached_, "full", Question(kQuestions[1]));
  ASSERT_EQ(second["type"], "final") << second.dump();
  const int64_t prompt = second["usage"]["prompt_tokens"];
  ASSERT_GT(prompt, 600);
  // Everything up to the question came from the cache (the document and the template before it).
  EXPECT_GT(Cached(second), prompt - 30) << second.dump();
  EXPECT_LT(Cached(second), prompt);
  EXPECT_EQ(Metric(*cached_, "sift_prefix_cache_hits_total"), hits + 1);
  EXPECT_EQ(Metric(*cached_, "sift_prefix_cache_reused_tokens_total"),
            reused + static_cast<double>(Cached(second)));
  EXPECT_GT(Metric(*cached_, "sift_prefix_cache_bytes"), 0);
  EXPECT_LE(Metric(*cached_, "sift_kv_reserved_bytes"), Metric(*cached_, "sift_kv_budget_bytes"));
  const json reference = Ask(*fresh_, "full", Question(kQuestions[1]));
  ASSERT_EQ(reference["type"], "final");
  EXPECT_EQ(Cached(reference), 0);
  EXPECT_EQ(second["text"], reference["text"]);
  // The same question again: all but the last prompt token.
  const json again = Ask(*cached_, "full", Question(kQuestions[1]));
  EXPECT_EQ(Cached(again), prompt - 1);
  EXPECT_EQ(again["text"], reference["text"]);
}

TEST_F(ContextCacheTest, SelectionReusesAllButItsWindowAndH2oNothing) {
  ASSERT_EQ(Ask(*cached_, "full", Question(kQuestions[2]))["type"], "final");
  // snapkv shares prefill_full's entries; its 32-query window is prefilled for its statistics.
  const json snap = Ask(*cached_, "snapkv", Question(kQuestions[3]));
  ASSERT_EQ(snap["type"], "final") << snap.dump();
  const int64_t prompt = snap["usage"]["prompt_tokens"];
  EXPECT_GT(Cached(snap), prompt - 64);
  EXPECT_LE(Cached(snap), prompt - 32);
  const json snap_ref = Ask(*fresh_, "snapkv", Question(kQuestions[3]));
  EXPECT_EQ(snap["text"], snap_ref["text"]);
  EXPECT_EQ(snap["stats"]["tokens_kept"], snap_ref["stats"]["tokens_kept"]);
  // H2O sums attention over every query row: nothing can come from the cache.
  const json h2o = Ask(*cached_, "h2o", Question(kQuestions[3]));
  ASSERT_EQ(h2o["type"], "final") << h2o.dump();
  EXPECT_EQ(Cached(h2o), 0);
  EXPECT_EQ(h2o["text"], Ask(*fresh_, "h2o", Question(kQuestions[3]))["text"]);
}

TEST_F(ContextCacheTest, ContextOnlySelectionCachesTheCompressedContext) {
  // query_aware = false selects from the context alone (its window is the context's last rows):
  // the first question files what the selection kept of the document, and the prefill stores no
  // full prefix; a second question takes that compressed context whole and prefills only itself,
  // and its answer and kept tokens equal a fresh daemon's.
  const json params = {{"select", {{"query_aware", false}}}};
  const std::string p = "chunkkv";
  const double bytes = Metric(*cached_, "sift_prefix_cache_bytes");
  const json first = Ask(*cached_, p, ContextAndQuestion(kQuestions[0]), 12, params);
  ASSERT_EQ(first["type"], "final") << first.dump();
  const int64_t prompt = first["usage"]["prompt_tokens"];
  ASSERT_GT(prompt, 600);
  // About a tenth of the document's KV (keep_ratio 0.1, raised to the floor of 128 entries).
  const double filed = Metric(*cached_, "sift_prefix_cache_bytes") - bytes;
  EXPECT_GT(filed, 0);
  EXPECT_LT(filed, 0.3 * static_cast<double>(prompt * KvBytesPerToken(*cached_)));

  const double hits = Metric(*cached_, "sift_prefix_cache_hits_total");
  const auto ask_kept = [&](const Daemon& d, const char* question) {
    json prompt_and_kept = ContextAndQuestion(question);
    prompt_and_kept["return_kept"] = true;
    return Ask(d, p, prompt_and_kept, 12, params);
  };
  const json second = ask_kept(*cached_, kQuestions[1]);
  ASSERT_EQ(second["type"], "final") << second.dump();
  const int64_t context = Cached(second);
  EXPECT_GT(context, prompt - 30) << second.dump();
  EXPECT_LT(context, prompt);
  EXPECT_EQ(Metric(*cached_, "sift_prefix_cache_hits_total"), hits + 1);
  EXPECT_EQ(Metric(*cached_, "sift_prefix_cache_bytes") - bytes, filed);  // held already
  const json reference = ask_kept(*fresh_, kQuestions[1]);
  ASSERT_EQ(reference["type"], "final") << reference.dump();
  EXPECT_EQ(Cached(reference), 0);
  EXPECT_EQ(second["text"], reference["text"]);
  EXPECT_EQ(second["stats"]["tokens_kept"], reference["stats"]["tokens_kept"]);
  EXPECT_EQ(second["kept"], reference["kept"]);
  EXPECT_LT(second["stats"]["tokens_kept"].get<int64_t>(), prompt / 3) << second.dump();

  // Other parameters select otherwise: never served this entry.
  json other = params;
  other["select"]["keep_ratio"] = 0.2;
  const json wider = Ask(*cached_, p, ContextAndQuestion(kQuestions[1]), 12, other);
  ASSERT_EQ(wider["type"], "final") << wider.dump();
  const json wider_ref = Ask(*fresh_, p, ContextAndQuestion(kQuestions[1]), 12, other);
  EXPECT_GT(wider["stats"]["tokens_kept"], second["stats"]["tokens_kept"]);
  EXPECT_EQ(wider["stats"]["tokens_kept"], wider_ref["stats"]["tokens_kept"]);
  EXPECT_EQ(wider["text"], wider_ref["text"]);

  // H2O (column sums over the context's queries) and PyramidKV (a budget per layer) alike.
  for (const char* pipeline : {"h2o", "pyramidkv"}) {
    SCOPED_TRACE(pipeline);
    ASSERT_EQ(Ask(*cached_, pipeline, ContextAndQuestion(kQuestions[2]), 12, params)["type"],
              "final");
    const json got = Ask(*cached_, pipeline, ContextAndQuestion(kQuestions[3]), 12, params);
    ASSERT_EQ(got["type"], "final") << got.dump();
    EXPECT_EQ(Cached(got), context);
    const json want = Ask(*fresh_, pipeline, ContextAndQuestion(kQuestions[3]), 12, params);
    EXPECT_EQ(got["text"], want["text"]);
    EXPECT_EQ(got["stats"]["tokens_kept"], want["stats"]["tokens_kept"]);
  }
}

TEST_F(ContextCacheTest, GemFilterReusesItsScoringPassOverTheDocument) {
  // GemFilter's pass 1 (prefill_partial, layers 0..r) files its own entries: a second question
  // runs only the question through those layers; the filter and the final prefill of the kept
  // tokens run as always, so the answer, the kept tokens and their count equal a fresh daemon's.
  json second, reference;
  ASSERT_NO_FATAL_FAILURE(
      ExpectScoringPassReused("gemfilter", {{"filter", {{"topk", 200}}}}, &second, &reference));
  EXPECT_EQ(second["stats"]["tokens_kept"], 200) << second.dump();
}

TEST_F(ContextCacheTest, IlreReusesItsStreamingPassOverTheDocument) {
  // ILRe's pass 1 (prefill_streaming) files layers 0..l_R of every row under its own scope: a
  // second question runs only the question through the Λ-masked layers, against the document's
  // sink and window entries and its keys at l_R; the scores, the kept tokens and the answer equal
  // a fresh daemon's.
  json second, reference;
  ASSERT_NO_FATAL_FAILURE(
      ExpectScoringPassReused("ilre", {{"filter", {{"budget", 200}}}}, &second, &reference));
  const int64_t prompt = second["usage"]["prompt_tokens"];
  ASSERT_GT(prompt, 600);
  EXPECT_LT(second["stats"]["tokens_kept"].get<int64_t>(), prompt - 300) << second.dump();
  EXPECT_EQ(second["stats"]["tokens_kept"], reference["stats"]["tokens_kept"]);
}

TEST_F(ContextCacheTest, RollingStreamingLlmResumesQuestionsAndTurnsInBoundedMemory) {
  // streamingllm_rolling keeps 4 sinks + `window` recent entries per layer through its prefill
  // and files the rolling state after the context and after the prompt: a second question
  // streams only itself, each chat turn only the answer and the new message, and the answers
  // equal a fresh daemon's, while the conversation's entries keep one size.
  const json params = {{"prefill", {{"window", 128}}}};
  const std::string p = "streamingllm_rolling";
  const json first = Ask(*cached_, p, ContextAndQuestion(kQuestions[0]), 12, params);
  ASSERT_EQ(first["type"], "final") << first.dump();
  EXPECT_EQ(Cached(first), 0);
  EXPECT_LE(first["stats"]["tokens_kept"].get<int64_t>(), 4 + 128 + 12) << first.dump();
  const json second = Ask(*cached_, p, ContextAndQuestion(kQuestions[1]), 12, params);
  ASSERT_EQ(second["type"], "final") << second.dump();
  const int64_t prompt = second["usage"]["prompt_tokens"];
  ASSERT_GT(prompt, 600);
  EXPECT_GT(Cached(second), prompt - 30) << second.dump();
  EXPECT_LT(Cached(second), prompt);
  const json reference = Ask(*fresh_, p, ContextAndQuestion(kQuestions[1]), 12, params);
  ASSERT_EQ(reference["type"], "final") << reference.dump();
  EXPECT_EQ(Cached(reference), 0);
  EXPECT_EQ(second["text"], reference["text"]);

  // A conversation: every turn re-sends the earlier ones with the model's answers.
  json messages = Question(kQuestions[0]);
  const char* follow_ups[] = {"And on day 14?", "Which goods came most often?"};
  int64_t previous_prompt = 0;
  double bytes_after_turn2 = 0;
  for (int turn = 0; turn < 3; ++turn) {
    SCOPED_TRACE("turn " + std::to_string(turn + 1));
    if (turn > 0) {
      messages.push_back({{"role", "user"}, {"content", follow_ups[turn - 1]}});
    }
    const json got = Ask(*cached_, p, messages, 12, params);
    ASSERT_EQ(got["type"], "final") << got.dump();
    const json want = Ask(*fresh_, p, messages, 12, params);
    ASSERT_EQ(want["type"], "final") << want.dump();
    EXPECT_EQ(got["text"], want["text"]);
    if (turn > 0) {
      // The previous turn's whole prompt came from its rolling state.
      EXPECT_EQ(Cached(got), previous_prompt) << got.dump();
    }
    previous_prompt = got["usage"]["prompt_tokens"];
    if (turn == 1) bytes_after_turn2 = Metric(*cached_, "sift_prefix_cache_bytes");
    if (turn == 2) {
      // Two states per conversation (after the context, after the prompt), each sink + window
      // entries per layer: a longer conversation takes no more.
      EXPECT_EQ(Metric(*cached_, "sift_prefix_cache_bytes"), bytes_after_turn2);
    }
    messages.push_back({{"role", "assistant"}, {"content", got["text"]}});
  }
}

TEST_F(ContextCacheTest, ConcurrentRequestsShareOneCachedPrefix) {
  ASSERT_EQ(Ask(*cached_, "full", Question(kQuestions[0]))["type"], "final");
  std::vector<json> answers(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] { answers[i] = Ask(*cached_, "full", Question(kQuestions[i])); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(kQuestions[i]);
    ASSERT_EQ(answers[i]["type"], "final") << answers[i].dump();
    EXPECT_GT(Cached(answers[i]), 600);
    EXPECT_EQ(answers[i]["text"], Ask(*fresh_, "full", Question(kQuestions[i]))["text"]);
  }
}

TEST_F(ContextCacheTest, ACancelledRequestLeavesTheCacheServing) {
  ASSERT_EQ(Ask(*cached_, "full", Question(kQuestions[0]))["type"], "final");
  zmq::context_t ctx(1);
  sift::client::ClientOptions o;
  o.endpoint = cached_->endpoint();
  SiftClient c(ctx, o);
  c.Send({{"type", "generate"},
          {"id", "cancelled"},
          {"pipeline", "full"},
          {"messages", Question(kQuestions[2])},
          {"max_tokens", 200},
          {"ignore_eos", true}});
  json h;
  while (c.Recv(&h, 30000) && h["type"] != "chunk") {
  }
  ASSERT_EQ(h["type"], "chunk");
  c.Send({{"type", "cancel"}, {"id", "cancelled"}});
  while (c.Recv(&h, 30000) && h["type"] != "error" && h["type"] != "final") {
  }
  EXPECT_EQ(h.value("code", ""), "CANCELLED") << h.dump();
  const json after = Ask(*cached_, "full", Question(kQuestions[1]));
  EXPECT_GT(Cached(after), 600);
  EXPECT_EQ(after["text"], Ask(*fresh_, "full", Question(kQuestions[1]))["text"]);
}

TEST(ContextCacheBudgetTest, ASmallBudgetEvictsInsteadOfGrowing) {
  SIFT_SKIP_WITHOUT_MODEL();
  Daemon probe;
  ASSERT_EQ(probe.Start({"--dtype", "fp32", "--n-ctx", "2048"}), "");
  const int64_t per_token = KvBytesPerToken(probe);
  ASSERT_GT(per_token, 0) << probe.log();
  probe.Stop();
  // Room for one running request of ~720 tokens and one cached document, not for two documents
  // beside a request.
  const int64_t budget = 2000 * per_token;
  Daemon d;
  ASSERT_EQ(d.Start({"--dtype", "fp32", "--n-ctx", "2048", "--kv-budget", std::to_string(budget)}),
            "");
  const json a = Ask(d, "full", Question(kQuestions[0], "Marlow"));
  ASSERT_EQ(a["type"], "final") << a.dump();
  EXPECT_EQ(Metric(d, "sift_prefix_cache_entries"), 1);
  const json b = Ask(d, "full", Question(kQuestions[0], "Osprey"));
  ASSERT_EQ(b["type"], "final") << b.dump();
  EXPECT_EQ(Cached(b), 0);  // another document
  // The second document's entry did not fit beside the first: the first was evicted.
  EXPECT_EQ(Metric(d, "sift_prefix_cache_entries"), 1);
  EXPECT_GE(Metric(d, "sift_prefix_cache_evictions_total"), 1);
  EXPECT_GT(Cached(Ask(d, "full", Question(kQuestions[1], "Osprey"))), 600);
  EXPECT_EQ(Cached(Ask(d, "full", Question(kQuestions[1], "Marlow"))), 0);
  // Never past the budget, cached prompts included.
  EXPECT_LE(Metric(d, "sift_kv_reserved_peak_bytes"), static_cast<double>(budget));
  EXPECT_GT(Metric(d, "sift_kv_reserved_peak_bytes"), 0);
}

// A plugins folder of copies (prefill_full, decode_local) and the full pipeline, rescanned on
// SIGHUP only.
TEST(ContextCacheReloadTest, AHotReloadedPrefillNeverServesItsOldEntries) {
  SIFT_SKIP_WITHOUT_MODEL();
  sift::testing::TempDir dir;
  const std::string plugins = dir.File("plugins"), pipelines = dir.File("pipelines");
  fs::create_directories(plugins);
  fs::create_directories(pipelines);
  for (const char* p : {"prefill_full", "decode_local"}) {
    fs::copy_file(std::string(SIFT_BINARY_DIR) + "/plugins/" + p + ".so",
                  plugins + "/" + p + ".so");
  }
  fs::copy_file(std::string(SIFT_SOURCE_DIR) + "/pipelines/full.toml", pipelines + "/full.toml");
  Daemon d;
  ASSERT_EQ(d.Start({"--dtype", "fp32", "--n-ctx", "2048", "--plugins", plugins, "--pipelines",
                     pipelines, "--rescan-ms", "0"}),
            "");
  ASSERT_EQ(Ask(d, "full", Question(kQuestions[0]))["type"], "final");
  EXPECT_GT(Cached(Ask(d, "full", Question(kQuestions[1]))), 600);
  // A new build of prefill_full (the same code, other bytes: another content hash).
  { std::ofstream(plugins + "/prefill_full.so", std::ios::app) << "rebuilt"; }
  const auto count = [&] {
    const std::string log = d.log();
    size_t n = 0;
    for (size_t at = 0; (at = log.find("\"event\":\"rescan_done\"", at)) != std::string::npos;
         ++at) {
      ++n;
    }
    return n;
  };
  const size_t before = count();
  ::kill(d.pid(), SIGHUP);
  const auto end = Clock::now() + std::chrono::seconds(60);
  while (count() == before && Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(count(), before) << d.log();
  const json after = Ask(d, "full", Question(kQuestions[1]));
  ASSERT_EQ(after["type"], "final") << after.dump();
  EXPECT_EQ(Cached(after), 0) << "an entry of the old generation was served";
  // The new generation caches its own prompts.
  EXPECT_GT(Cached(Ask(d, "full", Question(kQuestions[2]))), 600);
}

}  // namespace
