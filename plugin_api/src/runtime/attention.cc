#include "sift/attention.h"

#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>

#include "column_sums.h"
#include "cpu/flash_attention.h"
#include "decode_attention.h"
#include "sift/error.h"
#include "sift/host.h"
#include "tensor_util.h"

namespace sift {
namespace {

// Positions are host metadata (sift/attention.h); device ones are brought over (counted).
at::Tensor HostPositions(const at::Tensor& pos) {
  if (pos.is_cpu()) return Contiguous(AsType(pos, at::kLong));
  return ToHost(AsType(pos, at::kLong));
}

// LibTorch's cuDNN attention backend builds an execution plan for every new shape (tens of ms
// each). A decode step has a new key length every token, and PyramidKV's per-layer budgets give
// every layer its own, so on a lent H200 decode cost about one plan build per distinct shape
// (docs/results/gpu.md). Turned off on first CUDA use, so SDPA takes the flash or memory-
// efficient kernels; SIFT_SDPA_CUDNN=1 keeps LibTorch's default (for comparisons).
void ConfigureCudaSdpaOnce() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  static std::once_flag once;
  std::call_once(once, [] {
    const char* keep = std::getenv("SIFT_SDPA_CUDNN");
    const bool cudnn = keep != nullptr && std::strcmp(keep, "1") == 0;
    at::globalContext().setSDPUseCuDNN(cudnn);
    std::fprintf(stderr, "[sift] CUDA attention: LibTorch's cuDNN SDPA backend %s\n",
                 cudnn ? "kept (SIFT_SDPA_CUDNN=1)" : "off (SIFT_SDPA_CUDNN=1 keeps it)");
  });
#endif
}

// Number of leading keys with position <= limit, max over heads (positions ascend per head).
int64_t CountAtMost(const at::Tensor& k_pos_host, int64_t limit) {
  const at::Tensor rows = k_pos_host.dim() == 1 ? k_pos_host.unsqueeze(0) : k_pos_host;
  const int64_t heads = rows.size(0), n = rows.size(1);
  const int64_t* p = rows.data_ptr<int64_t>();  // host: ToHost'd positions
  int64_t best = 0;
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t* row = p + h * n;
    best = std::max<int64_t>(best, std::upper_bound(row, row + n, limit) - row);
  }
  return best;
}

// Visibility of keys [k0, k1) to queries at positions q_pos_block: [1 or Hkv, B, k1-k0], computed
// where the positions are and moved to `device` (BlockedAttention passes device copies of the
// positions, so a GPU builds its masks itself: no device read, and no mask through host memory).
at::Tensor VisibleMask(const at::Tensor& q_pos_block, const at::Tensor& k_pos, int64_t k0,
                       int64_t k1, const AttentionOptions& options, const at::Device& device) {
  at::Tensor kp = (k_pos.dim() == 1 ? k_pos.unsqueeze(0) : k_pos).slice(1, k0, k1).unsqueeze(1);
  at::Tensor qp = q_pos_block.view({1, -1, 1});
  at::Tensor visible = kp <= qp;
  if (options.window > 0) {
    visible = visible.logical_and((qp - kp < options.window).logical_or(kp < options.sink));
  }
  return visible.to(device);
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

double Scale(const AttentionOptions& options, int64_t hd) {
  return options.scale > 0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(hd));
}

// The CPU kernel takes fp32/bf16 tensors whose head rows are contiguous.
bool UseCpuKernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const AttentionOptions& options) {
  auto supported = [](const at::Tensor& t) {
    return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16;
  };
  return options.kernel != AttentionKernel::kTorch && q.is_cpu() && k.is_cpu() && v.is_cpu() &&
         supported(q) && supported(k) && k.scalar_type() == v.scalar_type() &&
         cpu::FlashAttentionSupportsHeadDim(q.size(2)) && q.stride(2) == 1 && k.stride(2) == 1 &&
         v.stride(2) == 1 && q.numel() > 0 && k.size(1) > 0;
}

