#include "sift/device.h"

#include "sift/error.h"

namespace sift {

at::Device ParseDevice(const std::string& name) {
  const bool cuda = name == "cuda" || name.rfind("cuda:", 0) == 0;
  if (name != "cpu" && !cuda) {
    throw Error("device '" + name + "': expected cpu, cuda or cuda:N");
  }
  if (!cuda) return at::Device(at::kCPU);
  at::Device device(at::kCUDA);
  try {
    device = at::Device(name);
  } catch (const std::exception&) {
    throw Error("device '" + name + "': expected cpu, cuda or cuda:N");
  }
  if (!at::hasCUDA()) {
    throw Error("device '" + name +
                "': this LibTorch has no CUDA support or sees no GPU; build against a CUDA "
                "LibTorch (README, 'On a CUDA machine') or use cpu");
  }
  const int64_t gpus = static_cast<int64_t>(at::getNumGPUs());
  if (device.has_index() && device.index() >= gpus) {
    throw Error("device '" + name + "': only " + std::to_string(gpus) + " GPU(s) visible");
  }
  return device;
}

}  // namespace sift
