// sift-engine-bench: speed of the model runtime, against this machine's own limits.
//
// Measures (1) the machine: matrix-product GFLOP/s at the model's linear-layer shapes and the
// bandwidth of matrix-vector products over more bytes than the caches hold; (2) the engine:
// prefill tokens/s at several lengths, decode ms/token at several contexts, batched decode
// (several requests per step) at several batch sizes, peak RSS, and what a
// GPU would pay per step: LibTorch operators and host reads per prefill layer and per decode
// token (sift/op_counter.h). Writes JSON (--json) and Markdown (--out), prints the Markdown.
//
//   sift-engine-bench MODEL [--lengths 512,2048,8192] [--decode-contexts 2048] ...
//   (--help lists every option)
#include <torch/version.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "machine.h"
#include "sift/attention.h"
#include "sift/decode_pool.h"
#include "sift/error.h"
#include "sift/gguf.h"
#include "sift/host.h"
#include "sift/model.h"
#include "sift/op_counter.h"
#include "tools/common/command_line.h"

namespace po = boost::program_options;
using json = nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// FLOPs of a prefill of n tokens: every linear layer, causal attention (QK and PV over
// n(n+1)/2 pairs), the LM head for the last row.
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

struct Settings {
  std::string model_path, json_path, md_path;
  std::vector<int64_t> lengths, contexts;
  int64_t decode_tokens = 32;
  std::vector<int64_t> batch_rows;  // batched decode: rows per Model::DecodeStep
  int64_t batch_context = 64;       // each row's prompt before the batched steps
  int reps = 0;                     // 0 = by length
  std::vector<std::string> dtypes;
  std::string kernels = "auto";
  std::string decode_pool = "auto";                              // --decode-pool: auto | on | off
  sift::DecodePoolMode pool_mode = sift::DecodePoolMode::kAuto;  // decode_pool, parsed
  std::string weights = "native";
  std::string device = "cpu";
  int threads = 0;
  int64_t n_ctx = 0;                 // 0 = the model's context; larger runs past it (speed only)
  std::string activations = "auto";  // sift::Int8ActivationsFor
  int64_t native_max_rows = -1;      // -1: the model's default (ModelOptions::native_max_rows)
  bool machine = true;
};

// The decode path measured: Model::DecodeStep on each request's cache, or the batch's KV in a
// sift::DecodePool (--decode-pool on; auto: where its steps are CUDA graphs).
class Decoder {
 public:
  Decoder(const sift::Model& model, sift::DecodePoolMode mode) : model_(model) {
    if (sift::DecodePool::Wanted(model, mode)) pool_ = std::make_unique<sift::DecodePool>(model);
  }
  void Admit(sift::KvCache& cache, int64_t max_new) {
    if (pool_) pool_->Admit(cache, max_new);
  }
  void Release(sift::KvCache& cache) {
    if (pool_) pool_->Release(cache);
  }
  at::Tensor Step(const std::vector<sift::TokenId>& ids, const std::vector<int64_t>& positions,
                  const std::vector<sift::KvCache*>& caches) {
    if (pool_) return pool_->Step(ids, positions, caches);
    return model_.DecodeStep(ids, positions, caches, {}, &buffers_);
  }
  std::string Describe() const {
    return pool_ ? "decode pool, " + pool_->Describe() : "Model::DecodeStep";
  }

 private:
  const sift::Model& model_;
  std::unique_ptr<sift::DecodePool> pool_;
  sift::DecodeBuffers buffers_;  // as the batch loop keeps them
};

// Operators and host reads of one prefill, per layer (counted apart from the timed runs).
void CountPrefillOps(const sift::Model& model, json* out) {
  const sift::ModelConfig& c = model.config();
  const int64_t n = std::min<int64_t>(256, c.context_length);
  sift::KvCache cache = model.NewCache();
  sift::OpCounter count;
  sift::HostInt(model.Forward(SyntheticPrompt(n, c.vocab_size), 0, cache).argmax());
  (*out)["prefill_ops_per_layer"] = static_cast<double>(count.ops()) / c.num_layers;
  (*out)["prefill_host_reads_per_layer"] = static_cast<double>(count.host_reads()) / c.num_layers;
  (*out)["prefill_counted_tokens"] = n;
}

