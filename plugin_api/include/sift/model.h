// A Llama-family decoder (Llama 2/3, Mistral, Qwen2, SmolLM2) in LibTorch, exposed as building
// blocks that prefill plugins compose, plus the standard full forward.
//
// Numerics: matrices run in the compute dtype (bf16 by default on CPU; fp32 selectable). The
// residual stream, RMSNorm, RoPE and softmax are fp32. RoPE is rotate_half on HF-layout weights.
//
// Conventions: a hidden state `x` is [n, hidden] fp32; `positions` is [n] int64 on the host (RoPE
// position of each row; see sift/kv_cache.h); q is [n, Hq, hd], k and v are [n, Hkv, hd] in the
// compute dtype or fp32 (projections may return either; every consumer accepts both).
//
// OWNERSHIP: a Model is immutable after Load and shared (std::shared_ptr) by every request and
//            plugin; it owns its weights and tokenizer.
// THREADING: every method is const and safe to call from several threads at once.
// ERRORS:    Load throws sift::Error; forward methods throw sift::Error on shape misuse.
#ifndef SIFT_MODEL_H_
#define SIFT_MODEL_H_

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sift/attention.h"
#include "sift/error.h"
#include "sift/kv_cache.h"
#include "sift/model_config.h"
#include "sift/tokenizer.h"
#include "sift/weights.h"

