// Selection on the real model ($SIFT_MODEL; skipped without it): RoPE rotation by a delta
// position (the re-rotation option), re-rotated caches decode, context-only observation equals
// the prefill's statistics, context-only H2O scores equal the context alone's, the question
// re-prefill, a cached compressed context finishing as the selection does, and every selection
// pipeline answering through the real siftd. Prompts are short (< 400 tokens) to keep the suite
// fast.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chunkkv_stage.h"
#include "client.h"
#include "h2o_stage.h"
#include "layerwise_stage.h"
#include "plugins/test_context.h"
#include "prefill_full_stage.h"
#include "pyramidkv_stage.h"
#include "selection/cache_edit.h"
#include "sift/generate.h"
#include "sift/prefix_cache.h"
#include "snapkv_stage.h"
#include "streamingllm_stage.h"
#include "support/siftd_process.h"

namespace sift::plugins {
namespace {

using nlohmann::json;

std::shared_ptr<const Model> TheModel() {
  static std::shared_ptr<const Model> model = []() -> std::shared_ptr<const Model> {
    const std::string path = sift::testing::ModelPath();
    if (path.empty()) return nullptr;
    return Model::Load(path, ModelOptions());
  }();
  return model;
}

#define REQUIRE_MODEL() \
  if (TheModel() == nullptr) GTEST_SKIP() << "set SIFT_MODEL to run this test"

StageParams Params(const json& j, const std::string& plugin = "test") {
  StageParams p("test.toml", "select", plugin);
  for (auto& [k, v] : j.items()) p.Set(k, v, "test");
  return p;
}

std::string Context() {
  std::string text;
  for (int i = 0; i < 12; ++i) {
    text +=
        "The lighthouse keeper counted ships every evening and wrote their names in a "
        "leather book. ";
    if (i == 5) text += "The secret word is apricot. ";
  }
  return text;
}

// A prefilled request: chat prompt, question span marked, statistics as `plan` asks; with
// `context_only` the prompt ends where the question would begin (no question span).
// The request before any stage ran: chat prompt and question span (none with `context_only`).
RequestState Prompt(const Model& model, bool context_only = false,
                    const std::string& ask = "What is the secret word?") {
  const std::string head = "<|im_start|>user\n" + Context() + "\n\n";
  const std::string question = ask + "<|im_end|>\n<|im_start|>assistant\n";
  RequestState s;
  s.tokens = model.tokenizer().Encode(head, true);
  s.question_begin = static_cast<int64_t>(s.tokens.size());
  std::vector<TokenId> q = model.tokenizer().Encode(question, true);
  if (!context_only) s.tokens.insert(s.tokens.end(), q.begin(), q.end());
  s.prompt_length = static_cast<int64_t>(s.tokens.size());
  s.generation.max_tokens = 6;
  return s;
}

RequestState Prefill(const Model& model, RequestPlan plan, bool context_only = false,
                     const std::string& ask = "What is the secret word?",
                     StageContext* context = nullptr) {
  RequestState s = Prompt(model, context_only, ask);
  s.plan = std::move(plan);
  PrefillFullStage prefill(Params({}, "prefill_full"), model);
  testing::TestContext ctx;
  EXPECT_TRUE(prefill.Run(model, s, context != nullptr ? *context : ctx).ok());
  return s;
}

// `params` with every key of `common` set to common's value.
json Merged(json params, const json& common) {
  params.update(common);
  return params;
}

// A context with a prefix cache, as siftd offers the stages it runs in process.
class CachingContext : public testing::TestContext {
 public:
  CachingContext(PrefixCache* cache, std::string scope) : access_{cache, std::move(scope)} {}
  PrefixCacheAccess prefix_cache() override { return access_; }

