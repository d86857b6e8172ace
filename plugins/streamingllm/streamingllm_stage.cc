#include "streamingllm_stage.h"

namespace sift::plugins {

StreamingLlmStage::StreamingLlmStage(const StageParams& params)
    : SelectStageBase(params, Signal::kNone), sink_(params.GetInt("sink", 4, 0, 1024)) {}

at::Tensor StreamingLlmStage::ChoosePrefix(int64_t layer, const at::Tensor& scores, int64_t p,
                                           int64_t keep, int64_t heads,
                                           const at::TensorOptions& index_options) const {
  return at::arange(std::min(keep, p), index_options);  // the sinks, shared by every head
}

}  // namespace sift::plugins