namespace sift {

// Where matrix-vector products read their weights from.
enum class WeightFormat {
  // GGUF on the CPU: products with few rows (decode) multiply by the file's own blocks
  // (sift/quantized_matrix.h: exact dequantised values, fp32 activations and accumulation);
  // larger ones (prefill) use the dequantised copy in the compute dtype. Elsewhere: kDense.
  kNative,
  kDense,  // every product uses the dequantised copy in the compute dtype
};
WeightFormat ParseWeightFormat(const std::string& name);  // "native" | "dense"
const char* WeightFormatName(WeightFormat format);

struct ModelOptions {
  at::ScalarType dtype = at::kBFloat16;  // compute dtype of the linear layers and the KV cache
  WeightFormat weights = WeightFormat::kNative;
  // kNative: products with at most this many rows read the blocks. -1 = automatic: 96 where bf16
  // products are upcast (upcast_min_rows: no hardware bf16), whose conversion of every weight
  // costs more than the blocks' kernel below ~100 rows; else 8 (docs/engine.md#weights).
  int64_t native_max_rows = -1;
  at::Device device = at::kCPU;
  int threads = 0;  // intra-op threads; 0 = all cores
  // bf16 only: matrix products with at least this many rows are computed in fp32 from the bf16
  // weights (upcast per call). -1 = automatic: 16 on CPUs without hardware bf16, else never.
  // Matrix-vector products (decode) always stay in bf16, where fewer bytes read is the win.
  int64_t upcast_min_rows = -1;
  // CPU only: run the layer's elementwise steps and attention with sift's CPU kernels (true) or
  // with LibTorch operators only (false: the reference, and the operator sequence a GPU runs).
  bool cpu_kernels = true;
  // Context limit in tokens; 0 = the model's trained context. A larger value lets prompts and
  // generation run past the trained context (RoPE extrapolates: speed is meaningful, quality is
  // not), as llama.cpp does when n_ctx exceeds it; config().context_length reports the value used.
  int64_t context_length = 0;
  // kNative on the CPU: products by the blocks quantise their activations to int8 per 32 values
  // (QuantOptions::int8_activations; on AVX-512 VNNI CPUs from Q4_1/Q8_0 rows packed at load,
  // QuantizedMatrix::PackedForInt8). Faster decode, at the cost of the activation rounding
  // (docs/engine.md#int8-activations). Off: fp32 activations, the reference (the library's
  // default; siftd and the tools pick by Int8ActivationsFor("auto", ...)).
  bool int8_activations = false;
};

// The activations of the block products (ModelOptions::int8_activations) that an --activations
// value selects for a model loaded with `options` (device and weights set): "int8" -> true,
// "fp32" -> false, "auto" -> true where the products would read rows packed for AVX-512 VNNI
// (native weights on the CPU, PackedInt8Available()), false elsewhere. Throws sift::Error on
// another value.
bool Int8ActivationsFor(const std::string& mode, const ModelOptions& options);
// True for the values Int8ActivationsFor takes ("auto", "int8", "fp32"): how a CLI checks its
// --activations before loading anything.
bool IsActivationsMode(const std::string& mode);

// RoPE angles of a set of positions, computed once and shared by every layer of a forward.
struct RopeTables {
  at::Tensor cos, sin;  // [n, head_dim / 2] fp32 on the model's device
};

// The buffers of a decode batch, kept at the same addresses from step to step: the step's token
// ids and positions and, on the CPU host path (native weights with CPU kernels), every fp32
// activation of the step, its RoPE tables and its logits. Model::DecodeStep given buffers writes
// into them instead of allocating per step. They grow to the largest batch seen, in powers of two
// rows, and then never move: what capturing the step as a CUDA graph per batch-size bucket needs
// (docs/engine.md#decode-buffers).
// OWNERSHIP: the caller's (BatchEngine keeps one for its loop, Generate one per request).
// THREADING: one DecodeStep at a time per DecodeBuffers.
struct DecodeBuffers {
  int64_t rows = 0;           // rows the tensors below hold (0: none yet)
  at::Tensor ids, positions;  // [rows] int64, host
  at::Tensor x, h, out;       // host path: [rows, hidden] fp32
  // host path: [rows, (Hq + 2 Hkv) hd], [rows, Hq, hd], [rows, 2 ff], [rows, ff]
  at::Tensor qkv, attn, gate_up, act;
  at::Tensor rope_cos, rope_sin;  // host path: [rows, head_dim / 2] fp32
  at::Tensor logits;              // host path: [rows, vocab] fp32
};

// Parses "bf16"/"bfloat16", "fp32"/"float32", "fp16"/"float16"; throws on anything else.
at::ScalarType ParseDtype(const std::string& name);
const char* DtypeName(at::ScalarType dtype);
// Sets LibTorch's intra-op thread count (0 = hardware concurrency). Call once at startup.
void ConfigureThreads(int threads);
// Call first thing in main(). Two thread pools share the cores: OpenMP's (LibTorch's ops and
// sift's kernels) and OpenBLAS's (fp32 products). OpenBLAS workers spin for 2^28 cycles after
// every call by default and OpenMP's for ~3 ms, so each starves the other; sleeping at once
// (OMP_WAIT_POLICY=PASSIVE) instead costs a ~40 us wake-up per parallel region, hundreds of which
// make a decode step. Unless already set, this sets OPENBLAS_THREAD_TIMEOUT=4 and
// GOMP_SPINCOUNT=30000 (~0.3 ms of spinning; not when OMP_WAIT_POLICY is set) and re-executes
// the process once (both are read only when the libraries load). Measured on the 2-core machine
// (docs/engine.md): bf16 decode at 2K 6.3 ms/token against 16.5 with PASSIVE and the same fp32
// prefill rate. Returns normally when nothing needs doing.
void ConfigureThreadEnvironment(char** argv);

// Per-layer hooks for the full forward: which statistics a layer should collect, and where they
// go. A default-constructed Hooks collects nothing.
struct LayerHooks {
  std::function<AttentionStatsRequest(int64_t layer)> stats_request;
  std::function<void(int64_t layer, AttentionStats&& stats)> on_stats;
};

struct ForwardOptions {
  AttentionOptions attention;
  LayerHooks hooks;
  // Rows per forward chunk (0 = the whole input at once). Chunks attend to the cache filled by
  // the previous chunks, so the result is the same; peak activation memory is bounded.
  int64_t chunk_size = 0;
};

class Model {
 public:
  static std::shared_ptr<const Model> Load(const std::string& path, const ModelOptions& options);

  const ModelConfig& config() const { return weights_.config; }
  const ModelWeights& weights() const { return weights_; }
  // The blocks the native products read (empty unless they are in use).
  const QuantizedWeights& quantized_weights() const { return qweights_; }
  bool native_weights() const { return !qweights_.empty(); }
  // The CPU kernels in use, e.g. "attention avx512, matmul avx512-fp32" (sift-model info,
  // /metrics).
  std::string KernelSummary() const;
  const ModelOptions& options() const { return options_; }
  // GGUF models carry a tokenizer, HF directories when they hold tokenizer.json. Throws
  // sift::Error naming the path when there is none (check has_tokenizer() first).
  const Tokenizer& tokenizer() const {
    if (!tokenizer_) throw Error(path_ + ": the model has no tokenizer (no tokenizer.json)");
    return *tokenizer_;
  }
  bool has_tokenizer() const { return tokenizer_ != nullptr; }
  const std::string& path() const { return path_; }

