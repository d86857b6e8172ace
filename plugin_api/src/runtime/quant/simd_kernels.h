// The fp32-activation kernels, written once over a SIMD traits type S and instantiated by each
// ISA file (kernels_avx2.cc, kernels_avx512.cc) with its own S and -m flags.
//
// S provides W float lanes (F) and W int32 lanes (I), and kMaxRows, the most activation rows one
// pass keeps accumulators for (two vectors each):
//   F Zero(), Load(const float*), Set1(float), Mul/Add/Sub(F, F), Fma(a, b, c) = a * b + c,
//   float Sum(F), void Store(float*, F), F F16(const uint8_t*), F BF16(const uint8_t*) (W values),
//   F Half(const uint8_t*) (one fp16 value in every lane),
//   I U8(const uint8_t*) / I8(const uint8_t*) (W bytes, zero- / sign-extended), AndC/SrlC/SllC/
//   SubC(I, int), Or(I, I), F ToF(I), I HighBits(uint32_t bits) (lane k = bit k of bits, times 16),
//   and kLut16: when true, F Iota() (lanes 0, 1, ..., 15) and F Lut16(I index, F table) (lane k =
//   table[index[k] & 15]; W = 16).
//
// 4-bit types on an S with kLut16 decode a block by a table: the 16 values a nibble can stand
// for are computed once per block (or sub-block) with the very operations the per-weight path
// applies, and each group of W weights is one lookup instead of a mask, a conversion, a multiply
// and an add. Same values, so the same bits.
//
// Each type's Block<S>(block, sink) decodes one block and calls sink(i, w) for each group of W
// weights starting at element i, computing every weight with the same float operations in the
// same order as DequantizeRow (ggml_types.cc), so the weights are bit-identical to it. Every
// product of a quant and a scale here is exact in float (an 11-bit fp16 significand times at most
// 13 bits), so the compiler fusing the following add into an FMA does not change them either. The
// dot and dequantise drivers are the two sinks. Block layouts: ggml's (see ggml_types.cc).
//
// Everything is in an anonymous namespace on purpose: each ISA file gets its own private copy
// (an inline function shared by files compiled with different -m flags could be merged by the
// linker into the copy with the wider instructions).
#ifndef SIFT_RUNTIME_QUANT_SIMD_KERNELS_H_
#define SIFT_RUNTIME_QUANT_SIMD_KERNELS_H_

#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "block_common.h"
#include "kernels.h"

