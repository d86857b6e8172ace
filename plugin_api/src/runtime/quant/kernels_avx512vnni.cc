// AVX-512 VNNI int8-activation kernels: int8_kernels.h with vpdpbusd on 256-bit vectors.
// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma -mf16c
// (plugin_api/CMakeLists.txt); called only when the CPU has them.
//
// GCC 12's AVX-512 intrinsic headers trip its own -Wmaybe-uninitialized (GCC bug 105593, fixed
// in 12.3): silenced for this file only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "block_common.h"
#include "kernels.h"

namespace sift::quant {
namespace {

struct Avx512VnniInt8 {
  static constexpr int kMaxRows = 8;  // 16 accumulators of 32 (EVEX) registers
  SIFT_INLINE static __m256i DotU8(__m256i w, __m256i x) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x);
  }
  SIFT_INLINE static __m256i DotS8(__m256i w, __m256i x) {
    return DotU8(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
  }
  SIFT_INLINE static __m256i Bits(uint32_t bits) { return _mm256_maskz_set1_epi8(bits, 0x10); }
};

}  // namespace
}  // namespace sift::quant

#include "int8_kernels.h"

namespace sift::quant {

DotInt8Fn Avx512VnniInt8Kernel(GgmlType type) { return Int8Kernel<Avx512VnniInt8>(type); }

}  // namespace sift::quant