// The CPU kernel's arguments for q against k, v into out (host tensors UseCpuKernel accepted;
// positions on the host, k_pos [nk] or [hkv, nk] with unit stride along the keys).
cpu::FlashAttentionArgs KernelArgs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& q_pos, const at::Tensor& k_pos,
                                   const AttentionOptions& options, const at::Tensor& out) {
  cpu::FlashAttentionArgs a;
  auto elem = [](const at::Tensor& t) {
    return t.scalar_type() == at::kBFloat16 ? cpu::ElemType::kBF16 : cpu::ElemType::kF32;
  };
  a.q = q.data_ptr();  // host: the CPU kernel's input
  a.q_type = elem(q);
  a.q_stride_row = q.stride(0);
  a.q_stride_head = q.stride(1);
  a.k = k.data_ptr();  // host: the CPU kernel's input
  a.v = v.data_ptr();  // host: the CPU kernel's input
  a.kv_type = elem(k);
  a.k_stride_head = k.stride(0);
  a.k_stride_row = k.stride(1);
  a.v_stride_head = v.stride(0);
  a.v_stride_row = v.stride(1);
  a.q_pos = q_pos.data_ptr<int64_t>();  // host: positions
  a.k_pos = k_pos.data_ptr<int64_t>();  // host: positions
  a.k_pos_stride_head = k_pos.dim() == 2 ? k_pos.stride(0) : 0;
  a.out = out.data_ptr();  // host: the CPU kernel's output
  a.out_stride_row = out.stride(0);
  a.out_stride_head = out.stride(1);
  a.nq = q.size(0);
  a.nk = k.size(1);
  a.hq = q.size(1);
  a.hkv = k.size(0);
  a.hd = q.size(2);
  a.scale = static_cast<float>(Scale(options, a.hd));
  a.sink = options.sink;
  a.window = options.window;
  return a;
}

// Key positions as the kernel reads them: a cache's [hkv, size] view of its [hkv, capacity]
// rows is used in place (its rows are contiguous), anything else made contiguous.
at::Tensor KernelKeyPositions(const at::Tensor& k_pos) {
  return k_pos.dim() == 2 && k_pos.stride(1) == 1 ? k_pos : Contiguous(k_pos);
}

at::Tensor CpuKernelAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& q_pos, const at::Tensor& k_pos,
                              const AttentionOptions& options) {
  const at::Tensor qp = Contiguous(q_pos), kp = KernelKeyPositions(k_pos);
  at::Tensor out = at::empty(q.sizes(), q.options());
  cpu::FlashAttention(KernelArgs(q, k, v, qp, kp, options, out));
  return out;
}

// Queries and keys are the positions 0..n-1 in order (every head): a prompt over a fresh cache.
[[maybe_unused]] bool IsDenseCausal(const at::Tensor& q_pos, const at::Tensor& k_pos) {
  const int64_t n = q_pos.size(0);
  const int64_t* qp = q_pos.data_ptr<int64_t>();  // host: positions
  const at::Tensor kr = k_pos.dim() == 1 ? k_pos.unsqueeze(0) : k_pos;
  const int64_t* kp = kr.data_ptr<int64_t>();  // host: positions
  if (kr.size(1) != n) return false;
  for (int64_t i = 0; i < n; ++i) {
    if (qp[i] != i) return false;
  }
  for (int64_t h = 0; h < kr.size(0); ++h) {
    for (int64_t i = 0; i < n; ++i) {
      if (kp[h * n + i] != i) return false;
    }
  }
  return true;
}

// The case one causal call of LibTorch's fused kernel covers: a whole prompt over a fresh cache,
// no Λ mask, products in the cache's dtype.
[[maybe_unused]] bool OneCausalCall(const at::Tensor& q_pos, const at::Tensor& k_pos,
                                    const AttentionOptions& options) {
  return options.window == 0 && !options.upcast_fp32 && q_pos.size(0) == k_pos.size(-1) &&
         IsDenseCausal(q_pos, k_pos);
}

// q [nq, hq, hd] as [hkv, group, nq, hd]: query head h uses KV head h / group (HF repeat_kv).
at::Tensor GroupedQueries(const at::Tensor& q, int64_t hkv) {
  return q.permute({1, 0, 2}).reshape({hkv, q.size(1) / hkv, q.size(0), q.size(2)});
}

// A cache's k or v [hkv, nk, hd] seen by every query head of its group: [hkv, group, nk, hd].
[[maybe_unused]] at::Tensor GroupedKeys(const at::Tensor& kv, int64_t group) {
  return kv.unsqueeze(1).expand({kv.size(0), group, kv.size(1), kv.size(2)});
}

