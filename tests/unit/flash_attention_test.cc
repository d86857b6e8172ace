// The CPU attention kernel against the dense reference, at every instruction-set level this
// machine has: the shapes the engine uses (head dim 64 and 128, GQA), prefill blocks, decode
// with the keys split between threads, chunked prefill after a cached prefix, Λ masks, caches
// compressed per head, bf16 and mixed dtypes, strided cache views, and a query that sees nothing.
#include "cpu/flash_attention.h"

#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "decode_attention.h"
#include "sift/attention.h"
#include "sift/kv_cache.h"

namespace sift {
namespace {

struct Case {
  at::Tensor q, k, v, q_pos, k_pos;
  AttentionOptions options;
};

// nq queries at the end of nk keys (positions 0..nk-1).
Case MakeCase(int64_t nq, int64_t nk, int64_t hq, int64_t hkv, int64_t hd, uint64_t seed) {
  at::manual_seed(seed);
  Case c;
  c.q = at::randn({nq, hq, hd});
  c.k = at::randn({hkv, nk, hd});
  c.v = at::randn({hkv, nk, hd});
  c.k_pos = at::arange(nk, at::kLong);
  c.q_pos = at::arange(nk - nq, nk, at::kLong);
  return c;
}

double MaxError(const Case& c, at::ScalarType q_type, at::ScalarType kv_type) {
  const at::Tensor ref = AttentionReference(c.q, c.k, c.v, c.q_pos, c.k_pos, c.options);
  const at::Tensor out =
      Attention(c.q.to(q_type), c.k.to(kv_type), c.v.to(kv_type), c.q_pos, c.k_pos, c.options);
  EXPECT_EQ(out.scalar_type(), q_type);
  EXPECT_EQ(out.sizes(), ref.sizes());
  return (out.to(at::kFloat) - ref).abs().max().item<double>();
}

TEST(FlashAttentionTest, PrefillMatchesDenseFp32) {
  for (int64_t hd : {64, 128}) {
    for (int64_t n : {1, 17, 64, 200, 333}) {
      Case c = MakeCase(n, n, 9, 3, hd, 1 + n);
      EXPECT_LT(MaxError(c, at::kFloat, at::kFloat), 2e-5) << "hd " << hd << " n " << n;
    }
  }
}

TEST(FlashAttentionTest, DecodeSplitsKeysAcrossThreadsAndMerges) {
  // One query over many keys: the kernel splits each KV head's keys into slices.
  at::set_num_threads(4);
  for (int64_t nk : {1, 63, 64, 65, 1000, 4097}) {
    Case c = MakeCase(1, nk, 14, 2, 64, 7 + nk);
    EXPECT_LT(MaxError(c, at::kFloat, at::kFloat), 2e-5) << "nk " << nk;
  }
}

TEST(FlashAttentionTest, ChunkAfterCachedPrefix) {
  Case c = MakeCase(40, 300, 9, 3, 64, 3);
  EXPECT_LT(MaxError(c, at::kFloat, at::kFloat), 2e-5);
}

TEST(FlashAttentionTest, LambdaMaskMatchesDenseAndMatters) {
  Case c = MakeCase(300, 300, 9, 3, 64, 4);
  c.options.sink = 4;
  c.options.window = 70;
  EXPECT_LT(MaxError(c, at::kFloat, at::kFloat), 2e-5);
  // The mask changes the result, so the comparison above is not vacuous.
  const at::Tensor masked = Attention(c.q, c.k, c.v, c.q_pos, c.k_pos, c.options);
  const at::Tensor causal = Attention(c.q, c.k, c.v, c.q_pos, c.k_pos, {});
  EXPECT_GT((masked - causal).abs().max().item<double>(), 1e-2);
}

TEST(FlashAttentionTest, CompressedCacheWithPerHeadPositions) {
  // Each KV head keeps a different sorted subset of 500 positions; queries continue after them.
  Case c = MakeCase(3, 120, 6, 2, 64, 5);
  at::Tensor p0 = std::get<0>(at::randperm(500).narrow(0, 0, 120).sort());
  at::Tensor p1 = std::get<0>(at::randperm(500).narrow(0, 0, 120).sort());
  c.k_pos = at::stack({p0, p1});
  c.q_pos = at::tensor({500, 501, 502}, at::kLong);
  EXPECT_LT(MaxError(c, at::kFloat, at::kFloat), 2e-5);
  // Queries inside the cached range see only the keys at or before their position.
  c.q_pos = at::tensor({100, 250, 499}, at::kLong);
  EXPECT_LT(MaxError(c, at::kFloat, at::kFloat), 2e-5);
}

// A decode batch: one query per request, each over its own cache (lengths from 1 to 900 keys, one
// cache compressed per head, storage with free slots), appended to row by row as Model::DecodeStep
// does. One call for the batch equals each request's own Attention call bit for bit, at one and
// four threads (few items: each request on its own with its keys split; many: one flat region).
TEST(FlashAttentionTest, DecodeBatchEqualsEachRequestAlone) {
  const int64_t hq = 9, hkv = 3, hd = 64;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (int threads : {1, 4}) {
      at::set_num_threads(threads);
      for (int64_t count : {1, 2, 5, 12}) {
        at::manual_seed(100 + count);
        std::vector<std::unique_ptr<KvCache>> caches;
        std::vector<KvCache*> ptrs;
        std::vector<int64_t> positions;
        for (int64_t i = 0; i < count; ++i) {
          const int64_t len = (i * 397) % 900 + 1;
          caches.push_back(std::make_unique<KvCache>(KvCacheShape{1, hkv, hd, dtype}));
          KvCache& cache = *caches.back();
          cache.set_headroom(40);
          at::Tensor pos = at::arange(len, at::kLong).unsqueeze(0).expand({hkv, len});
          if (i % 3 == 1 && len > 10) {
            // Compressed per head: each head keeps its own sorted subset of 2 x len positions.
            std::vector<at::Tensor> heads;
            for (int64_t h = 0; h < hkv; ++h) {
              heads.push_back(std::get<0>(at::randperm(2 * len).narrow(0, 0, len).sort()));
            }
            pos = at::stack(heads);
          }
          cache.Set(0, at::randn({hkv, len, hd}).to(dtype), at::randn({hkv, len, hd}).to(dtype),
                    pos.contiguous());
          positions.push_back(pos.max().item<int64_t>() + 1);
          // This step's key: appended as DecodeStep does (fp32 rows of a wider buffer).
          const at::Tensor qkv = at::randn({1, 2 * hkv * hd + 5});
          cache.Append(0, qkv.narrow(1, 0, hkv * hd).view({1, hkv, hd}),
                       qkv.narrow(1, hkv * hd, hkv * hd).view({1, hkv, hd}),
                       at::tensor({positions.back()}, at::kLong));
          ptrs.push_back(&cache);
        }
        const at::Tensor q = at::randn({count, hq, hd}).to(dtype);
        const at::Tensor pos = at::tensor(positions, at::kLong);
        const at::Tensor batch = DecodeAttention(q, pos, ptrs, 0, {});
        ASSERT_EQ(batch.sizes(), q.sizes());
        for (int64_t i = 0; i < count; ++i) {
          const KvCache& cache = *ptrs[static_cast<size_t>(i)];
          const at::Tensor alone = Attention(q.narrow(0, i, 1), cache.Keys(0), cache.Values(0),
                                             pos.narrow(0, i, 1), cache.Positions(0), {});
          EXPECT_TRUE(at::equal(batch.narrow(0, i, 1), alone))
              << dtype << " threads " << threads << " batch " << count << " request " << i;
          AttentionOptions torch;
          torch.kernel = AttentionKernel::kTorch;
          const at::Tensor ref =
              AttentionReference(q.narrow(0, i, 1).to(at::kFloat), cache.Keys(0).to(at::kFloat),
                                 cache.Values(0).to(at::kFloat), pos.narrow(0, i, 1),
                                 cache.Positions(0).contiguous(), torch);
          EXPECT_LT((batch.narrow(0, i, 1).to(at::kFloat) - ref).abs().max().item<double>(),
                    dtype == at::kFloat ? 2e-5 : 0.05);
        }
      }
    }
  }
}

// A row appended on the host (the decode step's fast path) holds what copy_ would have written,
// fp32 into an fp32 or a bf16 cache (rounded to nearest even).
TEST(FlashAttentionTest, HostAppendEqualsCopy) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    KvCache cache(KvCacheShape{1, 2, 64, dtype});
    const at::Tensor wide = at::randn({3, 2 * 64 + 7}) * 1000;
    const at::Tensor k = wide.narrow(1, 0, 128).view({3, 2, 64});
    const at::Tensor v = wide.narrow(1, 7, 128).view({3, 2, 64});
    cache.Append(0, k, v, at::tensor({4, 5, 9}, at::kLong));
    EXPECT_TRUE(at::equal(cache.Keys(0), k.transpose(0, 1).to(dtype)));
    EXPECT_TRUE(at::equal(cache.Values(0), v.transpose(0, 1).to(dtype)));
    EXPECT_TRUE(at::equal(cache.Positions(0)[1], at::tensor({4, 5, 9}, at::kLong)));
  }
}

