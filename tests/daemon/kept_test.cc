// return_kept (issue 26, item 4) through the real siftd with the real model and this build's
// plugins: a request that asks gets what its pipeline kept, read from the cache the decode stage
// received: every position for full KV, per-head sets with the observation window for SnapKV,
// fewer positions in later layers for PyramidKV, and for GemFilter the filtered prompt as text.
// Asking never changes the answer; not asking adds nothing to the `final`.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/sift_request.h"
#include "support/siftd_process.h"

namespace {

using json = nlohmann::json;
using Daemon = sift::testing::SiftdProcess;

// About 700 tokens of one-fact sentences, and a question about one of them (sent as SIFT/1's
// context and question, so that the question span is the question alone).
const std::string kQuestion = "What did the Marlow unload on day 9?";
std::string Document() {
  std::string text = "The Marlow harbour ledger for the week of the storm:\n";
  const char* goods[] = {"barrels of salt", "crates of apples", "bolts of wool", "sacks of flour",
                         "coils of rope"};
  for (int day = 1; day <= 28; ++day) {
    text += "On day " + std::to_string(day) + " the ship Marlow unloaded " +
            std::to_string(3 + (day * 7) % 40) + " " + goods[day % 5] + " at pier " +
            std::to_string(1 + day % 6) + ". ";
  }
  return text;
}

std::atomic<int> counter{0};  // request ids

// One greedy, unstreamed request with `extra` header fields; the `final` or `error` reply.
json Ask(const Daemon& d, const std::string& pipeline, const json& extra) {
  json h = {{"type", "generate"},    {"id", pipeline + "-" + std::to_string(++counter)},
            {"pipeline", pipeline},  {"context", Document()},
            {"question", kQuestion}, {"max_tokens", 8},
            {"stream", false},       {"sampling", {{"temperature", 0}}}};
  h.update(extra);
  return sift::testing::SendAndAwait(d.endpoint(), h);
}

// Positions in one head's ranges; checks they are sorted, disjoint and inside [0, n).
std::set<int64_t> Positions(const json& ranges, int64_t n) {
  std::set<int64_t> out;
  int64_t last_end = -1;
  for (const json& r : ranges) {
    const int64_t b = r[0], e = r[1];
    EXPECT_LT(last_end, b) << "ranges overlap, touch or are unsorted: " << ranges.dump();
    EXPECT_LT(b, e);
    EXPECT_GE(b, 0);
    EXPECT_LE(e, n);
    for (int64_t p = b; p < e; ++p) out.insert(p);
    last_end = e;
  }
  return out;
}

// The number of layers the groups cover, checking they are consecutive from 0.
int64_t LayersCovered(const json& kept) {
  int64_t next = 0;
  for (const json& g : kept["layers"]) {
    EXPECT_EQ(g["first"], next);
    EXPECT_GE(g["last"], g["first"]);
    next = g["last"].get<int64_t>() + 1;
  }
  return next;
}

class KeptTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (sift::testing::ModelPath().empty()) return;
    daemon_ = new Daemon();
    // No prefix cache: each request's cache is its own prefill's (the cache does not change
    // what is kept, but keeps these tests independent of their order).
    start_error_ = daemon_->Start({"--prefix-cache", "false"});
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override {
    SIFT_SKIP_WITHOUT_MODEL();
    ASSERT_EQ(start_error_, "");
  }
  // A request with and one without return_kept: the same answer; the kept report.
  json AskKept(const std::string& pipeline, const json& extra = json::object()) {
    const json plain = Ask(*daemon_, pipeline, extra);
    json with = extra;
    with["return_kept"] = true;
    const json asked = Ask(*daemon_, pipeline, with);
    EXPECT_EQ(plain["type"], "final") << plain.dump();
    EXPECT_EQ(asked["type"], "final") << asked.dump();
    EXPECT_FALSE(plain.contains("kept"));
    EXPECT_EQ(asked.value("text", ""), plain.value("text", "")) << "asking changed the answer";
    EXPECT_EQ(asked["stats"]["tokens_kept"], plain["stats"]["tokens_kept"]);
    last_ = asked;
    return asked.value("kept", json());
  }