// [hkv, group, nq, hd] (any contiguous-compatible layout) back to [nq, hq, hd] in `dtype`.
at::Tensor TokensMajor(const at::Tensor& grouped, at::ScalarType dtype) {
  const int64_t hq = grouped.size(0) * grouped.size(1);
  return grouped.reshape({hq, grouped.size(2), grouped.size(3)})
      .permute({1, 0, 2})
      .to(dtype)
      .contiguous();
}

// First query row any requested statistic reads (nq when none).
int64_t FirstStatsRow(const AttentionStatsRequest& r, int64_t nq) {
  int64_t first = nq;
  if (r.window > 0) first = std::min(first, std::max<int64_t>(0, nq - r.window));
  if (r.last_query || r.last_query_logit_sum) first = std::min(first, nq - 1);
  if (r.column_sum) first = 0;
  if (r.max_from_query >= 0) first = std::min(first, std::max<int64_t>(0, r.max_from_query));
  return std::max<int64_t>(0, first);
}

// Adds what `request` asks from the fp32 probabilities `p` [Hq, b, kend] of query rows
// [i0, i0 + b) (of nq) to `stats`.
void AccumulateStats(const AttentionStatsRequest& request, const at::Tensor& p, int64_t i0,
                     int64_t nq, AttentionStats* stats) {
  const int64_t b = p.size(1), kend = p.size(2), i1 = i0 + b;
  const int64_t window_from = nq - request.window;
  if (request.window > 0 && i1 > window_from) {
    const int64_t from = std::max<int64_t>(0, window_from - i0);
    stats->window_sum.slice(1, 0, kend).add_(p.slice(1, from, b).sum(1));
  }
  if (request.last_query && i1 == nq) {
    stats->last_query.slice(1, 0, kend).copy_(p.select(1, b - 1));
  }
  if (request.column_sum) stats->column_sum.slice(1, 0, kend).add_(p.sum(1));
  if (request.max_from_query >= 0 && i1 > request.max_from_query) {
    const int64_t from = std::max<int64_t>(0, request.max_from_query - i0);
    at::Tensor m = std::get<0>(p.slice(1, from, b).reshape({-1, kend}).max(0));
    at::Tensor dst = stats->max_prob.slice(0, 0, kend);
    dst.copy_(at::maximum(dst, m));
  }
}

// Query rows per block of the LibTorch path: options.block_size, or more while [hq, rows, nk]
// fp32 scores fit options.block_bytes (a Λ-masked chunk of ILRe's streaming pass, about 1.5K
// keys, then runs as one block instead of four).
int64_t BlockRows(const AttentionOptions& options, int64_t hq, int64_t nk) {
  const int64_t row_bytes = std::max<int64_t>(1, hq * nk * static_cast<int64_t>(sizeof(float)));
  return std::max<int64_t>({1, options.block_size, options.block_bytes / row_bytes});
}

