// Weight loading: GGUF (dequantised to fp32 row by row in parallel, then cast) and Hugging Face
// safetensors directories, both into HF layout (sift/weights.h).
//
// GGUF specifics (ggml docs/gguf.md; llama.cpp convert_hf_to_gguf.py): dims are reversed to get
// the torch shape (GGUF's ne[0] is the contiguous one), and for
// llama-family files the q/k rows (and biases) are un-permuted from the adjacent-pair RoPE order
// llama.cpp's converter writes back to HF order. qwen2 GGUF files are not permuted (llama.cpp
// runs them with NeoX RoPE), so they are taken as they are.
#include "sift/weights.h"

#include <ATen/Parallel.h>

#include <cstring>
#include <filesystem>
#include <sstream>
#include <unordered_set>
#include <utility>

#include "sift/error.h"
#include "sift/ggml_types.h"
#include "sift/gguf.h"
#include "sift/safetensors.h"

namespace sift {
namespace {

std::string ShapeString(at::IntArrayRef shape) {
  std::ostringstream os;
  os << '(';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ')';
  return os.str();
}

// Moves a loaded fp32/bf16/... tensor to its final dtype and device.
at::Tensor Finish(const at::Tensor& t, at::ScalarType dtype, const LoadOptions& options) {
  return t.to(dtype).to(options.device).contiguous();
}

// Undoes llama.cpp's q/k permutation along dim 0 (convert_hf_to_gguf.py, LlamaModel.permute):
// W_hf = W_gguf.view(n_h, hd/2, 2, ...).transpose(1, 2).reshape(n_h*hd, ...). Works for a
// weight (rows, in) and a bias (rows).
at::Tensor UnpermuteRows(const at::Tensor& w, int64_t n_heads, int64_t head_dim) {
  std::vector<int64_t> split = {n_heads, head_dim / 2, 2};
  std::vector<int64_t> merged = {n_heads * head_dim};
  for (int64_t d = 1; d < w.dim(); ++d) {
    split.push_back(w.size(d));
    merged.push_back(w.size(d));
  }
  return w.view(split).transpose(1, 2).reshape(merged).contiguous();
}

// ---- GGUF -----------------------------------------------------------------------------------

class GgufLoader {
 public:
  GgufLoader(const GgufFile& file, const ModelConfig& config, const LoadOptions& options)
      : file_(file), config_(config), options_(options) {}

  // Dequantises tensor `name` to an fp32 CPU tensor of torch shape `shape`.
  at::Tensor Dequantize(const std::string& name, std::vector<int64_t> shape) const {
    const GgufTensorInfo* info = file_.FindTensor(name);
    SIFT_CHECK(info != nullptr, file_.path(), ": missing tensor '", name, "'");
    const std::vector<int64_t> got = info->torch_shape();
    SIFT_CHECK(got == shape, file_.path(), ": tensor '", name, "' has shape ", ShapeString(got),
               ", expected ", ShapeString(shape));
    SIFT_CHECK(GgmlTypeDequantizable(info->type), file_.path(), ": tensor '", name, "' has type ",
               GgmlTypeName(info->type),
               ", which sift cannot dequantise (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, "
               "Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)");
    const int64_t row_len = info->ne.empty() ? 1 : info->ne[0];
    const int64_t rows = row_len == 0 ? 0 : info->num_elements() / row_len;
    const uint64_t row_bytes = GgmlRowBytes(info->type, row_len);
    // Dequantised from the file on the CPU; Finish() moves it to the device.
    at::Tensor out = at::empty(shape, at::TensorOptions().dtype(at::kFloat));  // host: file data
    float* dst = out.data_ptr<float>();  // host: just created on the CPU
    const uint8_t* src = info->data;
    const GgmlType type = info->type;
    // Aim for ~64K elements per task so small tensors stay on one thread.
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, row_len));
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        DequantizeRow(type, src + static_cast<uint64_t>(r) * row_bytes, dst + r * row_len, row_len);
      }
    });
    return out;
  }

  at::Tensor Matrix(const std::string& name, int64_t out, int64_t in) const {
    return Finish(Dequantize(name, {out, in}), options_.dtype, options_);
  }
  at::Tensor Vector(const std::string& name, int64_t n) const {
    return Finish(Dequantize(name, {n}), at::kFloat, options_);
  }
  // q or k projection (and bias) with `heads` heads, back in HF row order when permuted.
  at::Tensor QkMatrix(const std::string& name, int64_t heads) const {
    at::Tensor w = Dequantize(name, {heads * config_.head_dim, config_.hidden_size});
    if (Permuted()) w = UnpermuteRows(w, heads, config_.head_dim);
    return Finish(w, options_.dtype, options_);
  }
  at::Tensor QkBias(const std::string& name, int64_t heads) const {
    at::Tensor b = Dequantize(name, {heads * config_.head_dim});
    if (Permuted()) b = UnpermuteRows(b, heads, config_.head_dim);
    return Finish(b, at::kFloat, options_);
  }

 private:
  // llama.cpp's converter permutes q/k for the llama architecture (mistral included) only.
  bool Permuted() const { return config_.architecture != "qwen2"; }

  const GgufFile& file_;
  const ModelConfig& config_;
  const LoadOptions& options_;
};

