// ChunkKV's chunk selection (ChunkKV paper §3.2.1, Algorithm 1): the method's own math, used by
// ChunkKvStage (chunkkv_stage.h) on each layer's prefix scores.
//
// A pure function (no model, no cache), unit-tested on hand-built scores
// (tests/selection/selection_ops_test.cc). Scores are float tensors [H, n] (one row per KV head)
// on any device; indices are int64 on the scores' device, sorted ascending (original order).
// Misuse (wrong rank, chunk < 1, keep < 0) throws sift::Error.
#ifndef SIFT_PLUGINS_CHUNKKV_CHUNK_SELECTION_H_
#define SIFT_PLUGINS_CHUNKKV_CHUNK_SELECTION_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

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

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_CHUNKKV_CHUNK_SELECTION_H_
