#include "snapkv_stage.h"

namespace sift::plugins {

SnapKvStage::SnapKvStage(const StageParams& params) : SelectStageBase(params, Signal::kWindow) {
  ReadScoring(params, /*window=*/32, /*pooling=*/"max", /*kernel=*/7);
}

at::Tensor SnapKvStage::ChoosePrefix(int64_t layer, const at::Tensor& scores, int64_t p,
                                     int64_t keep, int64_t heads,
                                     const at::TensorOptions& index_options) const {
  return SelectTopK(scores, keep);
}

}  // namespace sift::plugins
