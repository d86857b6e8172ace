// Int8 quantisation of activation rows for the int8-activation kernels (kernels.h). Portable
// C++ at the baseline flags: it touches n * cols floats, against the matrix's rows * cols weights.
#include <algorithm>
#include <cmath>

#include "kernels.h"

namespace sift::quant {

void QuantizeActivations(const float* x, int64_t n, int64_t ldx, int64_t cols, int64_t lds,
                         int8_t* q, float* d, float* sum) {
  const int64_t groups = cols / 32;
  std::fill(d + groups * lds, d + groups * lds + 8, 0.0f);  // the spare floats kernels may read
  std::fill(sum + 2 * groups * lds, sum + 2 * groups * lds + 8, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* xg = x + j * ldx + 32 * g;
      int8_t* qg = q + j * cols + 32 * g;
      float amax = 0;
      for (int k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(xg[k]));
      const float dg = amax / 127;
      const float inv = amax > 0 ? 127 / amax : 0;
      int half_sum[2] = {0, 0};
      for (int k = 0; k < 32; ++k) {
        const float v = std::clamp(std::nearbyint(xg[k] * inv), -127.0f, 127.0f);
        qg[k] = static_cast<int8_t>(v);
        half_sum[k / 16] += qg[k];
      }
      d[g * lds + j] = dg;
      sum[2 * g * lds + j] = dg * static_cast<float>(half_sum[0]);
      sum[(2 * g + 1) * lds + j] = dg * static_cast<float>(half_sum[1]);
    }
  }
}

}  // namespace sift::quant
