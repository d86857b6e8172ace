#include "sift/model.h"

#include <ATen/Parallel.h>

#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cpu/elementwise.h"
#include "decode_attention.h"
#include "sift/error.h"
#include "sift/host.h"
#include "tensor_util.h"

namespace sift {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// inv_freq[i] = 1 / theta^(2i/hd), with Llama 3 / linear scaling applied as HF does.
at::Tensor RopeInverseFrequencies(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  at::Tensor inv = at::empty({half}, at::kFloat);  // host: RoPE angles are host math
  float* p = inv.data_ptr<float>();                // host: just created on the CPU
  const RopeScaling& s = c.rope_scaling;
  for (int64_t i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / c.head_dim);
    if (s.type == "linear") {
      f /= s.factor;
    } else if (s.type == "llama3") {
      const double old_len = static_cast<double>(s.original_context_length);
      const double low_wavelen = old_len / s.low_freq_factor;
      const double high_wavelen = old_len / s.high_freq_factor;
      const double wavelen = 2 * M_PI / f;
      if (wavelen > low_wavelen) {
        f /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth =
            (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
    p[i] = static_cast<float>(f);
  }
  return inv;
}

// True when the device multiplies bf16 matrices in hardware (CUDA, or x86 CPUs with AVX512-BF16
// or AMX). Without it oneDNN emulates bf16 and large products run 3-4x slower than fp32 on the
// same cores (docs/results/engine-baseline.md), while matrix-vector products are still faster in
// bf16 because they are bound by the bytes read.
bool HasNativeBf16(const at::Device& device) {
  if (device.is_cuda()) return true;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    return line.find(" avx512_bf16") != std::string::npos ||
           line.find(" amx_bf16") != std::string::npos;
  }
  return false;
}

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor inv = at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true).add_(eps));
  return xf.mul(inv).mul_(weight);
}

}  // namespace

WeightFormat ParseWeightFormat(const std::string& name) {
  if (name == "native") return WeightFormat::kNative;
  if (name == "dense") return WeightFormat::kDense;
  throw Error("unknown weight format '" + name + "' (expected native or dense)");
}

const char* WeightFormatName(WeightFormat format) {
  return format == WeightFormat::kNative ? "native" : "dense";
}

bool IsActivationsMode(const std::string& mode) {
  return mode == "auto" || mode == "int8" || mode == "fp32";
}

bool Int8ActivationsFor(const std::string& mode, const ModelOptions& options) {
  SIFT_CHECK(IsActivationsMode(mode), "unknown activations '", mode,
             "' (expected auto, int8 or fp32)");
  if (mode != "auto") return mode == "int8";
  return options.weights == WeightFormat::kNative && options.device.is_cpu() &&
         PackedInt8Available();
}

at::ScalarType ParseDtype(const std::string& name) {
  if (name == "bf16" || name == "bfloat16") return at::kBFloat16;
  if (name == "fp32" || name == "float32" || name == "f32") return at::kFloat;
  if (name == "fp16" || name == "float16" || name == "f16") return at::kHalf;
  throw Error("unknown dtype '" + name + "' (expected bf16, fp32 or fp16)");
}

const char* DtypeName(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16:
      return "bf16";
    case at::kFloat:
      return "fp32";
    case at::kHalf:
      return "fp16";
    default:
      return "other";
  }
}

void ConfigureThreadEnvironment(char** argv) {
  // Both variables are read once, when libgomp / OpenBLAS load, so they have to be in the
  // environment before the process starts: set them and re-execute once.
  // A wait policy the user chose is kept as it is (GOMP_SPINCOUNT would override its spinning).
  bool changed = false;
  const bool policy_set = std::getenv("OMP_WAIT_POLICY") != nullptr;
  for (const char* kv : {"GOMP_SPINCOUNT=30000", "OPENBLAS_THREAD_TIMEOUT=4"}) {
    const std::string s(kv);
    const std::string name = s.substr(0, s.find('='));
    if (std::getenv(name.c_str()) != nullptr || (policy_set && name == "GOMP_SPINCOUNT")) continue;
    setenv(name.c_str(), s.substr(s.find('=') + 1).c_str(), 1);
    changed = true;
  }
  if (changed && argv != nullptr) {
    // The binary's own path, not /proc/self/exe: the process name (ps, top, pkill) comes from it.
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    execv(ec ? "/proc/self/exe" : self.c_str(), argv);
  }
  // execv only returns on failure; carry on with the libraries' defaults.
}