// Best-of-reps prefill time at each --lengths.
json BenchPrefill(const sift::Model& model, const Settings& s, const std::string& dtype_name) {
  const sift::ModelConfig& c = model.config();
  json prefill = json::array();
  for (int64_t n : s.lengths) {
    if (n > c.context_length) {
      std::fprintf(stderr, "[bench] skipping prefill %lld: past the model's context %lld\n",
                   static_cast<long long>(n), static_cast<long long>(c.context_length));
      continue;
    }
    const std::vector<sift::TokenId> ids = SyntheticPrompt(n, c.vocab_size);
    const int reps = s.reps > 0 ? s.reps : n <= 1024 ? 5 : n <= 4096 ? 3 : 2;
    sift::bench::ResetPeakRss();
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      sift::KvCache cache = model.NewCache();
      const auto t0 = Clock::now();
      sift::HostInt(model.Forward(ids, 0, cache).argmax());  // waits for the device
      best = std::min(best, Seconds(t0));
    }
    const double gflops = PrefillFlops(c, n) / best / 1e9;
    prefill.push_back({{"tokens", n},
                       {"reps", reps},
                       {"best_s", best},
                       {"tokens_per_s", n / best},
                       {"gflops", gflops},
                       {"peak_rss_mib", sift::bench::PeakRssMiB()}});
    std::fprintf(stderr, "[bench] %s prefill %lld: %.3f s, %.0f tok/s\n", dtype_name.c_str(),
                 static_cast<long long>(n), best, n / best);
  }
  return prefill;
}

// Decode time per token at each --contexts, with the operators and host reads of one step.
json BenchDecode(const sift::Model& model, const Settings& s, const std::string& dtype_name) {
  const sift::ModelConfig& c = model.config();
  json decode = json::array();
  for (int64_t ctx : s.contexts) {
    if (ctx + s.decode_tokens + 2 > c.context_length) continue;
    sift::bench::ResetPeakRss();
    sift::KvCache cache = model.NewCache();
    cache.set_headroom(s.decode_tokens + 2);
    at::Tensor logits = model.Forward(SyntheticPrompt(ctx, c.vocab_size), 0, cache);
    int64_t pos = ctx;
    Decoder decoder(model, s.pool_mode);
    decoder.Admit(cache, s.decode_tokens + 2);
    auto step = [&] {
      const auto next = static_cast<sift::TokenId>(sift::HostInt(logits.argmax()));
      // What sift::Generate runs per token (the batch's step with one row).
      logits = decoder.Step({next}, {pos++}, {&cache})[0];
    };
    step();  // warm-up
    double ops = 0, reads = 0;
    json by_name = json::object();
    {
      sift::OpCounter count(/*keep_names=*/true);
      step();
      ops = static_cast<double>(count.ops());
      reads = static_cast<double>(count.host_reads());
      for (const auto& [name, n] : count.by_name()) by_name[name] = n;
    }
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < s.decode_tokens; ++i) step();
    sift::HostInt(logits.argmax());
    const double ms = Seconds(t0) * 1000.0 / s.decode_tokens;
    decoder.Release(cache);  // a pool's entries back into the cache, which the KV column counts
    decode.push_back({{"context", ctx},
                      {"path", decoder.Describe()},
                      {"tokens", s.decode_tokens},
                      {"ms_per_token", ms},
                      {"ops_per_token", ops},
                      {"host_reads_per_token", reads},
                      {"ops_by_name", by_name},
                      {"kv_cache_mib", cache.Bytes() / 1048576.0},
                      {"peak_rss_mib", sift::bench::PeakRssMiB()}});
    std::fprintf(stderr, "[bench] %s decode at %lld: %.2f ms/token, %.0f ops, %.0f host reads\n",
                 dtype_name.c_str(), static_cast<long long>(ctx), ms, ops, reads);
  }
  return decode;
}

