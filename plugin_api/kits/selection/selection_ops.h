// SDK kit sift_kit_selection (plugin_api/kits/selection), linked by the select plugins and
// the reuse plugin (layerwise).
//
// The index arithmetic every select plugin (snapkv, streamingllm, h2o, pyramidkv, chunkkv) shares:
// the budget of a request, the compression floor (also used by the filters gemfilter and ilre and
// by prefill_skip) and top-k in original order. The methods' own arithmetic lives in their
// plugins: ChunkKV's chunk selection in plugins/chunkkv/chunk_selection.h, PyramidKV's schedule in
// plugins/pyramidkv/pyramid_schedule.h, the layer-wise reuse groups in
// plugins/layerwise/layerwise_stage.h.
//
// Every function is pure (no model, no cache) so the edge cases are unit-tested on hand-built
// scores. Scores are float tensors [H, n] (one row per KV head); indices are int64, sorted
// ascending (original order). Misuse (wrong rank, negative sizes) throws sift::Error.
#ifndef SIFT_KITS_SELECTION_SELECTION_OPS_H_
#define SIFT_KITS_SELECTION_SELECTION_OPS_H_

#include <ATen/ATen.h>

#include <cstdint>

namespace sift::plugins {

// Top-`keep` tokens per row, original order ([H, min(keep, n)]); wraps TopKSorted.
at::Tensor SelectTopK(const at::Tensor& scores, int64_t keep);

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

// The compression floor (docs/pipelines.md "The compression floor"): a stage never compresses a
// span of at most `floor` entries, and above it never keeps fewer than `floor`, whatever
// keep_ratio or budget say. Default 128: the smallest absolute budget the SnapKV, PyramidKV,
// GemFilter and ILRe papers evaluate, below the smallest budget of the shipped accuracy tables
// (docs/results/methods.md: keep_ratio 0.1 of 2K = 204; models.md: 10 % of 4K = 409), so those
// results are unchanged. Every stage reads it as its `floor` parameter (int >= 0); whatever the
// pipeline file or a request sets, the floor in force is at least the stage's hard minimum: the
// entries it always keeps (sinks, question span, observation window), so `floor = 0` means "the
// hard minimum only".
inline constexpr int64_t kDefaultFloor = 128;
inline constexpr int64_t kMaxFloor = int64_t{1} << 24;

// Entries kept out of a span of n when the stage asks for `budget` and always keeps
// `hard_minimum` of them: min(n, max(budget, floor, hard_minimum)); n (nothing evicted) when n is
// at or below max(floor, hard_minimum). Negative arguments throw sift::Error.
int64_t ApplyFloor(int64_t n, int64_t budget, int64_t floor, int64_t hard_minimum);

}  // namespace sift::plugins

#endif  // SIFT_KITS_SELECTION_SELECTION_OPS_H_