 private:
  PrefixCacheAccess access_;
};

TEST(RopeRotation, RotatingByADeltaEqualsRopeAtTheNewPosition) {
  REQUIRE_MODEL();
  const Model& model = *TheModel();
  at::manual_seed(1);
  const int64_t hd = model.config().head_dim;
  at::Tensor k = at::randn({50, 3, hd});
  at::Tensor p1 = at::randint(0, 8000, {50}, at::kLong);
  at::Tensor p2 = at::randint(0, 8000, {50}, at::kLong);
  at::Tensor direct = model.ApplyRope(k, p2);
  at::Tensor via = model.ApplyRope(model.ApplyRope(k, p1), p2 - p1);
  EXPECT_LT((direct - via).abs().max().item<float>(), 2e-3);
  // And a wrong delta does not match (the check can fail).
  at::Tensor wrong = model.ApplyRope(model.ApplyRope(k, p1), p2 - p1 + 1);
  EXPECT_GT((direct - wrong).abs().max().item<float>(), 1e-2);
}

TEST(RopeRotation, RerotatedCacheHasContiguousPositionsAndDecodes) {
  REQUIRE_MODEL();
  const Model& model = *TheModel();
  SnapKvStage stage(Params({{"budget", 48}, {"rerotate", true}, {"floor", 0}}));
  RequestPlan plan;
  stage.PlanStats(model.config().num_layers, plan);
  RequestState s = Prefill(model, plan);
  const int64_t n = static_cast<int64_t>(s.tokens.size());
  // The kept keys, rotated back from 0..47 to their original positions, are the prefill's.
  at::Tensor before = s.cache->Keys(3).clone();
  testing::TestContext ctx;
  ASSERT_TRUE(stage.RunOn(&model, s, ctx).ok());
  EXPECT_EQ(s.next_position, 48);
  EXPECT_TRUE(at::equal(s.cache->Positions(3)[1], at::arange(48, at::kLong)));
  at::Tensor kept = s.kept_indices.at(3);
  for (int64_t h = 0; h < 3; ++h) {
    at::Tensor back = model.ApplyRope(s.cache->Keys(3)[h].unsqueeze(1).to(at::kFloat),
                                      kept[h] - at::arange(48, at::kLong));
    at::Tensor orig = before[h].index_select(0, kept[h]).to(at::kFloat);
    EXPECT_LT((back.squeeze(1) - orig).abs().max().item<float>(), 0.1) << h;
  }
  GenerationResult r = Generate(model, *s.cache, s.last_logits, s.next_position, s.generation);
  EXPECT_FALSE(r.tokens.empty());
  EXPECT_EQ(s.cache->size(0), 48 + static_cast<int64_t>(r.tokens.size()) - 1);
  EXPECT_LT(48, n);
}

TEST(ContextOnly, ObservedWindowEqualsThePrefillStatistics) {
  REQUIRE_MODEL();
  const Model& model = *TheModel();
  RequestPlan plan;
  for (int64_t l = 0; l < model.config().num_layers; ++l) plan.stats[l].window = 16;
  RequestState s = Prefill(model, plan);
  const int64_t n = static_cast<int64_t>(s.tokens.size());
  AttentionStatsRequest r;
  r.window = 16;
  auto observed = ObserveRows(model, *s.cache, s.tokens, n - 16, n, r, 29);
  for (int64_t l : {0, 15, 29}) {
    at::Tensor a = observed.at(l).window_sum, b = s.layer_stats.at(l).window_sum;
    ASSERT_EQ(a.sizes(), b.sizes());
    EXPECT_LT((a - b).abs().max().item<float>(), 0.05) << l;  // sums of 16 rows, bf16 products
  }
}

TEST(ContextOnly, QuestionIsKeptWholeAndPrefilledAgain) {
  REQUIRE_MODEL();
  const Model& model = *TheModel();
  ChunkKvStage stage(Params({{"budget", 40}, {"query_aware", false}, {"window", 8}, {"floor", 0}}));
  RequestPlan plan;
  stage.PlanStats(model.config().num_layers, plan);
  EXPECT_TRUE(plan.stats.empty());  // context-only window scores are recomputed, not collected
  RequestState s = Prefill(model, plan);
  const int64_t n = static_cast<int64_t>(s.tokens.size()), qb = s.question_begin;
  testing::TestContext ctx;
  ASSERT_TRUE(stage.RunOn(&model, s, ctx).ok());
  EXPECT_TRUE(s.last_logits.defined());
  EXPECT_EQ(s.cache->size(0), 40 + (n - qb));
  EXPECT_EQ(s.next_position, n);
  at::Tensor kept = s.kept_indices.at(7)[0];
  EXPECT_EQ(kept[39].item<int64_t>(), qb - 1);  // the context window ends the context part
  EXPECT_TRUE(at::equal(kept.narrow(0, 40, n - qb), at::arange(qb, n, at::kLong)));
  EXPECT_TRUE(at::equal(s.cache->Positions(7)[0], kept));
}

TEST(ContextOnly, ACachedCompressedContextFinishesAsTheSelectionDoes) {
  REQUIRE_MODEL();
  const Model& model = *TheModel();
  ChunkKvStage stage(Params({{"budget", 40}, {"query_aware", false}, {"window", 8}, {"floor", 0}}));
  RequestPlan plan;
  stage.PlanStats(model.config().num_layers, plan);
  ASSERT_EQ(plan.context_state, "context");      // named at planning
  plan.context_state = "chunkkv@1#h/context/0";  // as siftd qualifies it for this stage
  PrefixCache cache(PrefixCache::Options{}, {});
  CachingContext prefill_ctx(&cache, "prefill_full@1#h"), select_ctx(&cache, "chunkkv@1#h");

  // A miss: the whole prompt is prefilled but not stored; the select files the context it kept.
  RequestState first = Prefill(model, plan, false, "What is the secret word?", &prefill_ctx);
  EXPECT_FALSE(first.context_state_hit);
  EXPECT_EQ(cache.stats().entries, 0);
  ASSERT_TRUE(stage.RunOn(&model, first, select_ctx).ok());
  ASSERT_EQ(cache.stats().entries, 1);
  const int64_t qb = first.question_begin, n = static_cast<int64_t>(first.tokens.size());

  // The same prompt again: the prefill serves the compressed context and runs nothing, and the
  // select finishes with what the selection itself produced.
  RequestState again = Prefill(model, plan, false, "What is the secret word?", &prefill_ctx);
  ASSERT_TRUE(again.context_state_hit);
  EXPECT_EQ(again.cached_tokens, qb);
  EXPECT_FALSE(again.last_logits.defined());
  EXPECT_EQ(again.cache->size(3), 40);
  ASSERT_TRUE(stage.RunOn(&model, again, select_ctx).ok());
  EXPECT_FALSE(again.context_state_hit);
  EXPECT_EQ(again.next_position, first.next_position);
  EXPECT_TRUE(at::equal(again.last_logits, first.last_logits));
  ASSERT_EQ(again.kept_indices.size(), first.kept_indices.size());
  for (const auto& [layer, kept] : first.kept_indices) {
    EXPECT_EQ(kept.size(1), 40 + (n - qb)) << layer;
    EXPECT_TRUE(at::equal(again.kept_indices.at(layer), kept)) << layer;
    EXPECT_TRUE(at::equal(again.cache->Positions(layer), first.cache->Positions(layer))) << layer;
  }

  // Without the host's cache (a remote worker) or with another stage's state: nothing is served.
  testing::TestContext plain;
  RequestState uncached = Prefill(model, plan, false, "What is the secret word?", &plain);
  EXPECT_FALSE(uncached.context_state_hit);
  RequestState foreign = Prefill(model, plan, false, "What is the secret word?", &prefill_ctx);
  ASSERT_TRUE(foreign.context_state_hit);
  CachingContext other_select(&cache, "snapkv@1#h");
  EXPECT_EQ(stage.RunOn(&model, foreign, other_select).reason(), "foreign_context_state");
}

// H2O that records the prefix scores it ranks (per layer, [Hkv, p]).
class RecordingH2o : public H2oStage {
 public:
  using H2oStage::H2oStage;
  mutable std::map<int64_t, at::Tensor> scores;

