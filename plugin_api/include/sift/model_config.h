// Hyperparameters of a Llama-family decoder, read from GGUF metadata or HF config.json.
//
// Sources: GGUF `general.architecture` and `<arch>.*` keys (the GGUF spec's standardized
// key-value pairs, ggml docs/gguf.md), or the HF keys
// of config.json: rope_theta and rope scaling (default, linear, llama3) either top level
// ("rope_theta", "rope_scaling") or under transformers >= 5's "rope_parameters"; other rope
// types, partial rotary embeddings and activations other than silu are refused.
// "mistral" computes exactly like "llama"; "qwen2" adds q/k/v biases.
// THREADING: plain value type. ERRORS: FromGguf / FromHfConfigJson / Validate throw sift::Error
//            naming the file (for the loaders) and the missing, unsupported or inconsistent field.
#ifndef SIFT_MODEL_CONFIG_H_
#define SIFT_MODEL_CONFIG_H_

#include <cstdint>
#include <string>

namespace sift {

class GgufFile;

struct RopeScaling {
  std::string type = "none";  // "none", "linear" or "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3 only
  double high_freq_factor = 4.0;  // llama3 only
  int64_t original_context_length = 0;
};

struct ModelConfig {
  std::string architecture = "llama";  // "llama", "mistral" or "qwen2"
  std::string name;                    // general.name or the directory name
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  // The trained context; longer prompts are rejected by callers. For HF configs with sliding-
  // window attention (not implemented) it is capped at the window, where full attention is exact.
  int64_t context_length = 0;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  RopeScaling rope_scaling;
  bool tied_embeddings = false;  // lm_head shares token_embd
  bool attention_bias = false;   // q/k/v biases (Qwen2)

  int64_t group_size() const { return num_heads / num_kv_heads; }
  // Parameters in the linear layers (weights, plus q/k/v biases when present), embeddings and
  // norms excluded (for FLOP counts).
  int64_t LinearParamsPerLayer() const;

  // Throws sift::Error naming the missing or inconsistent field.
  static ModelConfig FromGguf(const GgufFile& file);
  static ModelConfig FromHfConfigJson(const std::string& config_json_path);
  void Validate() const;
};

}  // namespace sift

#endif  // SIFT_MODEL_CONFIG_H_
