// Unit tests of the select and reuse stages on hand-built caches and fake statistics (no model):
// window concatenation, index order, GQA aggregation, budgets larger than the input, positions
// and memory after eviction, per-method choices, PyramidKV per-layer sizes, the
// select -> layerwise hand-off (plan, follower layers at the end of a 30-layer model), and the
// compression floor with what every method always keeps (sinks, question span, window).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "chunkkv_stage.h"
#include "h2o_stage.h"
#include "layerwise_stage.h"
#include "plugins/test_context.h"
#include "pyramidkv_stage.h"
#include "snapkv_stage.h"
#include "streamingllm_stage.h"

namespace sift::plugins {
namespace {

constexpr int64_t kHq = 9, kHkv = 3, kHd = 4;

std::vector<int64_t> Row(const at::Tensor& t, int64_t r = 0) {
  at::Tensor c = t[r].contiguous().to(at::kLong);
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

std::vector<int64_t> Range(int64_t a, int64_t b) {
  std::vector<int64_t> v(static_cast<size_t>(b - a));
  std::iota(v.begin(), v.end(), a);
  return v;
}

// A state with an n-token prompt already "prefilled" into a `layers`-layer fp32 cache whose
// key values encode the token index (k[h, i, :] = i), and per-layer stats filled from `scores`
// ([Hq, n], the same for every layer unless set later).
RequestState MakeState(int64_t layers, int64_t n, const at::Tensor& scores,
                       bool column_sum = false) {
  RequestState s;
  s.tokens.assign(static_cast<size_t>(n), 1);
  s.question_begin = n;
  s.prompt_length = n;
  s.next_position = n;
  KvCacheShape shape{layers, kHkv, kHd, at::kFloat, at::kCPU};
  s.cache = std::make_unique<KvCache>(shape);
  at::Tensor pos = at::arange(n, at::kLong);
  at::Tensor k = pos.to(at::kFloat).view({n, 1, 1}).expand({n, kHkv, kHd}).contiguous();
  for (int64_t l = 0; l < layers; ++l) {
    s.cache->Append(l, k, k + 1000, pos);
    AttentionStats st;
    if (scores.defined()) (column_sum ? st.column_sum : st.window_sum) = scores.clone();
    s.layer_stats[l] = st;
  }
  s.last_logits = at::zeros({8});
  return s;
}

// The stage's parameters; without a `floor` key, floor = 0 (these prompts are far below the
// default floor of 128, which would leave them whole).
StageParams Params(const nlohmann::json& j) {
  StageParams p("test.toml", "select", "test");
  for (auto& [k, v] : j.items()) p.Set(k, v, "test");
  if (!j.contains("floor")) p.Set("floor", 0, "test");
  return p;
}

// Scores where every query head gives token i the value base[i].
at::Tensor Uniform(const std::vector<float>& base) {
  return at::tensor(base, at::kFloat).unsqueeze(0).expand({kHq, -1}).contiguous();
}

TEST(SnapKv, KeepsTopPrefixPlusWindowInOrder) {
  // n = 12, window 3, budget 6: 3 from the prefix [0, 9) + the window 9..11.
  std::vector<float> base = {0.1f, 9, 0.1f, 0.1f, 7, 0.1f, 0.1f, 8, 0.1f, 0, 0, 0};
  RequestState s = MakeState(2, 12, Uniform(base));
  const int64_t full_bytes = s.cache->Bytes();
  SnapKvStage stage(Params({{"budget", 6}, {"window", 3}, {"pooling", "none"}}));
  RequestPlan plan;
  stage.PlanStats(2, plan);
  EXPECT_EQ(plan.stats.at(0).window, 3);
  testing::TestContext ctx;
  ASSERT_TRUE(stage.RunOn(nullptr, s, ctx).ok());
  for (int64_t l = 0; l < 2; ++l) {
    ASSERT_EQ(s.cache->size(l), 6);
    EXPECT_EQ(Row(s.kept_indices.at(l)), (std::vector<int64_t>{1, 4, 7, 9, 10, 11}));
    // Entries really moved: keys encode the token index, positions stay original.
    EXPECT_EQ(Row(s.cache->Positions(l)), (std::vector<int64_t>{1, 4, 7, 9, 10, 11}));
    EXPECT_EQ(s.cache->Keys(l)[2][3][0].item<float>(), 9.0f);
    EXPECT_EQ(s.cache->Values(l)[0][1][0].item<float>(), 1004.0f);
  }
  EXPECT_EQ(s.next_position, 12);  // decode continues at the uncompressed length
  EXPECT_EQ(s.cache->TotalEntries(), 2 * 6);
  EXPECT_EQ(s.cache->Bytes(), full_bytes / 2);
  EXPECT_EQ(s.cache->AllocatedBytes(), s.cache->Bytes());  // evicted memory released
}

TEST(SnapKv, PoolingSpreadsAPeakToItsNeighbours) {
  // Max pooling, kernel 3: the peak at 4 lifts 3 and 5 above the 0.5 at 1.
  std::vector<float> base = {0, 0.5f, 0, 0, 9, 0, 0, 0, 0, 0};
  RequestState s = MakeState(1, 10, Uniform(base));
  SnapKvStage stage(Params({{"budget", 5}, {"window", 2}, {"pooling", "max"}, {"kernel", 3}}));
  testing::TestContext ctx;
  ASSERT_TRUE(stage.RunOn(nullptr, s, ctx).ok());
  EXPECT_EQ(Row(s.kept_indices.at(0)), (std::vector<int64_t>{3, 4, 5, 8, 9}));
}

TEST(SnapKv, GqaAggregationPerKvHead) {
  // KV head h owns query heads 3h..3h+2. Head 0's group prefers token 0, head 1's token 1 and
  // head 2's token 2, but only through the group mean (one query head each with a large value).
  const int64_t n = 8;
  at::Tensor sc = at::zeros({kHq, n});
  sc[0][0] = 3.0;  // group 0 mean at token 0: 1.0
  sc[1][3] = 0.9;  // group 0 mean at token 3: 0.3 (max would be 0.9 < 3 anyway)
  sc[3][1] = 3.0;
  sc[7][2] = 3.0;
  sc[8][2] = 0.3;
  RequestState s = MakeState(1, n, sc);
  SnapKvStage stage(Params({{"budget", 3}, {"window", 2}, {"pooling", "none"}}));
  testing::TestContext ctx;
  ASSERT_TRUE(stage.RunOn(nullptr, s, ctx).ok());
  at::Tensor kept = s.kept_indices.at(0);
  ASSERT_EQ(kept.sizes(), (at::IntArrayRef{kHkv, 3}));
  EXPECT_EQ(Row(kept, 0), (std::vector<int64_t>{0, 6, 7}));
  EXPECT_EQ(Row(kept, 1), (std::vector<int64_t>{1, 6, 7}));
  EXPECT_EQ(Row(kept, 2), (std::vector<int64_t>{2, 6, 7}));
  // Per-head positions follow the per-head indices.
  EXPECT_EQ(Row(s.cache->Positions(0), 2), (std::vector<int64_t>{2, 6, 7}));
}

TEST(SnapKv, BudgetLargerThanInputIsANoOp) {
  RequestState s = MakeState(2, 10, Uniform(std::vector<float>(10, 1.0f)));
  const int64_t bytes = s.cache->Bytes();
  SnapKvStage stage(Params({{"budget", 64}}));
  testing::TestContext ctx;
  ASSERT_TRUE(stage.RunOn(nullptr, s, ctx).ok());
  EXPECT_EQ(s.cache->size(0), 10);
  EXPECT_EQ(Row(s.kept_indices.at(1)), Range(0, 10));
  EXPECT_EQ(s.cache->Bytes(), bytes);
  EXPECT_TRUE(s.last_logits.defined());
}

TEST(SnapKv, KeepRatioIsTheFractionKept) {
  RequestState s = MakeState(1, 100, Uniform(std::vector<float>(100, 1.0f)));
  SnapKvStage stage(Params({{"keep_ratio", 0.2}, {"window", 4}}));
  testing::TestContext ctx;
  ASSERT_TRUE(stage.RunOn(nullptr, s, ctx).ok());
  EXPECT_EQ(s.cache->size(0), 20);
}

TEST(SnapKv, BudgetAndRatioTogetherIsAnError) {
  EXPECT_THROW(SnapKvStage(Params({{"budget", 10}, {"keep_ratio", 0.1}})), std::exception);
  EXPECT_THROW(SnapKvStage(Params({{"pooling", "median"}})), std::exception);
}

TEST(SnapKv, MissingStatisticsFailCleanly) {
  RequestState s = MakeState(2, 10, at::Tensor());
  SnapKvStage stage(Params({{"budget", 4}, {"window", 2}}));
  testing::TestContext ctx;
  Status st = stage.RunOn(nullptr, s, ctx);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
}

TEST(ChunkKv, ChunksThenWindow) {
  // n = 23, window 3, chunk 5, budget 11: prefix [0, 20) = chunks {0-4} {5-9} {10-14} {15-19};
  // 8 prefix slots: best chunks by sum are 10-14 (score 5) then 0-4 (score 4): in order
  // 0..4, 10..12 (the positionally last chunk trimmed to 3), then the window 20..22.
  std::vector<float> base(23, 0.0f);
  for (int i = 0; i < 5; ++i) base[static_cast<size_t>(i)] = 0.8f;
  for (int i = 10; i < 15; ++i) base[static_cast<size_t>(i)] = 1.0f;
  base[7] = 3.5f;  // a single strong token (chunk 5-9 sums to 3.5 < 4)
  RequestState s = MakeState(1, 23, Uniform(base));
  ChunkKvStage stage(Params({{"budget", 11}, {"window", 3}, {"chunk_size", 5}}));
  testing::TestContext ctx;
  ASSERT_TRUE(stage.RunOn(nullptr, s, ctx).ok());
  EXPECT_EQ(Row(s.kept_indices.at(0)),
            (std::vector<int64_t>{0, 1, 2, 3, 4, 10, 11, 12, 20, 21, 22}));
  EXPECT_EQ(s.cache->size(0), 11);
  // SnapKV on the same scores keeps the strong single token 7 (which ChunkKV dropped).
  RequestState t = MakeState(1, 23, Uniform(base));
  SnapKvStage snap(Params({{"budget", 11}, {"window", 3}, {"pooling", "none"}}));
  ASSERT_TRUE(snap.RunOn(nullptr, t, ctx).ok());
  EXPECT_EQ(Row(t.kept_indices.at(0)),
            (std::vector<int64_t>{0, 1, 7, 10, 11, 12, 13, 14, 20, 21, 22}));
}

TEST(ChunkKv, PerHeadOrShared) {
  const int64_t n = 12;
  at::Tensor sc = at::zeros({kHq, n});
  for (int64_t q = 0; q < 3; ++q) sc[q].narrow(0, 0, 3).fill_(1.0);  // KV head 0: chunk 0
  for (int64_t q = 3; q < 9; ++q) sc[q].narrow(0, 3, 3).fill_(1.0);  // heads 1, 2: chunk 1
  ChunkKvStage per_head(Params({{"budget", 5}, {"window", 2}, {"chunk_size", 3}}));
  RequestState s = MakeState(1, n, sc);
  testing::TestContext ctx;
  ASSERT_TRUE(per_head.RunOn(nullptr, s, ctx).ok());
  EXPECT_EQ(Row(s.kept_indices.at(0), 0), (std::vector<int64_t>{0, 1, 2, 10, 11}));
  EXPECT_EQ(Row(s.kept_indices.at(0), 1), (std::vector<int64_t>{3, 4, 5, 10, 11}));
  ChunkKvStage shared(
      Params({{"budget", 5}, {"window", 2}, {"chunk_size", 3}, {"shared_indices", true}}));
  RequestState t = MakeState(1, n, sc);
  ASSERT_TRUE(shared.RunOn(nullptr, t, ctx).ok());
  for (int64_t h = 0; h < kHkv; ++h) {
    EXPECT_EQ(Row(t.kept_indices.at(0), h), (std::vector<int64_t>{3, 4, 5, 10, 11}));
  }
}

TEST(StreamingLlm, SinksPlusRecentWithoutStatistics) {
  RequestState s = MakeState(2, 20, at::Tensor());
  StreamingLlmStage stage(Params({{"budget", 8}, {"sink", 2}}));
  RequestPlan plan;
  stage.PlanStats(2, plan);
  EXPECT_TRUE(plan.stats.empty());
  testing::TestContext ctx;
  ASSERT_TRUE(stage.RunOn(nullptr, s, ctx).ok());
  EXPECT_EQ(Row(s.kept_indices.at(1), 2), (std::vector<int64_t>{0, 1, 14, 15, 16, 17, 18, 19}));
}

TEST(H2o, HeavyHittersByColumnSumPlusRecent) {
  std::vector<float> base(16, 1.0f);
  base[0] = 20;  // early tokens accumulate more (seen by more queries)
  base[5] = 9;
  base[9] = 8;
  RequestState s = MakeState(1, 16, Uniform(base), /*column_sum=*/true);
  H2oStage stage(Params({{"budget", 6}, {"recent_ratio", 0.5}}));
  RequestPlan plan;
  stage.PlanStats(1, plan);
  EXPECT_TRUE(plan.stats.at(0).column_sum);
  EXPECT_EQ(plan.stats.at(0).window, 0);
  testing::TestContext ctx;
  ASSERT_TRUE(stage.RunOn(nullptr, s, ctx).ok());
  EXPECT_EQ(Row(s.kept_indices.at(0)), (std::vector<int64_t>{0, 5, 9, 13, 14, 15}));
}

TEST(PyramidKv, LayerSizesShrinkAndSumToTheUniformTotal) {
  const int64_t layers = 30, n = 400;
  RequestState s = MakeState(layers, n, Uniform(std::vector<float>(n, 1.0f)));
  PyramidKvStage stage(Params({{"budget", 100}, {"window", 8}}));
  testing::TestContext ctx;
  ASSERT_TRUE(stage.RunOn(nullptr, s, ctx).ok());
  int64_t total = 0;
  for (int64_t l = 0; l < layers; ++l) total += s.cache->size(l);
  EXPECT_EQ(total, layers * 100);
  EXPECT_GT(s.cache->size(0), s.cache->size(layers - 1));
  // Every layer keeps its window.
  EXPECT_EQ(Row(s.kept_indices.at(29)).back(), n - 1);
}

// ---- The compression floor and what each method always keeps (issue 29) ----

// One select stage of each method with `extra` parameters, on an n-token state with the
// statistics it needs and the question span [qb, n).
struct Method {
  std::string name;
  std::function<std::unique_ptr<SelectStageBase>(const nlohmann::json&)> make;
  bool column_sum = false;
};

std::vector<Method> Methods() {
  return {
      {"snapkv", [](const nlohmann::json& j) { return std::make_unique<SnapKvStage>(Params(j)); }},
      {"chunkkv",
       [](const nlohmann::json& j) { return std::make_unique<ChunkKvStage>(Params(j)); }},
      {"pyramidkv",
       [](const nlohmann::json& j) { return std::make_unique<PyramidKvStage>(Params(j)); }},
      {"streamingllm",
       [](const nlohmann::json& j) { return std::make_unique<StreamingLlmStage>(Params(j)); }},
      {"h2o", [](const nlohmann::json& j) { return std::make_unique<H2oStage>(Params(j)); }, true}};
}

RequestState MethodState(const Method& m, int64_t layers, int64_t n, int64_t qb) {
  // Scores favour the start of the prompt, so nothing at the end is kept by its score alone.
  std::vector<float> base(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) base[static_cast<size_t>(i)] = static_cast<float>(n - i);
  RequestState s = MakeState(layers, n, Uniform(base), m.column_sum);
  s.question_begin = qb;
  return s;
}

TEST(Floor, APromptAtOrBelowTheFloorIsNotCompressed) {
  for (const Method& m : Methods()) {
    for (int64_t n : {40, 128}) {
      RequestState s = MethodState(m, 4, n, n - 10);
      const int64_t bytes = s.cache->Bytes();
      auto stage = m.make({{"keep_ratio", 0.1}, {"floor", 128}});
      testing::TestContext ctx;
      ASSERT_TRUE(stage->RunOn(nullptr, s, ctx).ok()) << m.name;
      for (int64_t l = 0; l < 4; ++l) {
        EXPECT_EQ(Row(s.kept_indices.at(l)), Range(0, n)) << m.name << " n " << n << " l " << l;
      }
      EXPECT_EQ(s.cache->Bytes(), bytes) << m.name;
    }
  }
}

TEST(Floor, AboveTheFloorTheBudgetIsNeverBelowIt) {
  for (const Method& m : Methods()) {
    // keep_ratio 0.1 of 300 is 30; the floor (default 128) wins.
    RequestState s = MethodState(m, 4, 300, 290);
    nlohmann::json params = {{"keep_ratio", 0.1}, {"floor", kDefaultFloor}};
    auto stage = m.make(params);
    testing::TestContext ctx;
    ASSERT_TRUE(stage->RunOn(nullptr, s, ctx).ok()) << m.name;
    int64_t total = 0;
    for (int64_t l = 0; l < 4; ++l) total += s.cache->size(l);
    EXPECT_EQ(total, 4 * 128) << m.name;  // PyramidKV: 128 on average
    if (m.name != "pyramidkv") {
      EXPECT_EQ(s.cache->size(3), 128) << m.name;
    }
    // A ratio above the floor is the ratio: 0.5 of 300.
    RequestState t = MethodState(m, 4, 300, 290);
    auto half = m.make({{"keep_ratio", 0.5}, {"floor", 128}});
    ASSERT_TRUE(half->RunOn(nullptr, t, ctx).ok()) << m.name;
    EXPECT_EQ(t.cache->TotalEntries(), 4 * 150) << m.name;
  }
}

TEST(Floor, TheDefaultIs128) {
  RequestState s = MethodState(Methods()[0], 1, 128, 120);
  StageParams p("test.toml", "select", "snapkv");  // no floor key
  SnapKvStage stage(p);
  testing::TestContext ctx;
  ASSERT_TRUE(stage.RunOn(nullptr, s, ctx).ok());
  EXPECT_EQ(s.cache->size(0), 128);
  RequestState t = MethodState(Methods()[0], 1, 129, 120);
  ASSERT_TRUE(stage.RunOn(nullptr, t, ctx).ok());
  EXPECT_EQ(t.cache->size(0), 128);
}

TEST(Floor, TheHardMinimumKeepsSinksQuestionAndWindow) {
  // floor 0 and a budget of 1: each method still keeps what it always keeps. n = 200, the
  // question is the last 40 tokens (longer than the window of 8), StreamingLLM's sinks 0..3.
  const int64_t n = 200, qb = 160;
  for (const Method& m : Methods()) {
    RequestState s = MethodState(m, 3, n, qb);
    nlohmann::json params = {{"budget", 1}, {"floor", 0}};
    if (m.name == "snapkv" || m.name == "chunkkv" || m.name == "pyramidkv") params["window"] = 8;
    if (m.name == "streamingllm") params["sink"] = 4;
    auto stage = m.make(params);
    testing::TestContext ctx;
    ASSERT_TRUE(stage->RunOn(nullptr, s, ctx).ok()) << m.name;
    std::vector<int64_t> want = m.name == "streamingllm" ? Range(0, 4) : std::vector<int64_t>{};
    for (int64_t i = qb; i < n; ++i) want.push_back(i);
    for (int64_t l = 0; l < 3; ++l) {
      for (int64_t h = 0; h < kHkv; ++h) {
        std::vector<int64_t> row = Row(s.kept_indices.at(l), h);
        if (m.name == "pyramidkv") {  // lower layers keep more than the minimum (the pyramid)
          ASSERT_GE(row.size(), want.size()) << l;
          row.erase(row.begin(), row.end() - static_cast<std::ptrdiff_t>(want.size()));
        }
        EXPECT_EQ(row, want) << m.name << " layer " << l;
      }
    }
    if (m.name == "pyramidkv") {
      EXPECT_EQ(s.cache->size(2), 40);  // raised to the minimum
    }
  }
}

TEST(Floor, TheQuestionIsKeptBesidesTheTopScoredPrefix) {
  // SnapKV, window 4, a 10-token question, budget 20: the question + the 10 best prefix tokens
  // (scores favour the start), not the window + 16.
  RequestState s = MethodState(Methods()[0], 1, 100, 90);
  SnapKvStage stage(Params({{"budget", 20}, {"window", 4}, {"pooling", "none"}}));
  testing::TestContext ctx;
  ASSERT_TRUE(stage.RunOn(nullptr, s, ctx).ok());
  std::vector<int64_t> want = Range(0, 10);
  for (int64_t i = 90; i < 100; ++i) want.push_back(i);
  EXPECT_EQ(Row(s.kept_indices.at(0)), want);
}

TEST(Floor, AQuestionLongerThanTheFloorIsADocumentAndNotKeptWhole) {
  // A chat whose last message is a whole document (question span 300 > 128): only the window
  // of it is kept by rule, so the prompt is still compressed to the budget.
  RequestState s = MethodState(Methods()[0], 1, 320, 20);
  SnapKvStage stage(Params({{"budget", 50}, {"window", 8}, {"pooling", "none"}}));
  testing::TestContext ctx;
  ASSERT_TRUE(stage.RunOn(nullptr, s, ctx).ok());
  EXPECT_EQ(s.cache->size(0), 50);
  EXPECT_EQ(Row(s.kept_indices.at(0)).back(), 319);
}

TEST(Floor, ContextOnlyKeepsTheWindowAndReprefillsTheQuestion) {
  // query_aware = false: the question is outside the compressed span, so the hard minimum is
  // the window only. (The re-prefill needs the model; this checks the budget without it: a
  // span at or below the floor is left whole and nothing is recomputed.)
  RequestState s = MethodState(Methods()[0], 1, 100, 90);
  SnapKvStage stage(Params({{"keep_ratio", 0.1}, {"query_aware", false}, {"floor", 128}}));
  testing::TestContext ctx;
  ASSERT_TRUE(stage.RunOn(nullptr, s, ctx).ok());
  EXPECT_EQ(s.cache->size(0), 100);
}

TEST(Layerwise, PlanRemovesFollowerStatistics) {
  ChunkKvStage select(Params({{"budget", 8}}));
  LayerwiseStage reuse(Params({{"n_reuse", 4}}));
  RequestPlan plan;
  select.PlanStats(30, plan);
  reuse.PlanLayers(30, plan);
  std::vector<int64_t> with_stats;
  for (auto& [l, r] : plan.stats) with_stats.push_back(l);
  EXPECT_EQ(with_stats, (std::vector<int64_t>{0, 4, 8, 12, 16, 20, 24, 28}));
  EXPECT_EQ(plan.reuse_leader.at(29), 28);
  EXPECT_EQ(plan.reuse_leader.at(27), 24);
  EXPECT_EQ(plan.reuse_leader.count(28), 0u);
}

// The by-layer offer (RequestPlan::select_layer): taken only when the prefill offers it; the
// peak is the whole prompt in one layer plus what every layer keeps (PyramidKV: its own sizes).
TEST(ByLayer, ThePlannedPeakIsOneWholeLayerPlusWhatTheLayersKeep) {
  const int64_t layers = 30, n = 1000;
  auto offered = [&] {
    RequestPlan plan;
    plan.prompt_tokens = n;
    plan.question_begin = n;
    plan.prefill_offers_layers = true;
    return plan;
  };
  SnapKvStage snapkv(Params({{"budget", 100}, {"window", 8}}));
  RequestPlan not_offered;
  not_offered.prompt_tokens = n;
  snapkv.TakeLayerOffer(nullptr, layers, not_offered);
  EXPECT_FALSE(not_offered.select_layer);
  EXPECT_EQ(not_offered.kv_peak_entries, 0);

  RequestPlan plan = offered();
  snapkv.TakeLayerOffer(nullptr, layers, plan);
  EXPECT_TRUE(plan.select_layer);
  EXPECT_EQ(plan.kv_peak_entries, n + layers * 100);

  PyramidKvStage pyramid(Params({{"budget", 100}, {"window", 8}}));
  RequestPlan p = offered();
  pyramid.TakeLayerOffer(nullptr, layers, p);
  // Per-layer sizes that sum to the uniform total: at most the prompt plus that total.
  EXPECT_GT(p.kv_peak_entries, n + 100);
  EXPECT_LE(p.kv_peak_entries, n + layers * 100);

  // A selection that keeps (nearly) everything saves nothing by layer: the offer is declined.
  SnapKvStage keep_all(Params({{"budget", 5000}, {"window", 8}}));
  RequestPlan all = offered();
  keep_all.TakeLayerOffer(nullptr, layers, all);
  EXPECT_FALSE(all.select_layer);
  EXPECT_EQ(all.kv_peak_entries, 0);
}

TEST(Layerwise, FollowersCopyTheirLeadersIncludingTheShortLastGroup) {
  const int64_t layers = 30, n = 40;
  RequestState s = MakeState(layers, n, at::Tensor());
  // Different scores per leader so that groups are distinguishable; followers have no stats.
  ChunkKvStage select(Params({{"budget", 12}, {"window", 2}, {"chunk_size", 5}}));
  LayerwiseStage reuse(Params({{"n_reuse", 4}}));
  select.PlanStats(layers, s.plan);
  reuse.PlanLayers(layers, s.plan);
  s.layer_stats.clear();
  for (auto& [l, r] : s.plan.stats) {
    std::vector<float> base(n, 0.0f);
    for (int64_t i = 0; i < 5; ++i) base[static_cast<size_t>((l / 4 % 7) * 5 + i)] = 1.0f;
    s.layer_stats[l].window_sum = Uniform(base);
  }
  testing::TestContext ctx;
  ASSERT_TRUE(select.RunOn(nullptr, s, ctx).ok());
  EXPECT_EQ(s.cache->size(29), n);  // followers untouched by the select stage
  EXPECT_EQ(s.cache->size(28), 12);
  ASSERT_TRUE(reuse.RunOn(nullptr, s, ctx).ok());
  for (int64_t l = 0; l < layers; ++l) {
    const int64_t leader = l / 4 * 4;
    ASSERT_EQ(s.cache->size(l), 12) << l;
    EXPECT_TRUE(at::equal(s.kept_indices.at(l), s.kept_indices.at(leader))) << l;
    EXPECT_TRUE(at::equal(s.cache->Positions(l), s.cache->Positions(leader))) << l;
  }
  // Group 28-29 (led by 28: chunk (28/4 % 7) = 0 -> tokens 0..4).
  EXPECT_EQ(Row(s.kept_indices.at(29)).front(), 0);
  EXPECT_EQ(s.cache->TotalEntries(), layers * 12);
}

TEST(Layerwise, WithoutASelectStageFails) {
  RequestState s = MakeState(4, 10, at::Tensor());
  LayerwiseStage reuse(Params({{"n_reuse", 2}}));
  reuse.PlanLayers(4, s.plan);
  testing::TestContext ctx;
  EXPECT_EQ(reuse.RunOn(nullptr, s, ctx).code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace sift::plugins
