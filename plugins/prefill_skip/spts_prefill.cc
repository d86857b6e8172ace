#include "spts_prefill.h"

#include <limits>

#include "scores/score_ops.h"
#include "sift/error.h"
#include "sift/host.h"
#include "spts_layer.h"

namespace sift::plugins {

bool SptsPrefill(const Model& model, const std::vector<TokenId>& tokens,
                 const SptsPrefillOptions& options, KvCache& cache, at::Tensor* last_logits) {
  SIFT_CHECK(!tokens.empty(), "SptsPrefill: empty input");
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t layers = model.config().num_layers;
  const std::vector<SptsLayerPlan> plans = SptsSchedule::Make(options.settings, layers, n);
  // RoPE positions live on the host (sift/model.h).
  const at::TensorOptions host_options = at::TensorOptions().dtype(at::kLong).device(at::kCPU);
  at::Tensor positions = at::arange(n, host_options);
  at::Tensor x = model.EmbedTokens(tokens, 0, n);
  for (int64_t l = 0; l < layers; ++l) {
    if (options.cancelled && options.cancelled(l, layers)) return false;
    const SptsLayerPlan& plan = plans[l];
    SIFT_CHECK(plan.candidates == x.size(0), "SptsPrefill: layer ", l, " expected ",
               plan.candidates, " candidates, has ", x.size(0));
    cache.Reserve(l, plan.active);
    SptsLayerTrace trace;
    trace.plan = plan;
    if (options.trace != nullptr) trace.candidates = positions;
    if (!plan.skip) {
      x = model.Layer(l, x, positions, &cache, options.attention);
      if (options.trace != nullptr) {
        trace.attn_active = positions;
        trace.ffn_active = positions;
        options.trace->push_back(std::move(trace));
      }
      continue;
    }
    SptsLayerOptions layer_options;
    layer_options.active = plan.active;
    layer_options.proxy = options.proxy;
    layer_options.attention = options.attention;
    SptsLayerResult r = SptsSkipLayer(model, l, x, positions, cache, layer_options);
    if (options.trace != nullptr) {
      trace.attn_active = positions.index_select(0, ToHost(r.attn_active));
      trace.ffn_active = positions.index_select(0, ToHost(r.ffn_active));
      trace.scores = r.scores;
    }
    if (plan.prune_to > 0 && plan.prune_to < x.size(0)) {  // MSDP, Eq. 16
      at::Tensor s = r.scores.clone();
      s[s.size(0) - 1] = std::numeric_limits<float>::infinity();
      at::Tensor keep = TopKSorted(s, plan.prune_to);
      x = x.index_select(0, keep);
      positions = positions.index_select(0, ToHost(keep));  // one read per stage end
    }
    if (options.trace != nullptr) options.trace->push_back(std::move(trace));
  }
  *last_logits = model.Logits(x.slice(0, x.size(0) - 1, x.size(0))).squeeze(0);
  return true;
}

}  // namespace sift::plugins
