#include "sift/attention.h"

#include <torch/version.h>

#include <cmath>
#include <limits>

#include "sift/error.h"

namespace sift {
namespace {

// Number of leading keys (positions sorted ascending) with position <= limit, max over heads.
int64_t CountAtMost(const at::Tensor& k_pos, int64_t limit) {
  at::Tensor bound = at::full({1}, limit, k_pos.options());
  at::Tensor rows = k_pos.dim() == 1 ? k_pos.unsqueeze(0) : k_pos;
  at::Tensor counts =
      at::searchsorted(rows.contiguous(), bound.expand({rows.size(0), 1}).contiguous(),
                       /*out_int32=*/false, /*right=*/true);
  return counts.max().item<int64_t>();
}

// Visibility of keys [k0, k1) to queries with positions q_pos_block: [1 or Hkv, B, k1-k0].
at::Tensor VisibleMask(const at::Tensor& q_pos_block, const at::Tensor& k_pos, int64_t k0,
                       int64_t k1, const AttentionOptions& options) {
  at::Tensor kp = (k_pos.dim() == 1 ? k_pos.unsqueeze(0) : k_pos).slice(1, k0, k1).unsqueeze(1);
  at::Tensor qp = q_pos_block.view({1, -1, 1});
  at::Tensor visible = kp <= qp;
  if (options.window > 0) {
    visible = visible.logical_and((qp - kp < options.window).logical_or(kp < options.sink));
  }
  return visible;
}

void CheckShapes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const at::Tensor& q_pos, const at::Tensor& k_pos) {
  SIFT_CHECK(q.dim() == 3 && k.dim() == 3 && v.sizes() == k.sizes() && q.size(2) == k.size(2),
             "Attention: expected q [nq, Hq, hd], k/v [Hkv, nk, hd]; got q ", q.sizes(), " k ",
             k.sizes(), " v ", v.sizes());
  SIFT_CHECK(q.size(1) % k.size(0) == 0, "Attention: ", q.size(1),
             " query heads not a multiple of ", k.size(0), " KV heads");
  SIFT_CHECK(q_pos.dim() == 1 && q_pos.size(0) == q.size(0), "Attention: q_pos must be [nq]");
  SIFT_CHECK((k_pos.dim() == 1 && k_pos.size(0) == k.size(1)) ||
                 (k_pos.dim() == 2 && k_pos.size(0) == k.size(0) && k_pos.size(1) == k.size(1)),
             "Attention: k_pos must be [nk] or [Hkv, nk]");
}

}  // namespace

