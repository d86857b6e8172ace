// SDK kit sift_kit_selection (plugin_api/kits/selection), linked by the select plugins and
// the reuse plugin (layerwise).
//
// Cache edits shared by the select and reuse plugins: applying kept indices to a layer (really
// freeing the evicted entries), optional RoPE re-rotation of kept keys to new positions,
// re-computing observation statistics for a span of rows (context-only scoring), and what every
// compressing stage ends with (question re-prefill, next position).
//
// Positions policy: by default kept entries keep their original RoPE positions and decode
// continues at state.next_position (the uncompressed length). With re-rotation, the kept keys
// of a layer are rotated by (new - old) to positions 0..m-1 (RoPE is a rotation, so rotating a
// post-RoPE key by a delta equals applying RoPE at the new position), and decode continues at
// the cache's NextPosition().
//
// THREADING: functions on one request's state; the model is shared read-only.
// ERRORS:    sift::Error on shape misuse; FAILED_PRECONDITION statuses are returned where a model
//            is needed but absent (unit tests pass model = nullptr).
#ifndef SIFT_KITS_SELECTION_CACHE_EDIT_H_
#define SIFT_KITS_SELECTION_CACHE_EDIT_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <vector>

#include "sift/model.h"
#include "sift/request_state.h"
#include "sift/status.h"

namespace sift::plugins {

// Rotates the keys of `layer` from their current positions to `positions` ([Hkv, size]) and
// stores the new positions.
void RotateToPositions(const Model& model, KvCache& cache, int64_t layer,
                       const at::Tensor& positions);

// Keeps `indices` ([Hkv, m] sorted, indices into the layer's current entries) of `layer`,
// records them in state.kept_indices, and, with `rerotate`, moves the kept keys to positions
// 0..m-1. Fails (FAILED_PRECONDITION) if rerotate is asked without a model.
Status ApplyLayerSelection(const Model* model, RequestState& state, int64_t layer,
                           const at::Tensor& indices, bool rerotate);

// Runs tokens[begin, end) through layers [0, last_layer] again, attending to the cache's
// entries [0, begin) of each layer plus themselves (exactly what the prefill computed for these
// rows, since attention is causal by position), collecting `request` for every layer. The cache
// is not modified (each layer works on a copy of its first `begin` entries).
// REQUIRES: a cache straight from a full prefill (entries in prompt order).
std::map<int64_t, AttentionStats> ObserveRows(const Model& model, const KvCache& cache,
                                              const std::vector<TokenId>& tokens, int64_t begin,
                                              int64_t end, const AttentionStatsRequest& request,
                                              int64_t last_layer);

// Ends a compression: if state.last_logits was cleared (context-only selection dropped the
// question), prefills tokens[question_begin:] on the compressed cache from its NextPosition()
// (appending the question's indices to state.kept_indices) and sets last_logits; with rerotated
// caches sets next_position to the cache's NextPosition(). (What the compressed cache costs is
// measured by the pipeline runner after the stage: sift/cost_report.h.)
Status FinishSelection(const Model* model, RequestState& state, bool rerotated);

}  // namespace sift::plugins

#endif  // SIFT_KITS_SELECTION_CACHE_EDIT_H_
