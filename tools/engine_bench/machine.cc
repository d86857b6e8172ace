#include "machine.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "sift/host.h"

namespace sift::bench {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Waits for the device (a host read of one value; a no-op cost on the CPU).
void Sync(const at::Tensor& t) { HostDouble(t.flatten().narrow(0, 0, 1).to(at::kFloat)); }

template <typename F>
double BestSeconds(int reps, F&& f) {
  f();  // warm-up
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

CpuInfo ReadCpuInfo() {
  CpuInfo info;
  info.hardware_threads = static_cast<int>(std::thread::hardware_concurrency());
  const std::string s = ReadFile("/proc/cpuinfo");
  auto field = [&](const std::string& key) {
    const size_t at = s.find(key);
    if (at == std::string::npos) return std::string();
    const size_t colon = s.find(':', at), eol = s.find('\n', at);
    return s.substr(colon + 2, eol - colon - 2);
  };
  info.model = field("model name");
  static const std::set<std::string> kSimd = {
      "sse4_2",      "avx",      "avx2",     "fma",         "f16c",
      "avx512f",     "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
      "avx512_fp16", "avx_vnni", "amx_bf16", "amx_int8",    "amx_tile"};
  std::stringstream flags(field("flags"));
  std::string f;
  while (flags >> f) {
    if (kSimd.count(f)) info.flags.push_back(f);
  }
  return info;
}

double MeasureMatmulGflops(const ModelConfig& c, at::ScalarType dtype, int64_t n,
                           const at::Device& device) {
  const int64_t hd = c.head_dim;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {c.hidden_size, (c.num_heads + 2 * c.num_kv_heads) * hd},
      {c.num_heads * hd, c.hidden_size},
      {c.hidden_size, 2 * c.intermediate_size},
      {c.intermediate_size, c.hidden_size}};
  double flops = 0, seconds = 0;
  const auto opts = at::TensorOptions().dtype(dtype).device(device);
  for (auto [in, out] : shapes) {
    at::Tensor x = at::randn({n, in}, opts), w = at::randn({out, in}, opts);
    seconds += BestSeconds(5, [&] { Sync(at::linear(x, w)); });
    flops += 2.0 * n * in * out;
  }
  return flops / seconds / 1e9;
}

double MeasureGemvBandwidth(at::ScalarType dtype, int64_t bytes, int64_t in,
                            const at::Device& device) {
  const int64_t elem = static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t rows = bytes / elem / in / 8;
  const auto opts = at::TensorOptions().dtype(dtype).device(device);
  std::vector<at::Tensor> ws;
  for (int i = 0; i < 8; ++i) ws.push_back(at::randn({rows, in}, opts));
  at::Tensor x = at::randn({1, in}, opts);
  const double s = BestSeconds(5, [&] {
    at::Tensor last;
    for (auto& w : ws) last = at::linear(x, w);
    Sync(last);
  });
  return 8.0 * rows * in * elem / s / 1e9;
}

double PeakRssMiB() {
  const std::string s = ReadFile("/proc/self/status");
  const size_t at = s.find("VmHWM:");
  return at == std::string::npos ? 0 : std::stod(s.substr(at + 6)) / 1024.0;
}

void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

}  // namespace sift::bench
