// CPU attention kernel: exact softmax attention computed tile by tile with an online softmax
// (the FlashAttention recurrence), so no query x key score matrix is ever materialised: memory
// is O(threads x tile), and the work is only over the keys each query block can see.
//
// Visibility follows sift/attention.h: key j is visible to query i when pos(j) <= pos(i), and
// with a Λ mask (window > 0) additionally when pos(j) < sink or pos(i) - pos(j) < window. Key
// positions must ascend along the key axis of every head.
//
// Numerics: products and softmax in fp32 (bf16 inputs are widened exactly); the output is
// rounded to the output dtype once. Results equal the dense reference up to summation order.
//
// THREADING: parallel over (KV head, query block, key slice) with LibTorch's intra-op pool; a
//            batch runs every sequence's items in one parallel region.
// ERRORS:    none; the caller (sift::Attention) validates shapes. Positions are host memory.
#ifndef SIFT_RUNTIME_CPU_FLASH_ATTENTION_H_
#define SIFT_RUNTIME_CPU_FLASH_ATTENTION_H_

#include <cstdint>

#include "sift/quantized_matrix.h"  // CpuIsa: the CPU kernel levels

namespace sift::cpu {

enum class ElemType { kF32, kBF16 };

// Strides are in elements. q/out: [nq, hq, hd]; k/v: [hkv, nk, hd] with hd contiguous.
struct FlashAttentionArgs {
  const void* q = nullptr;
  ElemType q_type = ElemType::kF32;
  int64_t q_stride_row = 0, q_stride_head = 0;
  const void* k = nullptr;
  const void* v = nullptr;
  ElemType kv_type = ElemType::kF32;
  int64_t k_stride_head = 0, k_stride_row = 0;
  int64_t v_stride_head = 0, v_stride_row = 0;
  const int64_t* q_pos = nullptr;  // [nq]
  const int64_t* k_pos = nullptr;  // [hkv, nk] with k_pos_stride_head, or [nk] with stride 0
  int64_t k_pos_stride_head = 0;
  void* out = nullptr;  // same dtype as q
  int64_t out_stride_row = 0, out_stride_head = 0;
  int64_t nq = 0, nk = 0, hq = 0, hkv = 0, hd = 0;
  float scale = 1.0f;
  int64_t sink = 0, window = 0;  // Λ mask; window 0 = off
};

// Head dims the kernel handles (others use the LibTorch path).
bool FlashAttentionSupportsHeadDim(int64_t hd);

// Runs at DefaultCpuIsa()'s level, or at the given one (tests; it must not exceed the CPU's).
// At the AVX-512 level, bf16 caches use bf16 dot products (vdpbf16ps) where the CPU has them
// (q and the probabilities are then rounded to bf16, as a bf16 matrix product would).
void FlashAttention(const FlashAttentionArgs& args);
void FlashAttention(const FlashAttentionArgs& args, CpuIsa isa, bool bf16_dot_products = true);

// count independent attentions (a decode batch: each sequence's query rows over its own cache,
// whatever its length) in one parallel region at DefaultCpuIsa()'s level; the same results as
// calling FlashAttention on each. All args must share hd and kv_type.
void FlashAttentionBatch(const FlashAttentionArgs* args, int64_t count);

// Name of the instruction-set variant FlashAttention runs ("avx512", "avx2", "scalar").
const char* FlashAttentionIsa();

}  // namespace sift::cpu

#endif  // SIFT_RUNTIME_CPU_FLASH_ATTENTION_H_
