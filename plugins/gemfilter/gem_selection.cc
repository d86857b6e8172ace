#include "gem_selection.h"

#include <algorithm>

#include "scores/score_ops.h"
#include "sift/error.h"
#include "sift/host.h"

namespace sift::plugins {

std::vector<int64_t> GemFilterSelect(const at::Tensor& scores, int64_t question_begin,
                                     int64_t budget, int64_t kernel) {
  SIFT_CHECK(scores.dim() == 1, "GemFilter: scores must be 1-D, got ", scores.dim(), "-D");
  SIFT_CHECK(budget >= 1 && kernel >= 1, "GemFilter: budget and kernel must be >= 1");
  const int64_t n = scores.size(0);
  const int64_t qb = std::clamp<int64_t>(question_begin, 0, n);
  std::vector<int64_t> out;
  if (n <= budget) {
    for (int64_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  const int64_t from_context = std::max<int64_t>(0, budget - (n - qb));
  if (from_context > 0 && qb > 0) {
    const at::Tensor pooled = Pool1d(scores.to(at::kFloat), PoolKind::kAvg, kernel);
    // Top-k on the scores' device; only the chosen indices come to the host.
    out = HostInts(TopKSorted(pooled.narrow(0, 0, qb), from_context));
  }
  for (int64_t i = qb; i < n; ++i) out.push_back(i);
  return out;
}

}  // namespace sift::plugins