// Batched decode (continuous batching's step, sift/batch_engine.h): --batch-rows requests, each
// with its own --batch-context-token prompt and cache, decoded together by Model::DecodeStep.
// Per step: wall time, LibTorch operators and host reads; aggregate tokens/s over every row.
json BenchBatchDecode(const sift::Model& model, const Settings& s, const std::string& dtype_name) {
  const sift::ModelConfig& c = model.config();
  json rows_out = json::array();
  for (int64_t rows : s.batch_rows) {
    std::vector<sift::KvCache> caches;
    std::vector<sift::KvCache*> cache_ptrs;
    std::vector<sift::TokenId> ids;
    std::vector<int64_t> positions;
    caches.reserve(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      caches.push_back(model.NewCache());
      caches.back().set_headroom(s.decode_tokens + 2);
      std::vector<sift::TokenId> prompt = SyntheticPrompt(s.batch_context + r, c.vocab_size);
      const at::Tensor logits = model.Forward(prompt, 0, caches.back());
      ids.push_back(static_cast<sift::TokenId>(sift::HostInt(logits.argmax())));
      positions.push_back(static_cast<int64_t>(prompt.size()));
    }
    for (sift::KvCache& cache : caches) cache_ptrs.push_back(&cache);
    Decoder decoder(model, s.pool_mode);
    for (sift::KvCache& cache : caches) decoder.Admit(cache, s.decode_tokens + 2);
    auto step = [&] {
      const at::Tensor logits = decoder.Step(ids, positions, cache_ptrs);
      const std::vector<int64_t> next = sift::HostInts(logits.argmax(1));  // one read per step
      for (int64_t r = 0; r < rows; ++r) {
        ids[static_cast<size_t>(r)] = static_cast<sift::TokenId>(next[static_cast<size_t>(r)]);
        ++positions[static_cast<size_t>(r)];
      }
    };
    step();  // warm-up
    double ops = 0, reads = 0;
    {
      sift::OpCounter count;
      step();
      ops = static_cast<double>(count.ops());
      reads = static_cast<double>(count.host_reads());
    }
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < s.decode_tokens; ++i) step();
    const double ms = Seconds(t0) * 1000.0 / s.decode_tokens;
    rows_out.push_back({{"rows", rows},
                        {"path", decoder.Describe()},
                        {"context", s.batch_context},
                        {"steps", s.decode_tokens},
                        {"ms_per_step", ms},
                        {"tokens_per_s", rows * 1000.0 / ms},
                        {"ops_per_step", ops},
                        {"host_reads_per_step", reads}});
    std::fprintf(stderr, "[bench] %s batched decode, %lld rows: %.2f ms/step, %.0f tok/s\n",
                 dtype_name.c_str(), static_cast<long long>(rows), ms, rows * 1000.0 / ms);
  }
  return rows_out;
}

// One prefill + decode configuration (dtype) of the model.
json BenchConfig(const Settings& s, const std::string& dtype_name) {
  sift::ModelOptions mo;
  mo.dtype = sift::ParseDtype(dtype_name);
  mo.device = at::Device(s.device);
  mo.threads = s.threads;
  mo.context_length = s.n_ctx;
  mo.cpu_kernels = s.kernels != "torch";
  mo.weights = sift::ParseWeightFormat(s.weights);
  mo.native_max_rows = s.native_max_rows;
  mo.int8_activations = sift::Int8ActivationsFor(s.activations, mo);
  const auto t_load = Clock::now();
  const auto model = sift::Model::Load(s.model_path, mo);
  json out = {{"dtype", dtype_name},
              {"kernels", s.kernels},
              {"weights", model->native_weights() ? "native" : "dense"},
              {"kernel_summary", model->KernelSummary()},
              {"load_s", Seconds(t_load)},
              {"weight_mib", model->weights().Bytes() / 1048576.0},
              {"native_weight_mib", model->quantized_weights().Bytes() / 1048576.0},
              {"native_max_rows", model->native_max_rows()},
              {"activations", s.activations},
              {"int8_activations", mo.int8_activations}};
  CountPrefillOps(*model, &out);
  out["prefill"] = BenchPrefill(*model, s, dtype_name);
  out["decode"] = BenchDecode(*model, s, dtype_name);
  out["batch_decode"] = BenchBatchDecode(*model, s, dtype_name);
  return out;
}

