// ChunkKvStage (chunkkv.so): ChunkKV (paper §3.2.1, Algorithm 1; the chunk selection itself is
// chunk_selection.h).
//
// Observation scores A = fp32 softmax rows of the last `window` queries (causal inside the
// window) summed over those queries, aggregated over each KV head's query group (`gqa_reduce`),
// optionally pooled (`pooling`; the paper does not pool: default none). The tokens before the
// window are cut into chunks of `chunk_size` (the last chunk of the span may be shorter); a
// chunk's score is the sum of its tokens' scores (`chunk_score`); the best chunks are kept,
// in original order, until they cover L - window tokens, the positionally last kept chunk
// trimmed to fit; the observation window replaces the last `window` slots of the budget
// (Algorithm 1 lines 16-17), so exactly L entries remain. The window is excluded from chunk
// scoring so no token is kept twice. Always kept: the observation window and the question span
// (when the question is longer than the window, the chunks fill L - question; select_stage_base.h
// step 3); a prompt at or below the floor (128) is not compressed.
//
// Parameters (besides budget / keep_ratio / query_aware / rerotate):
//   chunk_size      int in [1, 4096], default 10   (paper: 10 for every model)
//   window          int in [1, 8192], default 32   (paper: w in {4, 8, 16, 32})
//   shared_indices  bool, default false   false: Algorithm 1 per KV head (the paper writes it for
//                   one head's K, and App. B.2.1 analyses "the indices of the first head", so
//                   heads differ); true: one index set for all heads from the scores summed over
//                   KV heads (kvpress ChunkKVPress)
//   chunk_score     sum | mean, default sum (paper: sum; kvpress: mean)
//   pooling         none | avg | max, default none;  kernel default 7;  gqa_reduce default mean
#ifndef SIFT_PLUGINS_CHUNKKV_CHUNKKV_STAGE_H_
#define SIFT_PLUGINS_CHUNKKV_CHUNKKV_STAGE_H_

#include "chunk_selection.h"
#include "selection/select_stage_base.h"

namespace sift::plugins {

class ChunkKvStage : public SelectStageBase {
 public:
  explicit ChunkKvStage(const StageParams& params);
  ChunkKvStage(const StageParams& params, const Model& model) : ChunkKvStage(params) {}

 protected:
  int64_t KeptWindow(int64_t layer_budget) const override { return window_; }
  at::Tensor ChoosePrefix(int64_t layer, const at::Tensor& scores, int64_t p, int64_t keep,
                          int64_t heads, const at::TensorOptions& index_options) const override;

 private:
  int64_t chunk_size_;
  bool shared_indices_;
  ChunkScore chunk_score_;
};

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_CHUNKKV_CHUNKKV_STAGE_H_
