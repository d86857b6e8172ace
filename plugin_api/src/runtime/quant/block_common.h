// Scalar helpers shared by the SIMD kernel templates (simd_kernels.h, int8_kernels.h): fp16
// scales and the packed 6-bit K-quant scales. Needs F16C (every SIMD ISA file has it).
//
// Anonymous namespace on purpose: each ISA file, compiled with its own -m flags, keeps its own
// copy (see simd_kernels.h).
#ifndef SIFT_RUNTIME_QUANT_BLOCK_COMMON_H_
#define SIFT_RUNTIME_QUANT_BLOCK_COMMON_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

// The kernels are built from many small functions that must all inline into one loop (GCC's
// inliner gives up on the larger row-count instantiations otherwise, leaving the accumulators in
// memory).
#define SIFT_INLINE inline __attribute__((always_inline))

namespace sift::quant {
namespace {

SIFT_INLINE float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return _cvtsh_ss(h);
}

SIFT_INLINE uint32_t U32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block, packed in 12 bytes.
SIFT_INLINE void ScaleMinK4(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// With several activation rows (each its own output stream) the hardware prefetchers lose track
// of a matrix streamed from memory: measured on the 28 MiB lm_head, 6-8 rows ran 2-3x slower per
// weight than from cache, often but not always. The kernels then prefetch the weight row
// kPrefetchRows ahead themselves, which mostly removes it.
constexpr int64_t kPrefetchRows = 4;
SIFT_INLINE void PrefetchRow(const uint8_t* p, int64_t bytes, const uint8_t* end) {
  if (p + bytes > end) return;
  for (int64_t i = 0; i < bytes; i += 64) __builtin_prefetch(p + i);
}

// Covers activation rows [0, n) in groups of at most kMax: calls f(std::integral_constant<int, N>,
// j) for rows j..j+N-1, so that kernels get their row count as a template argument.
template <int N, class F>
inline void RowGroupTail(int64_t rest, int64_t j, F& f) {
  if constexpr (N >= 1) {
    if (rest == N) {
      f(std::integral_constant<int, N>{}, j);
    } else {
      RowGroupTail<N - 1>(rest, j, f);
    }
  }
}

template <int kMax, class F>
inline void ForRowGroups(int64_t n, F&& f) {
  int64_t j = 0;
  for (; j + kMax <= n; j += kMax) f(std::integral_constant<int, kMax>{}, j);
  RowGroupTail<kMax - 1>(n - j, j, f);
}

// The loop order of a product of n activation rows by nrows weight rows: weight rows in tiles of
// about kTileBytes (read from memory once, then from cache), and per tile each group of at most
// kMax activation rows against every row of the tile, so that a group's activations stay in L1
// however many rows the batch has (one group's rows against the whole matrix would evict them:
// 32 fp32 rows of 576 columns are 72 KiB). Calls f(row, r, std::integral_constant<int, N>, j)
// for weight row r (at `row`) and activation rows j..j+N-1. The order only decides when each
// (weight row, activation row) product runs, never how it is summed.
constexpr int64_t kTileBytes = 16 << 10;
template <int kMax, class F>
inline void ForTiles(const uint8_t* rows, int64_t row_bytes, int64_t nrows, int64_t n, F&& f) {
  const int64_t tile = n <= kMax ? nrows : std::max<int64_t>(1, kTileBytes / row_bytes);
  const uint8_t* end = rows + nrows * row_bytes;
  for (int64_t r0 = 0; r0 < nrows; r0 += tile) {
    const int64_t r1 = std::min(nrows, r0 + tile);
    ForRowGroups<kMax>(n, [&](auto count, int64_t j) {
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = rows + r * row_bytes;
        if (n > 1 && j == 0) PrefetchRow(row + kPrefetchRows * row_bytes, row_bytes, end);
        f(row, r, count, j);
      }
    });
  }
}

}  // namespace
}  // namespace sift::quant

#endif  // SIFT_RUNTIME_QUANT_BLOCK_COMMON_H_
