// H2O's column sums of a prompt's attention, from the log-sum-exps of its forward pass, as one
// more causal attention. Runtime-internal: sift::Attention uses it on CUDA (docs/engine.md,
// "Attention").
//
// The column sum of key j for query head h is  C[h, j] = sum over i >= j of exp(s q_i.k_j - L_i),
// where L_i is query row i's log-sum-exp in the forward pass (the flash kernel returns it). With
// the roles swapped, keys as queries and queries as keys, both in reverse order, i >= j becomes
// the causal condition; -L_i / s folded into extra dimensions of the former queries (the former
// keys hold ones there) makes that attention's scores s q_i.k_j - L_i, and its own log-sum-exp of
// row j is log C[h, j]. So the column sums come from the same fused kernel as the output, in O(n)
// memory, instead of a pass over [rows, keys] blocks of every query row.
//
// THREADING: pure function of its inputs.
// ERRORS:    sift::Error on mismatched shapes.
#ifndef SIFT_RUNTIME_COLUMN_SUMS_H_
#define SIFT_RUNTIME_COLUMN_SUMS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>

namespace sift {

// A causal attention's log-sum-exp per query row: q, k [B, H, n, d] -> [B, H, n] fp32 with
// lse[b, h, i] = log(sum over j <= i of exp(scale q_i.k_j)).
using CausalLse = std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, double scale)>;

// Extra dimensions of the swapped attention's heads: -L / s in three parts of q's dtype (bf16
// holds 8 bits of a value, three parts about 24), padded so that the head dim stays a multiple of
// 8 (the flash kernel's rule).
constexpr int64_t kColumnSumExtraDims = 8;

// q: [Hkv, group, n, hd] (query head g * group + r at [g, r]); k: [Hkv, n, hd]; lse: [Hkv, group,
// n] fp32, the forward's log-sum-exp of scale q.k over the causal keys of each row. `lse_of`
// computes the swapped attention (head dim hd + kColumnSumExtraDims, q's dtype). Returns
// C [Hkv * group, n] fp32.
at::Tensor ColumnSumsFromLse(const at::Tensor& q, const at::Tensor& k, const at::Tensor& lse,
                             double scale, const CausalLse& lse_of);

}  // namespace sift

#endif  // SIFT_RUNTIME_COLUMN_SUMS_H_