  // A cache shaped for this model (compute dtype, device).
  KvCache NewCache() const;
  // The shape of NewCache()'s caches: the model's layers, KV heads, head_dim, dtype and device.
  KvCacheShape CacheShape() const;

  // ---- building blocks ----
  at::Tensor Embed(const at::Tensor& ids) const;  // [n] -> x [n, hidden]
  // Embed of tokens[begin, end) (token ids are host data; they go to the device once).
  at::Tensor EmbedTokens(const std::vector<TokenId>& tokens, int64_t begin, int64_t end) const;
  at::Tensor AttnNorm(int64_t layer, const at::Tensor& x) const;  // -> [n, hidden] dtype
  at::Tensor FfnNorm(int64_t layer, const at::Tensor& x) const;
  struct Qkv {
    at::Tensor q, k, v;  // [n, Hq, hd], [n, Hkv, hd], [n, Hkv, hd]; no RoPE yet
  };
  Qkv ProjectQkv(int64_t layer, const at::Tensor& h) const;
  // With `into` (tables of at least n rows on the CPU), the tables are written there and the
  // returned ones are views of its first n rows.
  RopeTables Rope(const at::Tensor& positions, const RopeTables* into = nullptr) const;
  at::Tensor ApplyRope(const at::Tensor& x, const RopeTables& rope) const;       // [n, H, hd]
  at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& positions) const;  // [n, H, hd]
  // attn: [n, Hq, hd] -> [n, hidden] fp32 (to be added to the residual).
  at::Tensor OutputProjection(int64_t layer, const at::Tensor& attn) const;
  at::Tensor Ffn(int64_t layer, const at::Tensor& h) const;  // -> [n, hidden] fp32
  // Final norm + LM head: x [n, hidden] -> logits [n, vocab] fp32.
  at::Tensor Logits(const at::Tensor& x) const;

