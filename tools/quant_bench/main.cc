// sift-quant-bench: y = x W^T at a GGUF model's real matrix shapes, for n = 1..8 activation rows,
// with sift's QuantizedMatrix kernels (every CPU level this machine has, fp32 and int8
// activations) against the library alternatives on the same weights: at::linear with bf16 and
// fp32 weights (what the engine does today) and LibTorch's dynamic int8 linear
// (quantized::linear_dynamic with per-channel int8 weights requantised from the dequantised ones,
// on fbgemm where the LibTorch build has it, else oneDNN: Debian's has no fbgemm). Reports ms per
// call and GB/s of weight bytes read, the n at which a GEMM overtakes the kernel, the weights-only
// decode time per token, and GB/s per ggml type on a synthetic matrix. Writes Markdown (--out) and
// prints it.
//
// Weights are read cold, as in decode (the whole model does not fit in the last-level cache):
// each measured matrix is copied until the copies exceed --cold-mib and calls rotate over them.
// Timing: the median of --reps calls after two warm-up calls. Wrap in
// `flock /tmp/sift-measure.lock` when the numbers go into a results document.
#include <sys/utsname.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sift/error.h"
#include "sift/ggml_types.h"
#include "sift/gguf.h"
#include "sift/model.h"
#include "sift/quantized_matrix.h"
#include "tools/common/command_line.h"

