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

int64_t ApplyFloor(int64_t n, int64_t budget, int64_t floor, int64_t hard_minimum) {
  SIFT_CHECK(n >= 0 && budget >= 0 && floor >= 0 && hard_minimum >= 0,
             "ApplyFloor: negative size (n ", n, ", budget ", budget, ", floor ", floor,
             ", hard minimum ", hard_minimum, ")");
  return std::min(n, std::max({budget, floor, hard_minimum}));
}

}  // namespace sift::plugins