 protected:
  at::Tensor ChoosePrefix(int64_t layer, const at::Tensor& s, int64_t p, int64_t keep,
                          int64_t heads, const at::TensorOptions& index_options) const override {
    scores[layer] = s.clone();
    return H2oStage::ChoosePrefix(layer, s, p, keep, heads, index_options);
  }
};

TEST(ContextOnly, H2oWithoutTheQuestionScoresLikeTheContextAlone) {
  // query_aware = false ranks the context by the context queries' attention only: all queries'
  // column sums minus the question's. That must equal the column sums of a prefill of the
  // context alone (causal attention: the context rows do not see the question).
  REQUIRE_MODEL();
  const Model& model = *TheModel();
  RecordingH2o blind(Params({{"budget", 48}, {"query_aware", false}, {"floor", 0}}, "h2o"));
  RecordingH2o aware(Params({{"budget", 48}, {"floor", 0}}, "h2o"));
  RequestPlan plan;
  blind.PlanStats(model.config().num_layers, plan);
  RequestState s = Prefill(model, plan);
  RequestState c = Prefill(model, plan, /*context_only=*/true);
  const int64_t qb = s.question_begin, n = static_cast<int64_t>(s.tokens.size());
  ASSERT_EQ(static_cast<int64_t>(c.tokens.size()), qb);
  // The question's own attention mass: what the subtraction removes (a sanity bound below).
  const at::Tensor all_queries = s.layer_stats.at(20).column_sum.narrow(-1, 0, qb - 24).clone();
  testing::TestContext ctx;
  ASSERT_TRUE(blind.RunOn(&model, s, ctx).ok());
  ASSERT_TRUE(aware.RunOn(&model, c, ctx).ok());
  for (int64_t l : {0, 10, 20, 29}) {
    const at::Tensor a = blind.scores.at(l), b = aware.scores.at(l);
    ASSERT_EQ(a.sizes(), b.sizes()) << l;
    // fp32 column sums over ~250 query rows, subtracted vs summed directly: rounding only
    // (measured <= 2e-6 with hardware bf16); leaving the question in moves them by 0.26-10.7 on
    // these layers. On CPUs without hardware bf16 the products run in fp32 from bf16 storage,
    // whose rounding depends on the number of rows (a prompt with or without the question):
    // up to 0.10 on an AVX2-only AMD EPYC, still below what the question moves.
    const float bound = model.UpcastsToFp32(int64_t{1} << 20) ? 0.2f : 1e-3f;
    EXPECT_LT((a - b).abs().max().item<float>(), bound) << l;
  }
  const int64_t heads = s.cache->shape().num_kv_heads;
  const at::Tensor with_question = AggregateGqa(all_queries, heads, Reduce::kMean);
  EXPECT_GT((with_question - aware.scores.at(20)).abs().max().item<float>(), 1.0)
      << "the question's queries should move the scores by more than the tolerance above";
  // The question itself is kept whole and prefilled again after the context.
  EXPECT_EQ(s.cache->size(0), 48 + (n - qb));
}

TEST(Layerwise, FollowersOnTheRealPrefillHaveNoStatistics) {
  REQUIRE_MODEL();
  const Model& model = *TheModel();
  ChunkKvStage select(Params({{"budget", 40}, {"floor", 0}}));
  LayerwiseStage reuse(Params({{"n_reuse", 3}}));
  RequestPlan plan;
  select.PlanStats(model.config().num_layers, plan);
  reuse.PlanLayers(model.config().num_layers, plan);
  RequestState s = Prefill(model, plan);
  EXPECT_EQ(s.layer_stats.size(), 10u);  // layers 0, 3, ..., 27
  EXPECT_EQ(s.layer_stats.count(1), 0u);
  testing::TestContext ctx;
  ASSERT_TRUE(select.RunOn(&model, s, ctx).ok());
  ASSERT_TRUE(reuse.RunOn(&model, s, ctx).ok());
  EXPECT_TRUE(at::equal(s.kept_indices.at(29), s.kept_indices.at(27)));
  EXPECT_EQ(s.cache->TotalEntries(), s.cache->num_layers() * 40);
}

// What each selection pipeline always keeps (issue 29), on the real model's prefill: with floor 0
// and a budget of 1 entry, every layer and KV head still keeps the question span (longer than
// the observation window here) and the window; StreamingLLM its 4 sinks too; chunkkv_reuse's
// follower layers copy their leader's. Each pipeline's shipped parameters otherwise.
TEST(AlwaysKept, EachSelectionPipelineKeepsTheQuestionWindowAndSinks) {
  REQUIRE_MODEL();
  const Model& model = *TheModel();
  const std::string ask =
      "Read the text above carefully and tell me which secret word the lighthouse keeper's "
      "book mentions; answer with that single word only, without any explanation or any other "
      "words at all.";
  auto with = [](json extra) { return Merged(std::move(extra), {{"budget", 1}, {"floor", 0}}); };
  struct Case {
    std::string pipeline;
    std::function<std::unique_ptr<SelectStageBase>()> make;
    int64_t sinks;
    bool reuse;
  };
  const std::vector<Case> cases = {
      {"snapkv",
       [&] {
         return std::make_unique<SnapKvStage>(Params(with({{"window", 32}})));
       },
       0, false},
      {"pyramidkv",
       [&] {
         return std::make_unique<PyramidKvStage>(Params(with({{"window", 32}})));
       },
       0, false},
      {"chunkkv",
       [&] {
         return std::make_unique<ChunkKvStage>(Params(with({{"chunk_size", 10}})));
       },
       0, false},
      {"chunkkv_reuse",
       [&] {
         return std::make_unique<ChunkKvStage>(Params(with({{"chunk_size", 10}})));
       },
       0, true},
      {"h2o",
       [&] {
         return std::make_unique<H2oStage>(Params(with({{"recent_ratio", 0.5}})));
       },
       0, false},
      {"streamingllm",
       [&] {
         return std::make_unique<StreamingLlmStage>(Params(with({{"sink", 4}})));
       },
       4, false}};
  const int64_t layers = model.config().num_layers;
  for (const Case& c : cases) {
    std::unique_ptr<SelectStageBase> stage = c.make();
    LayerwiseStage reuse(Params({{"n_reuse", 2}}));
    RequestPlan plan;
    stage->PlanStats(layers, plan);
    if (c.reuse) reuse.PlanLayers(layers, plan);
    RequestState s = Prefill(model, plan, false, ask);
    const int64_t n = static_cast<int64_t>(s.tokens.size()), qb = s.question_begin;
    ASSERT_GT(n - qb, 32) << "the question must be longer than the window";
    testing::TestContext ctx;
    ASSERT_TRUE(stage->RunOn(&model, s, ctx).ok()) << c.pipeline;
    if (c.reuse) {
      ASSERT_TRUE(reuse.RunOn(&model, s, ctx).ok()) << c.pipeline;
    }
    at::Tensor want = at::arange(qb, n, at::kLong);
    if (c.sinks > 0) want = at::cat({at::arange(c.sinks, at::kLong), want});
    for (int64_t l = 0; l < layers; ++l) {
      const at::Tensor kept = s.kept_indices.at(l).to(at::kLong).cpu();
      for (int64_t h = 0; h < kept.size(0); ++h) {
        // The question span ends every row; the sinks start it.
        const at::Tensor row = kept[h];
        ASSERT_TRUE(at::equal(row.narrow(0, row.size(0) - (n - qb), n - qb),
                              want.narrow(0, want.size(0) - (n - qb), n - qb)))
            << c.pipeline << " layer " << l << " head " << h;
        if (c.sinks > 0) {
          EXPECT_TRUE(at::equal(row.narrow(0, 0, c.sinks), at::arange(c.sinks, at::kLong)))
              << c.pipeline << " layer " << l;
        }
      }
      EXPECT_LT(s.cache->size(l), n) << c.pipeline << " layer " << l << ": not compressed";
    }
    // And the compressed cache still answers.
    GenerationResult r = Generate(model, *s.cache, s.last_logits, s.next_position, s.generation);
    EXPECT_FALSE(r.tokens.empty()) << c.pipeline;
  }
}

// select_by_layer: the prefill hands each layer to the select stage as soon as it holds the whole
// prompt. Every query-aware selection keeps the same entries, with the same keys, values and
// logits, as after a prefill of the whole prompt (prefilled in chunks both ways), while the cache
// never holds the whole prompt in more than one layer; and a reuse stage, or context-only
// selection, turns the offer down.
TEST(ByLayer, EverySelectionEqualsTheWholePromptsAndHoldsLess) {
  REQUIRE_MODEL();
  const Model& model = *TheModel();
  const int64_t layers = model.config().num_layers;
  auto with = [](json extra) { return Merged(std::move(extra), {{"budget", 40}, {"floor", 0}}); };
  struct Case {
    std::string name;
    std::function<std::unique_ptr<SelectStageBase>()> make;
  };
  const std::vector<Case> cases = {
      {"snapkv",
       [&] {
         return std::make_unique<SnapKvStage>(Params(with({{"window", 32}})));
       }},
      {"snapkv rerotated",
       [&] {
         return std::make_unique<SnapKvStage>(
             Params(with({{"window", 32}, {"rerotate", true}, {"pooling", "max"}})));
       }},
      {"pyramidkv",
       [&] {
         return std::make_unique<PyramidKvStage>(Params(with({{"window", 32}})));
       }},
      {"chunkkv",
       [&] {
         return std::make_unique<ChunkKvStage>(Params(with({{"chunk_size", 10}})));
       }},
      {"h2o",
       [&] {
         return std::make_unique<H2oStage>(Params(with({{"recent_ratio", 0.5}})));
       }},
      {"streamingllm", [&] {
         return std::make_unique<StreamingLlmStage>(Params(with({{"sink", 4}})));
       }}};

  // The request before any stage ran: the prompt, and the plan of `prefill` and `select`.
  auto planned = [&](const PrefillFullStage& prefill, const SelectStageBase& select) {
    RequestState s = Prompt(model);
    s.plan.prompt_tokens = static_cast<int64_t>(s.tokens.size());
    s.plan.question_begin = s.question_begin;
    EXPECT_TRUE(prefill.Plan(model, s.plan).ok());
    select.PlanStats(layers, s.plan);
    select.TakeLayerOffer(&model, layers, s.plan);
    return s;
  };
  const int64_t entry = KvCache::EntryBytes(model.CacheShape());
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PrefillFullStage whole_prefill(Params({{"chunk_size", 64}}, "prefill_full"), model);
    PrefillFullStage by_layer_prefill(
        Params({{"chunk_size", 64}, {"select_by_layer", true}}, "prefill_full"), model);
    std::unique_ptr<SelectStageBase> whole_select = c.make(), by_layer_select = c.make();
    testing::TestContext ctx;

    RequestState a = planned(whole_prefill, *whole_select);
    ASSERT_FALSE(a.plan.select_layer) << "taken without the prefill's offer";
    ASSERT_TRUE(whole_prefill.Run(model, a, ctx).ok());
    ASSERT_TRUE(whole_select->RunOn(&model, a, ctx).ok());

    RequestState b = planned(by_layer_prefill, *by_layer_select);
    ASSERT_TRUE(b.plan.select_layer) << "the offer was not taken";
    const int64_t n = static_cast<int64_t>(b.tokens.size());
    ASSERT_GT(n, 3 * 64) << "the prompt must span several chunks";
    // What the cache holds at each layer's hand-over, the most ever; and the plan's bound.
    int64_t most = 0, layers_handed = 0;
    auto select_layer = b.plan.select_layer;
    b.plan.select_layer = [&](int64_t layer, RequestState& state) {
      EXPECT_EQ(layer, layers_handed++);
      EXPECT_EQ(state.cache->size(layer), n);
      if (layer + 1 < layers) {
        EXPECT_EQ(state.cache->size(layer + 1), 0);
      }
      most = std::max(most, state.cache->Bytes());
      return select_layer(layer, state);
    };
    ASSERT_TRUE(by_layer_prefill.Run(model, b, ctx).ok());
    EXPECT_EQ(layers_handed, layers);
    ASSERT_TRUE(by_layer_select->RunOn(&model, b, ctx).ok());

    EXPECT_LE(most, b.plan.kv_peak_entries * entry);
    EXPECT_LT(b.plan.kv_peak_entries, n * layers / 2) << "holds most of the whole prompt's KV";
    EXPECT_TRUE(at::equal(a.last_logits, b.last_logits));
    EXPECT_EQ(a.next_position, b.next_position);
    EXPECT_TRUE(b.layer_stats.empty());
    for (int64_t l = 0; l < layers; ++l) {
      ASSERT_TRUE(at::equal(a.kept_indices.at(l), b.kept_indices.at(l))) << "layer " << l;
      EXPECT_TRUE(at::equal(a.cache->Keys(l), b.cache->Keys(l))) << "layer " << l;
      EXPECT_TRUE(at::equal(a.cache->Values(l), b.cache->Values(l))) << "layer " << l;
      EXPECT_TRUE(at::equal(a.cache->Positions(l), b.cache->Positions(l))) << "layer " << l;
      EXPECT_LT(b.cache->size(l), n) << "layer " << l << ": not compressed";
    }
    GenerationResult ra = Generate(model, *a.cache, a.last_logits, a.next_position, a.generation);
    GenerationResult rb = Generate(model, *b.cache, b.last_logits, b.next_position, b.generation);
    EXPECT_EQ(ra.tokens, rb.tokens);
  }

