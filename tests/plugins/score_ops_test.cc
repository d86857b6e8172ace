// Shared score operations (plugin_api/kits/scores/score_ops.h) on hand-built tensors.
#include "scores/score_ops.h"

#include <gtest/gtest.h>

#include <vector>

#include "sift/error.h"

namespace sift::plugins {
namespace {

std::vector<float> Values(const at::Tensor& t) {
  at::Tensor c = t.to(at::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}
std::vector<int64_t> Ids(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

TEST(ScoreOps, AggregateGqaGroupsConsecutiveQueryHeads) {
  // 4 query heads, 2 KV heads: heads {0,1} -> KV 0, {2,3} -> KV 1.
  at::Tensor s = at::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f}).reshape({4, 2});
  EXPECT_EQ(Values(AggregateGqa(s, 2, Reduce::kSum)), (std::vector<float>{4, 6, 12, 14}));
  EXPECT_EQ(Values(AggregateGqa(s, 2, Reduce::kMean)), (std::vector<float>{2, 3, 6, 7}));
  EXPECT_EQ(Values(AggregateGqa(s, 2, Reduce::kMax)), (std::vector<float>{3, 4, 7, 8}));
  EXPECT_THROW(AggregateGqa(s, 3, Reduce::kSum), Error);
}

TEST(ScoreOps, AvgPoolCountsPaddingAsZeros) {
  at::Tensor s = at::tensor({3.f, 0.f, 0.f, 6.f});
  // kernel 3, centred: (0+3+0)/3, (3+0+0)/3, (0+0+6)/3, (0+6+0)/3.
  EXPECT_EQ(Values(Pool1d(s, PoolKind::kAvg, 3)), (std::vector<float>{1, 1, 2, 2}));
}

TEST(ScoreOps, MaxPoolEvenKernelLeansLeft) {
  at::Tensor s = at::tensor({1.f, 5.f, 2.f, 0.f});
  // kernel 2: output i covers [i-1, i].
  EXPECT_EQ(Values(Pool1d(s, PoolKind::kMax, 2)), (std::vector<float>{1, 5, 5, 2}));
  EXPECT_EQ(Values(Pool1d(s, PoolKind::kMax, 1)), Values(s));
  EXPECT_EQ(Values(Pool1d(s, PoolKind::kNone, 7)), Values(s));
}

TEST(ScoreOps, PoolKeepsLeadingShape) {
  at::Tensor s = at::rand({2, 3, 10});
  EXPECT_EQ(Pool1d(s, PoolKind::kAvg, 5).sizes(), s.sizes());
  EXPECT_THROW(Pool1d(s, PoolKind::kAvg, 0), Error);
}

TEST(ScoreOps, TopKSortedReturnsOriginalOrderAndBreaksTiesLow) {
  at::Tensor s = at::tensor({0.5f, 0.9f, 0.1f, 0.9f, 0.7f});
  EXPECT_EQ(Ids(TopKSorted(s, 3)), (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(Ids(TopKSorted(s, 1)), (std::vector<int64_t>{1}));
  EXPECT_EQ(Ids(TopKSorted(s, 99)), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  at::Tensor rows = at::tensor({3.f, 1.f, 2.f, 1.f, 2.f, 3.f}).reshape({2, 3});
  EXPECT_EQ(Ids(TopKSorted(rows, 2)), (std::vector<int64_t>{0, 2, 1, 2}));
}

TEST(ScoreOps, ParseNamesRejectUnknown) {
  EXPECT_EQ(ParsePoolKind("max"), PoolKind::kMax);
  EXPECT_EQ(ParseReduce("sum"), Reduce::kSum);
  EXPECT_THROW(ParsePoolKind("median"), Error);
  EXPECT_THROW(ParseReduce("prod"), Error);
}

}  // namespace
}  // namespace sift::plugins