void ConfigureThreads(int threads) {
  int n = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  at::set_num_threads(std::max(1, n));
}

std::shared_ptr<const Model> Model::Load(const std::string& path, const ModelOptions& options) {
  std::shared_ptr<Model> model(new Model());
  model->path_ = path;
  model->options_ = options;
  LoadOptions load;
  load.dtype = options.dtype;
  load.device = options.device;
  model->weights_ = LoadWeights(path, load);
  SIFT_CHECK(options.context_length >= 0, "context_length must be >= 0, got ",
             options.context_length);
  if (options.context_length > 0) {
    ModelConfig& config = model->weights_.config;
    if (options.context_length > config.context_length) {
      std::fprintf(stderr,
                   "[sift] context %lld is past the model's trained context %lld: RoPE "
                   "extrapolates (speed is meaningful, answers are not)\n",
                   static_cast<long long>(options.context_length),
                   static_cast<long long>(config.context_length));
    }
    config.context_length = options.context_length;
  }
  // GGUF metadata or tokenizer.json; null for a Hugging Face directory without one.
  model->tokenizer_ = Tokenizer::ForModel(path);
  if (EndsWith(path, ".gguf") && options.weights == WeightFormat::kNative &&
      options.device.is_cpu()) {
    model->qweights_ = LoadQuantizedWeights(path);
    if (options.int8_activations) {
      // The AVX-512 VNNI kernel's packed rows, where the products read them (PackedForInt8 packs
      // nothing on a CPU without it or under SIFT_CPU_ISA below avx512).
      for (QuantizedMatrix* m : model->qweights_.Matrices()) *m = m->PackedForInt8();
    }
  }
  const ModelConfig& c = model->weights_.config;
  model->inv_freq_cpu_ = RopeInverseFrequencies(c);
  if (options.upcast_min_rows < 0) {
    model->upcast_min_rows_ =
        options.dtype == at::kBFloat16 && !HasNativeBf16(options.device) ? 16 : 0;
  } else {
    model->upcast_min_rows_ = options.upcast_min_rows;
  }
  // Fuse q/k/v and gate/up into one matrix each (fewer, larger GEMMs); the per-projection
  // tensors become views of the fused storage, so memory is not doubled.
  for (LayerWeights& l : model->weights_.layers) {
    at::Tensor qkv = at::cat({l.wq, l.wk, l.wv}, 0).contiguous();
    const int64_t nq = l.wq.size(0), nk = l.wk.size(0);
    l.wq = qkv.narrow(0, 0, nq);
    l.wk = qkv.narrow(0, nq, nk);
    l.wv = qkv.narrow(0, nq + nk, nk);
    model->w_qkv_.push_back(qkv);
    model->b_qkv_.push_back(c.attention_bias ? at::cat({l.bq, l.bk, l.bv}, 0) : at::Tensor());
    at::Tensor gate_up = at::cat({l.w_gate, l.w_up}, 0).contiguous();
    const int64_t ff = l.w_gate.size(0);
    l.w_gate = gate_up.narrow(0, 0, ff);
    l.w_up = gate_up.narrow(0, ff, ff);
    model->w_gate_up_.push_back(gate_up);
  }
  // Measured on the 2-core AVX2 machine (docs/engine.md#weights): upcasting converts every weight
  // per product, which the blocks' kernel (weights read once per 8 rows) beats below ~100 rows.
  model->native_max_rows_ = options.native_max_rows >= 0  ? options.native_max_rows
                            : model->upcast_min_rows_ > 0 ? 96
                                                          : 8;
  return model;
}

KvCacheShape Model::CacheShape() const {
  KvCacheShape shape;
  shape.num_layers = config().num_layers;
  shape.num_kv_heads = config().num_kv_heads;
  shape.head_dim = config().head_dim;
  shape.dtype = options_.dtype;
  shape.device = options_.device;
  return shape;
}

KvCache Model::NewCache() const { return KvCache(CacheShape()); }