  // Turned down: by a reuse stage that follows, and by context-only selection.
  PrefillFullStage by_layer_prefill(Params({{"select_by_layer", true}}, "prefill_full"), model);
  ChunkKvStage chunkkv(Params(with({{"chunk_size", 10}})));
  RequestState r = planned(by_layer_prefill, chunkkv);
  ASSERT_TRUE(r.plan.select_layer);
  LayerwiseStage(Params({{"n_reuse", 2}})).PlanLayers(layers, r.plan);
  EXPECT_FALSE(r.plan.select_layer);
  EXPECT_EQ(r.plan.kv_peak_entries, 0);
  SnapKvStage context_only(Params(with({{"window", 32}, {"query_aware", false}})));
  RequestState q = planned(by_layer_prefill, context_only);
  EXPECT_FALSE(q.plan.select_layer);
}

// Every selection pipeline validates and answers through the real siftd.
TEST(SelectionPipelines, AnswerThroughSiftd) {
  REQUIRE_MODEL();
  for (const char* p : {"snapkv", "streamingllm", "h2o", "pyramidkv", "chunkkv", "layerwise"}) {
    if (!std::filesystem::exists(std::string(SIFT_BINARY_DIR) + "/plugins/" + p + ".so")) {
      GTEST_SKIP() << p << ".so not built";
    }
  }
  testing::SiftdProcess daemon;
  ASSERT_EQ(daemon.Start({"--n-ctx", "1024", "--workers", "1"}), "");
  zmq::context_t zctx(1);
  client::ClientOptions o;
  o.endpoint = daemon.endpoint();
  client::SiftClient c(zctx, o);
  for (const char* pipeline :
       {"snapkv", "streamingllm", "h2o", "pyramidkv", "chunkkv", "chunkkv_reuse"}) {
    c.Send({{"type", "generate"},
            {"id", pipeline},
            {"pipeline", pipeline},
            {"context", Context()},
            {"question", "What is the secret word?"},
            {"max_tokens", 3},
            // This ~250-token prompt is above the default floor (128) but 10 % of it is not:
            // floor 0 asks for the ratio itself (the hard minimum, window + question, holds).
            {"params", {{"select", {{"floor", 0}}}}}});
    json h, final;
    while (c.Recv(&h, 60000)) {
      if (h.value("id", "") != pipeline) continue;
      if (h["type"] == "final" || h["type"] == "error") {
        final = h;
        break;
      }
    }
    ASSERT_EQ(final.value("type", ""), "final") << pipeline << ": " << final.dump() << "\n"
                                                << daemon.log();
    const json& st = final["stats"];
    EXPECT_GE(final["usage"]["completion_tokens"].get<int>(), 1) << pipeline;
    EXPECT_LT(st["tokens_kept"].get<int64_t>(), st["tokens_before"].get<int64_t>()) << pipeline;
    EXPECT_LT(st["kv_bytes"].get<int64_t>(), st["kv_bytes_full"].get<int64_t>() / 5) << pipeline;
  }
}

}  // namespace
}  // namespace sift::plugins
