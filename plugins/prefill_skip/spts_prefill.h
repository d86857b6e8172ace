// SptsPrefill: a whole SPTS prefill (paper Algorithm 1): dense layers, then skip layers per the
// schedule, candidates pruned at stage ends (MSDP, Eq. 16: top N_{s+1} by the stage's last S^MHA,
// the last token always kept), and the last token's logits.
//
// The cache gets, per layer, the k/v of that layer's active rows at their original positions, so
// layers hold different numbers of entries; decoding continues at position n.
//
// THREADING: pure function of its inputs apart from the cache and trace it fills.
// ERRORS:    sift::Error on bad settings or shapes; returns false when `cancelled` said so.
#ifndef SIFT_PLUGINS_PREFILL_SKIP_SPTS_PREFILL_H_
#define SIFT_PLUGINS_PREFILL_SKIP_SPTS_PREFILL_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "sift/model.h"
#include "spts_proxy.h"
#include "spts_schedule.h"

namespace sift::plugins {

// What each layer did, for tests and diagnostics (positions are original token positions).
struct SptsLayerTrace {
  SptsLayerPlan plan;
  at::Tensor candidates;   // [N] positions entering the layer
  at::Tensor attn_active;  // positions that got attention (and were cached)
  at::Tensor ffn_active;   // positions that got the FFN
  at::Tensor scores;       // [N] S^MHA (skip layers only)
};

struct SptsPrefillOptions {
  SptsSettings settings;
  const SptsProxy* proxy = nullptr;  // null = no LTP (FFN on every candidate)
  AttentionOptions attention;
  // Called before every layer with (layer, layers); returning true abandons the prefill.
  std::function<bool(int64_t, int64_t)> cancelled;
  std::vector<SptsLayerTrace>* trace = nullptr;  // optional
};

// Prefills `tokens` (positions 0..n-1) into `cache` (fresh, from model.NewCache()). On success
// sets *last_logits ([vocab] fp32) and returns true.
bool SptsPrefill(const Model& model, const std::vector<TokenId>& tokens,
                 const SptsPrefillOptions& options, KvCache& cache, at::Tensor* last_logits);

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_PREFILL_SKIP_SPTS_PREFILL_H_