at::Tensor Model::Embed(const at::Tensor& ids) const {
  return weights_.embed.index_select(0, ids.to(options_.device, at::kLong)).to(at::kFloat);
}

at::Tensor Model::EmbedTokens(const std::vector<TokenId>& tokens, int64_t begin,
                              int64_t end) const {
  SIFT_CHECK(0 <= begin && begin <= end && end <= static_cast<int64_t>(tokens.size()),
             "EmbedTokens: rows [", begin, ", ", end, ") of ", tokens.size(), " tokens");
  const at::Tensor ids =
      at::tensor(std::vector<int64_t>(tokens.begin() + begin, tokens.begin() + end),
                 at::kLong);  // host: token ids
  return Embed(ids);
}

bool Model::UseCpuKernels(const at::Tensor& t) const {
  return options_.cpu_kernels && t.is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
}

at::Tensor Model::NormF32(const at::Tensor& x, const at::Tensor& weight) const {
  if (!UseCpuKernels(x)) return RmsNorm(x, weight, config().rms_norm_eps);
  at::Tensor out = at::empty(x.sizes(), x.options());
  cpu::RmsNorm(x.data_ptr<float>(), weight.data_ptr<float>(),  // host: CPU kernel
               static_cast<float>(config().rms_norm_eps), x.size(0), x.size(1),
               out.data_ptr<float>());  // host: CPU kernel
  return out;
}

at::Tensor Model::AttnNorm(int64_t layer, const at::Tensor& x) const {
  return NormF32(x, weights_.layers.at(layer).attn_norm).to(options_.dtype);
}

at::Tensor Model::FfnNorm(int64_t layer, const at::Tensor& x) const {
  return NormF32(x, weights_.layers.at(layer).ffn_norm).to(options_.dtype);
}

std::string Model::KernelSummary() const {
  std::string s = std::string("attention ") + AttentionCpuKernelIsa();
  if (!options_.device.is_cpu()) return "LibTorch on " + options_.device.str();
  if (!options_.cpu_kernels) s = "attention torch";
  s += ", matmul ";
  int64_t packed = 0;
  for (const QuantizedMatrix* m : qweights_.Matrices()) packed += m->packed_nbytes();
  s += native_weights() ? QuantKernelName(quant_options()) +
                              (packed > 0 ? " packed (" + std::to_string(packed >> 20) + " MiB)"
                                          : std::string()) +
                              " (native blocks up to " + std::to_string(native_max_rows_) + " rows)"
                        : std::string("LibTorch");
  return s;
}

Model::Qkv Model::ProjectQkv(int64_t layer, const at::Tensor& h) const {
  const ModelConfig& c = config();
  const QuantizedLayer* ql = Quantized(layer);
  at::Tensor qkv = Linear(h, w_qkv_.at(layer), b_qkv_.at(layer), ql ? &ql->qkv : nullptr);
  const int64_t n = h.size(0), hd = c.head_dim;
  Qkv out;
  out.q = qkv.narrow(1, 0, c.num_heads * hd).view({n, c.num_heads, hd});
  out.k = qkv.narrow(1, c.num_heads * hd, c.num_kv_heads * hd).view({n, c.num_kv_heads, hd});
  out.v = qkv.narrow(1, (c.num_heads + c.num_kv_heads) * hd, c.num_kv_heads * hd)
              .view({n, c.num_kv_heads, hd});
  return out;
}

RopeTables Model::Rope(const at::Tensor& positions, const RopeTables* into) const {
  // Angles in fp32 as Hugging Face computes them, on the host from the host positions, then
  // moved to the device (a copy to it, never a read back).
  const at::Tensor pos = positions.is_cpu() ? positions : ToHost(positions);
  at::Tensor angles = pos.to(at::kFloat).unsqueeze(1) * inv_freq_cpu_;
  RopeTables t;
  if (into != nullptr) {
    SIFT_CHECK(
        into->cos.is_cpu() && into->cos.size(0) >= pos.size(0) && into->sin.size(0) >= pos.size(0),
        "Rope: the tables to write into hold fewer than ", pos.size(0), " rows");
    t.cos = into->cos.narrow(0, 0, pos.size(0));
    t.sin = into->sin.narrow(0, 0, pos.size(0));
    at::cos_out(t.cos, angles);  // the same kernels as below, into the given rows
    at::sin_out(t.sin, angles);
    return t;
  }
  t.cos = angles.cos().to(options_.device);
  t.sin = angles.sin().to(options_.device);
  return t;
}

