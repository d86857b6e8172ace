// AVX2 + FMA + F16C kernels: the fp32-activation ones (simd_kernels.h, 8 float lanes) and the
// int8-activation ones (int8_kernels.h, vpmaddubsw + vpmaddwd).
// Compiled with -mavx2 -mfma -mf16c (plugin_api/CMakeLists.txt); called only when the CPU has them.
#include <immintrin.h>

#include <cstring>

#include "block_common.h"
#include "kernels.h"

namespace sift::quant {
namespace {

struct Avx2 {
  static constexpr int W = 8;
  static constexpr int kMaxRows = 4;     // 8 accumulators of 16 registers
  static constexpr bool kLut16 = false;  // 8-lane permutes: no 16-entry table in one instruction
  using F = __m256;
  using I = __m256i;
  SIFT_INLINE static F Zero() { return _mm256_setzero_ps(); }
  SIFT_INLINE static F Load(const float* p) { return _mm256_loadu_ps(p); }
  SIFT_INLINE static void Store(float* p, F v) { _mm256_storeu_ps(p, v); }
  SIFT_INLINE static F Set1(float v) { return _mm256_set1_ps(v); }
  SIFT_INLINE static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  SIFT_INLINE static F Add(F a, F b) { return _mm256_add_ps(a, b); }
  SIFT_INLINE static F Sub(F a, F b) { return _mm256_sub_ps(a, b); }
  SIFT_INLINE static F Fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  SIFT_INLINE static float Sum(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  SIFT_INLINE static F Half(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, sizeof(h));
    return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(h)));
  }
  SIFT_INLINE static F F16(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  SIFT_INLINE static F BF16(const uint8_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  SIFT_INLINE static I U8(const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  SIFT_INLINE static I I8(const uint8_t* p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  SIFT_INLINE static I AndC(I v, int c) { return _mm256_and_si256(v, _mm256_set1_epi32(c)); }
  SIFT_INLINE static I SubC(I v, int c) { return _mm256_sub_epi32(v, _mm256_set1_epi32(c)); }
  SIFT_INLINE static I SrlC(I v, int c) { return _mm256_srli_epi32(v, c); }
  SIFT_INLINE static I SllC(I v, int c) { return _mm256_slli_epi32(v, c); }
  SIFT_INLINE static I Or(I a, I b) { return _mm256_or_si256(a, b); }
  SIFT_INLINE static F ToF(I v) { return _mm256_cvtepi32_ps(v); }
  SIFT_INLINE static I HighBits(uint32_t bits) {
    const I lane_bits = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(bits)),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_slli_epi32(_mm256_and_si256(lane_bits, _mm256_set1_epi32(1)), 4);
  }
};

struct Avx2Int8 {
  static constexpr int kMaxRows = 4;
  // Unsigned weights <= 63 and activations in [-127, 127]: vpmaddubsw's int16 pair sums
  // (<= 2 * 63 * 127) never saturate.
  SIFT_INLINE static __m256i DotU8(__m256i w, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
  }
  // |w| <= 128 against x with w's sign: pair sums <= 2 * 128 * 127, no saturation either.
  SIFT_INLINE static __m256i DotS8(__m256i w, __m256i x) {
    return DotU8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  }
  // Byte k = 0x10 if bit k of bits is set: byte k/8 of bits, tested against bit k%8.
  SIFT_INLINE static __m256i Bits(uint32_t bits) {
    const __m256i spread =
        _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                            _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                               0x0202020202020202, 0x0303030303030303));
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
  }
};

}  // namespace
}  // namespace sift::quant

#include "int8_kernels.h"
#include "simd_kernels.h"

namespace sift::quant {

Kernels Avx2Kernels(GgmlType type) { return SimdKernels<Avx2>(type); }

DotInt8Fn Avx2Int8Kernel(GgmlType type) { return Int8Kernel<Avx2Int8>(type); }

}  // namespace sift::quant