namespace sift::quant {
namespace {

#define SIFT_UNROLL _Pragma("GCC unroll 32")

struct Q4_0 {
  static constexpr int kBlock = 32, kBytes = 18;
  template <class S, class Sink>
  SIFT_INLINE static void Block(const uint8_t* b, Sink&& sink) {
    const auto d = S::Half(b);
    if constexpr (S::kLut16) {
      static_assert(S::W == 16, "one lookup per 16 nibbles");
      const auto table = S::Mul(S::Sub(S::Iota(), S::Set1(8)), d);  // (q - 8) * d, q = 0..15
      const auto q = S::U8(b + 2);
      sink(0, S::Lut16(q, table));
      sink(16, S::Lut16(S::SrlC(q, 4), table));
      return;
    }
    SIFT_UNROLL for (int i = 0; i < 16; i += S::W) {
      const auto q = S::U8(b + 2 + i);
      sink(i, S::Mul(S::ToF(S::SubC(S::AndC(q, 15), 8)), d));
      sink(i + 16, S::Mul(S::ToF(S::SubC(S::SrlC(q, 4), 8)), d));
    }
  }
};

struct Q4_1 {
  static constexpr int kBlock = 32, kBytes = 20;
  template <class S, class Sink>
  SIFT_INLINE static void Block(const uint8_t* b, Sink&& sink) {
    const auto d = S::Half(b), m = S::Half(b + 2);
    if constexpr (S::kLut16) {
      static_assert(S::W == 16, "one lookup per 16 nibbles");
      const auto table = S::Add(S::Mul(S::Iota(), d), m);  // q * d + m, q = 0..15
      const auto q = S::U8(b + 4);
      sink(0, S::Lut16(q, table));
      sink(16, S::Lut16(S::SrlC(q, 4), table));
      return;
    }
    SIFT_UNROLL for (int i = 0; i < 16; i += S::W) {
      const auto q = S::U8(b + 4 + i);
      sink(i, S::Add(S::Mul(S::ToF(S::AndC(q, 15)), d), m));
      sink(i + 16, S::Add(S::Mul(S::ToF(S::SrlC(q, 4)), d), m));
    }
  }
};

// Q5_0 (offset -16) and Q5_1 (plus a min): a nibble plus a fifth bit from the 32-bit qh.
template <bool kHasMin>
struct Q5 {
  static constexpr int kBlock = 32, kBytes = kHasMin ? 24 : 22;
  template <class S, class Sink>
  SIFT_INLINE static void Block(const uint8_t* b, Sink&& sink) {
    const auto d = S::Half(b);
    const auto m = kHasMin ? S::Half(b + 2) : S::Zero();
    const uint8_t* p = b + (kHasMin ? 4 : 2);
    const uint32_t qh = U32(p);
    SIFT_UNROLL for (int i = 0; i < 16; i += S::W) {
      const auto q = S::U8(p + 4 + i);
      const auto x0 = S::Or(S::AndC(q, 15), S::HighBits(qh >> i));
      const auto x1 = S::Or(S::SrlC(q, 4), S::HighBits(qh >> (16 + i)));
      if (kHasMin) {
        sink(i, S::Add(S::Mul(S::ToF(x0), d), m));
        sink(i + 16, S::Add(S::Mul(S::ToF(x1), d), m));
      } else {
        sink(i, S::Mul(S::ToF(S::SubC(x0, 16)), d));
        sink(i + 16, S::Mul(S::ToF(S::SubC(x1, 16)), d));
      }
    }
  }
};

struct Q8_0 {
  static constexpr int kBlock = 32, kBytes = 34;
  template <class S, class Sink>
  SIFT_INLINE static void Block(const uint8_t* b, Sink&& sink) {
    const auto d = S::Half(b);
    SIFT_UNROLL for (int i = 0; i < 32; i += S::W) sink(i, S::Mul(S::ToF(S::I8(b + 2 + i)), d));
  }
};

// Q4_K (kHigh = false) and Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins; Q5_K adds a
// fifth bit per weight from 32 bytes of qh.
template <bool kHigh>
struct QK45 {
  static constexpr int kBlock = 256, kBytes = kHigh ? 176 : 144;
  template <class S, class Sink>
  SIFT_INLINE static void Block(const uint8_t* b, Sink&& sink) {
    const float d = Half(b), dmin = Half(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* q = b + (kHigh ? 48 : 16);
    SIFT_UNROLL for (int c = 0; c < 4; ++c, q += 32) {
      int sc, mn;
      ScaleMinK4(2 * c, scales, &sc, &mn);
      const auto d1 = S::Set1(d * static_cast<float>(sc));
      const auto m1 = S::Set1(dmin * static_cast<float>(mn));
      ScaleMinK4(2 * c + 1, scales, &sc, &mn);
      const auto d2 = S::Set1(d * static_cast<float>(sc));
      const auto m2 = S::Set1(dmin * static_cast<float>(mn));
      if constexpr (S::kLut16 && !kHigh) {
        const auto t1 = S::Sub(S::Mul(d1, S::Iota()), m1);  // d1 * q - m1, q = 0..15
        const auto t2 = S::Sub(S::Mul(d2, S::Iota()), m2);
        SIFT_UNROLL for (int l = 0; l < 32; l += S::W) {
          const auto v = S::U8(q + l);
          sink(64 * c + l, S::Lut16(v, t1));
          sink(64 * c + 32 + l, S::Lut16(S::SrlC(v, 4), t2));
        }
        continue;
      }
      SIFT_UNROLL for (int l = 0; l < 32; l += S::W) {
        const auto v = S::U8(q + l);
        auto lo = S::AndC(v, 15), hi = S::SrlC(v, 4);
        if (kHigh) {
          const auto h = S::U8(qh + l);
          lo = S::Or(lo, S::SllC(S::AndC(S::SrlC(h, 2 * c), 1), 4));
          hi = S::Or(hi, S::SllC(S::AndC(S::SrlC(h, 2 * c + 1), 1), 4));
        }
        sink(64 * c + l, S::Sub(S::Mul(d1, S::ToF(lo)), m1));
        sink(64 * c + 32 + l, S::Sub(S::Mul(d2, S::ToF(hi)), m2));
      }
    }
  }
};

// Q6_K: 16 sub-blocks of 16 with int8 scales; 4 low bits in ql, 2 high bits in qh, offset -32.
struct Q6_K {
  static constexpr int kBlock = 256, kBytes = 210;
  template <class S, class Sink>
  SIFT_INLINE static void Block(const uint8_t* b, Sink&& sink) {
    const auto d = S::Half(b + 208);
    SIFT_UNROLL for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b + 64 * h;
      const uint8_t* qh = b + 128 + 32 * h;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * h);
      SIFT_UNROLL for (int l = 0; l < 32; l += S::W) {
        const int is = l / 16;
        const auto a = S::U8(ql + l), c = S::U8(ql + 32 + l), hb = S::U8(qh + l);
        const auto q1 = S::Or(S::AndC(a, 15), S::SllC(S::AndC(hb, 3), 4));
        const auto q2 = S::Or(S::AndC(c, 15), S::SllC(S::AndC(S::SrlC(hb, 2), 3), 4));
        const auto q3 = S::Or(S::SrlC(a, 4), S::SllC(S::AndC(S::SrlC(hb, 4), 3), 4));
        const auto q4 = S::Or(S::SrlC(c, 4), S::SllC(S::SrlC(hb, 6), 4));
        // d * float(sc * q): sc * q (|.| <= 4096) is exact in float, so this is the same value.
        const auto w = [&](decltype(q1) q, int s) __attribute__((always_inline)) {
          return S::Mul(d, S::Mul(S::ToF(S::SubC(q, 32)), S::Set1(static_cast<float>(sc[s]))));
        };
        sink(128 * h + l, w(q1, is));
        sink(128 * h + 32 + l, w(q2, is + 2));
        sink(128 * h + 64 + l, w(q3, is + 4));
        sink(128 * h + 96 + l, w(q4, is + 6));
      }
    }
  }
};

// Plain rows, decoded 32 elements at a time; cols % 32 elements are left to Tail().
struct F32Row {
  static constexpr int kBlock = 32, kBytes = 128;
  template <class S, class Sink>
  SIFT_INLINE static void Block(const uint8_t* b, Sink&& sink) {
    SIFT_UNROLL for (int i = 0; i < 32; i += S::W) {
      sink(i, S::Load(reinterpret_cast<const float*>(b + 4 * i)));
    }
  }
  static float Tail(const uint8_t* row, int64_t k) {
    float v;
    std::memcpy(&v, row + 4 * k, sizeof(v));
    return v;
  }
};

struct F16Row {
  static constexpr int kBlock = 32, kBytes = 64;
  template <class S, class Sink>
  SIFT_INLINE static void Block(const uint8_t* b, Sink&& sink) {
    SIFT_UNROLL for (int i = 0; i < 32; i += S::W) sink(i, S::F16(b + 2 * i));
  }
  static float Tail(const uint8_t* row, int64_t k) { return Half(row + 2 * k); }
};

struct BF16Row {
  static constexpr int kBlock = 32, kBytes = 64;
  template <class S, class Sink>
  SIFT_INLINE static void Block(const uint8_t* b, Sink&& sink) {
    SIFT_UNROLL for (int i = 0; i < 32; i += S::W) sink(i, S::BF16(b + 2 * i));
  }
  static float Tail(const uint8_t* row, int64_t k) {
    const uint32_t bits = static_cast<uint32_t>(row[2 * k] | (row[2 * k + 1] << 8)) << 16;
    float v;
    std::memcpy(&v, &bits, sizeof(v));
    return v;
  }
};

template <class T, class = void>
struct HasTail : std::false_type {};
template <class T>
struct HasTail<T, decltype(void(T::Tail(nullptr, 0)))> : std::true_type {};

// N activation rows against one weight row. An FMA's latency (4 cycles) is about what decoding a
// 32-weight block costs, so each row keeps K = 2 independent accumulators: groups of W weights go
// to them in turn (counting on across a pair of blocks when a block has fewer than K groups).
// K is the same for every N, so a row's sum is formed in the same order whatever the size of
// its group: a request's decode step gives the same bits alone as in a batch (K = 4 for N <= 2
// was measured no faster on a Sapphire Rapids Xeon, at the AVX-512 and AVX2 levels).
template <class S, class T, int N>
SIFT_INLINE void DotRow(const uint8_t* row, int64_t cols, const float* x, int64_t ldx, float* y,
                        int64_t ldy) {
  constexpr int K = 2;                       // see above: not a function of N
  constexpr int kGroups = T::kBlock / S::W;  // vectors per block
  typename S::F acc[N][K];
  SIFT_UNROLL for (int j = 0; j < N; ++j) {
    SIFT_UNROLL for (int k = 0; k < K; ++k) acc[j][k] = S::Zero();
  }
  const auto block = [&](const uint8_t* p, const float* xb, auto parity)
      __attribute__((always_inline)) {
    T::template Block<S>(
        p, [&](int i, typename S::F w) __attribute__((always_inline)) {
          const int k = (i / S::W + decltype(parity)::value * kGroups) % K;
          SIFT_UNROLL for (int j = 0; j < N; ++j) {
            acc[j][k] = S::Fma(w, S::Load(xb + j * ldx + i), acc[j][k]);
          }
        });
  };
  const int64_t nb = cols / T::kBlock;
  int64_t b = 0;
  if constexpr (kGroups < K) {  // small blocks: a pair of them feeds all K accumulators
    for (; b + 1 < nb; b += 2) {
      block(row + b * T::kBytes, x + b * T::kBlock, std::integral_constant<int, 0>{});
      block(row + (b + 1) * T::kBytes, x + (b + 1) * T::kBlock, std::integral_constant<int, 1>{});
    }
  }
  for (; b < nb; ++b)
    block(row + b * T::kBytes, x + b * T::kBlock, std::integral_constant<int, 0>{});
  SIFT_UNROLL for (int j = 0; j < N; ++j) {
    typename S::F total = acc[j][0];
    SIFT_UNROLL for (int k = 1; k < K; ++k) total = S::Add(total, acc[j][k]);
    float sum = S::Sum(total);
    if constexpr (HasTail<T>::value) {
      for (int64_t k = nb * T::kBlock; k < cols; ++k) sum += T::Tail(row, k) * x[j * ldx + k];
    }
    y[j * ldy] = sum;
  }
}

// Weight rows in tiles that stay in L1/L2 (each read once from memory); per tile, activation
// rows in groups of up to S::kMaxRows, each group against every row of the tile (ForTiles).
template <class S, class T>
void Dot(const uint8_t* rows, int64_t row_bytes, int64_t nrows, int64_t cols, const float* x,
         int64_t n, int64_t ldx, float* y, int64_t ldy) {
  ForTiles<S::kMaxRows>(
      rows, row_bytes, nrows, n, [&](const uint8_t* row, int64_t r, auto count, int64_t j) {
        DotRow<S, T, decltype(count)::value>(row, cols, x + j * ldx, ldx, y + j * ldy + r, ldy);
      });
}

template <class S, class T>
void Dequant(const uint8_t* row, int64_t cols, float* out) {
  const int64_t nb = cols / T::kBlock;
  const uint8_t* p = row;
  float* o = out;
  for (int64_t b = 0; b < nb; ++b, p += T::kBytes, o += T::kBlock) {
    T::template Block<S>(
        p, [&](int i, typename S::F w) __attribute__((always_inline)) { S::Store(o + i, w); });
  }
  if constexpr (HasTail<T>::value) {
    for (int64_t k = nb * T::kBlock; k < cols; ++k) out[k] = T::Tail(row, k);
  }
}

template <class S, class T>
Kernels KernelsOf() {
  return Kernels{&Dot<S, T>, &Dequant<S, T>};
}

template <class S>
Kernels SimdKernels(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return KernelsOf<S, F32Row>();
    case GgmlType::kF16:
      return KernelsOf<S, F16Row>();
    case GgmlType::kBF16:
      return KernelsOf<S, BF16Row>();
    case GgmlType::kQ4_0:
      return KernelsOf<S, Q4_0>();
    case GgmlType::kQ4_1:
      return KernelsOf<S, Q4_1>();
    case GgmlType::kQ5_0:
      return KernelsOf<S, Q5<false>>();
    case GgmlType::kQ5_1:
      return KernelsOf<S, Q5<true>>();
    case GgmlType::kQ8_0:
      return KernelsOf<S, Q8_0>();
    case GgmlType::kQ4_K:
      return KernelsOf<S, QK45<false>>();
    case GgmlType::kQ5_K:
      return KernelsOf<S, QK45<true>>();
    case GgmlType::kQ6_K:
      return KernelsOf<S, Q6_K>();
    default:
      return Kernels{};
  }
}

#undef SIFT_UNROLL

}  // namespace
}  // namespace sift::quant

#endif  // SIFT_RUNTIME_QUANT_SIMD_KERNELS_H_