at::Tensor Attention(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                     const at::Tensor& q_pos, const at::Tensor& k_pos,
                     const AttentionOptions& options, const AttentionStatsRequest& request,
                     AttentionStats* stats) {
  CheckShapes(q_in, k_in, v_in, q_pos, k_pos);
  const bool upcast = options.upcast_fp32 && q_in.scalar_type() != at::kFloat;
  const at::Tensor q = upcast ? q_in.to(at::kFloat) : q_in;
  const at::Tensor k = upcast ? k_in.to(at::kFloat) : k_in;
  const at::Tensor v = upcast ? v_in.to(at::kFloat) : v_in;
  SIFT_CHECK(!request.any() || stats != nullptr, "Attention: statistics requested without output");
  const int64_t nq = q.size(0), hq = q.size(1), hd = q.size(2);
  const int64_t hkv = k.size(0), nk = k.size(1), group = hq / hkv;
  const double scale = options.scale > 0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(hd));
  const int64_t block = std::max<int64_t>(1, options.block_size);
  const bool lambda = options.window > 0;

  auto f32 = q.options().dtype(at::kFloat);
  if (request.window > 0) stats->window_sum = at::zeros({hq, nk}, f32);
  if (request.last_query) stats->last_query = at::zeros({hq, nk}, f32);
  if (request.column_sum) stats->column_sum = at::zeros({hq, nk}, f32);
  if (request.max_from_query >= 0) stats->max_prob = at::zeros({nk}, f32);
  if (request.last_query_logit_sum) stats->last_query_logit_sum = at::zeros({nk}, f32);

  // [Hkv, group, nq, hd]: query head h uses KV head h / group (HF repeat_kv order).
  at::Tensor qh = q.permute({1, 0, 2}).reshape({hkv, group, nq, hd});
  at::Tensor out = at::empty({hkv, group, nq, hd}, q.options());
  at::Tensor q_pos_cpu = q_pos.to(at::kCPU, at::kLong).contiguous();
  const int64_t* qp = q_pos_cpu.data_ptr<int64_t>();
  const int64_t window_from = nq - request.window;

  for (int64_t i0 = 0; i0 < nq; i0 += block) {
    const int64_t i1 = std::min(nq, i0 + block), b = i1 - i0;
    int64_t qmax = qp[i0], qmin = qp[i0];
    for (int64_t i = i0; i < i1; ++i) {
      qmax = std::max(qmax, qp[i]);
      qmin = std::min(qmin, qp[i]);
    }
    // Keys past kend are invisible to every query of the block; keys before kfull are visible
    // to all of them (no Λ mask), so only [kfull, kend) needs a mask.
    const int64_t kend = CountAtMost(k_pos, qmax);
    const int64_t kfull = lambda ? 0 : CountAtMost(k_pos, qmin);
    SIFT_CHECK(kend > 0, "Attention: query at position ", qmax, " sees no key");

    at::Tensor qb = qh.slice(2, i0, i1).reshape({hkv, group * b, hd});
    at::Tensor kb = k.slice(1, 0, kend);
    at::Tensor vb = v.slice(1, 0, kend);
#if TORCH_VERSION_MAJOR >= 2 && (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 1)
    if (!request.any()) {
      // LibTorch's fused kernel (flash / memory-efficient where available); same mask.
      at::Tensor mask = VisibleMask(q_pos.slice(0, i0, i1), k_pos, 0, kend, options).unsqueeze(1);
      at::Tensor ob = at::scaled_dot_product_attention(
          qb.view({hkv, group, b, hd}), kb.unsqueeze(1).expand({hkv, group, kend, hd}),
          vb.unsqueeze(1).expand({hkv, group, kend, hd}), mask, 0.0, false, scale);
      out.slice(2, i0, i1).copy_(ob);
      continue;
    }
#endif
    at::Tensor raw = at::bmm(qb, kb.transpose(1, 2));  // [Hkv, group*b, kend]
    at::Tensor scores = raw.to(at::kFloat).view({hkv, group, b, kend});
    const bool has_last = i1 == nq;
    if (request.last_query_logit_sum && has_last) {
      stats->last_query_logit_sum.slice(0, 0, kend).add_(
          scores.select(2, b - 1).sum(at::IntArrayRef{0, 1}));
    }
    scores.mul_(scale);
    if (kfull < kend) {
      at::Tensor visible =
          VisibleMask(q_pos.slice(0, i0, i1), k_pos, kfull, kend, options).unsqueeze(1);
      scores.slice(3, kfull, kend).masked_fill_(visible.logical_not(),
                                                -std::numeric_limits<float>::infinity());
    }
    at::Tensor probs = scores.softmax(-1);  // fp32 [Hkv, group, b, kend]

    if (request.any()) {
      at::Tensor p = probs.view({hq, b, kend});
      if (request.window > 0 && i1 > window_from) {
        const int64_t from = std::max<int64_t>(0, window_from - i0);
        stats->window_sum.slice(1, 0, kend).add_(p.slice(1, from, b).sum(1));
      }
      if (request.last_query && has_last) stats->last_query.slice(1, 0, kend).copy_(p.select(1, b - 1));
      if (request.column_sum) stats->column_sum.slice(1, 0, kend).add_(p.sum(1));
      if (request.max_from_query >= 0 && i1 > request.max_from_query) {
        const int64_t from = std::max<int64_t>(0, request.max_from_query - i0);
        at::Tensor m = std::get<0>(p.slice(1, from, b).reshape({-1, kend}).max(0));
        at::Tensor dst = stats->max_prob.slice(0, 0, kend);
        dst.copy_(at::maximum(dst, m));
      }
    }

    at::Tensor ob = at::bmm(probs.view({hkv, group * b, kend}).to(v.scalar_type()), vb);
    out.slice(2, i0, i1).copy_(ob.view({hkv, group, b, hd}));
  }
  return out.view({hq, nq, hd}).permute({1, 0, 2}).to(q_in.scalar_type()).contiguous();
}

at::Tensor AttentionReference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& q_pos, const at::Tensor& k_pos,
                              const AttentionOptions& options) {
  CheckShapes(q, k, v, q_pos, k_pos);
  const int64_t hq = q.size(1), hd = q.size(2), hkv = k.size(0), group = hq / hkv;
  const double scale = options.scale > 0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(hd));
  at::Tensor qf = q.to(at::kFloat).permute({1, 0, 2});                          // [Hq, nq, hd]
  at::Tensor kf = k.to(at::kFloat).repeat_interleave(group, 0);                  // [Hq, nk, hd]
  at::Tensor vf = v.to(at::kFloat).repeat_interleave(group, 0);
  at::Tensor kp = (k_pos.dim() == 1 ? k_pos.unsqueeze(0).expand({hkv, k.size(1)}) : k_pos)
                      .repeat_interleave(group, 0)
                      .unsqueeze(1);                                             // [Hq, 1, nk]
  at::Tensor qp = q_pos.view({1, -1, 1});
  at::Tensor visible = kp <= qp;
  if (options.window > 0) {
    visible = visible.logical_and((qp - kp < options.window).logical_or(kp < options.sink));
  }
  at::Tensor scores = at::matmul(qf, kf.transpose(1, 2)) * scale;
  scores.masked_fill_(visible.logical_not(), -std::numeric_limits<float>::infinity());
  at::Tensor o = at::matmul(scores.softmax(-1), vf);  // [Hq, nq, hd]
  return o.permute({1, 0, 2}).to(q.scalar_type()).contiguous();
}

}  // namespace sift
