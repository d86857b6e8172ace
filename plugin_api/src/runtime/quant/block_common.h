// Scalar helpers shared by the SIMD kernel templates (simd_kernels.h, int8_kernels.h): fp16
// scales and the packed 6-bit K-quant scales. Needs F16C (every SIMD ISA file has it).
//
// Anonymous namespace on purpose: each ISA file, compiled with its own -m flags, keeps its own
// copy (see simd_kernels.h).
#ifndef SIFT_RUNTIME_QUANT_BLOCK_COMMON_H_
#define SIFT_RUNTIME_QUANT_BLOCK_COMMON_H_

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace sift::quant {
namespace {

inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return _cvtsh_ss(h);
}

inline uint32_t U32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block, packed in 12 bytes.
inline void ScaleMinK4(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

}  // namespace
}  // namespace sift::quant

#endif  // SIFT_RUNTIME_QUANT_BLOCK_COMMON_H_
