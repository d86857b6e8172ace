#include "pyramidkv_stage.h"

#include <algorithm>

#include "pyramid_schedule.h"

namespace sift::plugins {

PyramidKvStage::PyramidKvStage(const StageParams& params)
    : SelectStageBase(params, Signal::kWindow) {
  ReadScoring(params, /*window=*/32, /*pooling=*/"max", /*kernel=*/7);
  beta_ = params.GetDouble("beta", 20.0, 1e-3, 1e6);
}

std::vector<int64_t> PyramidKvStage::LayerBudgets(int64_t num_layers, int64_t n_c,
                                                  int64_t budget) const {
  const int64_t w = std::min(window_, budget);
  if (budget >= n_c) return std::vector<int64_t>(num_layers, budget);
  std::vector<int64_t> out = PyramidPrefixBudgets(num_layers, budget - w, n_c - w, beta_);
  for (int64_t& b : out) b += w;
  return out;
}

at::Tensor PyramidKvStage::ChoosePrefix(int64_t layer, const at::Tensor& scores, int64_t p,
                                        int64_t keep, int64_t heads,
                                        const at::TensorOptions& index_options) const {
  return SelectTopK(scores, keep);
}

}  // namespace sift::plugins
