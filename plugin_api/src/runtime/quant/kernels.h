// Internal interface between QuantizedMatrix and its per-ISA kernels (no LibTorch here, so the
// ISA files compile fast and without the precompiled ATen header).
//
// Each ISA file (kernels_scalar.cc, kernels_avx2.cc, kernels_avx512.cc, ...) is compiled with its
// own -m flags and returns its kernels for a ggml type; quantized_matrix.cc picks the file by the
// CPU's capability. Kernels are pure functions of their arguments and thread-safe.
#ifndef SIFT_RUNTIME_QUANT_KERNELS_H_
#define SIFT_RUNTIME_QUANT_KERNELS_H_

#include <cstdint>

#include "sift/ggml_types.h"

namespace sift::quant {

// Activations quantised to int8 per 32-element group (the int8-activation mode), n rows. The
// per-group values are stored group-major (a group's rows together, lds apart), so that a kernel
// loads them for up to 8 rows at once:
//   q[j * ldq + k]               element k of row j: round(x / d), in [-127, 127]
//   d[g * lds + j]               scale of group g (elements 32g..32g+31) of row j: max|x| / 127
//   sum[(2 * g + h) * lds + j]   d * (sum of q over half h of the group: 16 elements)
// lds >= n; kernels read 8 floats from any row's position, so both float arrays have 8 to spare
// at the end.
struct Int8Activations {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const float* sum = nullptr;
  int64_t ldq = 0, lds = 0;

  // The same rows from row j on.
  Int8Activations Rows(int64_t j) const {
    return Int8Activations{q + j * ldq, d + j, sum + j, ldq, lds};
  }
};

// For r < nrows and j < n: y[j * ldy + r] = dot(row r, x row j), where row r starts at
// rows + r * row_bytes and holds cols elements, and x row j starts at x + j * ldx.
using DotFn = void (*)(const uint8_t* rows, int64_t row_bytes, int64_t nrows, int64_t cols,
                       const float* x, int64_t n, int64_t ldx, float* y, int64_t ldy);
// The same with int8 activations (cols % 32 == 0).
using DotInt8Fn = void (*)(const uint8_t* rows, int64_t row_bytes, int64_t nrows, int64_t cols,
                           const Int8Activations& a, int64_t n, float* y, int64_t ldy);
// Writes the cols values of one row, each bit-identical to DequantizeRow's.
using DequantFn = void (*)(const uint8_t* row, int64_t cols, float* out);

struct Kernels {
  DotFn dot = nullptr;  // null when the type has no kernel at this level
  DequantFn dequant = nullptr;
};

Kernels ScalarKernels(GgmlType type);
Kernels Avx2Kernels(GgmlType type);
Kernels Avx512Kernels(GgmlType type);
// Int8-activation kernels: null for plain types (F32/F16/BF16), which keep the fp32 kernels.
DotInt8Fn Avx2Int8Kernel(GgmlType type);
DotInt8Fn Avx512VnniInt8Kernel(GgmlType type);

// True if the CPU has AVX-512 VNNI (cpu_isa.cc).
bool CpuHasAvx512Vnni();

// ---- Rows packed for the AVX-512 VNNI kernel (QuantizedMatrix::PackedForInt8; packed_rows.cc) --
// A tile is kPackRows weight rows. Per 32-column group g it holds, from byte
// (tile * cols / 32 + g) * PackedGroupBytes(type):
//   Q4_1: 4 vectors of 64 bytes of nibbles, then the 16 rows' fp16 scales d, then their fp16 mins
//   m; Q8_0: 8 vectors of 64 bytes of weights + 128 (as unsigned bytes), then the 16 fp16 scales d.
// Bytes 4i..4i+3 of a vector belong to row i of the tile: in vector v, Q4_1's low nibbles hold
// the group's elements 4v..4v+3 and its high nibbles 16+4v..16+4v+3; Q8_0's bytes elements
// 4v..4v+3. One vpdpbusd of such a vector with 4 activation bytes broadcast to every lane gives
// each of the 16 rows its dot product over those 4 columns.
constexpr int64_t kPackRows = 16;
// Bytes per tile and group; 0 for a type that is not packed.
constexpr int64_t PackedGroupBytes(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_1:
      return 4 * 64 + 2 * 2 * kPackRows;  // nibbles, d, m
    case GgmlType::kQ8_0:
      return 8 * 64 + 2 * kPackRows;  // weights + 128, d
    default:
      return 0;
  }
}
// Packs rows [0, 16 * tiles) (row r at rows + r * row_bytes, cols elements, cols % 32 == 0).
void PackTiles(GgmlType type, const uint8_t* rows, int64_t row_bytes, int64_t tiles, int64_t cols,
               uint8_t* out);
// For t < tiles, i < 16, j < n: y[j * ldy + 16 t + i] = dot(row 16 t + i, activation row j), the
// same sum as the DotInt8Fn of the type up to fp32 summation order.
using PackedDotFn = void (*)(const uint8_t* packed, int64_t tiles, int64_t cols,
                             const Int8Activations& a, int64_t n, float* y, int64_t ldy);
// Null for types without a packed layout.
PackedDotFn Avx512VnniPackedKernel(GgmlType type);

// Quantises n rows of cols floats (row stride ldx; cols % 32 == 0) into the arrays of an
// Int8Activations with ldq = cols and the given lds >= n: q holds n * cols bytes, d
// cols / 32 * lds + 8 floats and sum cols / 16 * lds + 8 floats.
void QuantizeActivations(const float* x, int64_t n, int64_t ldx, int64_t cols, int64_t lds,
                         int8_t* q, float* d, float* sum);

}  // namespace sift::quant

#endif  // SIFT_RUNTIME_QUANT_KERNELS_H_