// ---- safetensors ----------------------------------------------------------------------------

at::ScalarType TorchDtype(const HfCheckpoint& ckpt, const SafetensorsTensor& t) {
  switch (t.dtype) {
    case SafetensorsDtype::kF32:
      return at::kFloat;
    case SafetensorsDtype::kF16:
      return at::kHalf;
    case SafetensorsDtype::kBF16:
      return at::kBFloat16;
    default:
      break;
  }
  throw Error(detail::Concat(ckpt.ShardPathOf(t.name), ": tensor '", t.name, "' has dtype ",
                             SafetensorsDtypeName(t.dtype), " (supported: F32, F16, BF16)"));
}

class HfLoader {
 public:
  HfLoader(const HfCheckpoint& ckpt, const LoadOptions& options) : ckpt_(ckpt), options_(options) {}

  // Copies tensor `name` out of the mapping, checking its shape, and casts it to `dtype`.
  at::Tensor Load(const std::string& name, const std::vector<int64_t>& shape,
                  at::ScalarType dtype) const {
    const SafetensorsTensor& t = ckpt_.Get(name);
    SIFT_CHECK(t.shape == shape, ckpt_.ShardPathOf(name), ": tensor '", name, "' has shape ",
               ShapeString(t.shape), ", expected ", ShapeString(shape));
    const at::ScalarType src_dtype = TorchDtype(ckpt_, t);
    const auto opts = at::TensorOptions().dtype(src_dtype);
    at::Tensor src;
    const uint64_t elem = static_cast<uint64_t>(SafetensorsDtypeSize(t.dtype));
    if (reinterpret_cast<uintptr_t>(t.data) % elem == 0) {
      // Read-only mapping: from_blob only views it; the copy below never writes to it.
      src = at::from_blob(const_cast<uint8_t*>(t.data), shape, opts);  // host: the file mapping
    } else {
      src = at::empty(shape, opts);
      std::memcpy(src.data_ptr(), t.data, t.nbytes());  // host: just created on the CPU
    }
    // copy=true: the result never aliases the mapping, even when the dtype already matches.
    at::Tensor out = src.to(dtype, /*non_blocking=*/false, /*copy=*/true);
    return out.to(options_.device);
  }
  at::Tensor Matrix(const std::string& name, int64_t out, int64_t in) const {
    return Load(name, {out, in}, options_.dtype);
  }
  at::Tensor Vector(const std::string& name, int64_t n) const {
    return Load(name, {n}, at::kFloat);
  }

 private:
  const HfCheckpoint& ckpt_;
  const LoadOptions& options_;
};

}  // namespace

