// SptsSkipLayer: one decoder layer with SPTS token skipping (paper Eq. 2-5, 13-15, Algorithm 1
// lines 7-27), built from Model's building blocks.
//
// x holds the N candidate rows [N, hidden] fp32 at RoPE positions `positions` [N] (ascending; the
// last row is the last prompt token). PAP: keys for all candidates, the query of the last row
// only, softmax scores averaged over all query heads (Eq. 4). The `active` top-scoring rows (the
// last row always among them) get q and v; with the keys already computed they alone enter a
// causal attention among themselves and are appended to the layer's cache at their original
// positions; their attention output is added to their residual. LTP: with a proxy, every
// candidate is scored ||f(FfnNorm(x))|| x S^MHA and the top `active` rows (last row always) get
// the real FFN; without one the FFN runs on every candidate. Every other row is left bit-for-bit
// unchanged (Eq. 2).
//
// When active == N the layer computes exactly what Model::Layer does (same fused projection, same
// operations), so budgets that cover the prompt reproduce the full model bit for bit.
//
// THREADING: pure function of its inputs apart from the cache it appends to.
// ERRORS:    sift::Error on shape misuse.
#ifndef SIFT_PLUGINS_PREFILL_SKIP_SPTS_LAYER_H_
#define SIFT_PLUGINS_PREFILL_SKIP_SPTS_LAYER_H_

#include <ATen/ATen.h>

#include <cstdint>

#include "sift/model.h"
#include "spts_proxy.h"

namespace sift::plugins {

struct SptsLayerOptions {
  int64_t active = 0;                // M, clamped to [1, N]
  const SptsProxy* proxy = nullptr;  // LTP proxy; null = FFN on every candidate
  AttentionOptions attention;
};

struct SptsLayerResult {
  at::Tensor scores;       // [N] fp32, S^MHA of every candidate
  at::Tensor attn_active;  // [M] int64 row indices (ascending) that got attention
  at::Tensor ffn_active;   // [M'] int64 row indices (ascending) that got the FFN
};

// Updates x in place and appends the active rows' k/v to cache layer `layer`.
SptsLayerResult SptsSkipLayer(const Model& model, int64_t layer, at::Tensor& x,
                              const at::Tensor& positions, KvCache& cache,
                              const SptsLayerOptions& options);

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_PREFILL_SKIP_SPTS_LAYER_H_