// LibTorch attention, blocked over queries [row_begin, nq): writes the output rows into `out`
// when it is defined and accumulates the requested statistics. Positions are host tensors.
void BlockedAttention(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                      const at::Tensor& q_pos, const at::Tensor& k_pos,
                      const AttentionOptions& options, const AttentionStatsRequest& request,
                      AttentionStats* stats, int64_t row_begin, at::Tensor out) {
  // Products run in the cache's dtype (fp32 when upcasting); q may arrive in fp32.
  const at::ScalarType ct = options.upcast_fp32 ? at::kFloat : k_in.scalar_type();
  const at::Tensor q = AsType(q_in, ct);
  const at::Tensor k = AsType(k_in, ct);
  const at::Tensor v = AsType(v_in, ct);
  const int64_t nq = q.size(0), hq = q.size(1), hd = q.size(2);
  const int64_t hkv = k.size(0), group = hq / hkv;
  const double scale = Scale(options, hd);
  const int64_t block = BlockRows(options, hq, k.size(1));
  const bool lambda = options.window > 0;
  const at::Device device = q.device();
  const int64_t* qp = q_pos.data_ptr<int64_t>();  // host: positions
  // Masks are built on the device from positions copied there once per call (a few hundred KB
  // at 32K keys). Built on the host, each 256-query block's [256, keys] mask went through
  // pageable memory: 8 MB per block and layer at 32K, the cause found when a chunked 32K prefill
  // took 11 s on an H100 against 0.24 s whole (docs/results/gpu.md, section 4).
  at::Tensor q_pos_mask, k_pos_mask;
  auto mask_positions = [&] {
    if (!k_pos_mask.defined()) {
      q_pos_mask = q_pos.to(device);
      k_pos_mask = k_pos.to(device);
    }
  };

  // [Hkv, group, nq, hd]: query head h uses KV head h / group (HF repeat_kv order).
  at::Tensor qh = GroupedQueries(q, hkv);
  for (int64_t i0 = row_begin; i0 < nq; i0 += block) {
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
    if (!request.any() && out.defined()) {
      // LibTorch's fused kernel (flash / memory-efficient where available). A block that sees
      // every key it reaches needs no mask, which keeps the flash kernel eligible.
      // No mask is passed as an empty optional: LibTorch 2.x rejects an undefined mask tensor
      // ("attn_mask.dtype: nullptr") on CUDA.
      const at::Tensor qv = qb.view({hkv, group, b, hd});
      const at::Tensor kv = GroupedKeys(kb, group);
      const at::Tensor vv = GroupedKeys(vb, group);
      if (kfull < kend) mask_positions();
      at::Tensor ob =
          kfull < kend
              ? at::scaled_dot_product_attention(
                    qv, kv, vv,
                    VisibleMask(q_pos_mask.slice(0, i0, i1), k_pos_mask, 0, kend, options, device)
                        .unsqueeze(1),
                    0.0, false, scale)
              : at::scaled_dot_product_attention(qv, kv, vv, {}, 0.0, false, scale);
      out.slice(2, i0, i1).copy_(ob);
      continue;
    }
#endif
    at::Tensor raw = at::bmm(qb, kb.transpose(1, 2));  // [Hkv, group*b, kend]
    at::Tensor scores = raw.to(at::kFloat).view({hkv, group, b, kend});
    const bool has_last = i1 == nq;
    if (request.last_query_logit_sum && has_last) {
      stats->last_query_logit_sum.slice(0, 0, kend)
          .add_(scores.select(2, b - 1).sum(at::IntArrayRef{0, 1}));
    }
    scores.mul_(scale);
    if (kfull < kend) {
      mask_positions();
      at::Tensor visible =
          VisibleMask(q_pos_mask.slice(0, i0, i1), k_pos_mask, kfull, kend, options, device)
              .unsqueeze(1);
      scores.slice(3, kfull, kend)
          .masked_fill_(visible.logical_not(), -std::numeric_limits<float>::infinity());
    }
    at::Tensor probs = scores.softmax(-1);  // fp32 [Hkv, group, b, kend]

    if (request.any()) AccumulateStats(request, probs.view({hq, b, kend}), i0, nq, stats);
    if (!out.defined()) continue;
    at::Tensor ob = at::bmm(probs.view({hkv, group * b, kend}).to(v.scalar_type()), vb);
    out.slice(2, i0, i1).copy_(ob.view({hkv, group, b, hd}));
  }
}

// LibTorch operators, no statistics: one causal SDPA call for a whole prompt over a fresh cache
// (LibTorch's flash kernel), else SDPA per block of queries (BlockedAttention).
at::Tensor FusedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& q_pos, const at::Tensor& k_pos,
                          const AttentionOptions& options) {
  const int64_t nq = q.size(0), hkv = k.size(0), hd = q.size(2), group = q.size(1) / hkv;
  if (q.is_cuda()) ConfigureCudaSdpaOnce();
#if TORCH_VERSION_MAJOR >= 2 && (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 1)
  if (OneCausalCall(q_pos, k_pos, options)) {
    // Top-left causal alignment is right when queries and keys are the same positions.
    const at::Tensor o = at::scaled_dot_product_attention(
        GroupedQueries(AsType(q, k.scalar_type()), hkv), GroupedKeys(k, group),
        GroupedKeys(v, group), {}, 0.0, /*is_causal=*/true, Scale(options, hd));
    return TokensMajor(o, q.scalar_type());
  }
#endif
  at::Tensor out = at::empty({hkv, group, nq, hd},
                             q.options().dtype(options.upcast_fp32 ? at::kFloat : q.scalar_type()));
  BlockedAttention(q, k, v, q_pos, k_pos, options, {}, nullptr, 0, out);
  return TokensMajor(out, q.scalar_type());
}

