#include "h2o_stage.h"

namespace sift::plugins {

H2oStage::H2oStage(const StageParams& params)
    : SelectStageBase(params, Signal::kColumnSum),
      recent_ratio_(params.GetDouble("recent_ratio", 0.5, 0.0, 1.0)) {
  ReadScoring(params, /*window=*/0, /*pooling=*/"none", /*kernel=*/7);
}

at::Tensor H2oStage::ChoosePrefix(int64_t layer, const at::Tensor& scores, int64_t p, int64_t keep,
                                  int64_t heads, const at::TensorOptions& index_options) const {
  return SelectTopK(scores, keep);
}

}  // namespace sift::plugins
