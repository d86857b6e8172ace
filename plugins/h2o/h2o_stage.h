// H2oStage (h2o.so): H2O heavy hitters (Zhang et al. 2023), one-shot at the end of the prefill
// (the original evicts at every decode step), with the H2O paper's split of the budget: half
// heavy hitters, half recent tokens (recent_ratio 0.5). That split is the paper's, not
// KVCache-Factory's: its H2OKVCluster is also one-shot over all queries' accumulated attention,
// but keeps a fixed recent window (window_size, 32 in its scripts) and spends the rest of the
// budget on heavy hitters. The paper's split is meant: it is the method the H2O paper measures.
//
// Score of token j = its accumulated attention: the sum over all queries of their fp32 softmax
// rows (column_sum, accumulated tile by tile by prefill_full, never an n x n matrix), optionally
// pooled, aggregated over each KV head's query group. Per KV head the top (L - recent) heavy
// hitters of the prefix are kept in original order, plus the `recent` last tokens. Always kept:
// the question span (the recent part is at least the question, select_stage_base.h step 3); a
// prompt at or below the floor (128) is not compressed.
// With query_aware = false the question's queries are subtracted (context queries only).
//
// Parameters (besides budget / keep_ratio / query_aware / rerotate):
//   recent_ratio  float in [0, 1], default 0.5   share of L that is the recent window (H2O paper:
//                                                equal heavy-hitter and recent budgets)
//   pooling       none | avg | max, default none (H2O does not pool)
//   kernel        int, default 7 (only with pooling)
//   gqa_reduce    mean | max | sum, default mean
#ifndef SIFT_PLUGINS_H2O_H2O_STAGE_H_
#define SIFT_PLUGINS_H2O_H2O_STAGE_H_

#include <cmath>

#include "selection/select_stage_base.h"

namespace sift::plugins {

class H2oStage : public SelectStageBase {
 public:
  explicit H2oStage(const StageParams& params);
  H2oStage(const StageParams& params, const Model& model) : H2oStage(params) {}

 protected:
  int64_t KeptWindow(int64_t layer_budget) const override {
    return static_cast<int64_t>(std::floor(recent_ratio_ * static_cast<double>(layer_budget)));
  }
  at::Tensor ChoosePrefix(int64_t layer, const at::Tensor& scores, int64_t p, int64_t keep,
                          int64_t heads, const at::TensorOptions& index_options) const override;

 private:
  double recent_ratio_;
};

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_H2O_H2O_STAGE_H_
