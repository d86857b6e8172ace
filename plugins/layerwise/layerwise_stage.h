// LayerwiseStage (layerwise.so, a reuse stage): ChunkKV's layer-wise index reuse (paper
// §3.2.2, Algorithm 2), placed right after a select stage.
//
// Layers are grouped by N = n_reuse: layer l with l mod N == 0 is a leader and is selected by
// the preceding select stage; layers l+1 .. l+N-1 (followers) reuse the leader's indices.
//   Plan  (runs after the select stage's Plan) removes every follower from plan.stats, so the
//         prefill computes no statistics for it, and records plan.reuse_leader[f] = leader. The
//         select stage then skips followers. With followers it clears plan.context_state (a
//         context-only select's cached compressed context would lack their selection), and
//         plan.select_layer (followers cannot be selected inside the prefill).
//   Run   for every follower: KvCache::Select with the leader's kept indices (prompt indices;
//         the follower's cache still holds the whole prompt), kept_indices copied, and the
//         follower's keys moved to the leader's positions when the leader was re-rotated. Then
//         it finishes the compression for the whole cache (question re-prefill for
//         context-only selection, next_position).
// A trailing group shorter than N (30 layers, N = 4: layers 28, 29) is led by its first layer.
//
// Parameters:
//   n_reuse  int in [1, 1024], default 2   N (1 = no reuse; paper: N = 2 keeps GSM8K accuracy)
//
// THREADING: one instance per request. ERRORS: FAILED_PRECONDITION when a leader has no kept
// indices (no select stage before it) or a follower's cache was already compressed.
#ifndef SIFT_PLUGINS_LAYERWISE_LAYERWISE_STAGE_H_
#define SIFT_PLUGINS_LAYERWISE_LAYERWISE_STAGE_H_

#include <cstdint>

#include "sift/stage.h"

namespace sift::plugins {

// Algorithm 2's groups: the leader whose indices `layer` uses (layer itself when
// layer % n_reuse == 0). Throws sift::Error for layer < 0 or n_reuse < 1.
int64_t ReuseLeader(int64_t layer, int64_t n_reuse);

class LayerwiseStage : public Stage {
 public:
  explicit LayerwiseStage(const StageParams& params);
  LayerwiseStage(const StageParams& params, const Model& model) : LayerwiseStage(params) {}

  Status Plan(const Model& model, RequestPlan& plan) const override;
  Status Run(const Model& model, RequestState& state, StageContext& context) override;

  // Without a Model (unit tests); RunOn needs the model only for re-rotation / re-prefill.
  void PlanLayers(int64_t num_layers, RequestPlan& plan) const;
  Status RunOn(const Model* model, RequestState& state, StageContext& context);

 private:
  int64_t n_reuse_;
};

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_LAYERWISE_LAYERWISE_STAGE_H_
