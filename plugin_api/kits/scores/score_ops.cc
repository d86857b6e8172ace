#include "scores/score_ops.h"

#include <algorithm>

#include "sift/error.h"

namespace sift::plugins {

PoolKind ParsePoolKind(const std::string& name, const std::string& what) {
  if (name == "none") return PoolKind::kNone;
  if (name == "avg") return PoolKind::kAvg;
  if (name == "max") return PoolKind::kMax;
  throw Error(what + ": expected \"none\", \"avg\" or \"max\", got \"" + name + "\"");
}

Reduce ParseReduce(const std::string& name, const std::string& what) {
  if (name == "mean") return Reduce::kMean;
  if (name == "max") return Reduce::kMax;
  if (name == "sum") return Reduce::kSum;
  throw Error(what + ": expected \"mean\", \"max\" or \"sum\", got \"" + name + "\"");
}

at::Tensor AggregateGqa(const at::Tensor& scores, int64_t num_kv_heads, Reduce reduce) {
  SIFT_CHECK(scores.dim() == 2, "AggregateGqa: scores must be [Hq, n]");
  const int64_t hq = scores.size(0);
  SIFT_CHECK(num_kv_heads > 0 && hq % num_kv_heads == 0,
             "AggregateGqa: " + std::to_string(hq) + " query heads are not a multiple of " +
                 std::to_string(num_kv_heads) + " KV heads");
  at::Tensor grouped = scores.to(at::kFloat).reshape({num_kv_heads, hq / num_kv_heads, -1});
  switch (reduce) {
    case Reduce::kMean:
      return grouped.mean(1);
    case Reduce::kMax:
      return std::get<0>(grouped.max(1));
    case Reduce::kSum:
      return grouped.sum(1);
  }
  return grouped.mean(1);
}

at::Tensor Pool1d(const at::Tensor& scores, PoolKind kind, int64_t kernel) {
  SIFT_CHECK(kernel >= 1, "Pool1d: kernel must be >= 1, got " + std::to_string(kernel));
  SIFT_CHECK(scores.dim() >= 1, "Pool1d: scores must have at least one axis");
  at::Tensor x = scores.to(at::kFloat);
  if (kind == PoolKind::kNone || kernel == 1) return x;
  const int64_t n = x.size(-1);
  // pool1d wants [batch, channels, n].
  at::Tensor flat = x.reshape({1, -1, n});
  at::Tensor pooled;
  if (kind == PoolKind::kAvg) {
    pooled = at::avg_pool1d(flat, {kernel}, {1}, {kernel / 2}, /*ceil_mode=*/false,
                            /*count_include_pad=*/true);
  } else {
    pooled = at::max_pool1d(flat, {kernel}, {1}, {kernel / 2});
  }
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  return pooled.narrow(-1, 0, n).reshape(shape);
}

at::Tensor TopKSorted(const at::Tensor& scores, int64_t k) {
  SIFT_CHECK(scores.dim() >= 1, "TopKSorted: scores must have at least one axis");
  const int64_t n = scores.size(-1);
  k = std::clamp<int64_t>(k, 0, n);
  if (k == n) {
    std::vector<int64_t> shape(scores.sizes().begin(), scores.sizes().end());
    return at::arange(n, scores.options().dtype(at::kLong)).expand(shape).contiguous();
  }
  // Stable descending sort makes ties go to the lower index, deterministically.
  at::Tensor order = std::get<1>(scores.to(at::kFloat).sort(/*stable=*/true, -1, true));
  return std::get<0>(order.narrow(-1, 0, k).sort(-1));
}

}  // namespace sift::plugins
