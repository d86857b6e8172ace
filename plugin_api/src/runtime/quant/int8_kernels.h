// The int8-activation kernels, written once over a traits type S and instantiated by
// kernels_avx2.cc (vpmaddubsw) and kernels_avx512vnni.cc (vpdpbusd).
//
// Activations come quantised per 32-element group (kernels.h, Int8Activations). Each type
// decodes its weights, 32 at a time, to bytes: unsigned 0..63 (4/5/6-bit types, offset not
// applied) or signed (Q8_0). A group contributes
//   scale * dx * int_dot(w, xq) + coef * sum(x over the group)
// where scale/coef come from the block (e.g. Q4_1: d and m; Q4_0: d and -8 d) and
// sum(x) = dx * sum(xq). Q6_K's two 16-element halves have their own scale and coef.
//
// S provides kMaxRows (activation rows per pass) and, on 256-bit vectors: __m256i DotU8(__m256i
// w_u8, __m256i x_s8) and DotS8(__m256i w_s8, __m256i x_s8) -> 8 int32 sums of 4 products each;
// __m256i Bits(uint32_t)
// -> byte k = 0x10 if bit k is set. Everything else is AVX2 + FMA, which every S has.
//
// Anonymous namespace on purpose, as in simd_kernels.h.
#ifndef SIFT_RUNTIME_QUANT_INT8_KERNELS_H_
#define SIFT_RUNTIME_QUANT_INT8_KERNELS_H_

#include <immintrin.h>

#include <cstring>

#include "block_common.h"
#include "kernels.h"

namespace sift::quant {
namespace {

namespace i8 {

#define SIFT_UNROLL _Pragma("GCC unroll 16")

SIFT_INLINE __m256i Load32(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

SIFT_INLINE __m256i Low4(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
SIFT_INLINE __m256i Shr4(__m256i v) { return Low4(_mm256_srli_epi16(v, 4)); }
// Bytes 0..15: low nibbles of the 16 bytes at p; bytes 16..31: their high nibbles.
SIFT_INLINE __m256i Nibbles16(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return Low4(_mm256_set_m128i(_mm_srli_epi16(v, 4), v));
}
// Byte-wise ((v >> shift) & mask) << 4 for shift < 8 and mask <= 3.
SIFT_INLINE __m256i HighBits(__m256i v, int shift, int mask) {
  return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(v, shift), _mm256_set1_epi8(mask)),
                           4);
}

SIFT_INLINE float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Accumulators for N <= 8 activation rows against one weight row. g0 is the activation group of
// the block being decoded (set by the driver). Per-group scales and sums are loaded for all N rows
// at once (lane j: row j) and the offset terms accumulate in one vector.
template <class S, int N>
struct Acc {
  static_assert(N >= 1 && N <= 8, "one 8-lane vector of per-row values");
  __m256 acc[N];
  __m256 corr = _mm256_setzero_ps();  // lane j: row j's offset terms
  const Int8Activations* a;
  int64_t g0 = 0;

  explicit Acc(const Int8Activations* act) : a(act) {
    SIFT_UNROLL for (int j = 0; j < N; ++j) acc[j] = _mm256_setzero_ps();
  }
  SIFT_INLINE const int8_t* Xq(int j, int g) const { return a->q + j * a->ldq + 32 * (g0 + g); }
  SIFT_INLINE __m256 Dx(int g) const { return _mm256_loadu_ps(a->d + (g0 + g) * a->lds); }
  // Sums of x over 16-element half h (0, 1) of group g.
  SIFT_INLINE __m256 Sum16(int g, int h) const {
    return _mm256_loadu_ps(a->sum + (2 * (g0 + g) + h) * a->lds);
  }
  SIFT_INLINE static __m256 Lane(__m256 v, int j) {
    return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(j));
  }

