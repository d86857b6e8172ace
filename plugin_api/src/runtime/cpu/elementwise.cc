#include "cpu/elementwise.h"

#include <ATen/Parallel.h>

#include <cmath>

namespace sift::cpu {
namespace {
// Rows per task: one task for decode-sized inputs, parallel for prefill-sized ones.
constexpr int64_t kRowGrain = 64;
}  // namespace

void RmsNorm(const float* x, const float* w, float eps, int64_t n, int64_t d, float* out) {
  at::parallel_for(0, n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * d;
      float* o = out + r * d;
      float ss = 0;
      for (int64_t i = 0; i < d; ++i) ss += xr[i] * xr[i];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
      for (int64_t i = 0; i < d; ++i) o[i] = xr[i] * inv * w[i];
    }
  });
}

void RopeInPlace(float* x, int64_t n, int64_t row_stride, int64_t heads, int64_t hd,
                 const float* cos, const float* sin) {
  const int64_t half = hd / 2;
  at::parallel_for(0, n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* c = cos + r * half;
      const float* s = sin + r * half;
      for (int64_t h = 0; h < heads; ++h) {
        float* x1 = x + r * row_stride + h * hd;
        float* x2 = x1 + half;
        for (int64_t i = 0; i < half; ++i) {
          const float a = x1[i], b = x2[i];
          x1[i] = a * c[i] - b * s[i];
          x2[i] = b * c[i] + a * s[i];
        }
      }
    }
  });
}

void SiluMul(const float* gu, int64_t n, int64_t ff, float* out) {
  at::parallel_for(0, n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = gu + r * 2 * ff;
      const float* u = g + ff;
      float* o = out + r * ff;
      for (int64_t i = 0; i < ff; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    }
  });
}

}  // namespace sift::cpu
