#include "pyramid_schedule.h"

#include <algorithm>
#include <cmath>

#include "sift/error.h"

namespace sift::plugins {

std::vector<int64_t> PyramidPrefixBudgets(int64_t num_layers, int64_t per_layer, int64_t prefix_len,
                                          double beta) {
  SIFT_CHECK(num_layers >= 1 && per_layer >= 0 && prefix_len >= 0 && beta > 0,
             "PyramidPrefixBudgets: bad arguments");
  if (per_layer >= prefix_len) return std::vector<int64_t>(num_layers, prefix_len);
  if (num_layers == 1) return {per_layer};
  const double total = static_cast<double>(per_layer);
  double min_num = total / beta;
  double max_num = 2 * total - min_num;
  if (max_num > static_cast<double>(prefix_len)) {
    max_num = static_cast<double>(prefix_len);
    min_num = 2 * total - max_num;
  }
  const double step = (max_num - min_num) / static_cast<double>(num_layers - 1);
  std::vector<int64_t> out(num_layers);
  int64_t sum = 0;
  for (int64_t l = 0; l < num_layers; ++l) {
    const double b = max_num - step * static_cast<double>(l);
    out[l] = std::clamp<int64_t>(static_cast<int64_t>(std::floor(b + 1e-9)), 0, prefix_len);
    sum += out[l];
  }
  int64_t rest = num_layers * per_layer - sum;
  // Floors only lose tokens; hand them back to the lowest layers, never above prefix_len.
  while (rest > 0) {
    bool gave = false;
    for (int64_t l = 0; l < num_layers && rest > 0; ++l) {
      if (out[l] < prefix_len) {
        ++out[l];
        --rest;
        gave = true;
      }
    }
    if (!gave) break;
  }
  return out;
}

}  // namespace sift::plugins
