// Pure index arithmetic shared by the select plugins (snapkv, streamingllm, h2o, pyramidkv,
// chunkkv) and the reuse plugin (layerwise): chunk selection (ChunkKV Algorithm 1), the
// PyramidKV budget schedule, the layer-wise reuse grouping (ChunkKV Algorithm 2) and the budget
// of a request.
//
// Every function is pure (no model, no cache) so the edge cases are unit-tested on hand-built
// scores. Scores are CPU float tensors [H, n] (one row per KV head); indices are int64, sorted
// ascending (original order). Misuse (wrong rank, negative sizes) throws sift::Error.
#ifndef SIFT_KITS_SELECTION_SELECTION_OPS_H_
#define SIFT_KITS_SELECTION_SELECTION_OPS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sift::plugins {

// How a chunk's score is formed from its tokens' scores: the paper's sum (Algorithm 1 line 8)
// or kvpress's mean (differs only for a partial trailing chunk).
enum class ChunkScore { kSum, kMean };
ChunkScore ParseChunkScore(const std::string& name);

// ChunkKV top-k chunk selection over one span of n tokens, per row of `scores` [H, n]:
// the span is cut into ceil(n / chunk) chunks of `chunk` tokens (the last one may be shorter),
// each chunk is scored (sum or mean of its tokens), chunks are taken in descending score order
// (ties: lower index first) until they cover at least `keep` tokens, their token indices are put
// in original order, and the result is cut to the first `keep` of them (so the positionally last
// selected chunk is trimmed to fit, as Algorithm 1's K'[0 : L_max - w] does).
// keep >= n returns every index. Returns [H, min(keep, n)].
at::Tensor SelectChunks(const at::Tensor& scores, int64_t chunk, int64_t keep, ChunkScore how);

// Top-`keep` tokens per row, original order ([H, min(keep, n)]); wraps TopKSorted.
at::Tensor SelectTopK(const at::Tensor& scores, int64_t keep);

// The PyramidKV schedule (KVCache-Factory PyramidKVCluster, β = `beta`): prefix budgets per
// layer (window excluded) that shrink linearly with depth and sum to exactly
// num_layers * per_layer. With P = `prefix_len` (tokens available before the window):
//   min = per_layer / beta, max = 2 per_layer - min; if max > P: max = P, min = 2 per_layer - max.
//   layer l gets max - l (max - min) / (L - 1), floored; the rounding remainder goes one token
//   each to the lowest layers that are below P.
// per_layer >= P means no compression: every layer gets P. num_layers == 1 gets per_layer.
std::vector<int64_t> PyramidPrefixBudgets(int64_t num_layers, int64_t per_layer, int64_t prefix_len,
                                          double beta);

// Algorithm 2: the layer whose indices `layer` uses (layer itself when layer % n_reuse == 0).
int64_t ReuseLeader(int64_t layer, int64_t n_reuse);

// Budget of one request: either an absolute number of KV entries per layer and head (the
// window included) or a fraction of the compressible span that is kept (the ChunkKV paper's
// "KV size compression ratio 10%" = keep_ratio 0.1).
struct Budget {
  int64_t tokens = 0;       // > 0: absolute
  double keep_ratio = 0.1;  // used when tokens == 0
  // Entries kept out of a span of n: tokens, or floor(keep_ratio * n), at least 1; never more
  // than n.
  int64_t Resolve(int64_t n) const;
};

}  // namespace sift::plugins

#endif  // SIFT_KITS_SELECTION_SELECTION_OPS_H_