#if TORCH_VERSION_MAJOR >= 2 && (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 1)
// On CUDA, a whole bf16/fp16 prompt over a fresh cache: LibTorch's flash kernel gives the output
// and every row's log-sum-exp, and H2O's column sums come from one more call of it
// (column_sums.h) instead of the blocked pass over every query row. Returns false when the case
// does not apply or the kernel refuses the inputs; the caller then takes the blocked pass.
bool FlashWithColumnSums(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const at::Tensor& q_pos, const at::Tensor& k_pos,
                         const AttentionOptions& options, at::Tensor* out, at::Tensor* column_sum) {
  const int64_t hd = q.size(2), hkv = k.size(0), group = q.size(1) / hkv;
  const at::ScalarType dtype = k.scalar_type();
  if (!q.is_cuda() || (dtype != at::kBFloat16 && dtype != at::kHalf) || hd % 8 != 0 ||
      hd + kColumnSumExtraDims > 256 || !OneCausalCall(q_pos, k_pos, options)) {
    return false;
  }
  ConfigureCudaSdpaOnce();
  const double scale = Scale(options, hd);
  // (output, log-sum-exp [B, H, n] fp32, ...) of LibTorch's flash kernel, causal from the top left.
  const auto flash = [](const at::Tensor& qq, const at::Tensor& kk, const at::Tensor& vv,
                        double s) {
    return at::_scaled_dot_product_flash_attention(qq, kk, vv, 0.0, /*is_causal=*/true,
                                                   /*return_debug_mask=*/false, s);
  };
  try {
    const at::Tensor qh = GroupedQueries(AsType(q, dtype), hkv);
    const auto forward = flash(qh, GroupedKeys(k, group), GroupedKeys(v, group), scale);
    *column_sum = ColumnSumsFromLse(qh, k, std::get<1>(forward).narrow(2, 0, q.size(0)), scale,
                                    [&](const at::Tensor& a, const at::Tensor& b, double s) {
                                      return std::get<1>(flash(a, b, b, s));
                                    });
    *out = TokensMajor(std::get<0>(forward), q.scalar_type());
    return true;
  } catch (const c10::Error& e) {
    static std::once_flag once;
    std::call_once(once, [&e] {
      const std::string what = e.what_without_backtrace();
      std::fprintf(stderr,
                   "[sift] CUDA column sums: LibTorch's flash kernel refused the inputs (%s); "
                   "using the blocked pass\n",
                   what.substr(0, what.find('\n')).c_str());
    });
    return false;
  }
}
#endif

}  // namespace

at::Tensor Attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& q_pos_in, const at::Tensor& k_pos_in,
                     const AttentionOptions& options, const AttentionStatsRequest& request,
                     AttentionStats* stats) {
  CheckShapes(q, k, v, q_pos_in, k_pos_in);
  SIFT_CHECK(!request.any() || stats != nullptr, "Attention: statistics requested without output");
  const at::Tensor q_pos = HostPositions(q_pos_in);
  const at::Tensor k_pos = HostPositions(k_pos_in);
  const int64_t nq = q.size(0), hq = q.size(1), nk = k.size(1);

  if (request.any()) {
    const auto opts = q.options().dtype(at::kFloat);
    if (request.window > 0) stats->window_sum = at::zeros({hq, nk}, opts);
    if (request.last_query) stats->last_query = at::zeros({hq, nk}, opts);
    if (request.column_sum) stats->column_sum = at::zeros({hq, nk}, opts);
    if (request.max_from_query >= 0) stats->max_prob = at::zeros({nk}, opts);
    if (request.last_query_logit_sum) stats->last_query_logit_sum = at::zeros({nk}, opts);
  }

  // The output always comes from a fused kernel (the CPU one, or LibTorch's SDPA); statistics
  // need normalised probabilities, recomputed in a second pass over the query rows they read
  // only (the window, the last row; every row only for column sums), with the same operators
  // whatever computed the output, so the scores do not depend on the device's kernel.
  // Column sums read every query row; on CUDA they come from the flash kernel's log-sum-exps
  // where it applies (FlashWithColumnSums), else from the blocked pass with the rest.
  AttentionStatsRequest blocked = request;
  at::Tensor out;
#if TORCH_VERSION_MAJOR >= 2 && (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 1)
  if (request.column_sum &&
      FlashWithColumnSums(q, k, v, q_pos, k_pos, options, &out, &stats->column_sum)) {
    blocked.column_sum = false;
  }
#endif
  if (!out.defined()) {
    out = UseCpuKernel(q, k, v, options) ? CpuKernelAttention(q, k, v, q_pos, k_pos, options)
                                         : FusedAttention(q, k, v, q_pos, k_pos, options);
  }
  if (blocked.any()) {
    BlockedAttention(q, k, v, q_pos, k_pos, options, blocked, stats, FirstStatsRow(blocked, nq),
                     at::Tensor());
  }
  return out;
}

