// StreamingLlmStage (streamingllm.so): StreamingLLM (Xiao et al. 2024) as a one-shot select
// after the prefill: every layer and KV head keeps the first `sink` tokens (attention sinks)
// and the most recent L - sink tokens of the span. Needs no attention statistics. Always kept:
// the sinks and the question span (select_stage_base.h step 3: L >= sink + question, so the
// recent part covers it); a prompt at or below the floor (128) is not compressed.
//
// Positions: by default kept entries keep their original positions (policy (a), as kvpress's
// StreamingLLMPress); the paper's own code re-applies RoPE at cache positions: set
// rerotate = true for that (keys are rotated once to 0..m-1 and decode continues at m).
//
// Parameters (besides budget / keep_ratio / query_aware / rerotate):
//   sink  int in [0, 1024], default 4   attention-sink tokens (StartRecentKVCache start_size=4)
#ifndef SIFT_PLUGINS_STREAMINGLLM_STREAMINGLLM_STAGE_H_
#define SIFT_PLUGINS_STREAMINGLLM_STREAMINGLLM_STAGE_H_

#include <algorithm>

#include "selection/select_stage_base.h"

namespace sift::plugins {

class StreamingLlmStage : public SelectStageBase {
 public:
  explicit StreamingLlmStage(const StageParams& params);
  StreamingLlmStage(const StageParams& params, const Model& model) : StreamingLlmStage(params) {}

 protected:
  int64_t KeptWindow(int64_t layer_budget) const override {
    return std::max<int64_t>(0, layer_budget - sink_);
  }
  int64_t Sinks() const override { return sink_; }
  at::Tensor ChoosePrefix(int64_t layer, const at::Tensor& scores, int64_t p, int64_t keep,
                          int64_t heads, const at::TensorOptions& index_options) const override;

 private:
  int64_t sink_;
};

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_STREAMINGLLM_STREAMINGLLM_STAGE_H_