at::Tensor Model::ApplyRope(const at::Tensor& x, const RopeTables& rope) const {
  if (UseCpuKernels(x) && x.dim() == 3) {
    at::Tensor out = x.clone();
    float* data = out.data_ptr<float>();                  // host: CPU kernel
    const float* cos_table = rope.cos.data_ptr<float>();  // host: CPU kernel
    const float* sin_table = rope.sin.data_ptr<float>();  // host: CPU kernel
    cpu::RopeInPlace(data, out.size(0), out.size(1) * out.size(2), out.size(1), out.size(2),
                     cos_table, sin_table);
    return out;
  }
  const int64_t half = config().head_dim / 2;
  const at::Tensor cos = rope.cos.unsqueeze(1), sin = rope.sin.unsqueeze(1);  // [n, 1, hd/2]
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor x1 = xf.narrow(2, 0, half), x2 = xf.narrow(2, half, half);
  return at::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, 2).to(x.scalar_type());
}

at::Tensor Model::ApplyRope(const at::Tensor& x, const at::Tensor& positions) const {
  return ApplyRope(x, Rope(positions));
}

at::Tensor Model::OutputProjection(int64_t layer, const at::Tensor& attn) const {
  return OutputProjectionRows(layer, attn, /*decode_rows=*/false);
}

at::Tensor Model::OutputProjectionRows(int64_t layer, const at::Tensor& attn,
                                       bool decode_rows) const {
  const QuantizedLayer* ql = Quantized(layer);
  return AsType(LinearRows(attn.reshape({attn.size(0), -1}), weights_.layers.at(layer).wo, {},
                           ql ? &ql->wo : nullptr, decode_rows),
                at::kFloat);
}

at::Tensor Model::Ffn(int64_t layer, const at::Tensor& h) const {
  return FfnRows(layer, h, /*decode_rows=*/false);
}

at::Tensor Model::FfnRows(int64_t layer, const at::Tensor& h, bool decode_rows) const {
  const QuantizedLayer* ql = Quantized(layer);
  at::Tensor gate_up =
      LinearRows(h, w_gate_up_.at(layer), {}, ql ? &ql->gate_up : nullptr, decode_rows);
  const int64_t ff = config().intermediate_size;
  at::Tensor act;
  if (UseCpuKernels(gate_up)) {
    act = at::empty({gate_up.size(0), ff}, gate_up.options());
    const float* in = gate_up.data_ptr<float>();  // host: CPU kernel
    float* result = act.data_ptr<float>();        // host: CPU kernel
    cpu::SiluMul(in, gate_up.size(0), ff, result);
  } else {
    act = at::silu(gate_up.narrow(1, 0, ff)).mul_(gate_up.narrow(1, ff, ff));
  }
  return AsType(LinearRows(act, weights_.layers.at(layer).w_down, {}, ql ? &ql->w_down : nullptr,
                           decode_rows),
                at::kFloat);
}

at::Tensor Model::Logits(const at::Tensor& x) const {
  const at::Tensor h = NormF32(x, weights_.final_norm);
  return AsType(Linear(h, weights_.lm_head, {}, native_weights() ? &qweights_.lm_head : nullptr),
                at::kFloat);
}

at::Tensor Model::Linear(const at::Tensor& x_in, const at::Tensor& w, const at::Tensor& b,
                         const QuantizedMatrix* q) const {
  return LinearRows(x_in, w, b, q, /*decode_rows=*/false);
}

at::Tensor Model::LinearRows(const at::Tensor& x_in, const at::Tensor& w, const at::Tensor& b,
                             const QuantizedMatrix* q, bool decode_rows) const {
  if (q != nullptr && x_in.is_cpu() && (decode_rows || x_in.size(0) <= native_max_rows_)) {
    at::Tensor y = q->MatMul(Contiguous(AsType(x_in, at::kFloat)), quant_options());
    return b.defined() ? y.add_(b) : y;
  }
  const at::Tensor x = AsType(x_in, w.scalar_type());
  if (UpcastsToFp32(x.size(0))) {
    // Matrix-matrix product in fp32 from bf16 storage: converting the weight costs one pass over
    // it, far less than the emulated bf16 GEMM would.
    return at::linear(x.to(at::kFloat), w.to(at::kFloat), b.defined() ? b.to(at::kFloat) : b)
        .to(x.scalar_type());
  }
  return at::linear(x, w, b.defined() ? AsType(b, w.scalar_type()) : b);
}

