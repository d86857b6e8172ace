// ModelConfig from GGUF metadata (`<arch>.*` keys, ggml docs/gguf.md) or a Hugging Face
// config.json, plus consistency checks. Pure functions of their inputs; thread-safe.
#include "sift/model_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "sift/error.h"
#include "sift/gguf.h"

namespace sift {
namespace {

bool SupportedArchitecture(const std::string& arch) {
  return arch == "llama" || arch == "mistral" || arch == "qwen2";
}

// ---- config.json helpers ----------------------------------------------------------------------

using Json = nlohmann::json;

// A key is "absent" if missing or null (HF writes `"head_dim": null` and `"rope_scaling": null`).
const Json* FindKey(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

int64_t JsonInt(const std::string& path, const Json& obj, const char* key) {
  const Json* v = FindKey(obj, key);
  SIFT_CHECK(v != nullptr, path, ": missing \"", key, "\"");
  SIFT_CHECK(v->is_number_integer(), path, ": \"", key, "\" must be an integer, got ", v->dump());
  return v->get<int64_t>();
}

int64_t JsonInt(const std::string& path, const Json& obj, const char* key, int64_t fallback) {
  return FindKey(obj, key) ? JsonInt(path, obj, key) : fallback;
}

double JsonFloat(const std::string& path, const Json& obj, const char* key, double fallback) {
  const Json* v = FindKey(obj, key);
  if (v == nullptr) return fallback;
  SIFT_CHECK(v->is_number(), path, ": \"", key, "\" must be a number, got ", v->dump());
  return v->get<double>();
}

bool JsonBool(const std::string& path, const Json& obj, const char* key, bool fallback) {
  const Json* v = FindKey(obj, key);
  if (v == nullptr) return fallback;
  SIFT_CHECK(v->is_boolean(), path, ": \"", key, "\" must be true or false, got ", v->dump());
  return v->get<bool>();
}

std::string JsonString(const std::string& path, const Json& obj, const char* key,
                       const std::string& fallback) {
  const Json* v = FindKey(obj, key);
  if (v == nullptr) return fallback;
  SIFT_CHECK(v->is_string(), path, ": \"", key, "\" must be a string, got ", v->dump());
  return v->get<std::string>();
}

// Rope scaling from an object holding "rope_type" (or the older "type") and its parameters: the
// old top-level "rope_scaling" or transformers >= 5's "rope_parameters". `key` names the object.
RopeScaling HfRopeScaling(const std::string& path, const Json& rs, const char* key) {
  RopeScaling s;
  SIFT_CHECK(rs.is_object(), path, ": \"", key, "\" must be an object or null");
  std::string type = JsonString(path, rs, "rope_type", JsonString(path, rs, "type", "default"));
  const double partial = JsonFloat(path, rs, "partial_rotary_factor", 1.0);
  SIFT_CHECK(partial == 1.0, path, ": ", key, ".partial_rotary_factor = ", partial,
             " (partial rotary embeddings) is not supported");
  if (type == "default" || type == "none") return s;
  SIFT_CHECK(type == "linear" || type == "llama3", path, ": ", key, " type \"", type,
             "\" is not supported (supported: default, linear, llama3)");
  s.type = type;
  s.factor = JsonFloat(path, rs, "factor", 1.0);
  if (type == "llama3") {
    s.low_freq_factor = JsonFloat(path, rs, "low_freq_factor", s.low_freq_factor);
    s.high_freq_factor = JsonFloat(path, rs, "high_freq_factor", s.high_freq_factor);
    s.original_context_length = JsonInt(path, rs, "original_max_position_embeddings", 0);
  }
  return s;
}

// rope_theta and rope scaling. transformers >= 5 writes both under "rope_parameters"
// ({"rope_type": "default", "rope_theta": 1e6, ...}); older configs have a top-level
// "rope_theta" and "rope_scaling". Where both forms are present they must agree. With neither,
// rope_theta is 10000, the default of transformers' Llama/Mistral/Qwen2 configs.
void HfRope(const std::string& path, const Json& j, ModelConfig* c) {
  const Json* params = FindKey(j, "rope_parameters");
  const Json* old_scaling = FindKey(j, "rope_scaling");
  const double top_theta = JsonFloat(path, j, "rope_theta", 0.0);
  SIFT_CHECK(JsonFloat(path, j, "partial_rotary_factor", 1.0) == 1.0, path,
             ": partial_rotary_factor (partial rotary embeddings) is not supported");
  if (params == nullptr) {
    c->rope_theta = top_theta > 0 ? top_theta : 10000.0;
    if (old_scaling != nullptr) c->rope_scaling = HfRopeScaling(path, *old_scaling, "rope_scaling");
    return;
  }
  SIFT_CHECK(params->is_object(), path, ": \"rope_parameters\" must be an object or null");
  if (!params->contains("rope_theta") && !params->contains("rope_type")) {
    for (const auto& [name, value] : params->items()) {
      SIFT_CHECK(!value.is_object(), path, ": per-layer-type \"rope_parameters\" (\"", name,
                 "\": ...) are not supported");
    }
  }
  c->rope_theta = JsonFloat(path, *params, "rope_theta", top_theta > 0 ? top_theta : 10000.0);
  SIFT_CHECK(top_theta == 0 || top_theta == c->rope_theta, path, ": \"rope_theta\" (", top_theta,
             ") and \"rope_parameters\".rope_theta (", c->rope_theta, ") disagree");
  c->rope_scaling = HfRopeScaling(path, *params, "rope_parameters");
  if (old_scaling != nullptr) {
    const RopeScaling old = HfRopeScaling(path, *old_scaling, "rope_scaling");
    SIFT_CHECK(old.type == c->rope_scaling.type && old.factor == c->rope_scaling.factor, path,
               ": \"rope_scaling\" (", old.type, " x", old.factor, ") and \"rope_parameters\" (",
               c->rope_scaling.type, " x", c->rope_scaling.factor, ") disagree");
  }
}

}  // namespace

int64_t ModelConfig::LinearParamsPerLayer() const {
  const int64_t q = num_heads * head_dim;
  const int64_t kv = num_kv_heads * head_dim;
  int64_t params = hidden_size * q                         // q_proj
                   + 2 * hidden_size * kv                  // k_proj, v_proj
                   + q * hidden_size                       // o_proj
                   + 3 * hidden_size * intermediate_size;  // gate, up, down
  if (attention_bias) params += q + 2 * kv;
  return params;
}

ModelConfig ModelConfig::FromGguf(const GgufFile& file) {
  const std::string& path = file.path();
  ModelConfig c;
  c.architecture = file.GetString("general.architecture");
  SIFT_CHECK(SupportedArchitecture(c.architecture), path, ": architecture '", c.architecture,
             "' is not supported (supported: llama, mistral, qwen2)");
  c.name = file.GetString("general.name", std::filesystem::path(path).stem().string());
  const std::string p = c.architecture + ".";

  c.context_length = file.GetInt(p + "context_length");
  c.hidden_size = file.GetInt(p + "embedding_length");
  c.num_layers = file.GetInt(p + "block_count");
  c.intermediate_size = file.GetInt(p + "feed_forward_length");
  c.num_heads = file.GetInt(p + "attention.head_count");
  c.num_kv_heads = file.GetInt(p + "attention.head_count_kv", c.num_heads);
  c.rope_theta = file.GetFloat(p + "rope.freq_base", 10000.0);
  c.rms_norm_eps = file.GetFloat(p + "attention.layer_norm_rms_epsilon");

  // head_dim: attention.key_length if given, else rope.dimension_count, else hidden / heads.
  // Partial rotary embeddings (rope dims < head dim) are not part of these architectures.
  const int64_t default_head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
  const int64_t rope_dims = file.GetInt(p + "rope.dimension_count", 0);
  c.head_dim =
      file.GetInt(p + "attention.key_length", rope_dims > 0 ? rope_dims : default_head_dim);
  SIFT_CHECK(rope_dims == 0 || rope_dims == c.head_dim, path, ": ", p,
             "rope.dimension_count = ", rope_dims, " differs from the head dimension ", c.head_dim,
             " (partial rotary embeddings are not supported)");
  const int64_t value_length = file.GetInt(p + "attention.value_length", c.head_dim);
  SIFT_CHECK(value_length == c.head_dim, path, ": ", p, "attention.value_length = ", value_length,
             " differs from the key length ", c.head_dim, " (not supported)");

  if (file.Has(p + "vocab_size")) {
    c.vocab_size = file.GetInt(p + "vocab_size");
  } else if (const GgufValue* tokens = file.Find("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<int64_t>(tokens->array_size());
  } else {
    throw Error(path + ": neither " + p + "vocab_size nor tokenizer.ggml.tokens is present");
  }

  const std::string scaling = file.GetString(p + "rope.scaling.type", "none");
  if (scaling == "linear") {
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = file.GetFloat(p + "rope.scaling.factor");
    c.rope_scaling.original_context_length =
        file.GetInt(p + "rope.scaling.original_context_length", 0);
  } else if (scaling != "none") {
    throw Error(path + ": " + p + "rope.scaling.type '" + scaling +
                "' is not supported (supported: none, linear)");
  } else if (file.Has(p + "rope.scaling.factor") &&
             file.GetFloat(p + "rope.scaling.factor") != 1.0) {
    throw Error(path + ": " + p + "rope.scaling.factor is set but rope.scaling.type is absent");
  }
  // Llama 3.1+ conversions store their RoPE scaling as per-dimension frequency factors.
  SIFT_CHECK(file.FindTensor("rope_freqs.weight") == nullptr, path,
             ": tensor 'rope_freqs.weight' (per-dimension RoPE frequency factors, Llama 3.1+) is "
             "not supported; load the Hugging Face checkpoint instead");

  c.tied_embeddings = file.FindTensor("output.weight") == nullptr;
  c.attention_bias = file.FindTensor("blk.0.attn_q.bias") != nullptr;
  try {
    c.Validate();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  return c;
}

ModelConfig ModelConfig::FromHfConfigJson(const std::string& path) {
  std::ifstream in(path);
  SIFT_CHECK(in.good(), path, ": cannot open");
  Json j;
  try {
    j = Json::parse(in);
  } catch (const Json::exception& e) {
    throw Error(path + ": invalid JSON: " + e.what());
  }
  SIFT_CHECK(j.is_object(), path, ": top level must be a JSON object");

  ModelConfig c;
  c.architecture = JsonString(path, j, "model_type", "");
  SIFT_CHECK(!c.architecture.empty(), path, ": missing \"model_type\"");
  SIFT_CHECK(SupportedArchitecture(c.architecture), path, ": model_type \"", c.architecture,
             "\" is not supported (supported: llama, mistral, qwen2)");
  c.name = std::filesystem::path(path).parent_path().filename().string();
  c.hidden_size = JsonInt(path, j, "hidden_size");
  c.intermediate_size = JsonInt(path, j, "intermediate_size");
  c.num_layers = JsonInt(path, j, "num_hidden_layers");
  c.num_heads = JsonInt(path, j, "num_attention_heads");
  c.num_kv_heads = JsonInt(path, j, "num_key_value_heads", c.num_heads);
  c.head_dim = JsonInt(path, j, "head_dim", c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  c.context_length = JsonInt(path, j, "max_position_embeddings");
  HfRope(path, j, &c);
  c.rms_norm_eps = JsonFloat(path, j, "rms_norm_eps", 1e-6);
  c.vocab_size = JsonInt(path, j, "vocab_size");
  const std::string act = JsonString(path, j, "hidden_act", "silu");
  SIFT_CHECK(act == "silu", path, ": hidden_act \"", act, "\" is not supported (supported: silu)");
  // Sliding-window attention (Mistral v0.1; Qwen2 when use_sliding_window) is not implemented:
  // full causal attention is exact only up to the window, so the usable context is capped there.
  const bool sliding =
      c.architecture == "mistral" ||
      (c.architecture == "qwen2" && JsonBool(path, j, "use_sliding_window", false));
  const int64_t window = sliding ? JsonInt(path, j, "sliding_window", 0) : 0;
  if (window > 0 && window < c.context_length) c.context_length = window;
  c.tied_embeddings = JsonBool(path, j, "tie_word_embeddings", false);
  // Qwen2 always has q/k/v biases (the HF class hard-codes them); Llama reads attention_bias.
  c.attention_bias = c.architecture == "qwen2" || JsonBool(path, j, "attention_bias", false);
  SIFT_CHECK(!JsonBool(path, j, "mlp_bias", false), path, ": mlp_bias is not supported");
  try {
    c.Validate();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  return c;
}

void ModelConfig::Validate() const {
  SIFT_CHECK(SupportedArchitecture(architecture), "architecture '", architecture,
             "' is not supported (supported: llama, mistral, qwen2)");
  auto positive = [](const char* field, int64_t v) {
    SIFT_CHECK(v > 0, "model config: ", field, " must be positive, got ", v);
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_layers", num_layers);
  positive("num_heads", num_heads);
  positive("num_kv_heads", num_kv_heads);
  positive("head_dim", head_dim);
  positive("context_length", context_length);
  SIFT_CHECK(num_heads % num_kv_heads == 0, "model config: num_heads (", num_heads,
             ") is not a multiple of num_kv_heads (", num_kv_heads, ")");
  SIFT_CHECK(head_dim % 2 == 0, "model config: head_dim (", head_dim, ") must be even for RoPE");
  SIFT_CHECK(std::isfinite(rope_theta) && rope_theta > 0,
             "model config: rope_theta must be "
             "positive, got ",
             rope_theta);
  SIFT_CHECK(std::isfinite(rms_norm_eps) && rms_norm_eps > 0 && rms_norm_eps < 1,
             "model config: rms_norm_eps must be in (0, 1), got ", rms_norm_eps);
  const RopeScaling& s = rope_scaling;
  SIFT_CHECK(s.type == "none" || s.type == "linear" || s.type == "llama3",
             "model config: rope_scaling type '", s.type, "' is not one of none, linear, llama3");
  SIFT_CHECK(std::isfinite(s.factor) && s.factor > 0,
             "model config: rope_scaling factor must be "
             "positive, got ",
             s.factor);
  if (s.type == "llama3") {
    SIFT_CHECK(s.original_context_length > 0,
               "model config: llama3 rope_scaling needs "
               "original_max_position_embeddings > 0");
    SIFT_CHECK(s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor,
               "model config: llama3 rope_scaling needs 0 < low_freq_factor < high_freq_factor, "
               "got ",
               s.low_freq_factor, " and ", s.high_freq_factor);
  }
}

}  // namespace sift
