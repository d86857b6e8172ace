// Conversions that skip LibTorch's dispatcher when nothing would change: every operator call
// costs about a microsecond on the CPU (and is a launch check on a GPU), and the decode step
// makes hundreds of them, so the no-op ones are worth not making.
#ifndef SIFT_RUNTIME_TENSOR_UTIL_H_
#define SIFT_RUNTIME_TENSOR_UTIL_H_

#include <ATen/ATen.h>

namespace sift {

inline at::Tensor AsType(const at::Tensor& t, at::ScalarType dtype) {
  return t.scalar_type() == dtype ? t : t.to(dtype);
}

inline at::Tensor Contiguous(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

}  // namespace sift

#endif  // SIFT_RUNTIME_TENSOR_UTIL_H_
