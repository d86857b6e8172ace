// GemFilterStage: GemFilter's filter (GemFilter §3 Algorithm 1, App. D.1-D.2).
//
// Plans the last query's scores at layer `layer` (r, 0-based as the paper's code) for the
// prefill before it (prefill_partial, which then runs layers 0..r only). Run: pools the scores
// (average, kernel `kernel`), keeps the top `topk` tokens in original order with the question
// span always kept (gem_selection.h), and replaces the prompt with them
// (filter/replace_prompt.h): the next stage, a prefill_full, re-prefills them at fresh
// positions 0..k-1.
//
// Parameters (defaults reproduce the paper's code):
//   layer   int in [0, layers-1], default 13   filter layer r (0-based; r + 1 layers run)
//   topk    int in [1, 1048576], default 1024  tokens kept, question included
//   kernel  int in [1, 1024], default 5        average-pool kernel (1 = no pooling)
//   score   "logits" (default) | "softmax"     raw q·k of the last query summed over all query
//           heads (the paper), or its per-head softmax(q·k/√d) summed over heads
//   floor   int >= 0, default 128               the compression floor (selection/selection_ops.h
//           ApplyFloor): a prompt of at most max(topk, floor) tokens is re-prefilled whole, and
//           no fewer than `floor` tokens are kept. Hard minimum: the question span (always kept).
//
// THREADING: one instance per request (sift/stage.h).
// ERRORS:    FAILED_PRECONDITION when the prefill before it did not produce the scores.
#ifndef SIFT_PLUGINS_GEMFILTER_GEMFILTER_STAGE_H_
#define SIFT_PLUGINS_GEMFILTER_GEMFILTER_STAGE_H_

#include <cstdint>
#include <string>

#include "sift/stage.h"

namespace sift::plugins {

class GemFilterStage : public Stage {
 public:
  GemFilterStage(const StageParams& params, const Model& model);
  Status Plan(const Model& model, RequestPlan& plan) const override;
  Status Run(const Model& model, RequestState& state, StageContext& context) override;

 private:
  int64_t layer_;
  int64_t topk_;
  int64_t kernel_;
  bool softmax_;
  int64_t floor_;
};

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_GEMFILTER_GEMFILTER_STAGE_H_
