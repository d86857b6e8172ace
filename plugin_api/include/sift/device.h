// Which device a model runs on: the `--device` value every tool and siftd accept.
//
// Code that reads tensor values on the host goes through sift/host.h; the rules for device-correct
// plugins and tools (and the CI check that enforces them) are in docs/devices.md.
//
// THREADING: pure function. ERRORS: sift::Error naming the problem.
#ifndef SIFT_DEVICE_H_
#define SIFT_DEVICE_H_

#include <ATen/ATen.h>

#include <string>

namespace sift {

// "cpu", "cuda" or "cuda:N". Throws sift::Error for anything else, for CUDA when this LibTorch has
// no CUDA support or sees no GPU, and for N past the GPU count.
at::Device ParseDevice(const std::string& name);

}  // namespace sift

#endif  // SIFT_DEVICE_H_
