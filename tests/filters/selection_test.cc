// GemFilter's top-k and ILRe's multi-kernel allocation on hand-built score vectors, and the
// prompt replacement a filter applies.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "context_allocation.h"
#include "filter/replace_prompt.h"
#include "gem_selection.h"
#include "sift/error.h"

namespace sift::plugins {
namespace {

at::Tensor Scores(const std::vector<float>& v) { return at::tensor(v, at::kFloat); }

TEST(GemFilterSelect, TopKInOriginalOrderWithQuestionKept) {
  // Context 0..9, question 10..11. Peaks at 7 and 2; kernel 1 = no pooling.
  const at::Tensor s = Scores({0, 1, 9, 0, 0, 0, 0, 8, 0, 0, -5, -5});
  EXPECT_EQ(GemFilterSelect(s, 10, 4, 1), (std::vector<int64_t>{2, 7, 10, 11}));
  // Budget smaller than the question: the question only.
  EXPECT_EQ(GemFilterSelect(s, 10, 2, 1), (std::vector<int64_t>{10, 11}));
  // Prompt fits: everything.
  EXPECT_EQ(GemFilterSelect(s, 10, 12, 1).size(), 12u);
}

TEST(GemFilterSelect, AveragePoolingFavoursDenseRegions) {
  // A lone spike (index 1, value 10) against a plateau 5..7 (value 4 each): with kernel 3 the
  // plateau's centre (12/3 = 4) beats the spike (10/3).
  std::vector<float> v(12, 0.f);
  v[1] = 10;
  v[5] = v[6] = v[7] = 4;
  EXPECT_EQ(GemFilterSelect(Scores(v), 11, 2, 3), (std::vector<int64_t>{6, 11}));
  EXPECT_EQ(GemFilterSelect(Scores(v), 11, 2, 1), (std::vector<int64_t>{1, 11}));
}

AllocationOptions Opts(std::vector<int64_t> max_k, std::vector<int64_t> avg_k, int64_t budget) {
  AllocationOptions o;
  o.max_kernels = std::move(max_k);
  o.avg_kernels = std::move(avg_k);
  o.budget = budget;
  return o;
}

TEST(AllocateContext, BudgetExactSortedAndDeduplicated) {
  at::manual_seed(3);
  const at::Tensor s = at::rand({1000});
  for (int64_t budget : {1, 7, 48, 100, 333}) {
    const std::vector<int64_t> out = AllocateContext(
        s, Opts({2, 4, 8}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, budget));
    EXPECT_EQ(static_cast<int64_t>(out.size()), budget);
    EXPECT_TRUE(std::is_sorted(out.begin(), out.end()));
    EXPECT_EQ(std::set<int64_t>(out.begin(), out.end()).size(), out.size());
    EXPECT_GE(out.front(), 0);
    EXPECT_LT(out.back(), 1000);
  }
}

TEST(AllocateContext, NextBestCandidateWhenTaken) {
  // Two combinations that rank the same way (max 1 x avg {1, 1}): budget 4 -> 2 each; the second
  // must skip the first's picks and take the next best.
  const at::Tensor s = Scores({0, 9, 0, 8, 0, 7, 0, 6, 0, 5});
  EXPECT_EQ(AllocateContext(s, Opts({1}, {1, 1}, 4)), (std::vector<int64_t>{1, 3, 5, 7}));
}

TEST(AllocateContext, MaxPoolBlocksMapBackToWholeBlocks) {
  // max kernel 4 over 12 scores: blocks [0,4) [4,8) [8,12) with maxima 1, 9, 2. Budget 4 = one
  // block: block mapping keeps 4..7; argmax keeps 5 then the next blocks' maxima.
  const at::Tensor s = Scores({1, 0, 0, 0, 0, 9, 0, 0, 0, 2, 0, 0});
  EXPECT_EQ(AllocateContext(s, Opts({4}, {1}, 4)), (std::vector<int64_t>{4, 5, 6, 7}));
  AllocationOptions arg = Opts({4}, {1}, 3);
  arg.map_back = MapBack::kArgmax;
  EXPECT_EQ(AllocateContext(s, arg), (std::vector<int64_t>{0, 5, 9}));
}

TEST(AllocateContext, PaperFloorSplitCanLeaveSlotsOpen) {
  at::manual_seed(4);
  const at::Tensor s = at::rand({500});
  AllocationOptions o =
      Opts({2, 4, 8}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, 100);
  o.exact_budget = false;
  EXPECT_EQ(AllocateContext(s, o).size(), 48u * (100 / 48));
}

TEST(AllocateContext, ShortContextKeepsEverything) {
  EXPECT_EQ(AllocateContext(Scores({3, 1, 2}), Opts({2}, {1}, 10)),
            (std::vector<int64_t>{0, 1, 2}));
}

TEST(ReplacePrompt, KeepsOrderMovesQuestionAndClears) {
  RequestState state;
  state.tokens = {10, 11, 12, 13, 14, 15, 16};
  state.question_begin = 5;
  state.next_position = 7;
  state.last_logits = at::zeros({4});
  state.layer_stats[3].max_prob = at::zeros({5});
  ReplacePrompt(state, {0, 2, 5, 6});
  EXPECT_EQ(state.tokens, (std::vector<TokenId>{10, 12, 15, 16}));
  EXPECT_EQ(state.question_begin, 2);
  EXPECT_EQ(state.prompt_length, 7);
  EXPECT_EQ(state.next_position, 0);
  EXPECT_TRUE(state.layer_stats.empty());
  EXPECT_FALSE(state.last_logits.defined());
  EXPECT_EQ(state.cache, nullptr);
  EXPECT_THROW(ReplacePrompt(state, {9}), Error);
}

}  // namespace
}  // namespace sift::plugins
