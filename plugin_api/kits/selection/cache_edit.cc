#include "selection/cache_edit.h"

#include <string>

#include "sift/error.h"

namespace sift::plugins {

void RotateToPositions(const Model& model, KvCache& cache, int64_t layer,
                       const at::Tensor& positions) {
  at::Tensor old_pos = cache.Positions(layer);
  at::Tensor new_pos = positions.to(at::kLong);
  SIFT_CHECK(new_pos.sizes() == old_pos.sizes(), "RotateToPositions: layer ", layer, ": positions ",
             new_pos.sizes(), " do not match the cache ", old_pos.sizes());
  if (at::equal(new_pos, old_pos)) return;
  at::Tensor keys = cache.Keys(layer);  // [Hkv, m, hd]
  at::Tensor delta = new_pos - old_pos;
  std::vector<at::Tensor> rotated;
  for (int64_t h = 0; h < keys.size(0); ++h) {
    // ApplyRope wants [n, H, hd] with one position per row.
    rotated.push_back(model.ApplyRope(keys[h].unsqueeze(1), delta[h]).squeeze(1));
  }
  cache.Set(layer, at::stack(rotated), cache.Values(layer).clone(), new_pos);
}

Status ApplyLayerSelection(const Model* model, RequestState& state, int64_t layer,
                           const at::Tensor& indices, bool rerotate) {
  KvCache& cache = *state.cache;
  const int64_t heads = cache.shape().num_kv_heads;
  at::Tensor idx = indices.to(at::kLong);
  if (idx.dim() == 1) idx = idx.unsqueeze(0).expand({heads, idx.size(0)});
  idx = idx.contiguous();
  const int64_t m = idx.size(1);
  const int64_t size = cache.size(layer);
  // kept_indices hold prompt indices: map through an earlier selection of this layer, if any.
  auto prev = state.kept_indices.find(layer);
  at::Tensor base = prev != state.kept_indices.end() && prev->second.size(1) == size
                        ? prev->second
                        : at::arange(size, idx.options()).expand({heads, size});
  const bool identity =
      m == size && at::equal(idx, at::arange(m, idx.options()).expand({heads, m}));
  if (!identity) cache.Select(layer, idx);
  state.kept_indices[layer] = base.gather(1, idx);
  if (rerotate) {
    if (model == nullptr) {
      return Status(StatusCode::kFailedPrecondition, "no_model", "re-rotation needs the model");
    }
    // Positions are host metadata (sift/kv_cache.h).
    const at::Tensor positions =
        at::arange(m, at::TensorOptions().dtype(at::kLong).device(at::kCPU)).expand({heads, m});
    RotateToPositions(*model, cache, layer, positions);
  }
  return Status::Ok();
}

std::map<int64_t, AttentionStats> ObserveRows(const Model& model, const KvCache& cache,
                                              const std::vector<TokenId>& tokens, int64_t begin,
                                              int64_t end, const AttentionStatsRequest& request,
                                              int64_t last_layer) {
  SIFT_CHECK(0 <= begin && begin < end && end <= static_cast<int64_t>(tokens.size()),
             "ObserveRows: bad row range [", begin, ", ", end, ")");
  // Token ids and RoPE positions live on the host (sift/model.h); Embed moves the ids over.
  const at::TensorOptions host_options = at::TensorOptions().dtype(at::kLong).device(at::kCPU);
  std::vector<int64_t> ids(tokens.begin() + begin, tokens.begin() + end);
  at::Tensor x = model.Embed(at::tensor(ids, host_options));
  at::Tensor positions = at::arange(begin, end, host_options);
  std::map<int64_t, AttentionStats> out;
  for (int64_t l = 0; l <= last_layer; ++l) {
    SIFT_CHECK(cache.size(l) >= begin, "ObserveRows: layer ", l, " holds ", cache.size(l),
               " entries, fewer than ", begin);
    KvCacheShape shape = cache.shape();
    KvCache scratch(shape);
    scratch.Set(l, cache.Keys(l).narrow(1, 0, begin).clone(),
                cache.Values(l).narrow(1, 0, begin).clone(),
                cache.Positions(l).narrow(1, 0, begin).clone());
    scratch.Reserve(l, end - begin);
    AttentionStats stats;
    x = model.Layer(l, x, positions, &scratch, AttentionOptions(), request, &stats);
    out[l] = std::move(stats);
  }
  return out;
}

Status FinishSelection(const Model* model, RequestState& state, bool rerotated) {
  KvCache& cache = *state.cache;
  if (!state.last_logits.defined()) {
    if (model == nullptr) {
      return Status(StatusCode::kFailedPrecondition, "no_model",
                    "the question re-prefill needs the model");
    }
    const int64_t n = static_cast<int64_t>(state.tokens.size());
    const int64_t qb = state.question_begin;
    std::vector<TokenId> question(state.tokens.begin() + qb, state.tokens.end());
    const int64_t start = cache.NextPosition();
    state.last_logits = model->Forward(question, start, cache);
    state.next_position = start + (n - qb);
    for (auto& [layer, kept] : state.kept_indices) {
      at::Tensor q = at::arange(qb, n, kept.options()).expand({kept.size(0), n - qb});
      kept = at::cat({kept, q}, 1);
    }
  } else if (rerotated) {
    state.next_position = cache.NextPosition();
  }
  return Status::Ok();
}

}  // namespace sift::plugins