int64_t ModelWeights::Bytes() const {
  std::unordered_set<const void*> seen;
  int64_t total = 0;
  auto add = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    if (seen.insert(t.storage().unsafeGetStorageImpl()).second) {
      total += static_cast<int64_t>(t.storage().nbytes());
    }
  };
  add(embed);
  add(final_norm);
  add(lm_head);
  for (const LayerWeights& l : layers) {
    for (const at::Tensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv,
                                &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down}) {
      add(*t);
    }
  }
  return total;
}

ModelWeights LoadWeightsFromGguf(const std::string& gguf_path, const LoadOptions& options) {
  std::unique_ptr<GgufFile> file = GgufFile::Open(gguf_path);
  ModelWeights w;
  w.config = ModelConfig::FromGguf(*file);
  const ModelConfig& c = w.config;
  const GgufLoader load(*file, c, options);
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;

  w.embed = load.Matrix("token_embd.weight", c.vocab_size, h);
  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = "blk." + std::to_string(i) + ".";
    l.attn_norm = load.Vector(p + "attn_norm.weight", h);
    l.wq = load.QkMatrix(p + "attn_q.weight", c.num_heads);
    l.wk = load.QkMatrix(p + "attn_k.weight", c.num_kv_heads);
    l.wv = load.Matrix(p + "attn_v.weight", kv, h);
    l.wo = load.Matrix(p + "attn_output.weight", h, q);
    if (c.attention_bias) {
      l.bq = load.QkBias(p + "attn_q.bias", c.num_heads);
      l.bk = load.QkBias(p + "attn_k.bias", c.num_kv_heads);
      l.bv = load.Vector(p + "attn_v.bias", kv);
    }
    l.ffn_norm = load.Vector(p + "ffn_norm.weight", h);
    l.w_gate = load.Matrix(p + "ffn_gate.weight", c.intermediate_size, h);
    l.w_up = load.Matrix(p + "ffn_up.weight", c.intermediate_size, h);
    l.w_down = load.Matrix(p + "ffn_down.weight", h, c.intermediate_size);
  }
  w.final_norm = load.Vector("output_norm.weight", h);
  w.lm_head = c.tied_embeddings ? w.embed : load.Matrix("output.weight", c.vocab_size, h);
  return w;
}

ModelWeights LoadWeightsFromHfDir(const std::string& dir, const LoadOptions& options) {
  std::unique_ptr<HfCheckpoint> ckpt = HfCheckpoint::Open(dir);
  ModelWeights w;
  w.config = ModelConfig::FromHfConfigJson(ckpt->config_path());
  const ModelConfig& c = w.config;
  const HfLoader load(*ckpt, options);
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;

  w.embed = load.Matrix("model.embed_tokens.weight", c.vocab_size, h);
  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    l.attn_norm = load.Vector(p + "input_layernorm.weight", h);
    l.wq = load.Matrix(p + "self_attn.q_proj.weight", q, h);
    l.wk = load.Matrix(p + "self_attn.k_proj.weight", kv, h);
    l.wv = load.Matrix(p + "self_attn.v_proj.weight", kv, h);
    l.wo = load.Matrix(p + "self_attn.o_proj.weight", h, q);
    if (c.attention_bias) {
      l.bq = load.Vector(p + "self_attn.q_proj.bias", q);
      l.bk = load.Vector(p + "self_attn.k_proj.bias", kv);
      l.bv = load.Vector(p + "self_attn.v_proj.bias", kv);
    }
    l.ffn_norm = load.Vector(p + "post_attention_layernorm.weight", h);
    l.w_gate = load.Matrix(p + "mlp.gate_proj.weight", c.intermediate_size, h);
    l.w_up = load.Matrix(p + "mlp.up_proj.weight", c.intermediate_size, h);
    l.w_down = load.Matrix(p + "mlp.down_proj.weight", h, c.intermediate_size);
  }
  w.final_norm = load.Vector("model.norm.weight", h);
  // Tied checkpoints usually omit lm_head.weight; if one is present anyway, HF ties it to the
  // embedding at load time, so the embedding wins here too.
  if (c.tied_embeddings) {
    w.lm_head = w.embed;
  } else {
    SIFT_CHECK(ckpt->Find("lm_head.weight") != nullptr, dir,
               ": config.json has tie_word_embeddings false but there is no lm_head.weight");
    w.lm_head = load.Matrix("lm_head.weight", c.vocab_size, h);
  }
  return w;
}

