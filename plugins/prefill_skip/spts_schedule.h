// SptsSchedule: which layers of an SPTS prefill skip tokens, and how many tokens each layer keeps
// as candidates and as active tokens (paper §3.4, Algorithm 1, settings of §4.1).
//
// Layers are 0-based. Layers [0, skip_start) run densely. Stage s (s = 0..S-1) covers the layers
// (stage_ends[s-1], stage_ends[s]] (the first stage starts at skip_start). Layers after the last
// stage end form the tail. Within stage s every layer activates M = min(N_s, budget_s) of its N_s
// candidates. With MSDP, at the end of stage s the candidates are pruned to
// N_{s+1} = max(1, budget_s - prune_margin) (the reading of "pruned by 1K tokens at the end of
// each stage" that reproduces the paper's Table 3 exactly, see docs/methods/spts.md), and the
// tail activates all of its candidates. Without MSDP the candidate set stays the whole prompt and
// the tail activates budget_{S-1} - prune_margin tokens (the same KV budget, no pruning).
//
// Budgets are either token counts or fractions of the prompt length (rounded, at least 1).
// The compression floor (`floor`, docs/pipelines.md): a prompt of at most `floor` tokens runs
// densely on every layer (no skipping, no LTP), and above it no stage activates or keeps fewer
// than `floor` tokens (active, MSDP's prune_to and the tail budget are at least
// min(candidates, floor)).
//
// THREADING: plain value type. ERRORS: Make() throws sift::Error describing the bad setting.
#ifndef SIFT_PLUGINS_PREFILL_SKIP_SPTS_SCHEDULE_H_
#define SIFT_PLUGINS_PREFILL_SKIP_SPTS_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace sift::plugins {

struct SptsSettings {
  int64_t skip_start = 9;  // first skipping layer (0-based)
  std::vector<int64_t> stage_ends = {12, 17, 22, 26};
  bool fractions = false;  // budgets below are fractions of the prompt
  std::vector<double> budgets = {2304, 1792, 1024, 512};  // per stage: tokens or fractions
  double prune_margin = 256;                              // tokens or fraction
  bool msdp = true;                                       // prune the candidate set at stage ends
  int64_t floor = 0;  // tokens: no skipping at or below, no budget below (0 = none)
};

struct SptsLayerPlan {
  bool skip = false;       // false: dense layer, all candidates computed
  int64_t stage = -1;      // stage index; S for the tail; -1 for dense layers
  int64_t candidates = 0;  // N: candidate rows entering the layer
  int64_t active = 0;      // M: rows computed (attention and FFN)
  int64_t prune_to = 0;    // > 0 at a stage end with MSDP: candidates kept for the next layer
};

class SptsSchedule {
 public:
  // Checks `settings` against a model with `num_layers` layers; throws sift::Error on a bad one.
  static void Validate(const SptsSettings& settings, int64_t num_layers);
  // The per-layer plan for a prompt of n tokens (n >= 1).
  static std::vector<SptsLayerPlan> Make(const SptsSettings& settings, int64_t num_layers,
                                         int64_t n);
};

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_PREFILL_SKIP_SPTS_SCHEDULE_H_
