// What the engine bench reports about the machine: CPU model and flags, and the rates the
// engine's own operations reach on it (matrix products at the model's shapes, the bandwidth of
// matrix-vector products over more bytes than the caches hold).
#ifndef SIFT_TOOLS_ENGINE_BENCH_MACHINE_H_
#define SIFT_TOOLS_ENGINE_BENCH_MACHINE_H_

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "sift/model_config.h"

namespace sift::bench {

struct CpuInfo {
  std::string model;
  std::vector<std::string> flags;  // the SIMD-relevant ones among /proc/cpuinfo's flags
  int hardware_threads = 0;
};
CpuInfo ReadCpuInfo();

// GFLOP/s of at::linear at the engine's GEMM shapes with n rows (FLOP-weighted).
double MeasureMatmulGflops(const ModelConfig& c, at::ScalarType dtype, int64_t n,
                           const at::Device& device);
// GB/s of matrix-vector products reading `bytes` of `dtype` weights.
double MeasureGemvBandwidth(at::ScalarType dtype, int64_t bytes, int64_t in,
                            const at::Device& device);

// Peak resident set (VmHWM) in MiB; ResetPeakRss() restarts the count.
double PeakRssMiB();
void ResetPeakRss();

}  // namespace sift::bench

#endif  // SIFT_TOOLS_ENGINE_BENCH_MACHINE_H_