  // ---- the product rule ----
  // x [n, in] W^T + b, the one rule every projection above uses: by the blocks `q` when given and
  // x has at most native_max_rows() rows on the CPU (fp32 result); else by the dense w, x and b
  // taken to w's dtype, and when UpcastsToFp32(n) computed in fp32 from that storage (w's dtype
  // result). A stage that multiplies by the model's weights itself (SPTS's partial projections)
  // calls it so its numerics are the model's.
  at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {},
                    const QuantizedMatrix* q = nullptr) const;
  // True when a matrix product or an attention over `rows` query rows runs in fp32 from bf16
  // storage (ModelOptions::upcast_min_rows, resolved for this machine at Load).
  bool UpcastsToFp32(int64_t rows) const {
    return upcast_min_rows_ > 0 && rows >= upcast_min_rows_;
  }
  // ModelOptions::native_max_rows, resolved at Load.
  int64_t native_max_rows() const { return native_max_rows_; }
  // The kernel options of every product by the blocks (ModelOptions::int8_activations).
  QuantOptions quant_options() const {
    QuantOptions o;
    o.int8_activations = options_.int8_activations;
    return o;
  }

  // One decoder layer on x (new rows at `positions`). With a cache, the new k/v are appended to
  // it and the rows attend to everything the layer's cache holds; without one, only to each
  // other. Returns the updated x.
  at::Tensor Layer(int64_t layer, const at::Tensor& x, const at::Tensor& positions, KvCache* cache,
                   const AttentionOptions& attention, const AttentionStatsRequest& request = {},
                   AttentionStats* stats = nullptr) const;
  // The same with the RoPE tables of `positions` already computed (RunLayers shares them).
  at::Tensor Layer(int64_t layer, const at::Tensor& x, const at::Tensor& positions,
                   const RopeTables& rope, KvCache* cache, const AttentionOptions& attention,
                   const AttentionStatsRequest& request = {},
                   AttentionStats* stats = nullptr) const;
  // Layers [begin, end).
  at::Tensor RunLayers(int64_t begin, int64_t end, const at::Tensor& x, const at::Tensor& positions,
                       KvCache* cache, const ForwardOptions& options = {}) const;

  // ---- batched decode ----
  // One decode step for several independent sequences: row i is token ids[i] at RoPE position
  // positions[i], appended to *caches[i] and attending to that cache alone (caches may hold
  // different numbers of entries per layer). The rows share the linear layers, so the weights are
  // read once per step for all of them; with native weights every row's products read the blocks
  // whatever the number of rows, as a one-row Forward does, so row i's logits equal
  // Forward({ids[i]}, positions[i], *caches[i])'s up to the product kernel's summation order.
  // Returns [rows, vocab] fp32. The caches must be distinct. With `buffers`, the step's ids,
  // positions and (host path) activations and logits live there: the result is then a view of
  // buffers->logits, valid until the next DecodeStep with the same buffers.
  at::Tensor DecodeStep(const std::vector<TokenId>& ids, const std::vector<int64_t>& positions,
                        const std::vector<KvCache*>& caches, const AttentionOptions& attention = {},
                        DecodeBuffers* buffers = nullptr) const;

  // The operator path of DecodeStep with the KV append and the attention left to `attend`,
  // called once per layer with the step's q [n, Hq, hd] and new k, v [n, Hkv, hd] (after RoPE,
  // fp32) and returning the attention [n, Hq, hd]. ids: [n] int64 on the model's device; rope:
  // the rows' tables on the device. Returns the logits [n, vocab] fp32. Reads nothing back to the
  // host, so that sift::DecodePool can capture it as a CUDA graph. Not for the host path (native
  // weights with CPU kernels), which DecodeStep runs on its own buffers.
  using DecodeAttend = std::function<at::Tensor(int64_t layer, const at::Tensor& q,
                                                const at::Tensor& k, const at::Tensor& v)>;
  at::Tensor DecodeLayers(const at::Tensor& ids, const RopeTables& rope,
                          const DecodeAttend& attend) const;

  // ---- standard forward ----
  // Runs ids (at positions start..start+n-1) through all layers, appending to cache; returns the
  // logits of the last row [vocab] fp32.
  at::Tensor Forward(const std::vector<TokenId>& ids, int64_t start_position, KvCache& cache,
                     const ForwardOptions& options = {}) const;

 private:
  Model() = default;
  std::string path_;
  ModelOptions options_;
  ModelWeights weights_;
  QuantizedWeights qweights_;  // empty unless WeightFormat::kNative applies
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<at::Tensor> w_qkv_;      // fused [Hq*hd + 2*Hkv*hd, hidden] per layer
  std::vector<at::Tensor> b_qkv_;      // fused bias, undefined without attention bias
  std::vector<at::Tensor> w_gate_up_;  // fused [2*ff, hidden] per layer
  at::Tensor inv_freq_cpu_;            // [hd/2] fp32 on the host (RoPE angles are host math)
  int64_t upcast_min_rows_ = 0;        // see ModelOptions::upcast_min_rows (resolved)
  int64_t native_max_rows_ = 8;        // see ModelOptions::native_max_rows (resolved)
  // Linear with the native-rows rule chosen by the caller: `decode_rows` reads the blocks for
  // any number of rows (each row is one sequence's decode step).
  at::Tensor LinearRows(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                        const QuantizedMatrix* q, bool decode_rows) const;
  at::Tensor OutputProjectionRows(int64_t layer, const at::Tensor& attn, bool decode_rows) const;
  at::Tensor FfnRows(int64_t layer, const at::Tensor& h, bool decode_rows) const;
  const QuantizedLayer* Quantized(int64_t layer) const {
    return qweights_.empty() ? nullptr : &qweights_.layers[static_cast<size_t>(layer)];
  }
  // RMSNorm to fp32 (the CPU kernel where it applies).
  at::Tensor NormF32(const at::Tensor& x, const at::Tensor& weight) const;
  bool UseCpuKernels(const at::Tensor& t) const;
};

}  // namespace sift

#endif  // SIFT_MODEL_H_
