#include "ilre_stage.h"

#include <algorithm>
#include <string>
#include <vector>

#include "filter/replace_prompt.h"
#include "selection/selection_ops.h"

namespace sift::plugins {

IlreStage::IlreStage(const StageParams& params, const Model& model)
    : layer_(params.GetInt("retrieval_layer", 3, 1, model.config().num_layers) - 1),
      sink_(params.GetInt("sink", 4, 0, 65536)),
      floor_(params.GetInt("floor", kDefaultFloor, 0, kMaxFloor)) {
  allocation_.budget = params.GetInt("budget", 1024, 1, int64_t{1} << 20);
  allocation_.max_kernels = params.GetIntList("max_kernels", allocation_.max_kernels, 1, 4096);
  allocation_.avg_kernels = params.GetIntList("avg_kernels", allocation_.avg_kernels, 1, 4096);
  if (allocation_.max_kernels.empty()) params.Fail("max_kernels", "must not be empty");
  if (allocation_.avg_kernels.empty()) params.Fail("avg_kernels", "must not be empty");
  allocation_.map_back = ParseMapBack(params.GetString("map_back", "block", {"block", "argmax"}));
  allocation_.exact_budget = params.GetBool("exact_budget", true);
}

Status IlreStage::Plan(const Model& model, RequestPlan& plan) const {
  plan.stats[layer_].max_from_query = 0;
  return Status::Ok();
}

Status IlreStage::Run(const Model& model, RequestState& state, StageContext& context) {
  auto it = state.layer_stats.find(layer_);
  if (it == state.layer_stats.end() || !it->second.max_prob.defined()) {
    return Status(StatusCode::kFailedPrecondition, "no_scores",
                  "ilre needs the retrieval scores of layer " + std::to_string(layer_ + 1) +
                      " (1-based): put prefill_streaming before it");
  }
  const at::Tensor& a = it->second.max_prob;
  const int64_t n = static_cast<int64_t>(state.tokens.size());
  const int64_t ctx = std::min<int64_t>(a.size(0), state.question_begin);
  const int64_t sink = std::min(sink_, ctx);
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < sink; ++i) kept.push_back(i);
  // The floor: B at least `floor`; a context that fits is kept whole (nothing to allocate).
  AllocationOptions allocation = allocation_;
  allocation.budget = ApplyFloor(ctx - sink, allocation_.budget, floor_, 0);
  if (allocation.budget >= ctx - sink) {
    for (int64_t i = sink; i < ctx; ++i) kept.push_back(i);
  } else {
    for (int64_t i : AllocateContext(a.narrow(0, sink, ctx - sink), allocation)) {
      kept.push_back(i + sink);
    }
  }
  for (int64_t i = ctx; i < n; ++i) kept.push_back(i);
  ReplacePrompt(state, kept);
  return Status::Ok();
}

}  // namespace sift::plugins
