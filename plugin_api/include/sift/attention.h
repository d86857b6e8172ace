// Multi-head attention with grouped KV heads, blocked over queries, with optional statistics.
//
// Visibility is decided by RoPE positions, not by index: key j is visible to query i when
// pos(j) <= pos(i) (causal), and with a Λ mask additionally when pos(j) < sink or
// pos(i) - pos(j) < window. This makes the same kernel serve full prefill, chunked streaming
// prefill and decode over a compressed cache (whose entries keep their original positions).
//
// Two implementations, one contract. On the CPU (fp32/bf16, head dim 64 or 128) a tiled kernel
// with an online softmax (the FlashAttention recurrence) never materialises scores: memory is
// O(threads × tile). Elsewhere (CUDA, other shapes) LibTorch operators process queries in
// blocks of at least `block_size` rows (AttentionOptions), so memory is O(H × block × n_keys).
// Softmax is computed in fp32.
// Statistics need normalised probabilities; they are computed by the blocked LibTorch path for
// the query rows that feed them only (the last `window` rows, the last row, or all rows for
// column sums), except column sums of a whole bf16/fp16 prompt on CUDA, which come from the
// flash kernel's log-sum-exps (docs/engine.md, "Attention").
//
// Positions are host metadata: q_pos and k_pos should be CPU tensors (every cache this runtime
// builds keeps them there); device ones are copied to the host, which a GPU pays for with a
// synchronisation. No device value is read on the host, so attention never synchronises.
//
// REQUIRES: key positions ascending along the key axis (true for every cache this runtime builds).
// THREADING: pure function of its inputs; uses LibTorch's intra-op thread pool.
#ifndef SIFT_ATTENTION_H_
#define SIFT_ATTENTION_H_

#include <ATen/ATen.h>

#include <cstdint>

namespace sift {

// Which statistics to collect while attending. All outputs are fp32, per *query* head.
struct AttentionStatsRequest {
  // Sum over the last `window` queries of their softmax rows -> window_sum [Hq, n_keys].
  int64_t window = 0;
  // Softmax row of the last query -> last_query [Hq, n_keys].
  bool last_query = false;
  // Sum over all queries of their softmax rows (H2O accumulated attention) -> column_sum.
  bool column_sum = false;
  // Max over heads and over queries with index >= max_from_query of softmax -> max_prob [n_keys]
  // (ILRe's A). -1 disables.
  int64_t max_from_query = -1;
  // Raw scores q·k (no scale, no softmax) of the last query summed over all heads ->
  // last_query_logit_sum [n_keys] (GemFilter's selection signal).
  bool last_query_logit_sum = false;

  bool any() const {
    return window > 0 || last_query || column_sum || max_from_query >= 0 || last_query_logit_sum;
  }
};

struct AttentionStats {
  at::Tensor window_sum;            // [Hq, n_keys]
  at::Tensor last_query;            // [Hq, n_keys]
  at::Tensor column_sum;            // [Hq, n_keys]
  at::Tensor max_prob;              // [n_keys]
  at::Tensor last_query_logit_sum;  // [n_keys]
};

enum class AttentionKernel {
  kAuto,   // the CPU kernel where it applies, else LibTorch operators
  kTorch,  // LibTorch operators only (the reference; what a GPU runs)
};

struct AttentionOptions {
  AttentionKernel kernel = AttentionKernel::kAuto;
  // Queries per block on the LibTorch path, at least: a block takes more rows while its fp32
  // scores ([Hq, rows, keys]) stay within block_bytes (fewer operators, each a launch on a GPU;
  // 0: exactly block_size rows).
  int64_t block_size = 256;
  int64_t block_bytes = int64_t{64} << 20;
  int64_t sink = 0;    // Λ mask: always-visible leading positions (0 with window 0 = off)
  int64_t window = 0;  // Λ mask: recent positions visible (0 = unlimited)
  double scale = 0.0;  // 0 -> 1/sqrt(head_dim)
  // Compute the products in fp32 even for bf16 inputs (CPUs without hardware bf16, where
  // emulated bf16 products are slower than fp32 ones). The result keeps q's dtype.
  bool upcast_fp32 = false;
};

// q: [nq, Hq, hd]; k, v: [Hkv, nk, hd] (cache layout, may be strided views);
// q_pos: [nq] int64; k_pos: [nk] or [Hkv, nk] int64.
// Returns [nq, Hq, hd] in q's dtype. Fills *stats if request.any() (stats may be null otherwise).
at::Tensor Attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& q_pos, const at::Tensor& k_pos,
                     const AttentionOptions& options, const AttentionStatsRequest& request = {},
                     AttentionStats* stats = nullptr);

// The instruction-set level the CPU kernel runs at on this machine ("avx512", "avx2",
// "scalar"; SIFT_CPU_ISA lowers it).
const char* AttentionCpuKernelIsa();

// Dense reference (materialises the full matrix; tests only): same contract as Attention.
at::Tensor AttentionReference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& q_pos, const at::Tensor& k_pos,
                              const AttentionOptions& options);

}  // namespace sift

#endif  // SIFT_ATTENTION_H_
