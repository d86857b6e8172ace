// The Λ mask (sink + window) of the blocked attention against the dense reference, including
// the case the streaming prefill relies on: keys trimmed to sink + window give the same rows.
#include <gtest/gtest.h>

#include "sift/attention.h"

namespace sift {
namespace {

TEST(LambdaAttention, MatchesDenseReferenceAndTrimmedKeys) {
  at::manual_seed(11);
  const int64_t n = 40, hq = 6, hkv = 2, hd = 8;
  const at::Tensor q = at::randn({n, hq, hd});
  const at::Tensor k = at::randn({hkv, n, hd});
  const at::Tensor v = at::randn({hkv, n, hd});
  const at::Tensor pos = at::arange(n, at::kLong);
  AttentionOptions o;
  o.block_size = 7;
  o.block_bytes = 0;  // exactly block_size rows
  o.sink = 2;
  o.window = 5;
  const at::Tensor blocked = Attention(q, k, v, pos, pos, o);
  const at::Tensor dense = AttentionReference(q, k, v, pos, pos, o);
  EXPECT_TRUE(at::allclose(blocked, dense, 1e-5, 1e-5));
  // The last 8 queries against only the keys they can see (sink 0..1 and positions >= 32 - 4).
  const at::Tensor keep = at::cat({at::arange(2, at::kLong), at::arange(28, n, at::kLong)});
  const at::Tensor trimmed = Attention(q.narrow(0, 32, 8), k.index_select(1, keep),
                                       v.index_select(1, keep), pos.narrow(0, 32, 8), keep, o);
  EXPECT_TRUE(at::allclose(trimmed, dense.narrow(0, 32, 8), 1e-5, 1e-5));
  // And the mask matters: without it the rows differ.
  const at::Tensor causal = AttentionReference(q, k, v, pos, pos, AttentionOptions());
  EXPECT_FALSE(at::allclose(causal.narrow(0, 32, 8), dense.narrow(0, 32, 8), 1e-3, 1e-3));
}

}  // namespace
}  // namespace sift
