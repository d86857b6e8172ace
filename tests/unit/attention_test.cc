// Blocked attention against the dense reference: causal, GQA, Λ mask, compressed caches with
// per-head positions, and every statistic selection methods request.
#include "sift/attention.h"

#include <gtest/gtest.h>

#include <limits>

namespace sift {
namespace {

struct Inputs {
  at::Tensor q, k, v, q_pos, k_pos;
};

// nq queries at the end of nk keys (positions 0..nk-1), random values.
Inputs MakeInputs(int64_t nq, int64_t nk, int64_t hq, int64_t hkv, int64_t hd, uint64_t seed) {
  at::manual_seed(seed);
  Inputs in;
  in.q = at::randn({nq, hq, hd});
  in.k = at::randn({hkv, nk, hd});
  in.v = at::randn({hkv, nk, hd});
  in.k_pos = at::arange(nk, at::kLong);
  in.q_pos = at::arange(nk - nq, nk, at::kLong);
  return in;
}

// Dense softmax probabilities [Hq, nq, nk] with the same visibility rules.
at::Tensor ReferenceProbs(const Inputs& in, const AttentionOptions& o) {
  const int64_t hq = in.q.size(1), hkv = in.k.size(0), g = hq / hkv;
  at::Tensor qf = in.q.permute({1, 0, 2});
  at::Tensor kf = in.k.repeat_interleave(g, 0);
  at::Tensor kp =
      (in.k_pos.dim() == 1 ? in.k_pos.unsqueeze(0).expand({hkv, in.k.size(1)}) : in.k_pos)
          .repeat_interleave(g, 0)
          .unsqueeze(1);
  at::Tensor qp = in.q_pos.view({1, -1, 1});
  at::Tensor visible = kp <= qp;
  if (o.window > 0) visible = visible.logical_and((qp - kp < o.window).logical_or(kp < o.sink));
  at::Tensor s = at::matmul(qf, kf.transpose(1, 2)) / std::sqrt(double(in.q.size(2)));
  s.masked_fill_(visible.logical_not(), -std::numeric_limits<float>::infinity());
  return s.softmax(-1);
}

void ExpectClose(const at::Tensor& a, const at::Tensor& b, double tol) {
  ASSERT_EQ(a.sizes(), b.sizes());
  EXPECT_LT((a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>(), tol);
}

TEST(AttentionTest, BlockedMatchesDenseForEveryBlockSize) {
  Inputs in = MakeInputs(37, 37, 6, 2, 16, 1);
  for (int64_t block : {1, 5, 16, 37, 256}) {
    // Exactly `block` rows, and blocks grown to the byte budget (here the whole prompt).
    for (int64_t bytes : {int64_t{0}, AttentionOptions().block_bytes}) {
      AttentionOptions o;
      o.block_size = block;
      o.block_bytes = bytes;
      ExpectClose(Attention(in.q, in.k, in.v, in.q_pos, in.k_pos, o),
                  AttentionReference(in.q, in.k, in.v, in.q_pos, in.k_pos, o), 1e-5);
    }
  }
}

TEST(AttentionTest, QueriesContinuingAfterACachedPrefix) {
  Inputs in = MakeInputs(9, 40, 4, 4, 8, 2);  // 31 cached keys, 9 new queries (MHA)
  AttentionOptions o;
  o.block_size = 4;
  o.block_bytes = 0;  // exactly block_size rows
  ExpectClose(Attention(in.q, in.k, in.v, in.q_pos, in.k_pos, o),
              AttentionReference(in.q, in.k, in.v, in.q_pos, in.k_pos, o), 1e-5);
}

TEST(AttentionTest, LambdaMaskMatchesDense) {
  Inputs in = MakeInputs(50, 50, 6, 3, 8, 3);
  AttentionOptions o;
  o.block_size = 7;
  o.block_bytes = 0;  // exactly block_size rows
  o.sink = 4;
  o.window = 8;
  at::Tensor out = Attention(in.q, in.k, in.v, in.q_pos, in.k_pos, o);
  ExpectClose(out, AttentionReference(in.q, in.k, in.v, in.q_pos, in.k_pos, o), 1e-5);
  // The mask really changes the result (the test would pass vacuously otherwise).
  AttentionOptions causal;
  EXPECT_GT((out - AttentionReference(in.q, in.k, in.v, in.q_pos, in.k_pos, causal))
                .abs()
                .max()
                .item<double>(),
            1e-2);
}

TEST(AttentionTest, CompressedCacheWithPerHeadPositions) {
  // Two KV heads keep different subsets of 20 positions; one decode query at position 25.
  Inputs in = MakeInputs(1, 6, 4, 2, 8, 4);
  in.k_pos = at::tensor({0, 3, 4, 9, 15, 19, 1, 2, 7, 8, 12, 18}, at::kLong).view({2, 6});
  in.q_pos = at::tensor({25}, at::kLong);
  AttentionOptions o;
  ExpectClose(Attention(in.q, in.k, in.v, in.q_pos, in.k_pos, o),
              AttentionReference(in.q, in.k, in.v, in.q_pos, in.k_pos, o), 1e-5);
}

TEST(AttentionTest, Bf16StaysCloseToFp32) {
  Inputs in = MakeInputs(64, 64, 9, 3, 64, 5);
  AttentionOptions o;
  o.block_size = 16;
  o.block_bytes = 0;  // exactly block_size rows
  at::Tensor ref = AttentionReference(in.q, in.k, in.v, in.q_pos, in.k_pos, o);
  at::Tensor out = Attention(in.q.to(at::kBFloat16), in.k.to(at::kBFloat16), in.v.to(at::kBFloat16),
                             in.q_pos, in.k_pos, o);
  EXPECT_EQ(out.scalar_type(), at::kBFloat16);
  // bf16 has 8 mantissa bits: relative error ~2^-8 per rounding, a few roundings deep.
  ExpectClose(out, ref, 0.05);
}

TEST(AttentionTest, StatisticsMatchDenseProbabilities) {
  Inputs in = MakeInputs(30, 30, 6, 2, 8, 6);
  AttentionOptions o;
  o.block_size = 8;   // the window straddles two blocks
  o.block_bytes = 0;  // exactly block_size rows
  AttentionStatsRequest r;
  r.window = 11;
  r.last_query = true;
  r.column_sum = true;
  r.max_from_query = 20;
  r.last_query_logit_sum = true;
  AttentionStats s;
  Attention(in.q, in.k, in.v, in.q_pos, in.k_pos, o, r, &s);
  at::Tensor p = ReferenceProbs(in, o);  // [Hq, nq, nk]
  ExpectClose(s.window_sum, p.slice(1, 30 - 11, 30).sum(1), 1e-5);
  ExpectClose(s.last_query, p.select(1, 29), 1e-6);
  ExpectClose(s.column_sum, p.sum(1), 1e-5);
  ExpectClose(s.max_prob, std::get<0>(p.slice(1, 20, 30).reshape({-1, 30}).max(0)), 1e-6);
  // GemFilter signal: raw q·k of the last query, summed over all query heads.
  at::Tensor raw = at::matmul(in.q.select(0, 29).unsqueeze(1),                // [Hq,1,hd]
                              in.k.repeat_interleave(3, 0).transpose(1, 2));  // [Hq,hd,nk]
  ExpectClose(s.last_query_logit_sum, raw.squeeze(1).sum(0), 1e-4);
  // Probability rows sum to one, so the window sum of each head totals the window length.
  ExpectClose(s.window_sum.sum(1), at::full({6}, 11.0), 1e-4);
}

// Statistics come from their own pass over the rows they read, whatever kernel computed the
// output: the CPU kernel (kAuto, head dim 64) and LibTorch's fused path (kTorch, what CUDA runs:
// one causal SDPA call for a whole prompt) give bit-identical scores, and both outputs match
// the dense reference.
TEST(AttentionTest, StatisticsDoNotDependOnTheOutputKernel) {
  Inputs in = MakeInputs(300, 300, 6, 2, 64, 8);
  AttentionStatsRequest r;
  r.window = 32;
  r.last_query = true;
  r.max_from_query = 250;
  r.last_query_logit_sum = true;
  r.column_sum = true;
  AttentionOptions cpu_kernel, torch_ops;
  torch_ops.kernel = AttentionKernel::kTorch;
  AttentionStats a, b;
  const at::Tensor out_a = Attention(in.q, in.k, in.v, in.q_pos, in.k_pos, cpu_kernel, r, &a);
  const at::Tensor out_b = Attention(in.q, in.k, in.v, in.q_pos, in.k_pos, torch_ops, r, &b);
  EXPECT_TRUE(at::equal(a.window_sum, b.window_sum));
  EXPECT_TRUE(at::equal(a.last_query, b.last_query));
  EXPECT_TRUE(at::equal(a.max_prob, b.max_prob));
  EXPECT_TRUE(at::equal(a.last_query_logit_sum, b.last_query_logit_sum));
  EXPECT_TRUE(at::equal(a.column_sum, b.column_sum));
  const at::Tensor ref = AttentionReference(in.q, in.k, in.v, in.q_pos, in.k_pos, cpu_kernel);
  ExpectClose(out_a, ref, 1e-5);
  ExpectClose(out_b, ref, 1e-5);
  const at::Tensor p = ReferenceProbs(in, cpu_kernel);
  ExpectClose(b.window_sum, p.slice(1, 300 - 32, 300).sum(1), 1e-5);
  ExpectClose(b.column_sum, p.sum(1), 1e-4);
  // The same request without statistics gives the same output (statistics never change it).
  EXPECT_TRUE(at::equal(out_b, Attention(in.q, in.k, in.v, in.q_pos, in.k_pos, torch_ops)));
}

// On CUDA (skipped elsewhere): a whole bf16 prompt runs LibTorch's flash kernel, the column sums
// come from its log-sum-exps and the other statistics from the second pass; all agree with the
// CPU's computation of the same bf16 inputs (different GEMMs: close, not bit-equal).
TEST(AttentionTest, CudaStatisticsMatchTheCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  Inputs in = MakeInputs(1000, 1000, 9, 3, 64, 9);
  AttentionStatsRequest r;
  r.window = 32;
  r.last_query = true;
  r.column_sum = true;
  r.last_query_logit_sum = true;
  AttentionOptions o;
  auto bf = [](const at::Tensor& t, at::Device d) { return t.to(d, at::kBFloat16); };
  const at::Device cuda(at::kCUDA);
  AttentionStats cpu, gpu;
  const at::Tensor out_cpu = Attention(bf(in.q, at::kCPU), bf(in.k, at::kCPU), bf(in.v, at::kCPU),
                                       in.q_pos, in.k_pos, o, r, &cpu);
  const at::Tensor out_gpu =
      Attention(bf(in.q, cuda), bf(in.k, cuda), bf(in.v, cuda), in.q_pos, in.k_pos, o, r, &gpu);
  ExpectClose(out_gpu.cpu(), out_cpu, 0.03);
  ExpectClose(gpu.window_sum.cpu(), cpu.window_sum, 2e-2);
  ExpectClose(gpu.last_query.cpu(), cpu.last_query, 2e-3);
  ExpectClose(gpu.column_sum.cpu(), cpu.column_sum, 5e-2);
  // The selection signals rank keys alike: the top window keys agree.
  const at::Tensor top_cpu = std::get<1>(cpu.window_sum.sum(0).topk(64));
  const at::Tensor top_gpu = std::get<1>(gpu.window_sum.sum(0).cpu().topk(64));
  const int64_t common = at::isin(top_gpu, top_cpu).sum().item<int64_t>();
  EXPECT_GE(common, 60);
  // H2O's signal too: on CUDA its column sums come from the flash kernel's log-sum-exps
  // (runtime/column_sums.h), on the CPU from the blocked pass.
  const at::Tensor col_cpu = std::get<1>(cpu.column_sum.sum(0).topk(64));
  const at::Tensor col_gpu = std::get<1>(gpu.column_sum.sum(0).cpu().topk(64));
  EXPECT_GE(at::isin(col_gpu, col_cpu).sum().item<int64_t>(), 60);
}

TEST(AttentionTest, RejectsMismatchedShapes) {
  Inputs in = MakeInputs(4, 4, 6, 4, 8, 7);  // 6 heads not divisible by 4 KV heads
  EXPECT_THROW(Attention(in.q, in.k, in.v, in.q_pos, in.k_pos, {}), std::exception);
}

}  // namespace
}  // namespace sift
