// SDK kit sift_kit_selection (plugin_api/kits/selection), linked by the select plugins and
// the reuse plugin (layerwise).
//
// The index arithmetic every select plugin (snapkv, streamingllm, h2o, pyramidkv, chunkkv) shares:
// the budget of a request and top-k in original order. The methods' own arithmetic lives in their
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

}  // namespace sift::plugins

#endif  // SIFT_KITS_SELECTION_SELECTION_OPS_H_
