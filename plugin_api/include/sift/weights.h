// Model weights as LibTorch tensors in Hugging Face layout, loaded from GGUF or safetensors.
//
// Layout: every projection is (out_features, in_features) as in nn.Linear. q/k rows are in HF
// order (GGUF files store them permuted for adjacent-pair RoPE; the loader undoes it, see
// llama.cpp's convert_hf_to_gguf.py, LlamaModel.permute), so the model applies rotate_half
// ("NeoX") RoPE.
//
// OWNERSHIP: ModelWeights owns its tensors (refcounted at::Tensor); no pointers into the file are
//            kept after loading, so the GgufFile may be closed.
// ERRORS:    Load* throw sift::Error naming the file and the missing or malformed tensor.
#ifndef SIFT_WEIGHTS_H_
#define SIFT_WEIGHTS_H_

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "sift/model_config.h"
#include "sift/quantized_matrix.h"

namespace sift {

struct LayerWeights {
  at::Tensor attn_norm;             // (hidden)
  at::Tensor wq, wk, wv, wo;        // (H*hd, hidden), (Hkv*hd, hidden) x2, (hidden, H*hd)
  at::Tensor bq, bk, bv;            // fp32; undefined unless config.attention_bias
  at::Tensor ffn_norm;              // (hidden)
  at::Tensor w_gate, w_up, w_down;  // (ff, hidden) x2, (hidden, ff)
};

struct ModelWeights {
  ModelConfig config;
  at::Tensor embed;  // (vocab, hidden)
  std::vector<LayerWeights> layers;
  at::Tensor final_norm;  // (hidden)
  at::Tensor lm_head;     // (vocab, hidden); the same storage as embed when tied

  // Total bytes held by distinct weight tensors (tied storage counted once).
  int64_t Bytes() const;
};

struct LoadOptions {
  at::ScalarType dtype = at::kBFloat16;  // matrices; norms and biases are always kept in fp32
  at::Device device = at::kCPU;
};

// The projection matrices as a GGUF file stores them (ggml blocks), in Hugging Face row order
// (llama q/k rows un-permuted), for products that read the file's own bytes instead of a
// dequantised copy (sift/quantized_matrix.h). q/k/v and gate/up are fused by rows, like the
// dense ones in sift::Model.
struct QuantizedLayer {
  QuantizedMatrix qkv, wo, gate_up, w_down;
};
struct QuantizedWeights {
  std::vector<QuantizedLayer> layers;
  QuantizedMatrix lm_head;  // token_embd when tied
  bool empty() const { return layers.empty(); }
  int64_t Bytes() const;
  // Every matrix: each layer's qkv, wo, gate_up and w_down, then lm_head. Pointers into this.
  std::vector<QuantizedMatrix*> Matrices();
  std::vector<const QuantizedMatrix*> Matrices() const;
};
QuantizedWeights LoadQuantizedWeights(const std::string& gguf_path);

// Loads from a .gguf file, or from a Hugging Face directory (config.json + *.safetensors).
// GGUF tensors of any type DequantizeRow supports are dequantised to fp32 (in parallel over rows)
// and then cast; safetensors tensors may be F32, F16 or BF16.
ModelWeights LoadWeights(const std::string& path, const LoadOptions& options);
ModelWeights LoadWeightsFromGguf(const std::string& gguf_path, const LoadOptions& options);
ModelWeights LoadWeightsFromHfDir(const std::string& dir, const LoadOptions& options);

}  // namespace sift

#endif  // SIFT_WEIGHTS_H_
