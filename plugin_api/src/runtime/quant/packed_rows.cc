// The packed row layout of the AVX-512 VNNI kernel (kernels.h, QuantizedMatrix::PackedForInt8):
// portable C++, run once per matrix at load.
#include <cstring>

#include "kernels.h"

namespace sift::quant {

void PackTiles(GgmlType type, const uint8_t* rows, int64_t row_bytes, int64_t tiles, int64_t cols,
               uint8_t* out) {
  const int64_t groups = cols / 32;
  const int64_t group_bytes = PackedGroupBytes(type);
  const bool q4 = type == GgmlType::kQ4_1;
  const int64_t block_bytes =
      q4 ? 20 : 34;  // ggml's block_q4_1 {d, m, qs[16]}, block_q8_0 {d, qs[32]}
  const int vectors = q4 ? 4 : 8;
  for (int64_t t = 0; t < tiles; ++t) {
    for (int64_t g = 0; g < groups; ++g) {
      uint8_t* o = out + (t * groups + g) * group_bytes;
      for (int64_t i = 0; i < kPackRows; ++i) {
        const uint8_t* block = rows + (t * kPackRows + i) * row_bytes + g * block_bytes;
        const uint8_t* qs = block + (q4 ? 4 : 2);
        for (int v = 0; v < vectors; ++v) {
          for (int b = 0; b < 4; ++b) {
            // Q4_1: qs[k] holds element k (low nibble) and k + 16 (high nibble), as packed here.
            // Q8_0: int8 w + 128 is the byte with its top bit flipped.
            const uint8_t byte = qs[4 * v + b];
            o[64 * v + 4 * i + b] = q4 ? byte : static_cast<uint8_t>(byte ^ 0x80);
          }
        }
        std::memcpy(o + 64 * vectors + 2 * i, block, 2);                              // d
        if (q4) std::memcpy(o + 64 * vectors + 2 * kPackRows + 2 * i, block + 2, 2);  // m
      }
    }
  }
}

}  // namespace sift::quant
