// Bringing tensor data to the host: the one place where values computed on the model's device
// are read by host code (index lists, scalars). On a GPU every call waits for the device, so
// each call is counted as a host read (sift/op_counter.h), whatever the tensor's device: the
// CPU engine bench then shows what a GPU would pay.
//
// RoPE positions are not data: they are host metadata by design (sift/kv_cache.h) and never
// need these helpers.
//
// THREADING: pure functions. ERRORS: sift::Error when a scalar is requested from a tensor with
// more than one element.
#ifndef SIFT_HOST_H_
#define SIFT_HOST_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace sift {

// A contiguous CPU tensor with t's values (t itself when it already is one).
at::Tensor ToHost(const at::Tensor& t);
// The single value of a one-element tensor.
int64_t HostInt(const at::Tensor& t);
double HostDouble(const at::Tensor& t);
// All values of an integer tensor, flattened.
std::vector<int64_t> HostInts(const at::Tensor& t);

}  // namespace sift

#endif  // SIFT_HOST_H_
