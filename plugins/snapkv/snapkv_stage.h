// SnapKvStage (snapkv.so): SnapKV (Li et al. 2024) as a one-shot select after the prefill.
//
// Score of prefix token j = sum over the last `window` queries of their fp32 softmax rows
// (causal inside the window; collected by prefill_full), pooled along the tokens per query head
// (`pooling`, `kernel`; padding kernel/2, stride 1), aggregated over each KV head's query group
// (`gqa_reduce`). Per KV head the top (L - window) prefix tokens are kept in original order,
// plus the window itself (always kept). L = budget or keep_ratio (select_stage_base.h). Always
// kept: the observation window and the question span (select_stage_base.h step 3); a prompt at
// or below the floor (128) is not compressed.
//
// Parameters (besides budget / keep_ratio / query_aware / rerotate):
//   window      int in [1, 8192], default 32   observation window (SnapKV w = 32)
//   pooling     none | avg | max, default max  (SnapKV's LongBench configs: maxpool, kernel 7)
//   kernel      int in [1, 1023], default 7
//   gqa_reduce  mean | max | sum, default mean (per-KV-head selection, kvpress convention: the
//               original repeats KV heads and selects per query head, which this cache layout
//               does not store)
#ifndef SIFT_PLUGINS_SNAPKV_SNAPKV_STAGE_H_
#define SIFT_PLUGINS_SNAPKV_SNAPKV_STAGE_H_

#include "selection/select_stage_base.h"

namespace sift::plugins {

class SnapKvStage : public SelectStageBase {
 public:
  explicit SnapKvStage(const StageParams& params);
  SnapKvStage(const StageParams& params, const Model& model) : SnapKvStage(params) {}

 protected:
  int64_t KeptWindow(int64_t layer_budget) const override { return window_; }
  at::Tensor ChoosePrefix(int64_t layer, const at::Tensor& scores, int64_t p, int64_t keep,
                          int64_t heads, const at::TensorOptions& index_options) const override;
};

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_SNAPKV_SNAPKV_STAGE_H_
