#include "prefill_partial_stage.h"

#include <string>

#include "partial_prefill.h"
#include "prefill/prompt_check.h"

namespace sift::plugins {

PrefillPartialStage::PrefillPartialStage(const StageParams& params, const Model& model)
    : block_size_(params.GetInt("block_size", 256, 1, 65536, RequestCap{64, 65536})) {}

Status PrefillPartialStage::Run(const Model& model, RequestState& state, StageContext& context) {
  SIFT_RETURN_IF_ERROR(CheckPromptTokens(model, state.tokens));
  if (state.plan.stats.empty()) {
    return Status(StatusCode::kFailedPrecondition, "nothing_planned",
                  "prefill_partial runs up to the deepest layer a later stage needs statistics "
                  "of, and none asked: put a filter such as gemfilter after it");
  }
  PartialPrefillOptions options;
  options.block_size = block_size_;
  options.cancelled = [&] { return context.Cancelled(); };
  options.progress = [&](int64_t done, int64_t total) {
    context.Progress("prefill_partial", done, total);
    context.Yield();  // other requests' decode steps may run between layers
  };
  std::map<int64_t, AttentionStats> stats;
  if (!PartialPrefill(model, state.tokens, state.plan.stats, options, &stats)) {
    return context.CancelStatus();
  }
  state.AdoptScores(std::move(stats));
  return Status::Ok();
}

}  // namespace sift::plugins
