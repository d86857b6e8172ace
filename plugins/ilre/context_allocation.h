// ILRe's context allocation (ILRe Algorithm 1, "multi-pooling kernels").
//
// Input: A^C, the retrieval scores of the context with the sink part removed ([m] fp32).
// For every max-pool kernel m_i (size = stride = m_i; a partial last block is pooled too) and
// every average-pool kernel n_j applied on the max-pooled sequence (stride 1, same length,
// zero padding counted, score_ops.h Pool1d), the top K_m = B / m_i + 1 pooled positions are
// ranked (descending score, ties to the lower position) and mapped back to indices of A^C; the
// combination then adds its share B_c of not-yet-allocated indices, walking its ranked list and
// skipping indices already taken ("next-best candidate"). Combinations run in order m_1 n_1,
// m_1 n_2, ..., m_NM n_NA.
//
// Conventions that change results (all options):
//   - map_back: kBlock (default) maps pooled position p to the whole block [p·m, p·m + m) in
//     order; kArgmax maps it to the block's highest-scoring index only.
//   - the budget split: B_c = floor(B / (N_M·N_A)) for every combination when exact_budget is
//     false (the paper's formula; up to N_M·N_A − 1 slots of B stay unused); with exact_budget
//     (default) the first B mod (N_M·N_A) combinations take one more, so exactly B are chosen.
// If a combination's candidates run out, the rest of its share stays open; after all
// combinations, open slots (exact_budget only) go to the best remaining raw scores, so the result
// always has min(B, m) indices.
//
// THREADING: pure function.
// ERRORS:    throws sift::Error for non-1-D scores, an empty kernel list, or a kernel < 1.
#ifndef SIFT_PLUGINS_ILRE_CONTEXT_ALLOCATION_H_
#define SIFT_PLUGINS_ILRE_CONTEXT_ALLOCATION_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sift::plugins {

enum class MapBack { kBlock, kArgmax };
// "block" | "argmax"; throws sift::Error otherwise.
MapBack ParseMapBack(const std::string& name);

struct AllocationOptions {
  std::vector<int64_t> max_kernels = {2, 4, 8};
  std::vector<int64_t> avg_kernels = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  int64_t budget = 1024;  // B: context tokens chosen besides the sink
  MapBack map_back = MapBack::kBlock;
  bool exact_budget = true;
};

// Returns indices into scores, sorted ascending, without duplicates: min(B, m) of them with
// exact_budget (at most B without).
std::vector<int64_t> AllocateContext(const at::Tensor& scores, const AllocationOptions& options);

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_ILRE_CONTEXT_ALLOCATION_H_