  // Unsigned weights: scale * dx * dot + coef * sum(x).
  SIFT_INLINE void Group(int g, __m256i w, float scale, float coef) {
    const __m256 s = _mm256_mul_ps(Dx(g), _mm256_set1_ps(scale));
    corr = _mm256_fmadd_ps(_mm256_set1_ps(coef), _mm256_add_ps(Sum16(g, 0), Sum16(g, 1)), corr);
    SIFT_UNROLL for (int j = 0; j < N; ++j) {
      const __m256i p = S::DotU8(w, Load32(Xq(j, g)));
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), Lane(s, j), acc[j]);
    }
  }
  // Signed weights, no offset.
  SIFT_INLINE void GroupSigned(int g, __m256i w, float scale) {
    const __m256 s = _mm256_mul_ps(Dx(g), _mm256_set1_ps(scale));
    SIFT_UNROLL for (int j = 0; j < N; ++j) {
      const __m256i p = S::DotS8(w, Load32(Xq(j, g)));
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), Lane(s, j), acc[j]);
    }
  }
  // Unsigned weights whose 16-element halves have their own scale and coef (Q6_K). The dot's
  // lanes 0-3 cover elements 0..15, lanes 4-7 elements 16..31.
  SIFT_INLINE void GroupHalves(int g, __m256i w, float scale0, float scale1, float coef0,
                               float coef1) {
    const __m256 halves = _mm256_set_m128(_mm_set1_ps(scale1), _mm_set1_ps(scale0));
    const __m256 dx = Dx(g);
    corr = _mm256_fmadd_ps(_mm256_set1_ps(coef0), Sum16(g, 0), corr);
    corr = _mm256_fmadd_ps(_mm256_set1_ps(coef1), Sum16(g, 1), corr);
    SIFT_UNROLL for (int j = 0; j < N; ++j) {
      const __m256i p = S::DotU8(w, Load32(Xq(j, g)));
      acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(p), halves), Lane(dx, j), acc[j]);
    }
  }
};

struct Q4_0 {
  static constexpr int kBlock = 32, kBytes = 18;
  template <class A>
  SIFT_INLINE static void Block(const uint8_t* b, A& acc) {
    const float d = Half(b);
    acc.Group(0, Nibbles16(b + 2), d, -8 * d);
  }
};

struct Q4_1 {
  static constexpr int kBlock = 32, kBytes = 20;
  template <class A>
  SIFT_INLINE static void Block(const uint8_t* b, A& acc) {
    acc.Group(0, Nibbles16(b + 4), Half(b), Half(b + 2));
  }
};

template <class S, bool kHasMin>
struct Q5 {
  static constexpr int kBlock = 32, kBytes = kHasMin ? 24 : 22;
  template <class A>
  SIFT_INLINE static void Block(const uint8_t* b, A& acc) {
    const float d = Half(b);
    const uint8_t* p = b + (kHasMin ? 4 : 2);
    const __m256i w = _mm256_or_si256(Nibbles16(p + 4), S::Bits(U32(p)));
    acc.Group(0, w, d, kHasMin ? Half(b + 2) : -16 * d);
  }
};

struct Q8_0 {
  static constexpr int kBlock = 32, kBytes = 34;
  template <class A>
  SIFT_INLINE static void Block(const uint8_t* b, A& acc) {
    acc.GroupSigned(0, Load32(b + 2), Half(b));
  }
};

