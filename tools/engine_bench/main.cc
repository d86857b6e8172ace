// sift-engine-bench: baseline speed of the model runtime, against this machine's own limits.
//
// Measures (1) the machine: bf16/fp32 matrix-product GFLOP/s at the model's linear-layer shapes
// and the memory bandwidth of a bf16 matrix-vector product over more bytes than the caches hold;
// (2) the engine: prefill tokens/s at several lengths, decode ms/token at a given context, and
// peak RSS per configuration (VmHWM, reset between configurations); and reports the engine as
// fractions of (1). Writes a Markdown report (and prints it).
//
//   sift-engine-bench MODEL [--lengths 512,2048,8192] [--decode-context 2048] [--decode-tokens 32]
//                     [--dtypes bf16,fp32] [--threads N] [--out FILE]
#include <sys/resource.h>
#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>

#include "sift/error.h"
#include "sift/gguf.h"
#include "sift/model.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Peak resident set (VmHWM) in MiB; ResetPeakRss() makes the kernel restart the count.
double PeakRssMiB() {
  std::string s = ReadFile("/proc/self/status");
  size_t at = s.find("VmHWM:");
  return at == std::string::npos ? 0 : std::stod(s.substr(at + 6)) / 1024.0;
}
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

std::string CpuName() {
  std::string s = ReadFile("/proc/cpuinfo");
  size_t at = s.find("model name");
  if (at == std::string::npos) return "unknown";
  size_t colon = s.find(':', at), eol = s.find('\n', at);
  return s.substr(colon + 2, eol - colon - 2);
}

std::vector<int64_t> ParseList(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoll(item));
  return out;
}

template <typename F>
double BestSeconds(int reps, F&& f) {
  f();  // warm-up
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    f();
    best = std::min(best, Seconds(t0));
  }
  return best;
}

struct MatmulRate {
  double gflops = 0;  // FLOP-weighted over the model's shapes
  std::string detail;
};

// GFLOP/s of at::linear at the engine's own GEMM shapes (fused qkv, o, fused gate/up, down).
MatmulRate MeasureMatmul(const sift::ModelConfig& c, at::ScalarType dtype, int64_t n) {
  const int64_t hd = c.head_dim;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {c.hidden_size, (c.num_heads + 2 * c.num_kv_heads) * hd},
      {c.num_heads * hd, c.hidden_size},
      {c.hidden_size, 2 * c.intermediate_size},
      {c.intermediate_size, c.hidden_size}};
  double flops = 0, seconds = 0;
  std::ostringstream detail;
  for (auto [in, out] : shapes) {
    at::Tensor x = at::randn({n, in}).to(dtype), w = at::randn({out, in}).to(dtype);
    double s = BestSeconds(5, [&] { at::linear(x, w); });
    double f = 2.0 * n * in * out;
    flops += f;
    seconds += s;
    char buf[96];
    std::snprintf(buf, sizeof buf, "%lldx%lld->%lld: %.0f; ", (long long)n, (long long)in,
                  (long long)out, f / s / 1e9);
    detail << buf;
  }
  return {flops / seconds / 1e9, detail.str()};
}

// GB/s reading weights of `dtype` in matrix-vector products over `bytes` of distinct matrices
// (more than the caches hold), as decode does.
double MeasureBandwidth(at::ScalarType dtype, int64_t bytes, int64_t in) {
  const int64_t elem = static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t rows = bytes / elem / in / 8;
  std::vector<at::Tensor> ws;
  for (int i = 0; i < 8; ++i) ws.push_back(at::randn({rows, in}).to(dtype));
  at::Tensor x = at::randn({1, in}).to(dtype);
  double s = BestSeconds(5, [&] {
    for (auto& w : ws) at::linear(x, w);
  });
  return 8.0 * rows * in * elem / s / 1e9;
}

// FLOPs of a prefill of n tokens: every linear layer, causal attention (QK and PV), LM head
// for the last row only.
double PrefillFlops(const sift::ModelConfig& c, int64_t n) {
  const double linear = 2.0 * n * c.LinearParamsPerLayer() * c.num_layers;
  const double attn = 2.0 * 2.0 * c.num_heads * c.head_dim * (n * (n + 1) / 2.0) * c.num_layers;
  return linear + attn + 2.0 * c.hidden_size * c.vocab_size;
}

