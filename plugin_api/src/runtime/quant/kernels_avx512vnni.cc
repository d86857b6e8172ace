// AVX-512 VNNI int8-activation kernels: int8_kernels.h with vpdpbusd on 256-bit vectors over the
// GGUF blocks, and the packed kernel: 512-bit vpdpbusd over rows packed 16 at a time (kernels.h).
// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma -mf16c
// (plugin_api/CMakeLists.txt); called only when the CPU has them.
//
// GCC 12's AVX-512 intrinsic headers trip its own -Wmaybe-uninitialized (GCC bug 105593, fixed
// in 12.3): silenced for this file only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>
#include <vector>

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

namespace {
namespace packed {

#define SIFT_UNROLL _Pragma("GCC unroll 16")

// 4 activation bytes in every 32-bit lane.
SIFT_INLINE __m512i X4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

// One tile (16 weight rows) against activation rows 0..N-1 of `a`, all groups. Lane i of a
// vector is weight row i: per group, eight vpdpbusd (4 columns each) give every row its integer
// dot product with the group, scaled by d_w * d_x; Q4_1 adds m_w * sum(x), Q8_0 takes back the
// +128 of its stored weights exactly, in integers (isq: 128 * the sum of the group's int8 x).
template <bool kQ8, int N>
SIFT_INLINE void Tile(const uint8_t* p, int64_t groups, const Int8Activations& a,
                      const int32_t* isq, float* y, int64_t ldy) {
  constexpr int64_t kWeightBytes = kQ8 ? 512 : 256;  // then the fp16 scales (and Q4_1's mins)
  constexpr int64_t kGroupBytes = PackedGroupBytes(kQ8 ? GgmlType::kQ8_0 : GgmlType::kQ4_1);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[N];
  SIFT_UNROLL for (int j = 0; j < N; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g, p += kGroupBytes) {
    __m512i w[8];  // w[c] pairs with activation columns 4c..4c+3 of the group
    if constexpr (kQ8) {
      SIFT_UNROLL for (int c = 0; c < 8; ++c) w[c] = _mm512_loadu_si512(p + 64 * c);
    } else {
      SIFT_UNROLL for (int v = 0; v < 4; ++v) {
        const __m512i b = _mm512_loadu_si512(p + 64 * v);
        w[v] = _mm512_and_si512(b, low4);
        w[v + 4] = _mm512_and_si512(_mm512_srli_epi16(b, 4), low4);
      }
    }
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kWeightBytes)));
    __m512 mw = _mm512_setzero_ps();
    if constexpr (!kQ8) {
      mw = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kWeightBytes + 32)));
    }
    SIFT_UNROLL for (int j = 0; j < N; ++j) {
      const int8_t* xq = a.q + j * a.ldq + 32 * g;
      __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
      SIFT_UNROLL for (int c = 0; c < 4; ++c) {
        s0 = _mm512_dpbusd_epi32(s0, w[c], X4(xq + 4 * c));
        s1 = _mm512_dpbusd_epi32(s1, w[c + 4], X4(xq + 16 + 4 * c));
      }
      __m512i s = _mm512_add_epi32(s0, s1);
      if constexpr (kQ8) s = _mm512_sub_epi32(s, _mm512_set1_epi32(isq[j * groups + g]));
      const float dx = a.d[g * a.lds + j];
      acc[j] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(dx)), acc[j]);
      if constexpr (!kQ8) {
        const float sx = a.sum[2 * g * a.lds + j] + a.sum[(2 * g + 1) * a.lds + j];
        acc[j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(sx), acc[j]);
      }
    }
  }
  SIFT_UNROLL for (int j = 0; j < N; ++j) _mm512_storeu_ps(y + j * ldy, acc[j]);
}

template <bool kQ8>
void Dot(const uint8_t* packed, int64_t tiles, int64_t cols, const Int8Activations& a, int64_t n,
         float* y, int64_t ldy) {
  const int64_t groups = cols / 32;
  constexpr int64_t kGroupBytes = PackedGroupBytes(kQ8 ? GgmlType::kQ8_0 : GgmlType::kQ4_1);
  // Q8_0: 128 * (sum of each group's int8 activations), per row and group.
  thread_local std::vector<int32_t> isq;
  if constexpr (kQ8) {
    isq.resize(static_cast<size_t>(n * groups));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t g = 0; g < groups; ++g) {
        const int8_t* xq = a.q + j * a.ldq + 32 * g;
        int32_t sum = 0;
        for (int k = 0; k < 32; ++k) sum += xq[k];
        isq[static_cast<size_t>(j * groups + g)] = 128 * sum;
      }
    }
  }
  for (int64_t t = 0; t < tiles; ++t) {
    const uint8_t* p = packed + t * groups * kGroupBytes;
    ForRowGroups<8>(n, [&](auto count, int64_t j) {
      Tile<kQ8, decltype(count)::value>(p, groups, a.Rows(j), isq.data() + j * groups,
                                        y + j * ldy + t * kPackRows, ldy);
    });
  }
}

#undef SIFT_UNROLL

}  // namespace packed
}  // namespace

PackedDotFn Avx512VnniPackedKernel(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_1:
      return &packed::Dot<false>;
    case GgmlType::kQ8_0:
      return &packed::Dot<true>;
    default:
      return nullptr;
  }
}

}  // namespace sift::quant
