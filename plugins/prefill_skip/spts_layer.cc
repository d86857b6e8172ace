#include "spts_layer.h"

#include <cmath>
#include <limits>

#include "scores/score_ops.h"
#include "sift/error.h"
#include "sift/host.h"

namespace sift::plugins {
namespace {

// Eq. 4: mean over query heads of softmax(q_h K_h^T / sqrt(d)). q: [1, Hq, hd]; k: [N, Hkv, hd].
at::Tensor PapScores(const at::Tensor& q, const at::Tensor& k, double scale) {
  const int64_t hq = q.size(1), hkv = k.size(1), hd = q.size(2);
  at::Tensor qf = q.to(at::kFloat).reshape({hkv, hq / hkv, hd});
  at::Tensor kf = k.to(at::kFloat).transpose(0, 1);                    // [Hkv, N, hd]
  at::Tensor logits = at::matmul(qf, kf.transpose(1, 2)).mul_(scale);  // [Hkv, G, N]
  return at::softmax(logits, -1).reshape({hq, -1}).mean(0);
}

// Top-m rows by `scores` in ascending order, the last row always included.
at::Tensor SelectWithLast(const at::Tensor& scores, int64_t m) {
  at::Tensor s = scores.clone();
  s[s.size(0) - 1] = std::numeric_limits<float>::infinity();
  return TopKSorted(s, m);
}

}  // namespace

SptsLayerResult SptsSkipLayer(const Model& model, int64_t layer, at::Tensor& x,
                              const at::Tensor& positions, KvCache& cache,
                              const SptsLayerOptions& options) {
  const ModelConfig& c = model.config();
  const LayerWeights& w = model.weights().layers.at(layer);
  SIFT_CHECK(x.dim() == 2 && x.size(1) == c.hidden_size && x.scalar_type() == at::kFloat,
             "SptsSkipLayer: x must be [n, hidden] fp32");
  const int64_t n = x.size(0), hd = c.head_dim;
  const int64_t m = std::max<int64_t>(1, std::min(options.active, n));
  const double scale = options.attention.scale > 0 ? options.attention.scale
                                                   : 1.0 / std::sqrt(static_cast<double>(hd));
  // Positions are host metadata (sift/model.h); the active rows are chosen on x's device.
  const at::Tensor pos =
      positions.is_cpu() ? positions.to(at::kLong) : ToHost(positions.to(at::kLong));
  const at::TensorOptions row_options = x.options().dtype(at::kLong);
  at::Tensor last_pos = pos.slice(0, n - 1, n);
  SptsLayerResult result;

  // ---- attention (PAP) ----
  at::Tensor h = model.AttnNorm(layer, x);
  at::Tensor attn, rows_pos;
  if (m == n) {
    Model::Qkv qkv = model.ProjectQkv(layer, h);
    at::Tensor q = model.ApplyRope(qkv.q, pos);
    at::Tensor k = model.ApplyRope(qkv.k, pos);
    result.scores = PapScores(q.slice(0, n - 1, n), k, scale);
    result.attn_active = at::arange(n, row_options);
    cache.Append(layer, k, qkv.v, pos);
    AttentionOptions a = options.attention;
    a.upcast_fp32 = model.UpcastsToFp32(n);
    attn = Attention(q, cache.Keys(layer), cache.Values(layer), pos, cache.Positions(layer), a);
    x.add_(model.OutputProjection(layer, attn));
  } else {
    at::Tensor k_all =
        model.ApplyRope(model.Linear(h, w.wk, w.bk).view({n, c.num_kv_heads, hd}), pos);
    at::Tensor q_last = model.ApplyRope(
        model.Linear(h.slice(0, n - 1, n), w.wq, w.bq).view({1, c.num_heads, hd}), last_pos);
    result.scores = PapScores(q_last, k_all, scale);
    at::Tensor active = SelectWithLast(result.scores, m);
    result.attn_active = active;
    at::Tensor h_act = h.index_select(0, active);
    at::Tensor pos_act = pos.index_select(0, ToHost(active));  // one read per skipped layer
    at::Tensor q =
        model.ApplyRope(model.Linear(h_act, w.wq, w.bq).view({m, c.num_heads, hd}), pos_act);
    at::Tensor v = model.Linear(h_act, w.wv, w.bv).view({m, c.num_kv_heads, hd});
    cache.Append(layer, k_all.index_select(0, active), v, pos_act);
    AttentionOptions a = options.attention;
    a.upcast_fp32 = model.UpcastsToFp32(m);
    attn = Attention(q, cache.Keys(layer), cache.Values(layer), pos_act, cache.Positions(layer), a);
    x.index_add_(0, active, model.OutputProjection(layer, attn));
  }

  // ---- FFN (LTP) ----
  if (options.proxy != nullptr && m < n) {
    at::Tensor hf = model.FfnNorm(layer, x);
    at::Tensor score = options.proxy->Norms(layer, hf).mul_(result.scores);  // Eq. 13-14
    at::Tensor active = SelectWithLast(score, m);                            // Eq. 15
    result.ffn_active = active;
    x.index_add_(0, active, model.Ffn(layer, hf.index_select(0, active)));
  } else {
    result.ffn_active = at::arange(n, row_options);
    x.add_(model.Ffn(layer, model.FfnNorm(layer, x)));
  }
  return result;
}

}  // namespace sift::plugins
