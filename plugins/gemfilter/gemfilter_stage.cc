#include "gemfilter_stage.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "filter/replace_prompt.h"
#include "gem_selection.h"
#include "selection/selection_ops.h"

namespace sift::plugins {

GemFilterStage::GemFilterStage(const StageParams& params, const Model& model)
    : layer_(params.GetInt("layer", 13, 0, model.config().num_layers - 1)),
      topk_(params.GetInt("topk", 1024, 1, int64_t{1} << 20)),
      kernel_(params.GetInt("kernel", 5, 1, 1024)),
      softmax_(params.GetString("score", "logits", {"logits", "softmax"}) == "softmax"),
      floor_(params.GetInt("floor", kDefaultFloor, 0, kMaxFloor)) {}

Status GemFilterStage::Plan(const Model& model, RequestPlan& plan) const {
  AttentionStatsRequest& r = plan.stats[layer_];
  if (softmax_) {
    r.last_query = true;
  } else {
    r.last_query_logit_sum = true;
  }
  return Status::Ok();
}

Status GemFilterStage::Run(const Model& model, RequestState& state, StageContext& context) {
  auto it = state.layer_stats.find(layer_);
  const at::Tensor* signal = nullptr;
  if (it != state.layer_stats.end()) {
    signal = softmax_ ? &it->second.last_query : &it->second.last_query_logit_sum;
  }
  if (signal == nullptr || !signal->defined()) {
    return Status(StatusCode::kFailedPrecondition, "no_scores",
                  "gemfilter needs the last query's scores at layer " + std::to_string(layer_) +
                      ": put prefill_partial (or prefill_full) before it");
  }
  const at::Tensor scores = softmax_ ? signal->sum(0) : *signal;
  const int64_t n = scores.size(0);
  const int64_t question = n - std::clamp<int64_t>(state.question_begin, 0, n);
  const int64_t topk = std::max<int64_t>(1, ApplyFloor(n, topk_, floor_, question));
  const std::vector<int64_t> kept = GemFilterSelect(scores, state.question_begin, topk, kernel_);
  ReplacePrompt(state, kept);
  return Status::Ok();
}

}  // namespace sift::plugins
