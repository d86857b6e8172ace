// IlreStage: ILRe's filter (ILRe §3.2-3.3, Algorithm 1).
//
// Plans A^C (max_prob over the query part) at the retrieval layer l_R for the prefill before it
// (prefill_streaming). Layer numbering follows the paper: l_R is 1-based (layers 1..N_L), so the
// scores come from 0-based layer l_R − 1 and the streaming prefill runs 0-based layers
// 0..l_R − 2 under the Λ mask. Run: drops the first `sink` context tokens from A^C (they are
// always kept), allocates `budget` more context tokens with the multi-kernel allocator
// (context_allocation.h), and replaces the prompt with sink + selected context +
// the whole query part in original order (filter/replace_prompt.h); the next stage, a
// prefill_full, re-prefills them at fresh positions 0..k-1 ("standard inference from scratch").
//
// Parameters (defaults: the paper's):
//   retrieval_layer  int in [1, layers], default 3   l_R, 1-based
//   budget           int in [1, 1048576], default 1024   B, context tokens besides the sink
//   sink             int in [0, 65536], default 4        S, leading tokens always kept
//   max_kernels      int list, each in [1, 4096], default [2, 4, 8]
//   avg_kernels      int list, each in [1, 4096], default [1, 2, ..., 16]
//   map_back         "block" (default) | "argmax"   pooled position -> its whole block / best
//   exact_budget     bool, default true   spread B mod combinations so exactly B are chosen
//                                         (false: the paper's B_c = floor(B / combinations))
//   floor            int >= 0, default 128  the compression floor (selection/selection_ops.h
//                                         ApplyFloor): B is at least `floor`; a context of at
//                                         most sink + max(B, floor) tokens is kept whole, so a
//                                         prompt at or below the floor is re-prefilled as is.
//                                         Always kept: the sink and the whole query part.
//
// THREADING: one instance per request (sift/stage.h).
// ERRORS:    FAILED_PRECONDITION when the prefill before it did not produce A^C.
#ifndef SIFT_PLUGINS_ILRE_ILRE_STAGE_H_
#define SIFT_PLUGINS_ILRE_ILRE_STAGE_H_

#include <cstdint>

#include "context_allocation.h"
#include "sift/stage.h"

namespace sift::plugins {

class IlreStage : public Stage {
 public:
  IlreStage(const StageParams& params, const Model& model);
  Status Plan(const Model& model, RequestPlan& plan) const override;
  Status Run(const Model& model, RequestState& state, StageContext& context) override;

 private:
  int64_t layer_;  // 0-based: l_R - 1
  int64_t sink_;
  int64_t floor_;
  AllocationOptions allocation_;
};

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_ILRE_ILRE_STAGE_H_
