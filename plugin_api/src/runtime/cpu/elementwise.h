// Row-wise elementwise kernels of the decoder layer for contiguous fp32 CPU tensors: one pass
// over memory each, no temporaries. They replace a handful of LibTorch operators apiece, whose
// fixed cost per call dominates at decode sizes (one row); results equal the operator
// composition in sift::Model up to float rounding.
//
// THREADING: parallel over rows with LibTorch's intra-op pool when there are many.
#ifndef SIFT_RUNTIME_CPU_ELEMENTWISE_H_
#define SIFT_RUNTIME_CPU_ELEMENTWISE_H_

#include <cstdint>

namespace sift::cpu {

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, for rows r < n of width d.
void RmsNorm(const float* x, const float* w, float eps, int64_t n, int64_t d, float* out);

// rotate_half RoPE in place on x [n, heads, hd] (rows of width row_stride elements, heads
// contiguous at hd apart): x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin with cos/sin [n, hd/2].
void RopeInPlace(float* x, int64_t n, int64_t row_stride, int64_t heads, int64_t hd,
                 const float* cos, const float* sin);

// out[r, i] = silu(gu[r, i]) * gu[r, ff + i] for gu [n, 2 ff].
void SiluMul(const float* gu, int64_t n, int64_t ff, float* out);

}  // namespace sift::cpu

#endif  // SIFT_RUNTIME_CPU_ELEMENTWISE_H_