at::Tensor Model::Layer(int64_t layer, const at::Tensor& x, const at::Tensor& positions,
                        KvCache* cache, const AttentionOptions& attention,
                        const AttentionStatsRequest& request, AttentionStats* stats) const {
  return Layer(layer, x, positions, Rope(positions), cache, attention, request, stats);
}

at::Tensor Model::Layer(int64_t layer, const at::Tensor& x, const at::Tensor& positions,
                        const RopeTables& rope, KvCache* cache, const AttentionOptions& attention,
                        const AttentionStatsRequest& request, AttentionStats* stats) const {
  const ModelConfig& c = config();
  const int64_t n = x.size(0), hd = c.head_dim, nq = c.num_heads * hd, nkv = c.num_kv_heads * hd;
  // q, k and v in fp32, RoPE applied to q and k in place.
  const QuantizedLayer* ql = Quantized(layer);
  at::Tensor qkv = Linear(NormF32(x, weights_.layers.at(layer).attn_norm), w_qkv_.at(layer),
                          b_qkv_.at(layer), ql ? &ql->qkv : nullptr);
  qkv = Contiguous(AsType(qkv, at::kFloat));
  if (UseCpuKernels(qkv)) {
    float* data = qkv.data_ptr<float>();                  // host: CPU kernel
    const float* cos_table = rope.cos.data_ptr<float>();  // host: CPU kernel
    const float* sin_table = rope.sin.data_ptr<float>();  // host: CPU kernel
    cpu::RopeInPlace(data, n, qkv.size(1), c.num_heads + c.num_kv_heads, hd, cos_table, sin_table);
  } else {
    qkv.narrow(1, 0, nq + nkv)
        .copy_(
            ApplyRope(qkv.narrow(1, 0, nq + nkv).view({n, c.num_heads + c.num_kv_heads, hd}), rope)
                .view({n, nq + nkv}));
  }
  const at::Tensor q = qkv.narrow(1, 0, nq).view({n, c.num_heads, hd});
  const at::Tensor k = qkv.narrow(1, nq, nkv).view({n, c.num_kv_heads, hd});
  const at::Tensor v = qkv.narrow(1, nq + nkv, nkv).view({n, c.num_kv_heads, hd});
  AttentionOptions attn_options = attention;
  attn_options.upcast_fp32 = UpcastsToFp32(n);
  if (!options_.cpu_kernels) attn_options.kernel = AttentionKernel::kTorch;
  at::Tensor attn;
  if (cache != nullptr) {
    cache->Append(layer, k, v, positions);
    attn = Attention(q, cache->Keys(layer), cache->Values(layer), positions,
                     cache->Positions(layer), attn_options, request, stats);
  } else {
    attn = Attention(q, k.to(options_.dtype).transpose(0, 1), v.to(options_.dtype).transpose(0, 1),
                     positions, positions, attn_options, request, stats);
  }
  at::Tensor h = x + OutputProjection(layer, attn);
  return h.add_(Ffn(layer, NormF32(h, weights_.layers.at(layer).ffn_norm)));
}

at::Tensor Model::RunLayers(int64_t begin, int64_t end, const at::Tensor& x,
                            const at::Tensor& positions, KvCache* cache,
                            const ForwardOptions& options) const {
  SIFT_CHECK(0 <= begin && begin <= end && end <= config().num_layers, "RunLayers: bad range [",
             begin, ", ", end, ")");
  at::Tensor h = x;
  const RopeTables rope = Rope(positions);
  for (int64_t l = begin; l < end; ++l) {
    AttentionStatsRequest request;
    if (options.hooks.stats_request) request = options.hooks.stats_request(l);
    AttentionStats stats;
    h = Layer(l, h, positions, rope, cache, options.attention, request,
              request.any() ? &stats : nullptr);
    if (request.any() && options.hooks.on_stats) options.hooks.on_stats(l, std::move(stats));
  }
  return h;
}

