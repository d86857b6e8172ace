// Portable fallback: each row is dequantised with DequantizeRow (ggml_types.cc) into a
// thread-local buffer and multiplied in plain C++ (eight partial sums, so the rounding depth is
// like the SIMD kernels'). Compiled with the project's baseline flags.
#include <vector>

#include "kernels.h"

namespace sift::quant {
namespace {

template <GgmlType kType>
void Dequant(const uint8_t* row, int64_t cols, float* out) {
  DequantizeRow(kType, row, out, cols);
}

template <GgmlType kType>
void Dot(const uint8_t* rows, int64_t row_bytes, int64_t nrows, int64_t cols, const float* x,
         int64_t n, int64_t ldx, float* y, int64_t ldy) {
  thread_local std::vector<float> w;
  w.resize(static_cast<size_t>(cols));
  for (int64_t r = 0; r < nrows; ++r) {
    DequantizeRow(kType, rows + r * row_bytes, w.data(), cols);
    for (int64_t j = 0; j < n; ++j) {
      const float* xj = x + j * ldx;
      float part[8] = {};
      int64_t k = 0;
      for (; k + 8 <= cols; k += 8) {
        for (int l = 0; l < 8; ++l) part[l] += w[k + l] * xj[k + l];
      }
      float sum = 0;
      for (float p : part) sum += p;
      for (; k < cols; ++k) sum += w[k] * xj[k];
      y[j * ldy + r] = sum;
    }
  }
}

template <GgmlType kType>
Kernels KernelsOf() {
  return Kernels{&Dot<kType>, &Dequant<kType>};
}

}  // namespace

Kernels ScalarKernels(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return KernelsOf<GgmlType::kF32>();
    case GgmlType::kF16:
      return KernelsOf<GgmlType::kF16>();
    case GgmlType::kBF16:
      return KernelsOf<GgmlType::kBF16>();
    case GgmlType::kQ4_0:
      return KernelsOf<GgmlType::kQ4_0>();
    case GgmlType::kQ4_1:
      return KernelsOf<GgmlType::kQ4_1>();
    case GgmlType::kQ5_0:
      return KernelsOf<GgmlType::kQ5_0>();
    case GgmlType::kQ5_1:
      return KernelsOf<GgmlType::kQ5_1>();
    case GgmlType::kQ8_0:
      return KernelsOf<GgmlType::kQ8_0>();
    case GgmlType::kQ4_K:
      return KernelsOf<GgmlType::kQ4_K>();
    case GgmlType::kQ5_K:
      return KernelsOf<GgmlType::kQ5_K>();
    case GgmlType::kQ6_K:
      return KernelsOf<GgmlType::kQ6_K>();
    default:
      return Kernels{};
  }
}

}  // namespace sift::quant
