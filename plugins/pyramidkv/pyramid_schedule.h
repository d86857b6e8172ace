// PyramidKV's budget schedule (Cai et al. 2024; the KVCache-Factory PyramidKVCluster schedule):
// the method's own math, used by PyramidKvStage::LayerBudgets (pyramidkv_stage.h).
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
//   each to the lowest layers that are below P.
// per_layer >= P means no compression: every layer gets P. num_layers == 1 gets per_layer.
std::vector<int64_t> PyramidPrefixBudgets(int64_t num_layers, int64_t per_layer, int64_t prefix_len,
                                          double beta);

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_PYRAMIDKV_PYRAMID_SCHEDULE_H_