TEST(FlashAttentionTest, Bf16AndMixedDtypes) {
  Case c = MakeCase(130, 130, 9, 3, 64, 6);
  // bf16 inputs are rounded (8 mantissa bits) before the kernel sees them; the kernel itself
  // computes in fp32, so the error is the inputs' rounding, not the kernel's.
  EXPECT_LT(MaxError(c, at::kBFloat16, at::kBFloat16), 0.05);
  EXPECT_LT(MaxError(c, at::kFloat, at::kBFloat16), 0.05);
}

TEST(FlashAttentionTest, StridedCacheViews) {
  // The KV cache hands out views [Hkv, size, hd] of [Hkv, capacity, hd] storage.
  Case c = MakeCase(20, 100, 9, 3, 64, 8);
  at::Tensor kstore = at::randn({3, 160, 64}), vstore = at::randn({3, 160, 64});
  kstore.narrow(1, 0, 100).copy_(c.k);
  vstore.narrow(1, 0, 100).copy_(c.v);
  const at::Tensor ref = AttentionReference(c.q, c.k, c.v, c.q_pos, c.k_pos, {});
  const at::Tensor out =
      Attention(c.q, kstore.narrow(1, 0, 100), vstore.narrow(1, 0, 100), c.q_pos, c.k_pos, {});
  EXPECT_LT((out - ref).abs().max().item<double>(), 2e-5);
}