namespace {

// Sizes `b` for n rows: unchanged when it holds enough, else reallocated for the next power of two
// (so a batch that grows one row at a time moves its buffers log2(max) times). The activations
// and logits only for the host path.
void GrowDecodeBuffers(const Model& model, int64_t n, bool host_path, DecodeBuffers& b) {
  if (b.rows >= n && (!host_path || b.logits.defined())) return;
  const ModelConfig& c = model.config();
  int64_t rows = 1;
  while (rows < n) rows *= 2;
  rows = std::max(rows, b.rows);
  const at::TensorOptions i64 = at::TensorOptions().dtype(at::kLong);
  const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat);
  b = DecodeBuffers();
  b.rows = rows;
  b.ids = at::empty({rows}, i64);        // host: token ids
  b.positions = at::empty({rows}, i64);  // host: positions
  if (!host_path) return;
  const int64_t hidden = c.hidden_size, hd = c.head_dim, ff = c.intermediate_size;
  const int64_t nqkv = (c.num_heads + 2 * c.num_kv_heads) * hd;
  b.x = at::empty({rows, hidden}, f32);              // host: CPU-only path
  b.h = at::empty({rows, hidden}, f32);              // host: CPU-only path
  b.out = at::empty({rows, hidden}, f32);            // host: CPU-only path
  b.qkv = at::empty({rows, nqkv}, f32);              // host: CPU-only path
  b.attn = at::empty({rows, c.num_heads, hd}, f32);  // host: CPU-only path
  b.gate_up = at::empty({rows, 2 * ff}, f32);        // host: CPU-only path
  b.act = at::empty({rows, ff}, f32);                // host: CPU-only path
  b.rope_cos = at::empty({rows, hd / 2}, f32);       // host: CPU-only path
  b.rope_sin = at::empty({rows, hd / 2}, f32);       // host: CPU-only path
  b.logits = at::empty({rows, model.quantized_weights().lm_head.rows()}, f32);  // host: CPU
}

