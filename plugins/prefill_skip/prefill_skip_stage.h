// PrefillSkipStage: the SPTS prefill (self-predictive token skipping: PAP for attention, LTP for
// the FFN, MSDP candidate pruning; docs/methods/spts.md).
//
// Builds a fresh per-layer-ragged KV cache (state.cache) from state.tokens at positions 0..n-1:
// dense layers cache every token, skip layers only their active tokens, each at its original
// RoPE position. Hands the cache over with last_logits (RequestState::AdoptPrefill: next_position
// = n, no statistics, kept indices dropped).
//
// Parameters (pipeline TOML or per-request overrides):
//   proxy        string, default ""      LTP proxy file from sift-spts-calibrate. "" = next to the
//                                        model: <model path without .gguf>.spts.bin. A relative
//                                        path is relative to the model file's folder. When the key
//                                        is given (file or override) and ltp is on, the file must
//                                        exist and match the model at construction (validation);
//                                        otherwise it is loaded on the first request.
//   skip_start   int, default 9          first skipping layer (0-based)
//   stage_ends   int list, [12,17,22,26] last layer of each stage (0-based, increasing)
//   budgets      int list, [2304,1792,1024,512]  active tokens per stage (M_fixed)
//   prune_margin int >= 0, default 256   MSDP: candidates after stage s = budgets[s] - margin
//   budget_mode  "fixed" | "proportional", default "fixed": budgets and margin are token counts,
//                or are scaled by prompt_length / reference_length
//   reference_length int, default 8192   the prompt length the budgets are written for
//   ltp          bool, default true      FFN skipping with the proxy (false: FFN on all candidates)
//   msdp         bool, default true      prune candidates at stage ends
//   block_size   int in [1, 65536], 256  least rows per attention query block (sift/attention.h)
//   floor        int >= 0, default 128   the compression floor (spts_schedule.h): a prompt of at
//                                        most `floor` tokens is prefilled densely (as
//                                        prefill_full), and no stage keeps fewer tokens
// Ablations of the paper's Table 2: PAP only = {ltp=false, msdp=false}; PAP+LTP = {msdp=false};
// PAP+LTP+MSDP = defaults.
//
// Cancellation is checked and context.Yield() called before every layer; progress is ("prefill",
// layers done, layers).
// Statistics requested by later stages (state.plan.stats) are not collected: such a request
// fails with FAILED_PRECONDITION.
//
// THREADING: one instance per request (sift/stage.h); the proxy is shared read-only.
// ERRORS:    INVALID_ARGUMENT for an empty or too long prompt or an out-of-vocabulary token;
//            FAILED_PRECONDITION for a missing or mismatched proxy file or requested statistics;
//            CANCELLED / DEADLINE_EXCEEDED from the context.
#ifndef SIFT_PLUGINS_PREFILL_SKIP_PREFILL_SKIP_STAGE_H_
#define SIFT_PLUGINS_PREFILL_SKIP_PREFILL_SKIP_STAGE_H_

#include <cstdint>
#include <string>

#include "sift/stage.h"
#include "spts_schedule.h"

namespace sift::plugins {

class PrefillSkipStage : public Stage {
 public:
  PrefillSkipStage(const StageParams& params, const Model& model);
  Status Run(const Model& model, RequestState& state, StageContext& context) override;

  // The proxy path `value` resolves to for `model` (see the `proxy` parameter).
  static std::string ResolveProxyPath(const std::string& value, const Model& model);

 private:
  std::string proxy_path_;
  bool ltp_;
  bool proportional_;
  int64_t reference_length_;
  std::vector<int64_t> budgets_;
  int64_t prune_margin_;
  SptsSettings settings_;  // fractions filled in per request when proportional
  int64_t block_size_;
};

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_PREFILL_SKIP_PREFILL_SKIP_STAGE_H_