int64_t QuantizedWeights::Bytes() const {
  int64_t total = 0;
  for (const QuantizedMatrix* m : Matrices()) total += m->nbytes();
  return total;
}

std::vector<const QuantizedMatrix*> QuantizedWeights::Matrices() const {
  std::vector<const QuantizedMatrix*> out;
  out.reserve(layers.size() * 4 + 1);
  for (const QuantizedLayer& l : layers) {
    out.insert(out.end(), {&l.qkv, &l.wo, &l.gate_up, &l.w_down});
  }
  out.push_back(&lm_head);
  return out;
}

std::vector<QuantizedMatrix*> QuantizedWeights::Matrices() {
  std::vector<QuantizedMatrix*> out;  // the const list, on this non-const object
  for (const QuantizedMatrix* m : std::as_const(*this).Matrices()) {
    out.push_back(const_cast<QuantizedMatrix*>(m));
  }
  return out;
}

QuantizedWeights LoadQuantizedWeights(const std::string& gguf_path) {
  std::unique_ptr<GgufFile> file = GgufFile::Open(gguf_path);
  const ModelConfig c = ModelConfig::FromGguf(*file);
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    const GgufTensorInfo* info = file->FindTensor(name);
    SIFT_CHECK(info != nullptr, gguf_path, ": missing tensor '", name, "'");
    QuantizedMatrix m = QuantizedMatrix::FromGguf(*info);
    SIFT_CHECK(m.rows() == rows && m.cols() == cols, gguf_path, ": tensor '", name, "' is ",
               m.rows(), " x ", m.cols(), ", expected ", rows, " x ", cols);
    return m;
  };
  // llama.cpp's converter permutes q/k rows for the llama architecture only (see GgufLoader).
  const bool permuted = c.architecture != "qwen2";
  auto qk = [&](const std::string& name, int64_t heads) {
    QuantizedMatrix m = matrix(name, heads * c.head_dim, c.hidden_size);
    return permuted ? m.PermuteRows(LlamaQkRowOrder(heads, c.head_dim)) : m;
  };
  const int64_t h = c.hidden_size, kv = c.num_kv_heads * c.head_dim;
  QuantizedWeights w;
  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    QuantizedLayer& l = w.layers[static_cast<size_t>(i)];
    const std::string p = "blk." + std::to_string(i) + ".";
    l.qkv = QuantizedMatrix::ConcatRows({qk(p + "attn_q.weight", c.num_heads),
                                         qk(p + "attn_k.weight", c.num_kv_heads),
                                         matrix(p + "attn_v.weight", kv, h)});
    l.wo = matrix(p + "attn_output.weight", h, c.num_heads * c.head_dim);
    l.gate_up = QuantizedMatrix::ConcatRows({matrix(p + "ffn_gate.weight", c.intermediate_size, h),
                                             matrix(p + "ffn_up.weight", c.intermediate_size, h)});
    l.w_down = matrix(p + "ffn_down.weight", h, c.intermediate_size);
  }
  w.lm_head = matrix(c.tied_embeddings ? "token_embd.weight" : "output.weight", c.vocab_size, h);
  return w;
}

ModelWeights LoadWeights(const std::string& path, const LoadOptions& options) {
  std::error_code ec;
  const std::filesystem::path p(path);
  if (std::filesystem::is_directory(p, ec)) return LoadWeightsFromHfDir(path, options);
  SIFT_CHECK(std::filesystem::exists(p, ec), path, ": no such file or directory");
  SIFT_CHECK(p.extension() != ".safetensors", path,
             ": a .safetensors file alone has no config.json; pass its directory instead");
  return LoadWeightsFromGguf(path, options);
}

}  // namespace sift
