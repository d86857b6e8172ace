#include "layerwise_stage.h"

#include <string>

#include "selection/cache_edit.h"
#include "sift/error.h"

namespace sift::plugins {

int64_t ReuseLeader(int64_t layer, int64_t n_reuse) {
  SIFT_CHECK(layer >= 0 && n_reuse >= 1, "ReuseLeader: bad arguments");
  return layer / n_reuse * n_reuse;
}

LayerwiseStage::LayerwiseStage(const StageParams& params)
    : n_reuse_(params.GetInt("n_reuse", 2, 1, 1024)) {}

Status LayerwiseStage::Plan(const Model& model, RequestPlan& plan) const {
  PlanLayers(model.config().num_layers, plan);
  return Status::Ok();
}

void LayerwiseStage::PlanLayers(int64_t num_layers, RequestPlan& plan) const {
  for (int64_t l = 0; l < num_layers; ++l) {
    const int64_t leader = ReuseLeader(l, n_reuse_);
    if (leader == l) continue;
    plan.stats.erase(l);
    plan.reuse_leader[l] = leader;
  }
  // The select's context state would lack the followers' selection: nothing is cached.
  if (!plan.reuse_leader.empty()) plan.context_state.clear();
  // Followers take their leader's indices after the select stage: the prefill cannot hand the
  // select stage its layers one by one (RequestPlan::select_layer).
  if (!plan.reuse_leader.empty()) {
    plan.select_layer = nullptr;
    plan.kv_peak_entries = 0;
  }
}

Status LayerwiseStage::Run(const Model& model, RequestState& state, StageContext& context) {
  return RunOn(&model, state, context);
}

Status LayerwiseStage::RunOn(const Model* model, RequestState& state, StageContext& context) {
  if (state.cache == nullptr) {
    return Status(StatusCode::kFailedPrecondition, "no_prefill",
                  "layerwise needs a prefilled cache and a select stage before it");
  }
  KvCache& cache = *state.cache;
  bool rerotated = false;
  for (const auto& [follower, leader] : state.plan.reuse_leader) {
    if (context.Cancelled()) return context.CancelStatus();
    auto it = state.kept_indices.find(leader);
    if (it == state.kept_indices.end()) {
      return Status(StatusCode::kFailedPrecondition, "no_leader_indices",
                    "layer " + std::to_string(leader) +
                        " has no kept indices: put a select stage right before layerwise");
    }
    if (state.kept_indices.count(follower) ||
        cache.size(follower) != static_cast<int64_t>(state.tokens.size())) {
      return Status(StatusCode::kFailedPrecondition, "follower_compressed",
                    "layer " + std::to_string(follower) +
                        " does not hold the whole prompt (already compressed?)");
    }
    const at::Tensor indices = it->second.clone();
    SIFT_RETURN_IF_ERROR(ApplyLayerSelection(model, state, follower, indices, false));
    // A re-rotated leader holds positions other than its prompt indices: follow it.
    at::Tensor leader_pos = cache.Positions(leader);
    if (!at::equal(leader_pos, cache.Positions(follower))) {
      if (model == nullptr) {
        return Status(StatusCode::kFailedPrecondition, "no_model", "re-rotation needs the model");
      }
      RotateToPositions(*model, cache, follower, leader_pos.clone());
      rerotated = true;
    }
    context.Progress("layerwise", follower + 1, cache.num_layers());
  }
  return FinishSelection(model, state, rerotated);
}

}  // namespace sift::plugins