std::string Markdown(const json& r) {
  std::ostringstream md;
  md << "# sift-engine-bench\n\n"
     << "Model `" << r["model"].get<std::string>() << "`, device " << r["device"].get<std::string>()
     << ", " << r["cpu"]["model"].get<std::string>() << " (" << r["cpu"]["hardware_threads"]
     << " hardware threads; flags " << r["cpu"]["flags"].dump() << "), LibTorch "
     << r["torch"].get<std::string>() << ", intra-op threads " << r["threads"] << ", CPU kernels "
     << r["cpu_kernel_isa"].get<std::string>() << ".\n\n";
  if (r.contains("machine")) {
    md << "Machine: bf16 matmul " << r["machine"]["matmul_gflops_bf16"].get<double>()
       << " GFLOP/s, fp32 matmul " << r["machine"]["matmul_gflops_fp32"].get<double>()
       << " GFLOP/s (n=2048, the model's shapes); bf16 matrix-vector "
       << r["machine"]["gemv_gbps_bf16"].get<double>() << " GB/s over 256 MiB.\n\n";
  }
  for (const json& cfg : r["configs"]) {
    md << "## " << cfg["dtype"].get<std::string>() << ", weights "
       << cfg["weights"].get<std::string>() << ", kernels " << cfg["kernels"].get<std::string>()
       << "\n\n"
       << cfg["kernel_summary"].get<std::string>() << ". Load " << cfg["load_s"].get<double>()
       << " s; dense weights " << cfg["weight_mib"].get<double>() << " MiB, native blocks "
       << cfg["native_weight_mib"].get<double>()
       << " MiB. Per prefill layer: " << cfg["prefill_ops_per_layer"].get<double>()
       << " LibTorch operators, " << cfg["prefill_host_reads_per_layer"].get<double>()
       << " host reads (" << cfg["prefill_counted_tokens"] << " tokens).\n\n"
       << "| prefill tokens | reps | best s | tokens/s | GFLOP/s | peak RSS MiB |\n"
       << "|---|---|---|---|---|---|\n";
    for (const json& p : cfg["prefill"]) {
      char row[200];
      std::snprintf(row, sizeof row, "| %lld | %d | %.3f | %.0f | %.1f | %.0f |\n",
                    p["tokens"].get<long long>(), p["reps"].get<int>(), p["best_s"].get<double>(),
                    p["tokens_per_s"].get<double>(), p["gflops"].get<double>(),
                    p["peak_rss_mib"].get<double>());
      md << row;
    }
    md << "\n| decode context | ms/token | tokens/s | LibTorch ops/token | host reads/token | "
          "KV MiB |\n|---|---|---|---|---|---|\n";
    for (const json& d : cfg["decode"]) {
      char row[200];
      std::snprintf(row, sizeof row, "| %lld | %.2f | %.1f | %.0f | %.0f | %.1f |\n",
                    d["context"].get<long long>(), d["ms_per_token"].get<double>(),
                    1000.0 / d["ms_per_token"].get<double>(), d["ops_per_token"].get<double>(),
                    d["host_reads_per_token"].get<double>(), d["kv_cache_mib"].get<double>());
      md << row;
    }
    if (!cfg["decode"].empty()) {
      md << "\nDecode path: " << cfg["decode"][0]["path"].get<std::string>() << ".\n";
    }
    if (!cfg["batch_decode"].empty()) {
      md << "\nBatched decode (one step over every row, "
         << cfg["batch_decode"][0]["path"].get<std::string>() << "; each row's own cache after a "
         << cfg["batch_decode"][0]["context"] << "-token prompt):\n\n"
         << "| rows | ms/step | tokens/s (all rows) | x one row | LibTorch ops/step | host "
            "reads/step |\n|---|---|---|---|---|---|\n";
      const double one = cfg["batch_decode"][0]["tokens_per_s"].get<double>() /
                         cfg["batch_decode"][0]["rows"].get<double>();
      for (const json& b : cfg["batch_decode"]) {
        char row[200];
        std::snprintf(row, sizeof row, "| %lld | %.2f | %.1f | %.2f | %.0f | %.0f |\n",
                      b["rows"].get<long long>(), b["ms_per_step"].get<double>(),
                      b["tokens_per_s"].get<double>(), b["tokens_per_s"].get<double>() / one,
                      b["ops_per_step"].get<double>(), b["host_reads_per_step"].get<double>());
        md << row;
      }
    }
    md << "\n";
  }
  return md.str();
}

}  // namespace