std::vector<sift::TokenId> SyntheticPrompt(int64_t n, int64_t vocab) {
  std::vector<sift::TokenId> ids(n);
  uint64_t x = 12345;
  for (auto& id : ids) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    id = static_cast<sift::TokenId>(100 + (x >> 33) % (vocab - 100));
  }
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  sift::ConfigureThreadEnvironment(argv);
  try {
    SIFT_CHECK(argc >= 2, "usage: sift-engine-bench MODEL [--lengths 512,2048,8192] "
                          "[--decode-context 2048] [--decode-tokens 32] [--dtypes bf16,fp32] "
                          "[--threads N] [--out FILE]");
    std::string model_path = argv[1], out_path;
    std::vector<int64_t> lengths = {512, 2048, 8192};
    int64_t decode_context = 2048, decode_tokens = 32;
    std::vector<std::string> dtypes = {"bf16", "fp32"};
    int threads = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
      std::string k = argv[i], v = argv[i + 1];
      if (k == "--lengths") lengths = ParseList(v);
      else if (k == "--decode-context") decode_context = std::stoll(v);
      else if (k == "--decode-tokens") decode_tokens = std::stoll(v);
      else if (k == "--dtypes") {
        dtypes.clear();
        std::stringstream ss(v);
        std::string d;
        while (std::getline(ss, d, ',')) dtypes.push_back(d);
      } else if (k == "--threads") threads = std::stoi(v);
      else if (k == "--out") out_path = v;
      else throw sift::Error("unknown option " + k);
    }
    sift::ConfigureThreads(threads);

    std::ostringstream md;
    utsname u{};
    uname(&u);
    md << "# Engine baseline speed\n\n"
       << "Produced by `build/bin/sift-engine-bench` (tools/engine_bench/main.cc). "
       << "Machine: " << CpuName() << ", " << std::thread::hardware_concurrency()
       << " hardware threads, LibTorch intra-op threads " << at::get_num_threads() << ", "
       << u.sysname << " " << u.release << ". Model: `" << model_path << "`.\n\n"
       << "Method: prefill = one `Model::Forward` over a synthetic prompt of n token ids "
       << "(fresh cache), best of the repetitions stated; decode = mean ms/token over "
       << decode_tokens << " single-token forwards after a " << decode_context
       << "-token prefill; peak RSS = VmHWM of the process, reset before each configuration "
       << "(includes the loaded weights). FLOPs count every linear layer, causal attention "
       << "(QK and PV, n(n+1)/2 pairs) and the LM head for the last row.\n\n";

    // The machine's own limits, measured with the same LibTorch operations the engine uses.
    const sift::ModelConfig c = [&] {
      std::unique_ptr<sift::GgufFile> f = sift::GgufFile::Open(model_path);
      return sift::ModelConfig::FromGguf(*f);
    }();
    const MatmulRate mm_fp32 = MeasureMatmul(c, at::kFloat, 2048);
    const MatmulRate mm_bf16 = MeasureMatmul(c, at::kBFloat16, 2048);
    const double best_rate = std::max(mm_fp32.gflops, mm_bf16.gflops);
    const double bw_fp32 = MeasureBandwidth(at::kFloat, 256ll << 20, c.hidden_size);
    const double bw_bf16 = MeasureBandwidth(at::kBFloat16, 256ll << 20, c.hidden_size);
    md << "## Machine limits (measured in this run)\n\n"
       << "| what | fp32 | bf16 |\n|---|---|---|\n"
       << "| matrix product at the model's shapes, n=2048, GFLOP/s | " << mm_fp32.gflops << " | "
       << mm_bf16.gflops << " |\n"
       << "| matrix-vector product over 256 MiB of weights, GB/s | " << bw_fp32 << " | "
       << bw_bf16 << " |\n\n"
       << "Per shape (GFLOP/s): fp32 " << mm_fp32.detail << " bf16 " << mm_bf16.detail
       << "\n\nPrefill is reported as a fraction of the faster matrix-product rate ("
       << best_rate << " GFLOP/s); decode against weight bytes / the matrix-vector bandwidth "
       << "of the weights' own dtype.\n\n";
    std::fprintf(stderr, "[bench] matmul fp32 %.1f bf16 %.1f GFLOP/s; bandwidth fp32 %.1f bf16 %.1f GB/s\n",
                 mm_fp32.gflops, mm_bf16.gflops, bw_fp32, bw_bf16);

    for (const std::string& dname : dtypes) {
      const at::ScalarType dtype = sift::ParseDtype(dname);
      sift::ModelOptions mo;
      mo.dtype = dtype;
      mo.threads = threads;
      auto t_load = Clock::now();
      auto model = sift::Model::Load(model_path, mo);
      const double load_s = Seconds(t_load);
      const double bw = dtype == at::kFloat ? bw_fp32 : bw_bf16;
      const double weight_bytes = static_cast<double>(model->weights().Bytes());
      md << "## " << dname << "\n\n"
         << "Load " << load_s << " s; weights in memory " << weight_bytes / 1048576.0
         << " MiB.\n\n"
         << "| prefill tokens | reps | best s | tokens/s | GFLOP/s | fraction of best matmul rate | "
            "peak RSS MiB |\n|---|---|---|---|---|---|---|\n";
      MatmulRate rate{best_rate, ""};
      for (int64_t n : lengths) {
        if (n > c.context_length) continue;
        std::vector<sift::TokenId> ids = SyntheticPrompt(n, c.vocab_size);
        const int reps = n <= 1024 ? 5 : n <= 4096 ? 3 : 2;
        ResetPeakRss();
        double best = 1e30;
        for (int r = 0; r < reps; ++r) {
          sift::KvCache cache = model->NewCache();
          auto t0 = Clock::now();
          model->Forward(ids, 0, cache);
          best = std::min(best, Seconds(t0));
        }
        const double gflops = PrefillFlops(c, n) / best / 1e9;
        char row[256];
        std::snprintf(row, sizeof row, "| %lld | %d | %.3f | %.0f | %.1f | %.0f%% | %.0f |\n",
                      (long long)n, reps, best, n / best, gflops, 100 * gflops / rate.gflops,
                      PeakRssMiB());
        md << row;
        std::fprintf(stderr, "[bench] %s prefill %lld: %.3f s, %.0f tok/s, %.0f%% of matmul\n",
                     dname.c_str(), (long long)n, best, n / best, 100 * gflops / rate.gflops);
      }
      // Decode at the given context.
      ResetPeakRss();
      std::vector<sift::TokenId> ids = SyntheticPrompt(decode_context, c.vocab_size);
      sift::KvCache cache = model->NewCache();
      at::Tensor logits = model->Forward(ids, 0, cache);
      sift::TokenId next = static_cast<sift::TokenId>(logits.argmax().item<int64_t>());
      logits = model->Forward({next}, decode_context, cache);  // warm-up step
      auto t0 = Clock::now();
      for (int64_t i = 0; i < decode_tokens; ++i) {
        next = static_cast<sift::TokenId>(logits.argmax().item<int64_t>());
        logits = model->Forward({next}, decode_context + 1 + i, cache);
      }
      const double ms = Seconds(t0) * 1000.0 / decode_tokens;
      const double bound_ms = weight_bytes / (bw * 1e9) * 1000.0;
      char row[512];
      std::snprintf(row, sizeof row,
                    "\nDecode at %lld context: **%.2f ms/token** (%.1f tokens/s); bound from "
                    "weight bytes / measured bandwidth = %.2f ms/token, so the engine runs at "
                    "**%.0f%%** of the bandwidth bound. KV cache %.1f MiB. Peak RSS %.0f MiB.\n\n",
                    (long long)decode_context, ms, 1000.0 / ms, bound_ms, 100 * bound_ms / ms,
                    cache.Bytes() / 1048576.0, PeakRssMiB());
      md << row;
      std::fprintf(stderr, "[bench] %s decode: %.2f ms/token (bound %.2f)\n", dname.c_str(), ms,
                   bound_ms);
    }
    std::printf("%s", md.str().c_str());
    if (!out_path.empty()) std::ofstream(out_path) << md.str();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sift-engine-bench: error: %s\n", e.what());
    return 1;
  }
}