at::Tensor DecodeAttention(const at::Tensor& q, const at::Tensor& positions,
                           const std::vector<KvCache*>& caches, int64_t layer,
                           const AttentionOptions& options, at::Tensor* out) {
  const int64_t n = q.size(0);
  SIFT_CHECK(q.dim() == 3 && positions.dim() == 1 && positions.size(0) == n &&
                 static_cast<int64_t>(caches.size()) == n,
             "DecodeAttention: q ", q.sizes(), ", positions ", positions.sizes(), " and ",
             caches.size(), " caches (need q [n, hq, hd], n positions and n caches)");
  SIFT_CHECK(
      out == nullptr || (out->sizes() == q.sizes() && out->is_contiguous() &&
                         out->scalar_type() == q.scalar_type() && out->device() == q.device()),
      "DecodeAttention: out must be a contiguous tensor like q ", q.sizes());
  const at::Tensor pos = HostPositions(positions);
  const bool cpu = q.is_cpu();
  at::Tensor result = out != nullptr ? *out
                      : cpu          ? at::empty(q.sizes(), q.options())
                                     : at::Tensor();
  // Every row on the CPU kernel in one parallel region when all of them can take it. Row i's
  // arguments are the whole batch's with the pointers moved to row i (no view per row).
  std::vector<cpu::FlashAttentionArgs> args;
  std::vector<at::Tensor> key_positions;  // what args' k_pos point into
  args.reserve(static_cast<size_t>(n));
  key_positions.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n && cpu; ++i) {
    const KvCache& cache = *caches[static_cast<size_t>(i)];
    const at::Tensor k = cache.Keys(layer), v = cache.Values(layer);
    key_positions.push_back(KernelKeyPositions(cache.Positions(layer)));
    CheckShapes(q, k, v, pos, key_positions.back());
    if (!UseCpuKernel(q, k, v, options) || k.scalar_type() != caches[0]->shape().dtype) break;
    cpu::FlashAttentionArgs a = KernelArgs(q, k, v, pos, key_positions.back(), options, result);
    a.q = static_cast<const char*>(a.q) + i * q.stride(0) * q.element_size();
    a.q_pos += i;
    a.out = static_cast<char*>(a.out) + i * result.stride(0) * result.element_size();
    a.nq = 1;
    args.push_back(a);
  }
  if (static_cast<int64_t>(args.size()) == n) {
    cpu::FlashAttentionBatch(args.data(), n);
    return result;
  }
  std::vector<at::Tensor> rows;
  rows.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const KvCache& cache = *caches[static_cast<size_t>(i)];
    rows.push_back(Attention(q.narrow(0, i, 1), cache.Keys(layer), cache.Values(layer),
                             pos.narrow(0, i, 1), cache.Positions(layer), options));
  }
  at::Tensor all = n == 1 ? rows[0] : at::cat(rows, 0);
  if (out == nullptr) return all;
  out->copy_(all);
  return *out;
}

const char* AttentionCpuKernelIsa() { return cpu::FlashAttentionIsa(); }

at::Tensor AttentionReference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& q_pos, const at::Tensor& k_pos,
                              const AttentionOptions& options) {
  CheckShapes(q, k, v, q_pos, k_pos);
  const int64_t hq = q.size(1), hd = q.size(2), hkv = k.size(0), group = hq / hkv;
  const double scale = Scale(options, hd);
  at::Tensor qf = q.to(at::kFloat).permute({1, 0, 2});           // [Hq, nq, hd]
  at::Tensor kf = k.to(at::kFloat).repeat_interleave(group, 0);  // [Hq, nk, hd]
  at::Tensor vf = v.to(at::kFloat).repeat_interleave(group, 0);
  const at::Tensor k_pos_d = k_pos.to(q.device(), at::kLong);
  at::Tensor kp = (k_pos_d.dim() == 1 ? k_pos_d.unsqueeze(0).expand({hkv, k.size(1)}) : k_pos_d)
                      .repeat_interleave(group, 0)
                      .unsqueeze(1);  // [Hq, 1, nk]
  at::Tensor qp = q_pos.to(q.device(), at::kLong).view({1, -1, 1});
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