// Model::DecodeStep with native weights and sift's CPU kernels: the kernels the operator path
// below calls, in the same order on the same values (so the same bits), but on the fp32 buffers
// of `b` (sized for the step), so a layer costs no LibTorch operator but the attention's reads of
// each cache (Keys, Values, Positions) and the step allocates nothing. Host overhead per layer is
// what made a one-row step slower than its products; sift-engine-bench counts the operators.
at::Tensor HostDecodeStep(const Model& model, const std::vector<at::Tensor>& b_qkv,
                          const at::Tensor& ids, const at::Tensor& pos,
                          const std::vector<KvCache*>& caches, const AttentionOptions& attention,
                          DecodeBuffers& b) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  const QuantizedWeights& qw = model.quantized_weights();
  const QuantOptions quant = model.quant_options();
  const int64_t n = ids.size(0);
  const int64_t hidden = c.hidden_size, hd = c.head_dim, ff = c.intermediate_size;
  const int64_t nq = c.num_heads * hd, nkv = c.num_kv_heads * hd, nqkv = nq + 2 * nkv;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const RopeTables into{b.rope_cos, b.rope_sin};
  const RopeTables rope = model.Rope(pos, &into);
  // The residual stream starts as the rows' embeddings: Model::Embed's gather, written into x
  // (Embed would return a tensor of its own).
  at::Tensor x = b.x.narrow(0, 0, n);
  if (w.embed.scalar_type() == at::kFloat) {
    at::index_select_out(x, w.embed, 0, ids);
  } else {
    x.copy_(w.embed.index_select(0, ids));
  }
  const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat);
  at::Tensor attn = b.attn.narrow(0, 0, n);
  float* xp = x.data_ptr<float>();                      // host: CPU kernel
  float* hp = b.h.data_ptr<float>();                    // host: CPU kernel
  float* qkvp = b.qkv.data_ptr<float>();                // host: CPU kernel
  float* attnp = attn.data_ptr<float>();                // host: CPU kernel
  float* outp = b.out.data_ptr<float>();                // host: CPU kernel
  float* gup = b.gate_up.data_ptr<float>();             // host: CPU kernel
  float* actp = b.act.data_ptr<float>();                // host: CPU kernel
  int64_t* posp = pos.data_ptr<int64_t>();              // host: positions
  const float* cos_table = rope.cos.data_ptr<float>();  // host: CPU kernel
  const float* sin_table = rope.sin.data_ptr<float>();  // host: CPU kernel
  // q, k and v of every row as views of the qkv buffer (no operator: from_blob).
  const at::Tensor q =
      at::from_blob(qkvp, {n, c.num_heads, hd}, {nqkv, hd, 1}, f32);  // host: CPU-only path
  const auto add_bias = [n](float* y, const float* b, int64_t ldy, int64_t width) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < width; ++j) y[i * ldy + j] += b[j];
    }
  };
  const auto add_residual = [n, hidden](float* x, const float* y) {
    for (int64_t i = 0; i < n * hidden; ++i) x[i] += y[i];
  };
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(layer)];
    const QuantizedLayer& ql = qw.layers[static_cast<size_t>(layer)];
    cpu::RmsNorm(xp, lw.attn_norm.data_ptr<float>(), eps, n, hidden, hp);  // host: CPU kernel
    ql.qkv.MatMul(hp, n, hidden, qkvp, nqkv, quant);
    const at::Tensor& bias = b_qkv[static_cast<size_t>(layer)];
    if (bias.defined()) add_bias(qkvp, bias.data_ptr<float>(), nqkv, nqkv);  // host: CPU kernel
    cpu::RopeInPlace(qkvp, n, nqkv, c.num_heads + c.num_kv_heads, hd, cos_table, sin_table);
    for (int64_t i = 0; i < n; ++i) {
      float* row = qkvp + i * nqkv;
      const at::Tensor k = at::from_blob(row + nq, {1, c.num_kv_heads, hd}, f32);  // host: CPU
      const at::Tensor v =
          at::from_blob(row + nq + nkv, {1, c.num_kv_heads, hd}, f32);  // host: CPU
      const at::Tensor p = at::from_blob(posp + i, {1}, at::kLong);     // host: positions
      caches[static_cast<size_t>(i)]->Append(layer, k, v, p);
    }
    DecodeAttention(q, pos, caches, layer, attention, &attn);
    ql.wo.MatMul(attnp, n, nq, outp, hidden, quant);
    add_residual(xp, outp);  // x + attention, then + FFN: the operator path's order
    cpu::RmsNorm(xp, lw.ffn_norm.data_ptr<float>(), eps, n, hidden, hp);  // host: CPU kernel
    ql.gate_up.MatMul(hp, n, hidden, gup, 2 * ff, quant);
    cpu::SiluMul(gup, n, ff, actp);
    ql.w_down.MatMul(actp, n, ff, outp, hidden, quant);
    add_residual(xp, outp);
  }
  cpu::RmsNorm(xp, w.final_norm.data_ptr<float>(), eps, n, hidden, hp);  // host: CPU kernel
  at::Tensor logits = b.logits.narrow(0, 0, n);
  float* logitsp = logits.data_ptr<float>();  // host: CPU kernel
  qw.lm_head.MatMul(hp, n, hidden, logitsp, qw.lm_head.rows(), quant);
  return logits;
}

}  // namespace

at::Tensor Model::DecodeStep(const std::vector<TokenId>& ids, const std::vector<int64_t>& positions,
                             const std::vector<KvCache*>& caches, const AttentionOptions& attention,
                             DecodeBuffers* buffers) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  SIFT_CHECK(n > 0 && positions.size() == ids.size() && caches.size() == ids.size(),
             "DecodeStep: ", ids.size(), " ids, ", positions.size(), " positions and ",
             caches.size(), " caches (need the same number, at least one)");
  // Native weights exist only on the CPU (Load), so this is the CPU host path.
  const bool host_path = native_weights() && options_.cpu_kernels;
  // The step's ids and positions (and on the host path its activations) in the caller's buffers
  // when given, else in buffers made for this step alone.
  DecodeBuffers own;
  DecodeBuffers& b = buffers != nullptr ? *buffers : own;
  GrowDecodeBuffers(*this, n, host_path, b);
  const at::Tensor pos = b.positions.narrow(0, 0, n), id_rows = b.ids.narrow(0, 0, n);
  std::copy(positions.begin(), positions.end(), pos.data_ptr<int64_t>());  // host: positions
  std::copy(ids.begin(), ids.end(), id_rows.data_ptr<int64_t>());          // host: token ids
  AttentionOptions attn_options = attention;
  attn_options.upcast_fp32 = false;  // one query row per sequence
  if (host_path) return HostDecodeStep(*this, b_qkv_, id_rows, pos, caches, attn_options, b);
  if (!options_.cpu_kernels) attn_options.kernel = AttentionKernel::kTorch;
  return DecodeLayers(
      id_rows, Rope(pos),
      [&](int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
        for (int64_t i = 0; i < n; ++i) {
          caches[static_cast<size_t>(i)]->Append(layer, k.narrow(0, i, 1), v.narrow(0, i, 1),
                                                 pos.narrow(0, i, 1));
        }
        return DecodeAttention(q, pos, caches, layer, attn_options);
      });
}