int main(int argc, char** argv) {
  sift::ConfigureThreadEnvironment(argv);
  Settings s;
  std::string lengths, contexts, dtypes, batch_rows;
  sift::cli::CommandLine cl(
      "sift-engine-bench", "sift-engine-bench MODEL [options]",
      "Prefill and decode speed of the model runtime on synthetic prompts, the machine's matrix\n"
      "rates, and the LibTorch operators / host reads per step (what a GPU pays per launch and "
      "per\n"
      "synchronisation). Prints the Markdown report.");
  cl.Add()("model", po::value(&s.model_path),
           "GGUF file or Hugging Face directory (or positional)")(
      "lengths", po::value(&lengths)->default_value("512,2048,8192"), "prefill lengths")(
      "decode-contexts", po::value(&contexts)->default_value("2048"),
      "contexts to decode at (tokens prefilled first)")(
      "decode-tokens", po::value(&s.decode_tokens)->default_value(32),
      "timed decode steps (also per batched size)")(
      "batch-rows", po::value(&batch_rows)->default_value("1,2,4,8,16,32"),
      "batched decode: rows per step (\"\" = skip)")("batch-context",
                                                     po::value(&s.batch_context)->default_value(64),
                                                     "batched decode: each row's prompt tokens")(
      "reps", po::value(&s.reps)->default_value(0),
      "prefill repetitions (0: 5 up to 1K tokens, 3 up to 4K, else 2; the best is kept)")(
      "dtypes", po::value(&dtypes)->default_value("bf16"), "compute dtypes, e.g. bf16,fp32")(
      "kernels", po::value(&s.kernels)->default_value("auto"),
      "auto: sift's CPU kernels where they apply; torch: LibTorch operators only")(
      "device", po::value(&s.device)->default_value("cpu"), "cpu or cuda")(
      "decode-pool", po::value(&s.decode_pool)->default_value("auto"),
      "decode steps over the KV in a sift::DecodePool: on | off | auto (where its steps are CUDA "
      "graphs)")("weights", po::value(&s.weights)->default_value("native"),
                 "native: decode reads the GGUF blocks; dense: the dequantised copy")(
      "threads", po::value(&s.threads)->default_value(0), "intra-op threads (0 = all cores)")(
      "activations", po::value(&s.activations)->default_value("auto"),
      "native weights: block products' activations, int8 | fp32 | auto (int8 where the CPU has "
      "AVX-512 VNNI, rows packed at load)")(
      "native-max-rows", po::value(&s.native_max_rows)->default_value(-1),
      "products with at most this many rows read the GGUF blocks (-1: the model's default)")(
      "n-ctx", po::value(&s.n_ctx)->default_value(0),
      "context limit (0 = the model's); past the trained context RoPE extrapolates, so the "
      "timings are meaningful and the outputs are not (as llama-bench's pp32768 on an 8K model)")(
      "no-machine", "skip measuring the machine's matrix rates")("json", po::value(&s.json_path),
                                                                 "write the results as JSON here")(
      "out", po::value(&s.md_path), "write the Markdown report here");
  cl.Positional("model", 1);
  po::variables_map vm;
  if (const int status = cl.Parse(argc, argv, &vm); status != sift::cli::kContinue) return status;
  if (s.model_path.empty()) return cl.Error("no MODEL given");
  if (s.kernels != "auto" && s.kernels != "torch")
    return cl.Error("--kernels must be auto or torch");
  if (!sift::ParseDecodePoolMode(s.decode_pool, &s.pool_mode))
    return cl.Error("--decode-pool must be auto, on or off");
  if (!sift::IsActivationsMode(s.activations)) {
    return cl.Error("--activations must be auto, int8 or fp32");
  }
  return sift::cli::Run("sift-engine-bench", 2, [&] {
    s.lengths = sift::cli::IntList(lengths, "--lengths");
    s.contexts = sift::cli::IntList(contexts, "--decode-contexts");
    if (!batch_rows.empty()) s.batch_rows = sift::cli::IntList(batch_rows, "--batch-rows");
    s.dtypes = sift::cli::SplitList(dtypes);
    s.machine = vm.count("no-machine") == 0;
    sift::ConfigureThreads(s.threads);

    const sift::bench::CpuInfo cpu = sift::bench::ReadCpuInfo();
    json r = {
        {"tool", "sift-engine-bench"},
        {"model", s.model_path},
        {"device", s.device},
        {"torch", TORCH_VERSION},
        {"threads", at::get_num_threads()},
        {"n_ctx", s.n_ctx},
        {"cpu_kernel_isa", sift::AttentionCpuKernelIsa()},
        {"cpu",
         {{"model", cpu.model}, {"flags", cpu.flags}, {"hardware_threads", cpu.hardware_threads}}}};
    if (s.machine) {
      const sift::ModelConfig c = [&] {
        sift::ModelOptions mo;
        mo.device = at::Device(s.device);
        return sift::Model::Load(s.model_path, mo)->config();
      }();
      const at::Device dev(s.device);
      r["machine"] = {
          {"matmul_gflops_bf16", sift::bench::MeasureMatmulGflops(c, at::kBFloat16, 2048, dev)},
          {"matmul_gflops_fp32", sift::bench::MeasureMatmulGflops(c, at::kFloat, 2048, dev)},
          {"gemv_gbps_bf16",
           sift::bench::MeasureGemvBandwidth(at::kBFloat16, 256ll << 20, c.hidden_size, dev)}};
    }
    json configs = json::array();
    for (const std::string& d : s.dtypes) configs.push_back(BenchConfig(s, d));
    r["configs"] = configs;

    const std::string md = Markdown(r);
    std::printf("%s", md.c_str());
    if (!s.md_path.empty()) std::ofstream(s.md_path) << md;
    if (!s.json_path.empty()) std::ofstream(s.json_path) << r.dump(2) << "\n";
    return 0;
  });
}
