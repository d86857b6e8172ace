// PyramidKvStage (pyramidkv.so): PyramidKV (Cai et al. 2024): SnapKV scoring with per-layer
// budgets that shrink linearly with depth (pyramid_schedule.h PyramidPrefixBudgets: the paper's
// schedule with KVCache-Factory's min / max bounds, but exact where KVCache-Factory's integer
// floors change the total): with C = L the average per-layer budget and w the window, layer l keeps
// b_l prefix tokens + the window, b_0 > ... > b_{L-1} (layer 0 keeps the most),
// b_{L-1} ~ (C - w) / beta, and sum_l b_l = num_layers * (C - w) exactly (rounding remainder
// to the lowest layers), so the total cache equals a uniform budget of C per layer.
// The floor (select_stage_base.h) applies to C: a prompt at or below it is not compressed and
// C is at least the floor; each layer keeps at least the hard minimum (the window and the
// question span), so the smallest layers may keep more than the schedule when the question is
// longer than the window.
//
// Parameters (besides budget / keep_ratio / query_aware / rerotate):
//   window      int, default 32        observation window, always kept (as snapkv)
//   pooling     none | avg | max, default max;  kernel int, default 7;  gqa_reduce default mean
//   beta        float > 0, default 20  PyramidKV's β (top/bottom budget ratio parameter)
#ifndef SIFT_PLUGINS_PYRAMIDKV_PYRAMIDKV_STAGE_H_
#define SIFT_PLUGINS_PYRAMIDKV_PYRAMIDKV_STAGE_H_

#include <vector>

#include "selection/select_stage_base.h"

namespace sift::plugins {

class PyramidKvStage : public SelectStageBase {
 public:
  explicit PyramidKvStage(const StageParams& params);
  PyramidKvStage(const StageParams& params, const Model& model) : PyramidKvStage(params) {}

  std::vector<int64_t> LayerBudgets(int64_t num_layers, int64_t n_c, int64_t budget) const override;

 protected:
  int64_t KeptWindow(int64_t layer_budget) const override { return window_; }
  at::Tensor ChoosePrefix(int64_t layer, const at::Tensor& scores, int64_t p, int64_t keep,
                          int64_t heads, const at::TensorOptions& index_options) const override;

 private:
  double beta_;
};

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_PYRAMIDKV_PYRAMIDKV_STAGE_H_
