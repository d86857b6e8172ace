#include "selection/selection_ops.h"

#include <algorithm>
#include <cmath>

#include "scores/score_ops.h"
#include "sift/error.h"

namespace sift::plugins {

at::Tensor SelectTopK(const at::Tensor& scores, int64_t keep) {
  SIFT_CHECK(scores.dim() == 2, "SelectTopK: scores must be [H, n]");
  return TopKSorted(scores, keep);
}

int64_t Budget::Resolve(int64_t n) const {
  if (n <= 0) return 0;
  int64_t k =
      tokens > 0 ? tokens : static_cast<int64_t>(std::floor(keep_ratio * static_cast<double>(n)));
  return std::clamp<int64_t>(k, 1, n);
}

}  // namespace sift::plugins
