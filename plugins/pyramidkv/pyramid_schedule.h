// PyramidKV's budget schedule (Cai et al. 2024): the method's own math, used by
// PyramidKvStage::LayerBudgets (pyramidkv_stage.h). The paper's linear shrink with depth, with
// KVCache-Factory PyramidKVCluster's min / max bounds, but computed exactly: the smallest budget
// min is kept unrounded and the floors' rounding remainder goes to the lowest layers, so the
// layers sum to exactly num_layers * per_layer. KVCache-Factory floors min and the step (integer
// division) and does not redistribute, so its total misses the uniform one by the rounding: on 24
// layers at a budget of 399 (window 32) it keeps 8,904 prefix entries, this schedule 8,808 =
// 24 * 367. The exact sum is meant: PyramidKV is compared with the uniform methods at the same
// total cache size, which the paper states and the floors break.
//
// A pure function (no model, no cache), unit-tested in tests/selection/selection_ops_test.cc.
// Misuse (no layers, negative sizes, beta <= 0) throws sift::Error.
#ifndef SIFT_PLUGINS_PYRAMIDKV_PYRAMID_SCHEDULE_H_
#define SIFT_PLUGINS_PYRAMIDKV_PYRAMID_SCHEDULE_H_

#include <cstdint>
#include <vector>

namespace sift::plugins {

// The PyramidKV schedule (β = `beta`): prefix budgets per layer (window excluded) that shrink
// linearly with depth and sum to exactly num_layers * per_layer. With P = `prefix_len` (tokens
// available before the window):
//   min = per_layer / beta, max = 2 per_layer - min; if max > P: max = P, min = 2 per_layer - max.
//   layer l gets max - l (max - min) / (L - 1), floored; the rounding remainder goes one token
//   each to the lowest layers that are below P. Layer 0 (the first, nearest the embeddings) gets
//   the largest budget, the last layer the smallest (the pyramid: wide at the bottom).
// per_layer >= P means no compression: every layer gets P. num_layers == 1 gets per_layer.
std::vector<int64_t> PyramidPrefixBudgets(int64_t num_layers, int64_t per_layer, int64_t prefix_len,
                                          double beta);

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_PYRAMIDKV_PYRAMID_SCHEDULE_H_
