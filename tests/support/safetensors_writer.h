// Test-only safetensors writer and tiny Hugging Face checkpoint builder. Header-only; not part
// of the library.
//
// SafetensorsWriter lays tensors out back to back in insertion order after an 8-byte header
// length and a JSON header padded with spaces to a multiple of 8. TinyLlama writes a small
// Llama/Qwen2-shaped checkpoint (config.json + one file or an index with two shards) whose every
// value is exactly representable in F32, BF16 and F16, so loaders can be checked with ==.
#ifndef SIFT_TESTS_SUPPORT_SAFETENSORS_WRITER_H_
#define SIFT_TESTS_SUPPORT_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "sift/ggml_types.h"

namespace sift::testing {

inline void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline void WriteText(const std::string& path, const std::string& text) {
  WriteBytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

// Encodes floats as "F32", "BF16" or "F16" bytes.
inline std::vector<uint8_t> EncodeFloats(const std::vector<float>& v, const std::string& dtype) {
  std::vector<uint8_t> out;
  for (float f : v) {
    if (dtype == "F32") {
      uint8_t b[4];
      std::memcpy(b, &f, 4);
      out.insert(out.end(), b, b + 4);
    } else {
      const uint16_t h = dtype == "BF16" ? FloatToBF16(f) : FloatToHalf(f);
      out.push_back(static_cast<uint8_t>(h & 0xFF));
      out.push_back(static_cast<uint8_t>(h >> 8));
    }
  }
  return out;
}

class SafetensorsWriter {
 public:
  void Add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
           const std::vector<uint8_t>& bytes) {
    header_[name] = {{"dtype", dtype},
                     {"shape", shape},
                     {"data_offsets", {data_.size(), data_.size() + bytes.size()}}};
    data_.insert(data_.end(), bytes.begin(), bytes.end());
  }
  void AddFloats(const std::string& name, const std::string& dtype,
                 const std::vector<int64_t>& shape, const std::vector<float>& values) {
    Add(name, dtype, shape, EncodeFloats(values, dtype));
  }
  void SetMetadata(const std::string& key, const std::string& value) {
    header_["__metadata__"][key] = value;
  }
  // Direct access for corrupting entries.
  nlohmann::json& header() { return header_; }

  std::vector<uint8_t> Build() const { return Build(header_.dump()); }
  std::vector<uint8_t> Build(std::string header_text) const {
    while (header_text.size() % 8 != 0) header_text.push_back(' ');
    std::vector<uint8_t> out;
    out.reserve(8 + header_text.size() + data_.size());
    const uint64_t n = header_text.size();
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
    for (char c : header_text) out.push_back(static_cast<uint8_t>(c));
    out.insert(out.end(), data_.begin(), data_.end());
    return out;
  }
  void Write(const std::string& path) const { WriteBytes(path, Build()); }

 private:
  nlohmann::json header_ = nlohmann::json::object();
  std::vector<uint8_t> data_;
};

// A tiny Llama: vocab 16, hidden 8, 2 heads of 4, 1 KV head, ff 12, 2 layers.
struct TinyLlama {
  std::string model_type = "llama";
  std::string dtype = "F32";  // storage dtype of every tensor
  bool tied = false;          // tie_word_embeddings (and no lm_head.weight)
  bool bias = false;          // q/k/v biases (qwen2 always has them)
  bool sharded = false;       // two shards + model.safetensors.index.json

  static constexpr int64_t kVocab = 16, kHidden = 8, kHeads = 2, kKvHeads = 1, kHeadDim = 4,
                           kFf = 12, kLayers = 2;

  // Known values: a per-tensor pattern of multiples of 1/8 in [-1.375, 1.375].
  static std::vector<float> Values(const std::string& name, int64_t n) {
    uint32_t seed = 0;
    for (char c : name) seed = seed * 31 + static_cast<uint8_t>(c);
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      v[static_cast<size_t>(i)] =
          static_cast<float>(static_cast<int>((i * 5 + seed) % 23) - 11) * 0.125f;
    }
    return v;
  }

  // Name -> torch shape of every tensor written.
  std::map<std::string, std::vector<int64_t>> Shapes() const {
    std::map<std::string, std::vector<int64_t>> s;
    const int64_t q = kHeads * kHeadDim, kv = kKvHeads * kHeadDim;
    s["model.embed_tokens.weight"] = {kVocab, kHidden};
    s["model.norm.weight"] = {kHidden};
    if (!tied) s["lm_head.weight"] = {kVocab, kHidden};
    for (int i = 0; i < kLayers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      s[p + "input_layernorm.weight"] = {kHidden};
      s[p + "post_attention_layernorm.weight"] = {kHidden};
      s[p + "self_attn.q_proj.weight"] = {q, kHidden};
      s[p + "self_attn.k_proj.weight"] = {kv, kHidden};
      s[p + "self_attn.v_proj.weight"] = {kv, kHidden};
      s[p + "self_attn.o_proj.weight"] = {kHidden, q};
      s[p + "mlp.gate_proj.weight"] = {kFf, kHidden};
      s[p + "mlp.up_proj.weight"] = {kFf, kHidden};
      s[p + "mlp.down_proj.weight"] = {kHidden, kFf};
      if (bias || model_type == "qwen2") {
        s[p + "self_attn.q_proj.bias"] = {q};
        s[p + "self_attn.k_proj.bias"] = {kv};
        s[p + "self_attn.v_proj.bias"] = {kv};
      }
    }
    return s;
  }

  nlohmann::json Config() const {
    return {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", model_type},
            {"hidden_size", kHidden},
            {"intermediate_size", kFf},
            {"num_hidden_layers", kLayers},
            {"num_attention_heads", kHeads},
            {"num_key_value_heads", kKvHeads},
            {"head_dim", kHeadDim},
            {"max_position_embeddings", 256},
            {"rope_theta", 50000.0},
            {"rms_norm_eps", 1e-6},
            {"rope_scaling", nullptr},
            {"tie_word_embeddings", tied},
            {"attention_bias", bias},
            {"vocab_size", kVocab},
            {"torch_dtype", "float32"}};
  }

  void Write(const std::string& dir) const {
    WriteText(dir + "/config.json", Config().dump(2));
    const auto shapes = Shapes();
    if (!sharded) {
      SafetensorsWriter w;
      w.SetMetadata("format", "pt");
      for (const auto& [name, shape] : shapes)
        w.AddFloats(name, dtype, shape, ValuesOf(shape, name));
      w.Write(dir + "/model.safetensors");
      return;
    }
    // Layer 0 and the embedding in shard 1, everything else in shard 2.
    SafetensorsWriter w1, w2;
    nlohmann::json map = nlohmann::json::object();
    for (const auto& [name, shape] : shapes) {
      const bool first =
          name.find("layers.0.") != std::string::npos || name.find("embed") != std::string::npos;
      (first ? w1 : w2).AddFloats(name, dtype, shape, ValuesOf(shape, name));
      map[name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    }
    w1.Write(dir + "/model-00001-of-00002.safetensors");
    w2.Write(dir + "/model-00002-of-00002.safetensors");
    WriteText(dir + "/model.safetensors.index.json",
              nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump(2));
  }

  static std::vector<float> ValuesOf(const std::vector<int64_t>& shape, const std::string& name) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return Values(name, n);
  }
};

}  // namespace sift::testing

#endif  // SIFT_TESTS_SUPPORT_SAFETENSORS_WRITER_H_
