// AVX-512 (F, BW, VL) fp32-activation kernels: simd_kernels.h with 16 float lanes.
// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx2 -mfma -mf16c (plugin_api/CMakeLists.txt);
// called only when the CPU has them.
// GCC 12's AVX-512 intrinsic headers trip its own -Wmaybe-uninitialized (GCC bug 105593, fixed
// in 12.3): silenced for this file only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "block_common.h"
#include "kernels.h"

namespace sift::quant {
namespace {

struct Avx512 {
  static constexpr int W = 16;
  static constexpr int kMaxRows = 8;  // 16 accumulators of 32 registers
  using F = __m512;
  using I = __m512i;
  SIFT_INLINE static F Zero() { return _mm512_setzero_ps(); }
  SIFT_INLINE static F Load(const float* p) { return _mm512_loadu_ps(p); }
  SIFT_INLINE static void Store(float* p, F v) { _mm512_storeu_ps(p, v); }
  SIFT_INLINE static F Set1(float v) { return _mm512_set1_ps(v); }
  SIFT_INLINE static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  SIFT_INLINE static F Add(F a, F b) { return _mm512_add_ps(a, b); }
  SIFT_INLINE static F Sub(F a, F b) { return _mm512_sub_ps(a, b); }
  SIFT_INLINE static F Fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  SIFT_INLINE static float Sum(F v) { return _mm512_reduce_add_ps(v); }
  SIFT_INLINE static F Half(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, sizeof(h));
    return _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<int16_t>(h)));
  }
  SIFT_INLINE static F F16(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  SIFT_INLINE static F BF16(const uint8_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  SIFT_INLINE static I U8(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  SIFT_INLINE static I I8(const uint8_t* p) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  SIFT_INLINE static I AndC(I v, int c) { return _mm512_and_si512(v, _mm512_set1_epi32(c)); }
  SIFT_INLINE static I SubC(I v, int c) { return _mm512_sub_epi32(v, _mm512_set1_epi32(c)); }
  SIFT_INLINE static I SrlC(I v, int c) { return _mm512_srli_epi32(v, static_cast<unsigned>(c)); }
  SIFT_INLINE static I SllC(I v, int c) { return _mm512_slli_epi32(v, static_cast<unsigned>(c)); }
  SIFT_INLINE static I Or(I a, I b) { return _mm512_or_si512(a, b); }
  SIFT_INLINE static F ToF(I v) { return _mm512_cvtepi32_ps(v); }
  SIFT_INLINE static I HighBits(uint32_t bits) {
    return _mm512_maskz_set1_epi32(static_cast<__mmask16>(bits), 16);
  }
  // A 16-entry table lookup in one instruction (vpermps reads bits 3:0 of each index lane).
  static constexpr bool kLut16 = true;
  SIFT_INLINE static F Iota() {
    return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  }
  SIFT_INLINE static F Lut16(I index, F table) { return _mm512_permutexvar_ps(index, table); }
};

}  // namespace
}  // namespace sift::quant

#include "simd_kernels.h"

namespace sift::quant {

Kernels Avx512Kernels(GgmlType type) { return SimdKernels<Avx512>(type); }

}  // namespace sift::quant