  static inline Daemon* daemon_ = nullptr;
  static inline std::string start_error_;
  json last_;  // the final of the last AskKept
};

TEST_F(KeptTest, FullKvKeepsEveryPositionInEveryLayer) {
  const json kept = AskKept("full");
  ASSERT_TRUE(kept.is_object());
  const int64_t n = last_["usage"]["prompt_tokens"];
  EXPECT_GT(n, 500);
  EXPECT_EQ(kept["prompt_tokens"], n);
  EXPECT_EQ(kept["tokens"], n);
  EXPECT_FALSE(kept.contains("filtered_prompt"));
  ASSERT_EQ(kept["layers"].size(), 1u);  // every layer the same: one group
  EXPECT_GT(LayersCovered(kept), 1);
  for (const json& head : kept["layers"][0]["heads"]) EXPECT_EQ(head, json({{0, n}}));
}

TEST_F(KeptTest, SnapKvKeepsItsBudgetPerHeadWithTheObservationWindow) {
  const json kept = AskKept("snapkv");
  ASSERT_TRUE(kept.is_object());
  const int64_t n = kept["tokens"];
  const int64_t budget = last_["stats"]["tokens_kept"];
  EXPECT_LT(budget, n);
  EXPECT_GT(LayersCovered(kept), 1);
  bool heads_differ = false;
  for (const json& g : kept["layers"]) {
    std::set<int64_t> first;
    for (size_t h = 0; h < g["heads"].size(); ++h) {
      const std::set<int64_t> p = Positions(g["heads"][h], n);
      EXPECT_EQ(static_cast<int64_t>(p.size()), budget) << "layers " << g["first"];
      EXPECT_TRUE(p.count(n - 1)) << "the last prompt token (in the window) was evicted";
      if (h == 0) first = p;
      heads_differ = heads_differ || p != first;
    }
  }
  EXPECT_TRUE(heads_differ) << "SnapKV selects per KV head";
}

TEST_F(KeptTest, PyramidKvKeepsFewerPositionsInLaterLayers) {
  const json kept = AskKept("pyramidkv");
  ASSERT_TRUE(kept.is_object());
  const int64_t n = kept["tokens"];
  const int64_t layers = LayersCovered(kept);
  ASSERT_GT(kept["layers"].size(), 1u);
  std::vector<int64_t> per_layer;  // entries per head, by layer
  for (const json& g : kept["layers"]) {
    const int64_t count = static_cast<int64_t>(Positions(g["heads"][0], n).size());
    for (int64_t l = g["first"]; l <= g["last"].get<int64_t>(); ++l) per_layer.push_back(count);
  }
  ASSERT_EQ(static_cast<int64_t>(per_layer.size()), layers);
  EXPECT_GT(per_layer.front(), per_layer.back());
  int64_t total = 0;
  for (int64_t c : per_layer) total += c;
  EXPECT_EQ(total / layers, last_["stats"]["tokens_kept"]);  // the stats' mean per layer
}

TEST_F(KeptTest, GemFilterGivesTheFilteredPromptAsText) {
  const json kept = AskKept("gemfilter", {{"params", {{"filter", {{"topk", 200}}}}}});
  ASSERT_TRUE(kept.is_object());
  const int64_t n = kept["tokens"];
  EXPECT_EQ(n, 200);
  EXPECT_GT(kept["prompt_tokens"].get<int64_t>(), n);
  ASSERT_TRUE(kept.contains("filtered_prompt"));
  const std::string text = kept["filtered_prompt"];
  // The question is always kept; most of the ledger is not.
  EXPECT_NE(text.find(kQuestion), std::string::npos) << text;
  EXPECT_LT(text.size(), Document().size() / 2) << text;
  // The final prefill is full KV over the filtered prompt.
  ASSERT_EQ(kept["layers"].size(), 1u);
  for (const json& head : kept["layers"][0]["heads"]) EXPECT_EQ(head, json({{0, n}}));
}

TEST_F(KeptTest, ABadValueIsRefused) {
  const json r = Ask(*daemon_, "full", {{"return_kept", "yes"}});
  EXPECT_EQ(r["type"], "error");
  EXPECT_EQ(r["reason"], "bad_field");
}

}  // namespace