at::Tensor Model::DecodeLayers(const at::Tensor& ids, const RopeTables& rope,
                               const DecodeAttend& attend) const {
  const ModelConfig& c = config();
  const int64_t n = ids.size(0);
  const int64_t hd = c.head_dim, nq = c.num_heads * hd, nkv = c.num_kv_heads * hd;
  at::Tensor x = Embed(ids);
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    const QuantizedLayer* ql = Quantized(layer);
    at::Tensor qkv = LinearRows(NormF32(x, weights_.layers.at(layer).attn_norm), w_qkv_.at(layer),
                                b_qkv_.at(layer), ql ? &ql->qkv : nullptr, /*decode_rows=*/true);
    qkv = Contiguous(AsType(qkv, at::kFloat));
    if (UseCpuKernels(qkv)) {
      float* data = qkv.data_ptr<float>();                  // host: CPU kernel
      const float* cos_table = rope.cos.data_ptr<float>();  // host: CPU kernel
      const float* sin_table = rope.sin.data_ptr<float>();  // host: CPU kernel
      cpu::RopeInPlace(data, n, qkv.size(1), c.num_heads + c.num_kv_heads, hd, cos_table,
                       sin_table);
    } else {
      qkv.narrow(1, 0, nq + nkv)
          .copy_(ApplyRope(qkv.narrow(1, 0, nq + nkv).view({n, c.num_heads + c.num_kv_heads, hd}),
                           rope)
                     .view({n, nq + nkv}));
    }
    const at::Tensor q = qkv.narrow(1, 0, nq).view({n, c.num_heads, hd});
    const at::Tensor k = qkv.narrow(1, nq, nkv).view({n, c.num_kv_heads, hd});
    const at::Tensor v = qkv.narrow(1, nq + nkv, nkv).view({n, c.num_kv_heads, hd});
    const at::Tensor attn = attend(layer, q, k, v);
    at::Tensor h = x + OutputProjectionRows(layer, attn, /*decode_rows=*/true);
    x = h.add_(
        FfnRows(layer, NormF32(h, weights_.layers.at(layer).ffn_norm), /*decode_rows=*/true));
  }
  const at::Tensor h = NormF32(x, weights_.final_norm);
  return AsType(LinearRows(h, weights_.lm_head, {}, native_weights() ? &qweights_.lm_head : nullptr,
                           /*decode_rows=*/true),
                at::kFloat);
}

at::Tensor Model::Forward(const std::vector<TokenId>& ids, int64_t start_position, KvCache& cache,
                          const ForwardOptions& options) const {
  SIFT_CHECK(!ids.empty(), "Forward: empty input");
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t chunk = options.chunk_size > 0 ? options.chunk_size : n;
  for (int64_t l = 0; l < config().num_layers; ++l) cache.Reserve(l, n);
  at::Tensor last;
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const int64_t c1 = std::min(n, c0 + chunk);
    at::Tensor positions =
        at::arange(start_position + c0, start_position + c1, at::kLong);  // host: positions
    at::Tensor x = EmbedTokens(ids, c0, c1);
    x = RunLayers(0, config().num_layers, x, positions, &cache, options);
    last = x.slice(0, x.size(0) - 1, x.size(0));
  }
  return Logits(last).squeeze(0);
}

}  // namespace sift
