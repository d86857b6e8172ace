#include "keep_recent_stage.h"

#include <algorithm>

namespace sift::plugins {

KeepRecentStage::KeepRecentStage(const StageParams& params, const Model& model)
    : keep_(params.GetInt("keep", 256, 1, int64_t{1} << 20)) {}

Status KeepRecentStage::Run(const Model& model, RequestState& state, StageContext& context) {
  if (state.cache == nullptr) {
    return Status(StatusCode::kFailedPrecondition, "no_prefill",
                  "keep_recent needs a prefilled cache: put a prefill stage before it");
  }
  KvCache& cache = *state.cache;
  const int64_t layers = cache.num_layers();
  for (int64_t layer = 0; layer < layers; ++layer) {
    if (context.Cancelled()) return context.CancelStatus();
    const int64_t size = cache.size(layer);
    const int64_t kept = std::min(size, keep_);
    // The same entries for every KV head: indices [m] shared by all heads. They are computed
    // without looking at the cache, so they live on the host like its positions: Select then
    // needs no read from the device.
    at::Tensor indices = at::arange(size - kept, size, cache.Positions(layer).options());
    if (kept < size) cache.Select(layer, indices);
    state.kept_indices[layer] =
        indices.unsqueeze(0).expand({cache.shape().num_kv_heads, kept}).contiguous();
    context.Progress("keep_recent", layer + 1, layers);
  }
  return Status::Ok();
}

}  // namespace sift::plugins
