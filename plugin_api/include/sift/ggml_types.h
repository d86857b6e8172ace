// ggml tensor types (block-quantised and plain) and their dequantisation to float.
//
// Block layouts and formulas: ggml's src/ggml-common.h (block_q4_0, block_q4_K, ...) and the
// dequantize_row_* functions of src/ggml-quants.c (https://github.com/ggml-org/ggml). Every
// function is pure and thread-safe. Dequantize* throw sift::Error for a type that is not supported.
#ifndef SIFT_GGML_TYPES_H_
#define SIFT_GGML_TYPES_H_

#include <cstddef>
#include <cstdint>

namespace sift {

// Numbered as in ggml.h.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

// Name as ggml prints it ("Q4_1"), or "type<N>" for an unknown number (that string lives in a
// thread-local buffer, valid until the next GgmlTypeName call on the same thread).
const char* GgmlTypeName(GgmlType type);
// True if the number is a known ggml type (its size is known, even if we cannot dequantise it).
bool GgmlTypeKnown(uint32_t type);
// True if DequantizeRow supports it.
bool GgmlTypeDequantizable(GgmlType type);
// Elements per block (1 for plain types) and bytes per block. REQUIRES: GgmlTypeKnown.
int64_t GgmlBlockSize(GgmlType type);
int64_t GgmlBlockBytes(GgmlType type);
// Bytes of a row of n elements. REQUIRES: n % GgmlBlockSize(type) == 0.
uint64_t GgmlRowBytes(GgmlType type, int64_t n);

// Dequantises n elements starting at src into dst (fp32).
// REQUIRES: n % GgmlBlockSize(type) == 0; src holds GgmlRowBytes(type, n) bytes.
void DequantizeRow(GgmlType type, const uint8_t* src, float* dst, int64_t n);

// IEEE half / bfloat16 conversions used by the formats above. Float-to-16-bit conversions round
// to nearest, ties to even; overflow gives infinity; NaN stays NaN (quiet).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BF16ToFloat(uint16_t b);
uint16_t FloatToBF16(float f);

}  // namespace sift

#endif  // SIFT_GGML_TYPES_H_