namespace {

namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;
using sift::CpuIsa;
using sift::GgmlType;
using sift::QuantizedMatrix;
using sift::QuantOptions;

struct Config {
  std::string model;
  std::vector<int64_t> ns;
  std::vector<CpuIsa> levels;
  int threads = 0;
  int reps = 30;
  double max_seconds = 1.0;  // per (method, n): stop early after this long
  int64_t cold_bytes = 0;
  bool synthetic = true;
  std::string note, out;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string CpuInfoField(const std::string& field) {
  const std::string s = ReadFile("/proc/cpuinfo");
  const size_t at = s.find(field);
  if (at == std::string::npos) return "unknown";
  const size_t colon = s.find(':', at), eol = s.find('\n', at);
  return s.substr(colon + 2, eol - colon - 2);
}

// The SIMD-relevant words of /proc/cpuinfo's flags line.
std::string SimdFlags() {
  std::istringstream in(CpuInfoField("flags"));
  std::string f, out;
  while (in >> f) {
    if (f.rfind("avx", 0) == 0 || f == "fma" || f == "f16c" || f.rfind("amx", 0) == 0 ||
        f == "sse4_2") {
      out += (out.empty() ? "" : " ") + f;
    }
  }
  return out;
}

// The 1, 5 and 15 minute load averages.
std::string LoadAverage() {
  std::istringstream in(ReadFile("/proc/loadavg"));
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// One way of computing y = x W^T for one weight matrix, with its weights in `copies` copies.
struct Method {
  std::string name;
  int64_t weight_bytes = 0;  // bytes of one copy, as this method stores them
  int copies = 1;
  // Runs one product with activation x (n, cols) on copy i.
  std::function<void(const at::Tensor& x, int copy)> run;
};

int CopiesFor(int64_t bytes, int64_t cold_bytes) {
  return static_cast<int>(
      std::clamp<int64_t>((cold_bytes + bytes - 1) / std::max<int64_t>(1, bytes), 1, 4096));
}

// Median ms per call of m at n rows.
double TimeMs(const Method& m, const at::Tensor& x, const Config& cfg) {
  for (int w = 0; w < 2; ++w) m.run(x, w % m.copies);
  std::vector<double> ms;
  const auto start = Clock::now();
  for (int r = 0; r < cfg.reps; ++r) {
    const auto t0 = Clock::now();
    m.run(x, r % m.copies);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (r >= 4 && std::chrono::duration<double>(Clock::now() - start).count() > cfg.max_seconds) {
      break;
    }
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

// The library alternatives, built from the exact dequantised fp32 weights.
void AddLibraryMethods(const at::Tensor& w, const Config& cfg, std::vector<Method>* methods) {
  const int64_t rows = w.size(0), cols = w.size(1);
  {
    auto copies = std::make_shared<std::vector<at::Tensor>>();
    Method m{"at::linear bf16", rows * cols * 2, CopiesFor(rows * cols * 2, cfg.cold_bytes), {}};
    for (int i = 0; i < m.copies; ++i) copies->push_back(w.to(at::kBFloat16).clone());
    m.run = [copies](const at::Tensor& x, int i) {
      at::linear(x.to(at::kBFloat16), (*copies)[static_cast<size_t>(i)]);
    };
    methods->push_back(std::move(m));
  }
  {
    auto copies = std::make_shared<std::vector<at::Tensor>>();
    Method m{"at::linear fp32", rows * cols * 4, CopiesFor(rows * cols * 4, cfg.cold_bytes), {}};
    for (int i = 0; i < m.copies; ++i) copies->push_back(w.clone());
    m.run = [copies](const at::Tensor& x, int i) {
      at::linear(x, (*copies)[static_cast<size_t>(i)]);
    };
    methods->push_back(std::move(m));
  }
  // LibTorch's dynamic int8 linear (per-channel symmetric int8 weights requantised from the
  // dequantised ones) on the best quantised engine this build has (fbgemm, else oneDNN).
  const auto& engines = at::globalContext().supportedQEngines();
  for (at::QEngine engine : {at::QEngine::FBGEMM, at::QEngine::ONEDNN}) {
    if (std::find(engines.begin(), engines.end(), engine) == engines.end()) continue;
    at::globalContext().setQEngine(engine);
    static const c10::OperatorHandle prepack =
        c10::Dispatcher::singleton().findSchemaOrThrow("quantized::linear_prepack", "");
    static const c10::OperatorHandle linear =
        c10::Dispatcher::singleton().findSchemaOrThrow("quantized::linear_dynamic", "");
    const at::Tensor scales = (std::get<0>(w.abs().max(1)) / 127).clamp_min(1e-12).to(at::kDouble);
    const at::Tensor zeros = at::zeros({rows}, at::kLong);
    auto packed = std::make_shared<std::vector<c10::IValue>>();
    Method m{std::string("linear_dynamic int8 (") + c10::toString(engine) + ")",
             rows * cols,
             CopiesFor(rows * cols, cfg.cold_bytes),
             {}};
    for (int i = 0; i < m.copies; ++i) {
      std::vector<c10::IValue> stack{at::quantize_per_channel(w, scales, zeros, 0, at::kQInt8),
                                     c10::optional<at::Tensor>()};
      prepack.callBoxed(&stack);
      packed->push_back(stack[0]);
    }
    m.run = [packed](const at::Tensor& x, int i) {
      std::vector<c10::IValue> stack{x, (*packed)[static_cast<size_t>(i)], false};
      linear.callBoxed(&stack);
    };
    methods->push_back(std::move(m));
    break;
  }
}

std::string KernelMethodName(CpuIsa isa, bool int8) {
  QuantOptions o;
  o.isa = isa;
  o.int8_activations = int8;
  return "sift " + sift::QuantKernelName(o);
}

void AddKernelMethods(const QuantizedMatrix& q, const Config& cfg, std::vector<Method>* methods) {
  auto copies = std::make_shared<std::vector<QuantizedMatrix>>();
  const int n_copies = CopiesFor(q.nbytes(), cfg.cold_bytes);
  for (int i = 0; i < n_copies; ++i) copies->push_back(QuantizedMatrix::ConcatRows({q}));
  auto out = std::make_shared<at::Tensor>();
  std::set<std::string> seen;
  for (CpuIsa isa : cfg.levels) {
    for (bool int8 : {false, true}) {
      const std::string name = KernelMethodName(isa, int8);
      if (!seen.insert(name).second) continue;  // scalar int8 is scalar fp32
      QuantOptions o;
      o.isa = isa;
      o.int8_activations = int8;
      Method m{name, q.nbytes(), n_copies, {}};
      m.run = [copies, out, o](const at::Tensor& x, int i) {
        const QuantizedMatrix& w = (*copies)[static_cast<size_t>(i)];
        if (!out->defined() || out->size(0) != x.size(0) || out->size(1) != w.rows()) {
          *out = at::empty({x.size(0), w.rows()});
        }
        w.MatMulOut(x, *out, o);
      };
      methods->push_back(std::move(m));
    }
  }
  // The packed rows of the AVX-512 VNNI kernel (QuantizedMatrix::PackedForInt8), where it packs.
  if (q.PackedForInt8().packed_nbytes() > 0 && cfg.levels.back() == CpuIsa::kAvx512) {
    auto packed = std::make_shared<std::vector<QuantizedMatrix>>();
    for (const QuantizedMatrix& c : *copies) packed->push_back(c.PackedForInt8());
    QuantOptions o;
    o.isa = CpuIsa::kAvx512;
    o.int8_activations = true;
    Method m{KernelMethodName(CpuIsa::kAvx512, true) + " packed", q.nbytes(), n_copies, {}};
    m.run = [packed, out, o](const at::Tensor& x, int i) {
      const QuantizedMatrix& w = (*packed)[static_cast<size_t>(i)];
      if (!out->defined() || out->size(0) != x.size(0) || out->size(1) != w.rows()) {
        *out = at::empty({x.size(0), w.rows()});
      }
      w.MatMulOut(x, *out, o);
    };
    methods->push_back(std::move(m));
  }
}

std::string Fmt(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", precision, v);
  return buf;
}

struct Shape {
  std::string name;
  QuantizedMatrix matrix;
  int64_t per_token = 1;  // how many of these one decode step multiplies by
};

// Layer 0's matrices, fused as the engine fuses them, and the output head.
std::vector<Shape> ModelShapes(const sift::GgufFile& file) {
  auto get = [&](const std::string& name) {
    const sift::GgufTensorInfo* t = file.FindTensor(name);
    SIFT_CHECK(t != nullptr, file.path(), ": no tensor ", name);
    return QuantizedMatrix::FromGguf(*t);
  };
  const int64_t layers = file.GetInt(file.GetString("general.architecture") + ".block_count");
  std::vector<Shape> shapes;
  shapes.push_back(
      {"qkv",
       QuantizedMatrix::ConcatRows(
           {get("blk.0.attn_q.weight"), get("blk.0.attn_k.weight"), get("blk.0.attn_v.weight")}),
       layers});
  shapes.push_back({"o", get("blk.0.attn_output.weight"), layers});
  shapes.push_back(
      {"gate_up",
       QuantizedMatrix::ConcatRows({get("blk.0.ffn_gate.weight"), get("blk.0.ffn_up.weight")}),
       layers});
  shapes.push_back({"down", get("blk.0.ffn_down.weight"), layers});
  shapes.push_back({"lm_head",
                    get(file.FindTensor("output.weight") ? "output.weight" : "token_embd.weight"),
                    1});
  return shapes;
}

// Random rows of `type` with ordinary scales (small normal halves), for the per-type table.
QuantizedMatrix SyntheticMatrix(GgmlType type, int64_t rows, int64_t cols) {
  std::mt19937 rng(7);
  if (type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16) {
    const at::ScalarType dtype = type == GgmlType::kF32   ? at::kFloat
                                 : type == GgmlType::kF16 ? at::kHalf
                                                          : at::kBFloat16;
    return QuantizedMatrix::FromTensor((at::randn({rows, cols}) * 0.05).to(dtype));
  }
  std::vector<uint8_t> bytes(GgmlRowBytes(type, cols) * static_cast<uint64_t>(rows));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  std::vector<int> scale_offsets = {0};
  if (type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1 || type == GgmlType::kQ4_K ||
      type == GgmlType::kQ5_K) {
    scale_offsets = {0, 2};
  }
  if (type == GgmlType::kQ6_K) scale_offsets = {208};
  const size_t block = static_cast<size_t>(GgmlBlockBytes(type));
  for (size_t at = 0; at < bytes.size(); at += block) {
    for (int off : scale_offsets) {
      const uint16_t h = sift::FloatToHalf(0.001f * static_cast<float>(1 + rng() % 100));
      std::memcpy(&bytes[at + static_cast<size_t>(off)], &h, 2);
    }
  }
  return QuantizedMatrix::FromBytes(type, rows, cols, bytes.data());
}

// The document's head: machine, kernels, threads, model, timing method.
void WriteHead(const Config& cfg, std::ostream& md) {
  utsname u{};
  uname(&u);
  md << "Produced by `build/bin/sift-quant-bench` (tools/quant_bench/main.cc).\n\n"
     << "- Machine: " << CpuInfoField("model name") << ", " << std::thread::hardware_concurrency()
     << " logical CPUs, " << u.sysname << " " << u.release << "\n"
     << "- CPU SIMD flags (/proc/cpuinfo): " << SimdFlags() << "\n"
     << "- Kernel levels: detected " << sift::CpuIsaName(sift::DetectedCpuIsa())
     << ", default kernel `" << sift::QuantKernelName() << "`\n"
     << "- Threads: " << at::get_num_threads() << " (at::parallel_for pool)\n"
     << "- Model: `" << cfg.model.substr(cfg.model.rfind('/') + 1) << "`\n"
     << "- Timing: median of up to " << cfg.reps << " calls (at most " << cfg.max_seconds
     << " s per cell) after 2 warm-up calls; weights cold (each matrix copied to >= "
     << cfg.cold_bytes / (1 << 20) << " MiB, calls rotate over the copies)\n";
  md << "- Load average (/proc/loadavg) at the start: " << LoadAverage() << "\n";
  if (!cfg.note.empty()) md << "- Machine state: " << cfg.note << "\n";
  md << "\nCells: ms per call (GB/s of the weight bytes the method reads, as it stores them).\n";
}

// Per method, weights-only decode ms per token, and the methods in the order first timed.
struct PerToken {
  std::map<std::string, double> ms;
  std::vector<std::string> order;
};

// The first n at which the fastest GEMM beats the kernel, for the fp32 and int8 kernels.
void WriteCrossovers(const Config& cfg, std::map<std::string, std::vector<double>>& times,
                     std::ostream& md) {
  md << "\n";
  for (bool int8 : {false, true}) {
    const std::string kernel = KernelMethodName(cfg.levels.back(), int8);
    if (times.find(kernel) == times.end()) continue;
    std::string crossover = "none up to n=" + std::to_string(cfg.ns.back());
    for (size_t i = 0; i < cfg.ns.size(); ++i) {
      const double gemm = std::min(times["at::linear bf16"][i], times["at::linear fp32"][i]);
      if (gemm < times[kernel][i]) {
        crossover = "n=" + std::to_string(cfg.ns[i]);
        break;
      }
    }
    md << "Crossover (at::linear bf16/fp32 faster than `" << kernel << "`): " << crossover << ".\n";
  }
}

// One of the model's matrices: every method at every n, then the crossovers.
void TimeShape(const Config& cfg, const Shape& shape, PerToken* per_token, std::ostream& md) {
  const QuantizedMatrix& q = shape.matrix;
  std::cerr << "timing " << shape.name << " (" << q.Describe() << ")\n";
  std::vector<Method> methods;
  AddKernelMethods(q, cfg, &methods);
  AddLibraryMethods(q.Dequantize(at::kFloat), cfg, &methods);
  {
    // Dequantising on the fly for every call, then at::linear in bf16 (the cost of keeping only
    // the blocks and using a GEMM for n > 1).
    Method m{"Dequantize(bf16) + at::linear", q.nbytes(), 1, {}};
    m.run = [&q](const at::Tensor& x, int) {
      at::linear(x.to(at::kBFloat16), q.Dequantize(at::kBFloat16));
    };
    methods.push_back(std::move(m));
  }
  md << "\n### " << shape.name << ": " << q.cols() << " -> " << q.rows() << " (" << q.Describe()
     << ", " << Fmt(static_cast<double>(q.nbytes()) / (1 << 20), 2) << " MiB; " << shape.per_token
     << " per token)\n\n| method |";
  for (int64_t n : cfg.ns) md << " n=" << n << " |";
  md << "\n|---|";
  for (size_t i = 0; i < cfg.ns.size(); ++i) md << "---|";
  md << "\n";
  std::map<std::string, std::vector<double>> times;
  for (const Method& m : methods) {
    md << "| " << m.name << " |";
    for (int64_t n : cfg.ns) {
      const at::Tensor x = at::randn({n, q.cols()});
      const double ms = TimeMs(m, x, cfg);
      times[m.name].push_back(ms);
      md << " " << Fmt(ms, 3) << " (" << Fmt(static_cast<double>(m.weight_bytes) / ms / 1e6, 1)
         << ") |";
    }
    md << "\n";
    if (per_token->ms.find(m.name) == per_token->ms.end()) per_token->order.push_back(m.name);
    per_token->ms[m.name] += times[m.name][0] * static_cast<double>(shape.per_token);
  }
  WriteCrossovers(cfg, times, md);
}

void WriteInt8Errors(const std::vector<Shape>& shapes, std::ostream& md) {
  md << "\n### int8 activations: error against the exact product\n\n"
     << "x = randn(8, cols); y = x W^T with the exact fp32 path (double-checked against a double "
     << "product in the tests) and with int8 activations. Relative errors: max |dy| / max |y| and "
     << "rms(dy) / rms(y).\n\n| matrix | kernel | max rel | rms rel |\n|---|---|---|---|\n";
  for (const Shape& shape : shapes) {
    const at::Tensor x = at::randn({8, shape.matrix.cols()});
    const at::Tensor exact =
        at::linear(x.to(at::kDouble), shape.matrix.Dequantize().to(at::kDouble));
    QuantOptions o;
    o.int8_activations = true;
    const at::Tensor dy = shape.matrix.MatMul(x, o).to(at::kDouble) - exact;
    md << "| " << shape.name << " (" << shape.matrix.Describe() << ") | "
       << sift::QuantKernelName(o) << " | "
       << Fmt(dy.abs().max().item<double>() / exact.abs().max().item<double>() * 100, 3) << "% | "
       << Fmt(dy.pow(2).mean().sqrt().item<double>() / exact.pow(2).mean().sqrt().item<double>() *
                  100,
              3)
       << "% |\n";
  }
}

void WritePerToken(const PerToken& per_token, int64_t layers, std::ostream& md) {
  md << "\n### Weights-only decode time per token (n = 1)\n\n"
     << "Sum over the model's " << layers << " layers of qkv + o + gate_up + down, plus lm_head, "
     << "at n = 1 (the matrix products alone: no attention, norms or framework overhead).\n\n"
     << "| method | ms per token |\n|---|---|\n";
  for (const std::string& name : per_token.order) {
    md << "| " << name << " | " << Fmt(per_token.ms.at(name), 2) << " |\n";
  }
}

// GB/s of every kernel on a synthetic matrix of each ggml type (--synthetic).
void WriteSynthetic(const Config& cfg, std::ostream& md) {
  const int64_t rows = 3072, cols = 1536;
  md << "\n### GB/s per ggml type (synthetic " << rows << " x " << cols
     << " matrix of random blocks, n = 1, cold)\n\n| type | bytes/weight |";
  std::vector<std::pair<CpuIsa, bool>> kernels;
  std::set<std::string> seen;
  for (CpuIsa isa : cfg.levels) {
    for (bool int8 : {false, true}) {
      if (seen.insert(KernelMethodName(isa, int8)).second) {
        kernels.emplace_back(isa, int8);
        md << " " << KernelMethodName(isa, int8).substr(5) << " |";
      }
    }
  }
  md << "\n|---|---|";
  for (size_t i = 0; i < kernels.size(); ++i) md << "---|";
  md << "\n";
  const at::Tensor x = at::randn({1, cols});
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                        GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K,
                        GgmlType::kF16, GgmlType::kBF16, GgmlType::kF32}) {
    std::cerr << "timing synthetic " << sift::GgmlTypeName(type) << "\n";
    const QuantizedMatrix q = SyntheticMatrix(type, rows, cols);
    std::vector<Method> methods;
    AddKernelMethods(q, cfg, &methods);
    md << "| " << sift::GgmlTypeName(type) << " | "
       << Fmt(static_cast<double>(q.nbytes()) / static_cast<double>(rows * cols), 4) << " |";
    for (const auto& [isa, int8] : kernels) {
      const std::string name = KernelMethodName(isa, int8);
      for (const Method& m : methods) {
        if (m.name != name) continue;
        md << " " << Fmt(static_cast<double>(m.weight_bytes) / TimeMs(m, x, cfg) / 1e6, 1) << " |";
      }
    }
    md << "\n";
  }
}

int Run(const Config& cfg) {
  sift::ConfigureThreads(cfg.threads);
  at::manual_seed(0);
  const std::unique_ptr<sift::GgufFile> file = sift::GgufFile::Open(cfg.model);
  std::vector<Shape> shapes = ModelShapes(*file);

  std::ostringstream md;
  WriteHead(cfg, md);
  PerToken per_token;
  for (const Shape& shape : shapes) TimeShape(cfg, shape, &per_token, md);
  WriteInt8Errors(shapes, md);
  WritePerToken(per_token, shapes[0].per_token, md);
  if (cfg.synthetic) WriteSynthetic(cfg, md);

  md << "\nLoad average at the end: " << LoadAverage() << "\n";
  std::cout << md.str();
  if (!cfg.out.empty()) {
    std::ofstream out(cfg.out);
    SIFT_CHECK(out, "cannot write ", cfg.out);
    out << md.str();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  sift::ConfigureThreadEnvironment(argv);
  Config cfg;
  std::string ns, levels;
  int64_t cold_mib = 0;
  sift::cli::CommandLine cl(
      "sift-quant-bench", "sift-quant-bench [--model GGUF] [options]",
      "Times y = x W^T on a GGUF model's matrices with sift's quantised kernels and the LibTorch\n"
      "alternatives (at::linear, quantized::linear_dynamic); prints the Markdown report.");
  const char* env_model = std::getenv("SIFT_MODEL");
  cl.Add()("model", po::value(&cfg.model)->default_value(env_model ? env_model : ""),
           "GGUF file (default $SIFT_MODEL)")(
      "n", po::value(&ns)->default_value("1,2,3,4,5,6,7,8,16,32"),
      "activation row counts, comma-separated")(
      "isa", po::value(&levels)->default_value(""),
      "kernel levels to time, comma-separated (default: every level this CPU has)")(
      "threads", po::value(&cfg.threads)->default_value(0), "intra-op threads (0: all cores)")(
      "reps", po::value(&cfg.reps)->default_value(30), "timed calls per cell (median)")(
      "max-seconds", po::value(&cfg.max_seconds)->default_value(1.0),
      "stop a cell after this long (at least 5 calls)")(
      "cold-mib", po::value(&cold_mib)->default_value(192),
      "copy each matrix until the copies hold this much (defeats the caches)")(
      "no-synthetic", "skip the per-type table")(
      "note", po::value(&cfg.note)->default_value(""),
      "what else ran on the machine (printed in the report)")(
      "out", po::value(&cfg.out)->default_value(""), "also write the Markdown report here");
  po::variables_map vm;
  if (const int status = cl.Parse(argc, argv, &vm); status != sift::cli::kContinue) return status;
  return sift::cli::Run("sift-quant-bench", 1, [&] {
    cfg.synthetic = vm.count("no-synthetic") == 0;
    if (cfg.model.empty()) throw sift::cli::UsageError("no model: pass --model or set SIFT_MODEL");
    cfg.ns = sift::cli::IntList(ns, "--n");
    if (cfg.ns.empty() || cfg.reps <= 0) {
      throw sift::cli::UsageError("need at least one n and one repetition");
    }
    for (int64_t n : cfg.ns) {
      if (n <= 0) throw sift::cli::UsageError("--n values must be positive");
    }
    cfg.cold_bytes = cold_mib << 20;
    if (levels.empty()) {
      for (int i = 0; i <= static_cast<int>(sift::DetectedCpuIsa()); ++i) {
        cfg.levels.push_back(static_cast<CpuIsa>(i));
      }
    } else {
      std::stringstream ss(levels);
      std::string l;
      while (std::getline(ss, l, ',')) {
        const CpuIsa isa = sift::ParseCpuIsa(l);
        SIFT_CHECK(isa <= sift::DetectedCpuIsa(), "--isa ", l, ": this CPU supports up to ",
                   sift::CpuIsaName(sift::DetectedCpuIsa()));
        cfg.levels.push_back(isa);
      }
      std::sort(cfg.levels.begin(), cfg.levels.end());
    }
    return Run(cfg);
  });
}