TEST(FlashAttentionTest, StatisticsStillMatchWhenTheKernelRuns) {
  Case c = MakeCase(90, 90, 9, 3, 64, 9);
  AttentionStatsRequest r;
  r.window = 11;
  r.last_query = true;
  r.max_from_query = 70;
  AttentionStats fast, ref;
  Attention(c.q, c.k, c.v, c.q_pos, c.k_pos, {}, r, &fast);
  AttentionOptions torch_options;
  torch_options.kernel = AttentionKernel::kTorch;
  Attention(c.q, c.k, c.v, c.q_pos, c.k_pos, torch_options, r, &ref);
  EXPECT_LT((fast.window_sum - ref.window_sum).abs().max().item<double>(), 1e-5);
  EXPECT_LT((fast.last_query - ref.last_query).abs().max().item<double>(), 1e-6);
  EXPECT_LT((fast.max_prob - ref.max_prob).abs().max().item<double>(), 1e-6);
}

TEST(FlashAttentionTest, QueryThatSeesNoKeyIsAnError) {
  Case c = MakeCase(1, 10, 9, 3, 64, 10);
  c.k_pos = at::arange(100, 110, at::kLong);  // every key after the query
  c.q_pos = at::tensor({5}, at::kLong);
  EXPECT_THROW(Attention(c.q, c.k, c.v, c.q_pos, c.k_pos, {}), std::exception);
}