template <bool kHigh>
struct QK45 {
  static constexpr int kBlock = 256, kBytes = kHigh ? 176 : 144;
  template <class A>
  SIFT_INLINE static void Block(const uint8_t* b, A& acc) {
    const float d = Half(b), dmin = Half(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* q = b + (kHigh ? 48 : 16);
    const __m256i h = kHigh ? Load32(b + 16) : _mm256_setzero_si256();
    SIFT_UNROLL for (int c = 0; c < 4; ++c, q += 32) {
      const __m256i v = Load32(q);
      __m256i lo = Low4(v), hi = Shr4(v);
      if (kHigh) {
        lo = _mm256_or_si256(lo, HighBits(h, 2 * c, 1));
        hi = _mm256_or_si256(hi, HighBits(h, 2 * c + 1, 1));
      }
      int sc, mn;
      ScaleMinK4(2 * c, scales, &sc, &mn);
      acc.Group(2 * c, lo, d * static_cast<float>(sc), -dmin * static_cast<float>(mn));
      ScaleMinK4(2 * c + 1, scales, &sc, &mn);
      acc.Group(2 * c + 1, hi, d * static_cast<float>(sc), -dmin * static_cast<float>(mn));
    }
  }
};

struct Q6_K {
  static constexpr int kBlock = 256, kBytes = 210;
  template <class A>
  SIFT_INLINE static void Block(const uint8_t* b, A& acc) {
    const float d = Half(b + 208);
    SIFT_UNROLL for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = Load32(b + 64 * h), ql1 = Load32(b + 64 * h + 32);
      const __m256i hb = Load32(b + 128 + 32 * h);
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * h);
      const __m256i w[4] = {_mm256_or_si256(Low4(ql0), HighBits(hb, 0, 3)),
                            _mm256_or_si256(Low4(ql1), HighBits(hb, 2, 3)),
                            _mm256_or_si256(Shr4(ql0), HighBits(hb, 4, 3)),
                            _mm256_or_si256(Shr4(ql1), HighBits(hb, 6, 3))};
      SIFT_UNROLL for (int g = 0; g < 4; ++g) {
        const float s0 = d * static_cast<float>(sc[2 * g]);
        const float s1 = d * static_cast<float>(sc[2 * g + 1]);
        acc.GroupHalves(4 * h + g, w[g], s0, s1, -32 * s0, -32 * s1);
      }
    }
  }
};

// Rows one at a time; activation rows in groups of up to four; blocks in pairs, each with its own
// accumulators (two FMA chains per activation row).
template <class S, class T, int N>
SIFT_INLINE void DotRow(const uint8_t* row, int64_t cols, const Int8Activations& a, float* y,
                        int64_t ldy) {
  Acc<S, N> even(&a), odd(&a);
  const int64_t nb = cols / T::kBlock;
  constexpr int kGroups = T::kBlock / 32;
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    even.g0 = b * kGroups;
    T::Block(row + b * T::kBytes, even);
    odd.g0 = (b + 1) * kGroups;
    T::Block(row + (b + 1) * T::kBytes, odd);
  }
  if (b < nb) {
    even.g0 = b * kGroups;
    T::Block(row + b * T::kBytes, even);
  }
  float corr[8];
  _mm256_storeu_ps(corr, _mm256_add_ps(even.corr, odd.corr));
  SIFT_UNROLL for (int j = 0; j < N; ++j) {
    y[j * ldy] = HSum(_mm256_add_ps(even.acc[j], odd.acc[j])) + corr[j];
  }
}

template <class S, class T>
void DotInt8(const uint8_t* rows, int64_t row_bytes, int64_t nrows, int64_t cols,
             const Int8Activations& a, int64_t n, float* y, int64_t ldy) {
  ForTiles<S::kMaxRows>(
      rows, row_bytes, nrows, n, [&](const uint8_t* row, int64_t r, auto count, int64_t j) {
        DotRow<S, T, decltype(count)::value>(row, cols, a.Rows(j), y + j * ldy + r, ldy);
      });
}

#undef SIFT_UNROLL

}  // namespace i8

template <class S>
DotInt8Fn Int8Kernel(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
      return &i8::DotInt8<S, i8::Q4_0>;
    case GgmlType::kQ4_1:
      return &i8::DotInt8<S, i8::Q4_1>;
    case GgmlType::kQ5_0:
      return &i8::DotInt8<S, i8::Q5<S, false>>;
    case GgmlType::kQ5_1:
      return &i8::DotInt8<S, i8::Q5<S, true>>;
    case GgmlType::kQ8_0:
      return &i8::DotInt8<S, i8::Q8_0>;
    case GgmlType::kQ4_K:
      return &i8::DotInt8<S, i8::QK45<false>>;
    case GgmlType::kQ5_K:
      return &i8::DotInt8<S, i8::QK45<true>>;
    case GgmlType::kQ6_K:
      return &i8::DotInt8<S, i8::Q6_K>;
    default:
      return nullptr;
  }
}

}  // namespace
}  // namespace sift::quant

#endif  // SIFT_RUNTIME_QUANT_INT8_KERNELS_H_
