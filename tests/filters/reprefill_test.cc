// Both filter pipelines run stage by stage in process: the filter replaces the prompt with the
// selected tokens (question kept, original order) and the re-prefill caches them at fresh
// positions 0..k-1, ready to decode.
#include <gtest/gtest.h>

#include "gemfilter_stage.h"
#include "ilre_stage.h"
#include "model_env.h"
#include "prefill_full_stage.h"
#include "prefill_partial_stage.h"
#include "prefill_streaming_stage.h"
#include "test_context.h"

namespace sift::plugins {
namespace {

using sift::testing::FillerPrompt;
using sift::testing::Fp32Model;
using sift::testing::TestContext;

StageParams Params(const std::string& plugin, const nlohmann::json& values) {
  StageParams p("test", plugin, plugin);
  for (auto& [key, value] : values.items()) p.Set(key, value, "test");
  return p;
}

void ExpectFreshPositions(const RequestState& state) {
  const int64_t k = static_cast<int64_t>(state.tokens.size());
  ASSERT_NE(state.cache, nullptr);
  for (int64_t l = 0; l < state.cache->num_layers(); ++l) {
    ASSERT_EQ(state.cache->size(l), k);
    const at::Tensor want = at::arange(k, at::kLong).expand({state.cache->shape().num_kv_heads, k});
    ASSERT_TRUE(at::equal(state.cache->Positions(l), want)) << "layer " << l;
  }
  EXPECT_EQ(state.next_position, k);
  EXPECT_TRUE(state.last_logits.defined());
}

void RunPipeline(const Model& model, std::vector<std::unique_ptr<Stage>>& stages,
                 RequestState& state) {
  for (auto& s : stages) ASSERT_TRUE(s->Plan(model, state.plan).ok());
  TestContext context;
  for (auto& s : stages) {
    const Status st = s->Run(model, state, context);
    ASSERT_TRUE(st.ok()) << st.message();
  }
}

TEST(Reprefill, GemFilterKeepsTopKAndQuestionAtFreshPositions) {
  SIFT_FILTERS_REQUIRE_MODEL();
  const Model& model = *Fp32Model();
  RequestState state;
  state.tokens = FillerPrompt(model, 12, &state.question_begin);
  const std::vector<TokenId> original = state.tokens;
  const int64_t qb = state.question_begin, n = static_cast<int64_t>(original.size());
  std::vector<std::unique_ptr<Stage>> stages;
  stages.push_back(std::make_unique<PrefillPartialStage>(Params("prefill_partial", {}), model));
  stages.push_back(std::make_unique<GemFilterStage>(
      Params("gemfilter", {{"layer", 2}, {"topk", 40}, {"floor", 0}}), model));
  stages.push_back(std::make_unique<PrefillFullStage>(Params("prefill_full", {}), model));
  RunPipeline(model, stages, state);
  ASSERT_EQ(state.tokens.size(), 40u);
  EXPECT_EQ(state.prompt_length, n);
  // The question is the tail, unchanged.
  ASSERT_EQ(state.question_begin, 40 - (n - qb));
  EXPECT_TRUE(std::equal(state.tokens.begin() + state.question_begin, state.tokens.end(),
                         original.begin() + qb));
  ExpectFreshPositions(state);
}

TEST(Reprefill, IlreKeepsSinkBudgetAndQueryAtFreshPositions) {
  SIFT_FILTERS_REQUIRE_MODEL();
  const Model& model = *Fp32Model();
  RequestState state;
  state.tokens = FillerPrompt(model, 12, &state.question_begin);
  const std::vector<TokenId> original = state.tokens;
  const int64_t qb = state.question_begin, n = static_cast<int64_t>(original.size());
  std::vector<std::unique_ptr<Stage>> stages;
  stages.push_back(std::make_unique<PrefillStreamingStage>(
      Params("prefill_streaming", {{"window", 16}, {"chunk", 32}}), model));
  stages.push_back(std::make_unique<IlreStage>(
      Params("ilre", {{"retrieval_layer", 3}, {"budget", 30}, {"floor", 0}}), model));
  stages.push_back(std::make_unique<PrefillFullStage>(Params("prefill_full", {}), model));
  RunPipeline(model, stages, state);
  // Sink (4) + budget (30) + the query part.
  ASSERT_EQ(static_cast<int64_t>(state.tokens.size()), 4 + 30 + (n - qb));
  EXPECT_TRUE(std::equal(state.tokens.begin(), state.tokens.begin() + 4, original.begin()));
  EXPECT_EQ(state.question_begin, 34);
  EXPECT_TRUE(std::equal(state.tokens.begin() + 34, state.tokens.end(), original.begin() + qb));
  EXPECT_EQ(state.prompt_length, n);
  ExpectFreshPositions(state);
}

// The floor and what the filters always keep (issue 29): a prompt at or below the floor is
// re-prefilled whole; at a budget of 1 with floor 0, GemFilter keeps the question and ILRe the
// sink and the query part (+ the one budgeted token).
TEST(Reprefill, FiltersKeepTheQuestionAndLeaveAPromptAtTheFloorWhole) {
  SIFT_FILTERS_REQUIRE_MODEL();
  const Model& model = *Fp32Model();
  RequestState base;
  base.tokens = FillerPrompt(model, 12, &base.question_begin);
  const std::vector<TokenId> original = base.tokens;
  const int64_t qb = base.question_begin, n = static_cast<int64_t>(original.size());
  ASSERT_GT(n, 40);
  auto gemfilter = [&](const nlohmann::json& p) {
    RequestState state;
    state.tokens = original;
    state.question_begin = qb;
    std::vector<std::unique_ptr<Stage>> stages;
    stages.push_back(std::make_unique<PrefillPartialStage>(Params("prefill_partial", {}), model));
    nlohmann::json params = p;
    params["layer"] = 2;
    stages.push_back(std::make_unique<GemFilterStage>(Params("gemfilter", params), model));
    stages.push_back(std::make_unique<PrefillFullStage>(Params("prefill_full", {}), model));
    RunPipeline(model, stages, state);
    return state;
  };
  auto ilre = [&](const nlohmann::json& p) {
    RequestState state;
    state.tokens = original;
    state.question_begin = qb;
    std::vector<std::unique_ptr<Stage>> stages;
    stages.push_back(std::make_unique<PrefillStreamingStage>(
        Params("prefill_streaming", {{"window", 16}, {"chunk", 32}}), model));
    nlohmann::json params = p;
    params["retrieval_layer"] = 3;
    stages.push_back(std::make_unique<IlreStage>(Params("ilre", params), model));
    stages.push_back(std::make_unique<PrefillFullStage>(Params("prefill_full", {}), model));
    RunPipeline(model, stages, state);
    return state;
  };
  const std::vector<TokenId> question(original.begin() + qb, original.end());
  // At the floor: nothing filtered, whatever topk / budget say.
  EXPECT_EQ(gemfilter({{"topk", 8}, {"floor", n}}).tokens, original);
  EXPECT_EQ(ilre({{"budget", 8}, {"floor", n}}).tokens, original);
  // Above it: no fewer than the floor.
  EXPECT_EQ(static_cast<int64_t>(gemfilter({{"topk", 8}, {"floor", n - 1}}).tokens.size()), n - 1);
  // ILRe's floor is on its context budget B: 5 context tokens short of the whole context.
  EXPECT_EQ(static_cast<int64_t>(ilre({{"budget", 8}, {"floor", qb - 4 - 5}}).tokens.size()),
            n - 5);
  // The hard minimum: the question (GemFilter), the sink and the query part (ILRe).
  RequestState g = gemfilter({{"topk", 1}, {"floor", 0}});
  EXPECT_EQ(g.tokens, question);
  RequestState i = ilre({{"budget", 1}, {"floor", 0}});
  ASSERT_EQ(static_cast<int64_t>(i.tokens.size()), 4 + 1 + (n - qb));
  EXPECT_TRUE(std::equal(i.tokens.begin(), i.tokens.begin() + 4, original.begin()));
  EXPECT_TRUE(std::equal(i.tokens.begin() + 5, i.tokens.end(), question.begin()));
}

TEST(Reprefill, FiltersRefuseWithoutScores) {
  SIFT_FILTERS_REQUIRE_MODEL();
  const Model& model = *Fp32Model();
  RequestState state;
  state.tokens = FillerPrompt(model, 2, &state.question_begin);
  TestContext context;
  IlreStage ilre(Params("ilre", {}), model);
  EXPECT_EQ(ilre.Run(model, state, context).code(), StatusCode::kFailedPrecondition);
  GemFilterStage gem(Params("gemfilter", {}), model);
  EXPECT_EQ(gem.Run(model, state, context).code(), StatusCode::kFailedPrecondition);
  PrefillStreamingStage streaming(Params("prefill_streaming", {}), model);
  EXPECT_EQ(streaming.Run(model, state, context).code(), StatusCode::kFailedPrecondition);
}

TEST(Reprefill, ScoringPassesRejectEmptyPromptsAndBadTokens) {
  SIFT_FILTERS_REQUIRE_MODEL();
  const Model& model = *Fp32Model();
  TestContext context;
  PrefillPartialStage partial(Params("prefill_partial", {}), model);
  PrefillStreamingStage streaming(Params("prefill_streaming", {}), model);
  for (Stage* stage : std::vector<Stage*>{&partial, &streaming}) {
    RequestState empty;
    Status st = stage->Run(model, empty, context);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(st.reason(), "empty_prompt");
    RequestState bad;
    bad.tokens = FillerPrompt(model, 2, &bad.question_begin);
    bad.tokens[3] = static_cast<TokenId>(model.config().vocab_size);
    st = stage->Run(model, bad, context);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(st.reason(), "bad_token") << st.message();
  }
}

}  // namespace
}  // namespace sift::plugins
