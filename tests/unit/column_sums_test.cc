// H2O's column sums from the forward pass's log-sum-exps (runtime/column_sums.h), the path CUDA
// takes, against the blocked pass over every query row that the CPU takes. The swapped causal
// attention runs here on a dense reference; on CUDA it is LibTorch's flash kernel
// (AttentionTest.CudaStatisticsMatchTheCpu compares the two devices).
#include "column_sums.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "sift/attention.h"

namespace sift {
namespace {

// Dense causal log-sum-exp (top-left alignment): q, k [B, H, n, d] -> [B, H, n], in fp32 from
// whatever dtype q and k hold, as the flash kernel accumulates.
at::Tensor DenseCausalLse(const at::Tensor& q, const at::Tensor& k, double scale) {
  const int64_t n = q.size(2);
  at::Tensor s = at::matmul(q.to(at::kFloat), k.to(at::kFloat).transpose(2, 3)) * scale;
  const at::Tensor above = at::ones({n, n}, at::kBool).triu(1);
  s.masked_fill_(above, -std::numeric_limits<float>::infinity());
  return s.logsumexp(-1);
}

struct Prompt {
  at::Tensor q, k, v, pos;  // q [n, hq, hd], k/v [hkv, n, hd], positions 0..n-1
};

Prompt MakePrompt(int64_t n, int64_t hq, int64_t hkv, int64_t hd, at::ScalarType dtype) {
  at::manual_seed(17);
  Prompt p;
  // Scaled so that some rows are peaked (log-sum-exps far from log n), as a trained model's are.
  p.q = (at::randn({n, hq, hd}) * 2.0).to(dtype);
  p.k = at::randn({hkv, n, hd}).to(dtype);
  p.v = at::randn({hkv, n, hd}).to(dtype);
  p.pos = at::arange(n, at::kLong);
  return p;
}

// The blocked pass's column sums (LibTorch operators in fp32) of the prompt's values in fp32.
at::Tensor BlockedColumnSums(const Prompt& p) {
  AttentionOptions o;
  o.kernel = AttentionKernel::kTorch;
  AttentionStatsRequest r;
  r.column_sum = true;
  AttentionStats s;
  Attention(p.q.to(at::kFloat), p.k.to(at::kFloat), p.v.to(at::kFloat), p.pos, p.pos, o, r, &s);
  return s.column_sum;
}

at::Tensor FromLse(const Prompt& p) {
  const int64_t n = p.q.size(0), hq = p.q.size(1), hd = p.q.size(2), hkv = p.k.size(0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const at::Tensor qh = p.q.permute({1, 0, 2}).reshape({hkv, hq / hkv, n, hd});
  const at::Tensor lse = DenseCausalLse(qh, p.k.unsqueeze(1).expand({hkv, hq / hkv, n, hd}), scale);
  return ColumnSumsFromLse(qh, p.k, lse, scale, DenseCausalLse);
}

double MaxRelativeError(const at::Tensor& got, const at::Tensor& want) {
  return ((got - want).abs() / want.abs()).max().item<double>();
}

TEST(ColumnSums, FromTheForwardsLseEqualTheBlockedPass) {
  const Prompt p = MakePrompt(300, 6, 2, 64, at::kFloat);
  const at::Tensor want = BlockedColumnSums(p);
  const at::Tensor got = FromLse(p);
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_LT(MaxRelativeError(got, want), 1e-4);
  // Every query row's probabilities sum to one, so the column sums of a head total n.
  EXPECT_LT((got.sum(1) - 300.0).abs().max().item<double>(), 1e-2);
}

// In bf16 the -L / s the swapped keys carry must keep its precision (three bf16 parts): one part
// alone would be off by up to 2^-9 of L / s, a few percent of a column sum.
TEST(ColumnSums, Bf16InputsKeepTheLseExact) {
  const Prompt p = MakePrompt(257, 9, 3, 64, at::kBFloat16);
  const at::Tensor got = FromLse(p);
  EXPECT_EQ(got.scalar_type(), at::kFloat);
  EXPECT_LT(MaxRelativeError(got, BlockedColumnSums(p)), 1e-3);
}

TEST(ColumnSums, HeadDim128AndOneKvHead) {
  const Prompt p = MakePrompt(64, 4, 1, 128, at::kFloat);
  EXPECT_LT(MaxRelativeError(FromLse(p), BlockedColumnSums(p)), 1e-4);
}

TEST(ColumnSums, RejectsMismatchedShapes) {
  const at::Tensor q = at::zeros({2, 3, 10, 64});
  const at::Tensor k = at::zeros({2, 9, 64});  // 9 keys for 10 queries
  EXPECT_THROW(ColumnSumsFromLse(q, k, at::zeros({2, 3, 10}), 0.125, DenseCausalLse),
               std::exception);
}

}  // namespace
}  // namespace sift