TEST(FlashAttentionTest, EveryInstructionSetLevelAgrees) {
  // Direct calls of each variant this CPU can run. The shapes cover both paths of the bf16
  // dot-product variant and of the AVX2 one (fp32 products): items with few rows (decode: one
  // query's GQA group of 3 or 7 rows, two queries of a 3-row group; keys in the vector lanes) and
  // the general one (rows in the lanes), with head dims 64 and 128, partial key tiles and a Λ mask.
  struct Shape {
    int64_t nq, nk, hq, hkv, hd, sink = 0, window = 0;
  };
  const Shape shapes[] = {{1, 700, 9, 3, 64},         {150, 150, 9, 3, 64},
                          {7, 300, 9, 3, 64},         {33, 129, 9, 3, 64},
                          {1, 1000, 14, 2, 64},       {2, 333, 9, 3, 64},
                          {1, 517, 16, 2, 128},       {1, 77, 9, 3, 64},
                          {1, 900, 9, 3, 64, 4, 100}, {3, 640, 14, 2, 64, 8, 129}};
  const int best = static_cast<int>(DetectedCpuIsa());
  for (int variant = 0; variant <= best + 1; ++variant) {
    // The last variant is AVX-512 with bf16 dot products (where the CPU has them).
    const int isa = std::min(variant, best);
    const bool dot = variant > best;
    if (dot && best != static_cast<int>(CpuIsa::kAvx512)) continue;
    for (const Shape& sh : shapes) {
      Case c = MakeCase(sh.nq, sh.nk, sh.hq, sh.hkv, sh.hd, 11 + sh.nq + sh.nk);
      c.options.sink = sh.sink;
      c.options.window = sh.window;
      at::Tensor q = c.q.to(at::kBFloat16), k = c.k.to(at::kBFloat16), v = c.v.to(at::kBFloat16);
      at::Tensor out = at::empty_like(q);
      cpu::FlashAttentionArgs a;
      a.q = q.data_ptr();
      a.q_type = cpu::ElemType::kBF16;
      a.q_stride_row = q.stride(0);
      a.q_stride_head = q.stride(1);
      a.k = k.data_ptr();
      a.v = v.data_ptr();
      a.kv_type = cpu::ElemType::kBF16;
      a.k_stride_head = a.v_stride_head = k.stride(0);
      a.k_stride_row = a.v_stride_row = k.stride(1);
      a.q_pos = c.q_pos.data_ptr<int64_t>();
      a.k_pos = c.k_pos.data_ptr<int64_t>();
      a.out = out.data_ptr();
      a.out_stride_row = out.stride(0);
      a.out_stride_head = out.stride(1);
      a.nq = sh.nq;
      a.nk = sh.nk;
      a.hq = sh.hq;
      a.hkv = sh.hkv;
      a.hd = sh.hd;
      a.scale = 1.0f / std::sqrt(static_cast<float>(sh.hd));
      a.sink = sh.sink;
      a.window = sh.window;
      cpu::FlashAttention(a, static_cast<CpuIsa>(isa), dot);
      const at::Tensor ref = AttentionReference(q, k, v, c.q_pos, c.k_pos, c.options);
      EXPECT_LT((out.to(at::kFloat) - ref.to(at::kFloat)).abs().max().item<double>(), 0.02)
          << CpuIsaName(static_cast<CpuIsa>(isa)) << (dot ? "+bf16dot" : "") << " nq " << sh.nq
          << " nk " << sh.nk << " hq " << sh.hq << " hkv " << sh.hkv << " hd " << sh.hd
          << " window " << sh.window;
    }
  }
}

}  // namespace
}  // namespace sift
