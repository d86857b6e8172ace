#include "context_allocation.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "scores/score_ops.h"
#include "sift/error.h"
#include "sift/host.h"

namespace sift::plugins {
namespace {

// The values of a CPU float tensor (the scores brought over with ToHost, and what is computed
// from them).
std::vector<float> Values(const at::Tensor& cpu) {
  const at::Tensor c = cpu.contiguous();
  const float* p = c.data_ptr<float>();  // host: a CPU tensor (ToHost'd scores)
  return std::vector<float>(p, p + c.numel());
}

// Positions of `values` by descending value, ties to the lower position; the first k.
std::vector<int64_t> Ranked(const std::vector<float>& values, int64_t k) {
  const float* p = values.data();
  std::vector<int64_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  k = std::min<int64_t>(k, static_cast<int64_t>(order.size()));
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [p](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  order.resize(k);
  return order;
}

}  // namespace

MapBack ParseMapBack(const std::string& name) {
  if (name == "block") return MapBack::kBlock;
  if (name == "argmax") return MapBack::kArgmax;
  throw Error("map_back: expected \"block\" or \"argmax\", got \"" + name + "\"");
}

std::vector<int64_t> AllocateContext(const at::Tensor& scores, const AllocationOptions& options) {
  SIFT_CHECK(scores.dim() == 1, "ILRe allocation: scores must be 1-D, got ", scores.dim(), "-D");
  SIFT_CHECK(!options.max_kernels.empty() && !options.avg_kernels.empty(),
             "ILRe allocation: empty kernel list");
  for (int64_t k : options.max_kernels) SIFT_CHECK(k >= 1, "ILRe allocation: max kernel ", k);
  for (int64_t k : options.avg_kernels) SIFT_CHECK(k >= 1, "ILRe allocation: avg kernel ", k);
  const int64_t m = scores.size(0);
  const int64_t budget = std::max<int64_t>(0, options.budget);
  std::vector<int64_t> all(m);
  std::iota(all.begin(), all.end(), 0);
  if (m <= budget) return all;

  // The allocation is a short sequential pass over m scores: it runs on the host, on one copy.
  const at::Tensor a = ToHost(scores.to(at::kFloat));
  const std::vector<float> raw = Values(a);
  const int64_t combos =
      static_cast<int64_t>(options.max_kernels.size() * options.avg_kernels.size());
  std::vector<char> taken(m, 0);
  int64_t chosen = 0, combo = 0;
  for (int64_t mk : options.max_kernels) {
    const int64_t k_m = budget / mk + 1;
    const int64_t blocks = (m + mk - 1) / mk;
    // Block max with stride = size; the partial last block is padded with -inf.
    at::Tensor padded =
        at::full({blocks * mk}, -std::numeric_limits<float>::infinity(), a.options());
    padded.narrow(0, 0, m).copy_(a);
    const at::Tensor maxed = std::get<0>(padded.view({blocks, mk}).max(1));
    for (int64_t ak : options.avg_kernels) {
      const int64_t share = options.exact_budget
                                ? (combo + 1) * budget / combos - combo * budget / combos
                                : budget / combos;
      ++combo;
      const std::vector<float> pooled = Values(Pool1d(maxed, PoolKind::kAvg, ak));
      int64_t added = 0;
      for (int64_t block : Ranked(pooled, k_m)) {
        if (added >= share) break;
        const int64_t b0 = block * mk, b1 = std::min(m, b0 + mk);
        if (options.map_back == MapBack::kArgmax) {
          const int64_t best = std::max_element(raw.begin() + b0, raw.begin() + b1) - raw.begin();
          if (!taken[best]) taken[best] = 1, ++added;
          continue;
        }
        for (int64_t i = b0; i < b1 && added < share; ++i) {
          if (!taken[i]) taken[i] = 1, ++added;
        }
      }
      chosen += added;
    }
  }
  if (options.exact_budget && chosen < budget) {
    for (int64_t i : Ranked(raw, m)) {
      if (chosen >= budget) break;
      if (!taken[i]) taken[i] = 1, ++chosen;
    }
  }
  std::vector<int64_t> out;
  out.reserve(chosen);
  for (int64_t i = 0; i < m; ++i) {
    if (taken[i]) out.push_back(i);
  }
  return out;
}

}  // namespace sift::plugins
