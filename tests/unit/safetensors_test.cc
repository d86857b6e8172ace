// Tests for sift/safetensors.h, ModelConfig::FromHfConfigJson and LoadWeightsFromHfDir on tiny
// checkpoints this test writes itself (tests/support/safetensors_writer.h): F32/BF16/F16
// storage, tied and untied heads, sharded checkpoints, Qwen2 biases, and corrupt inputs.
#include "sift/safetensors.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "sift/error.h"
#include "sift/model.h"
#include "sift/model_config.h"
#include "sift/weights.h"
#include "support/safetensors_writer.h"
#include "support/temp_dir.h"

namespace sift {
namespace {

using ::sift::testing::SafetensorsWriter;
using ::sift::testing::TempDir;
using ::sift::testing::TinyLlama;

void ExpectContains(const std::string& haystack, const std::string& needle) {
  EXPECT_NE(haystack.find(needle), std::string::npos) << "'" << needle << "' not in: " << haystack;
}

template <typename F>
std::string ErrorOf(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no sift::Error thrown";
  return "";
}

// Expected fp32 tensor with the writer's known values.
at::Tensor Expected(const std::string& name, const std::vector<int64_t>& shape) {
  std::vector<float> v = TinyLlama::ValuesOf(shape, name);
  return at::tensor(v, at::kFloat).reshape(shape);
}

void ExpectTensor(const at::Tensor& got, const std::string& name, const std::vector<int64_t>& shape,
                  at::ScalarType dtype) {
  SCOPED_TRACE(name);
  ASSERT_TRUE(got.defined());
  EXPECT_EQ(got.sizes().vec(), shape);
  EXPECT_EQ(got.scalar_type(), dtype);
  EXPECT_TRUE(got.is_contiguous());
  EXPECT_TRUE(at::equal(got.to(at::kFloat), Expected(name, shape)));
}

// Checks every tensor of a loaded TinyLlama against the values written.
void CheckTinyWeights(const ModelWeights& w, const TinyLlama& m, at::ScalarType dtype) {
  const int64_t h = TinyLlama::kHidden, q = TinyLlama::kHeads * TinyLlama::kHeadDim,
                kv = TinyLlama::kKvHeads * TinyLlama::kHeadDim, ff = TinyLlama::kFf;
  ExpectTensor(w.embed, "model.embed_tokens.weight", {TinyLlama::kVocab, h}, dtype);
  ExpectTensor(w.final_norm, "model.norm.weight", {h}, at::kFloat);
  if (m.tied) {
    EXPECT_TRUE(w.lm_head.is_same(w.embed));
  } else {
    ExpectTensor(w.lm_head, "lm_head.weight", {TinyLlama::kVocab, h}, dtype);
  }
  ASSERT_EQ(w.layers.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    ExpectTensor(l.attn_norm, p + "input_layernorm.weight", {h}, at::kFloat);
    ExpectTensor(l.ffn_norm, p + "post_attention_layernorm.weight", {h}, at::kFloat);
    ExpectTensor(l.wq, p + "self_attn.q_proj.weight", {q, h}, dtype);
    ExpectTensor(l.wk, p + "self_attn.k_proj.weight", {kv, h}, dtype);
    ExpectTensor(l.wv, p + "self_attn.v_proj.weight", {kv, h}, dtype);
    ExpectTensor(l.wo, p + "self_attn.o_proj.weight", {h, q}, dtype);
    ExpectTensor(l.w_gate, p + "mlp.gate_proj.weight", {ff, h}, dtype);
    ExpectTensor(l.w_up, p + "mlp.up_proj.weight", {ff, h}, dtype);
    ExpectTensor(l.w_down, p + "mlp.down_proj.weight", {h, ff}, dtype);
    if (w.config.attention_bias) {
      ExpectTensor(l.bq, p + "self_attn.q_proj.bias", {q}, at::kFloat);
      ExpectTensor(l.bk, p + "self_attn.k_proj.bias", {kv}, at::kFloat);
      ExpectTensor(l.bv, p + "self_attn.v_proj.bias", {kv}, at::kFloat);
    } else {
      EXPECT_FALSE(l.bq.defined());
    }
  }
}

// ---- loading --------------------------------------------------------------------------------

class HfLoadTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HfLoadTest, LoadsEveryTensorWithKnownValues) {
  TempDir dir;
  TinyLlama m;
  m.dtype = GetParam();
  m.Write(dir.path());
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    LoadOptions options;
    options.dtype = dtype;
    const ModelWeights w = LoadWeightsFromHfDir(dir.path(), options);
    const ModelConfig& c = w.config;
    EXPECT_EQ(c.architecture, "llama");
    EXPECT_EQ(c.vocab_size, 16);
    EXPECT_EQ(c.hidden_size, 8);
    EXPECT_EQ(c.num_layers, 2);
    EXPECT_EQ(c.num_heads, 2);
    EXPECT_EQ(c.num_kv_heads, 1);
    EXPECT_EQ(c.head_dim, 4);
    EXPECT_EQ(c.intermediate_size, 12);
    EXPECT_EQ(c.context_length, 256);
    EXPECT_EQ(c.rope_theta, 50000.0);
    EXPECT_EQ(c.rms_norm_eps, 1e-6);
    EXPECT_FALSE(c.tied_embeddings);
    EXPECT_FALSE(c.attention_bias);
    CheckTinyWeights(w, m, dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(StorageDtypes, HfLoadTest, ::testing::Values("F32", "BF16", "F16"));

TEST(HfLoad, TiedHeadSharesTheEmbedding) {
  TempDir dir;
  TinyLlama m;
  m.tied = true;
  m.dtype = "BF16";
  m.Write(dir.path());
  LoadOptions options;
  options.dtype = at::kBFloat16;
  const ModelWeights w = LoadWeightsFromHfDir(dir.path(), options);
  EXPECT_TRUE(w.config.tied_embeddings);
  CheckTinyWeights(w, m, at::kBFloat16);
  EXPECT_EQ(w.lm_head.data_ptr(), w.embed.data_ptr());
  // Bytes counts the shared storage once: 16*8 embed + 2 layers of (8*8*2 + 4*8*2 + 12*8*3)
  // bf16 values, plus 8 + 2*16 fp32 norms.
  const int64_t matrices = 16 * 8 + 2 * (64 * 2 + 32 * 2 + 96 * 3);
  EXPECT_EQ(w.Bytes(), matrices * 2 + (8 + 2 * 16) * 4);
}

TEST(HfLoad, UntiedHeadIsSeparate) {
  TempDir dir;
  TinyLlama m;
  m.Write(dir.path());
  LoadOptions options;
  options.dtype = at::kFloat;
  const ModelWeights w = LoadWeightsFromHfDir(dir.path(), options);
  EXPECT_FALSE(w.lm_head.is_same(w.embed));
  EXPECT_FALSE(at::equal(w.lm_head, w.embed));
  const int64_t matrices = 2 * 16 * 8 + 2 * (64 * 2 + 32 * 2 + 96 * 3);
  EXPECT_EQ(w.Bytes(), (matrices + 8 + 2 * 16) * 4);
}

TEST(HfLoad, ShardedCheckpoint) {
  TempDir dir;
  TinyLlama m;
  m.sharded = true;
  m.dtype = "F16";
  m.Write(dir.path());
  auto ckpt = HfCheckpoint::Open(dir.path());
  EXPECT_EQ(ckpt->shards().size(), 2u);
  EXPECT_EQ(ckpt->TensorNames().size(), m.Shapes().size());
  EXPECT_NE(ckpt->ShardPathOf("model.layers.1.mlp.up_proj.weight").find("00002-of-00002"),
            std::string::npos);
  LoadOptions options;
  options.dtype = at::kFloat;
  const ModelWeights w = LoadWeights(dir.path(), options);  // dispatches on the directory
  CheckTinyWeights(w, m, at::kFloat);
}

TEST(HfLoad, Qwen2HasBiases) {
  TempDir dir;
  TinyLlama m;
  m.model_type = "qwen2";
  m.tied = true;
  m.Write(dir.path());
  LoadOptions options;
  options.dtype = at::kBFloat16;
  const ModelWeights w = LoadWeightsFromHfDir(dir.path(), options);
  EXPECT_EQ(w.config.architecture, "qwen2");
  EXPECT_TRUE(w.config.attention_bias);  // implied by qwen2 even though the config says false
  CheckTinyWeights(w, m, at::kBFloat16);
}

TEST(HfLoad, ErrorsNameTheProblem) {
  TempDir dir;
  TinyLlama m;
  m.Write(dir.path());
  LoadOptions options;
  // Missing tensor.
  {
    SafetensorsWriter w;
    for (const auto& [name, shape] : m.Shapes()) {
      if (name != "model.layers.1.mlp.up_proj.weight") {
        w.AddFloats(name, "F32", shape, TinyLlama::ValuesOf(shape, name));
      }
    }
    w.Write(dir.File("model.safetensors"));
    const std::string msg = ErrorOf([&] { LoadWeightsFromHfDir(dir.path(), options); });
    ExpectContains(msg, dir.path());
    ExpectContains(msg, "model.layers.1.mlp.up_proj.weight' not found");
  }
  // Wrong shape.
  {
    SafetensorsWriter w;
    for (const auto& [name, shape] : m.Shapes()) {
      std::vector<int64_t> s = shape;
      if (name == "model.layers.0.self_attn.k_proj.weight") s = {8, 4};
      w.AddFloats(name, "F32", s, TinyLlama::ValuesOf(s, name));
    }
    w.Write(dir.File("model.safetensors"));
    ExpectContains(ErrorOf([&] { LoadWeightsFromHfDir(dir.path(), options); }),
                   "tensor 'model.layers.0.self_attn.k_proj.weight' has shape (8, 4), expected "
                   "(4, 8)");
  }
  // Unsupported dtype.
  {
    SafetensorsWriter w;
    for (const auto& [name, shape] : m.Shapes()) {
      if (name == "model.norm.weight") {
        w.Add(name, "I32", shape, std::vector<uint8_t>(8 * 4));
      } else {
        w.AddFloats(name, "F32", shape, TinyLlama::ValuesOf(shape, name));
      }
    }
    w.Write(dir.File("model.safetensors"));
    ExpectContains(ErrorOf([&] { LoadWeightsFromHfDir(dir.path(), options); }),
                   "tensor 'model.norm.weight' has dtype I32");
  }
  // Untied config without lm_head.
  {
    TinyLlama tied = m;
    tied.tied = true;
    tied.Write(dir.path());
    testing::WriteText(dir.File("config.json"), m.Config().dump());  // says untied
    ExpectContains(ErrorOf([&] { LoadWeightsFromHfDir(dir.path(), options); }),
                   "no lm_head.weight");
  }
}

TEST(HfLoad, DirectoryErrors) {
  TempDir dir;
  LoadOptions options;
  ExpectContains(ErrorOf([&] { HfCheckpoint::Open(dir.File("absent")); }), "not a directory");
  ExpectContains(ErrorOf([&] { HfCheckpoint::Open(dir.path()); }), "missing config.json");
  TinyLlama m;
  testing::WriteText(dir.File("config.json"), m.Config().dump());
  ExpectContains(ErrorOf([&] { HfCheckpoint::Open(dir.path()); }),
                 "no model.safetensors or model.safetensors.index.json");
  ExpectContains(ErrorOf([&] { LoadWeights(dir.File("nothing.gguf"), options); }),
                 "no such file or directory");

  // Index naming a missing shard, a shard without the tensor, and a path outside the directory.
  TinyLlama sharded;
  sharded.sharded = true;
  sharded.Write(dir.path());
  std::filesystem::remove(dir.File("model-00002-of-00002.safetensors"));
  ExpectContains(ErrorOf([&] { HfCheckpoint::Open(dir.path()); }),
                 "shard \"model-00002-of-00002.safetensors\"");
  sharded.Write(dir.path());
  testing::WriteText(
      dir.File("model.safetensors.index.json"),
      R"({"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}})");
  ExpectContains(ErrorOf([&] { HfCheckpoint::Open(dir.path()); }),
                 "puts tensor 'model.norm.weight' in \"model-00001-of-00002.safetensors\", which "
                 "does not contain it");
  testing::WriteText(dir.File("model.safetensors.index.json"),
                     R"({"weight_map": {"model.norm.weight": "../x.safetensors"}})");
  ExpectContains(ErrorOf([&] { HfCheckpoint::Open(dir.path()); }), "not a plain file name");
  testing::WriteText(dir.File("model.safetensors.index.json"), R"({"weight_map": 3})");
  ExpectContains(ErrorOf([&] { HfCheckpoint::Open(dir.path()); }), "missing \"weight_map\"");
  testing::WriteText(dir.File("model.safetensors.index.json"),
                     R"({"weight_map": {"a": "x", "a": "y"}})");
  ExpectContains(ErrorOf([&] { HfCheckpoint::Open(dir.path()); }), "duplicate key \"a\"");
}

// ---- SafetensorsFile ------------------------------------------------------------------------

TEST(SafetensorsFileTest, ReadsHeaderMetadataAndData) {
  TempDir dir;
  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  w.AddFloats("b", "BF16", {2, 3}, {1, 2, 3, 4, 5, 6});
  w.Add("a", "I8", {3}, {1, 2, 255});
  w.Add("empty", "F32", {0, 4}, {});
  w.Add("c", "F64", {}, std::vector<uint8_t>(8));  // a scalar
  const std::string path = dir.File("t.safetensors");
  w.Write(path);

  auto f = SafetensorsFile::Open(path);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  ASSERT_EQ(f->tensors().size(), 4u);
  EXPECT_EQ(f->tensors()[0].name, "b");  // sorted by offset
  const SafetensorsTensor* b = f->Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, SafetensorsDtype::kBF16);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(b->num_elements(), 6);
  EXPECT_EQ(b->nbytes(), 12u);
  EXPECT_EQ(b->data, f->tensors()[0].data);
  EXPECT_EQ(b->data[2], 0x00);
  EXPECT_EQ(b->data[3], 0x40);  // bf16 2.0 = 0x4000
  const SafetensorsTensor* a = f->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->data[2], 255);
  EXPECT_EQ(f->Find("empty")->nbytes(), 0u);
  EXPECT_EQ(f->Find("c")->shape.size(), 0u);
  EXPECT_EQ(f->Find("c")->num_elements(), 1);
  EXPECT_EQ(f->Find("nope"), nullptr);
  EXPECT_EQ(f->data_offset() % 8, 0u);
  EXPECT_STREQ(SafetensorsDtypeName(SafetensorsDtype::kF8E4M3), "F8_E4M3");
  EXPECT_EQ(SafetensorsDtypeSize(SafetensorsDtype::kBF16), 2);
}

std::string OpenError(const TempDir& dir, const std::vector<uint8_t>& bytes) {
  const std::string path = dir.File("bad.safetensors");
  testing::WriteBytes(path, bytes);
  const std::string msg = ErrorOf([&] { SafetensorsFile::Open(path); });
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
  return msg;
}

SafetensorsWriter SmallWriter() {
  SafetensorsWriter w;
  w.AddFloats("x", "F32", {2, 2}, {1, 2, 3, 4});
  w.AddFloats("y", "F16", {3}, {1, 2, 3});
  return w;
}

TEST(SafetensorsFileTest, CorruptHeaders) {
  TempDir dir;
  std::vector<uint8_t> bytes = SmallWriter().Build();
  bytes[0] = 0xFF;  // header length far beyond the file
  bytes[1] = 0xFF;
  ExpectContains(OpenError(dir, bytes), "truncated: the JSON header needs");
  bytes = SmallWriter().Build();
  bytes[7] = 0x7F;  // absurd length
  ExpectContains(OpenError(dir, bytes), "limit");

  ExpectContains(OpenError(dir, SmallWriter().Build("{\"x\": ")), "invalid JSON header");
  ExpectContains(OpenError(dir, SmallWriter().Build("[1, 2]")), "must be an object");
  ExpectContains(
      OpenError(dir, SmallWriter().Build(
                         R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                         R"( "x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})")),
      "duplicate key \"x\"");

  SafetensorsWriter w = SmallWriter();
  w.header()["x"]["dtype"] = "F4";
  ExpectContains(OpenError(dir, w.Build()), "tensor 'x': unknown dtype \"F4\"");
  w = SmallWriter();
  w.header()["x"]["data_offsets"] = {0, 1000};
  ExpectContains(OpenError(dir, w.Build()), "tensor 'x': truncated or bad offsets");
  w = SmallWriter();
  w.header()["x"]["shape"] = {2, 3};
  ExpectContains(OpenError(dir, w.Build()), "span 16 bytes, but shape [2,3] of F32 needs 24");
  w = SmallWriter();
  w.header()["x"]["shape"] = {-2, 2};
  ExpectContains(OpenError(dir, w.Build()), "non-negative integer");
  w = SmallWriter();
  w.header()["x"]["data_offsets"] = {8, 4};
  ExpectContains(OpenError(dir, w.Build()), "end before they begin");
  w = SmallWriter();
  w.header()["x"].erase("dtype");
  ExpectContains(OpenError(dir, w.Build()), "missing \"dtype\"");
  w = SmallWriter();
  w.header()["y"]["data_offsets"] = {14, 20};  // overlaps x = [0, 16)
  ExpectContains(OpenError(dir, w.Build()), "overlap");
  w = SmallWriter();
  w.header()["__metadata__"] = {{"n", 3}};
  ExpectContains(OpenError(dir, w.Build()), "__metadata__ \"n\" must be a string");
  ExpectContains(OpenError(dir, {1, 2, 3}), "truncated: need 8 bytes");
}

TEST(SafetensorsFileTest, EveryTruncationThrows) {
  TempDir dir;
  const std::vector<uint8_t> full = SmallWriter().Build();
  for (size_t cut = 0; cut < full.size(); ++cut) {
    SCOPED_TRACE(cut);
    const std::string msg = OpenError(dir, std::vector<uint8_t>(full.begin(), full.begin() + cut));
    ExpectContains(msg, "truncated");
  }
}

TEST(SafetensorsFileTest, RandomCorruptionThrowsOrReadsSafely) {
  TempDir dir;
  const std::vector<uint8_t> full = SmallWriter().Build();
  const std::string path = dir.File("fuzz.safetensors");
  std::mt19937 rng(99);
  for (int iter = 0; iter < 1000; ++iter) {
    std::vector<uint8_t> bytes = full;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
      bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    }
    testing::WriteBytes(path, bytes);
    std::unique_ptr<SafetensorsFile> f;
    try {
      f = SafetensorsFile::Open(path);
    } catch (const Error&) {
      continue;
    }
    for (const SafetensorsTensor& t : f->tensors()) {
      ASSERT_LE(t.end, f->file_size() - f->data_offset()) << t.name;
      unsigned sum = 0;  // touch every byte: a pointer past the mapping would fault here
      for (uint64_t i = 0; i < t.nbytes(); ++i) sum += t.data[i];
      (void)sum;
    }
  }
}

// ---- ModelConfig from config.json -----------------------------------------------------------

ModelConfig ConfigFrom(const TempDir& dir, const nlohmann::json& j) {
  testing::WriteText(dir.File("config.json"), j.dump());
  return ModelConfig::FromHfConfigJson(dir.File("config.json"));
}

nlohmann::json SmolLm2Config() {
  return {
      {"model_type", "llama"},           {"hidden_size", 576},       {"intermediate_size", 1536},
      {"num_hidden_layers", 30},         {"num_attention_heads", 9}, {"num_key_value_heads", 3},
      {"max_position_embeddings", 8192}, {"rope_theta", 100000.0},   {"rms_norm_eps", 1e-5},
      {"tie_word_embeddings", true},     {"vocab_size", 49152},      {"rope_scaling", nullptr}};
}

TEST(HfConfigTest, SmolLm2AndDefaults) {
  TempDir dir;
  const ModelConfig c = ConfigFrom(dir, SmolLm2Config());
  EXPECT_EQ(c.head_dim, 64);  // hidden / heads when head_dim is absent
  EXPECT_EQ(c.group_size(), 3);
  EXPECT_EQ(c.rope_scaling.type, "none");
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.LinearParamsPerLayer(), 3538944);  // 3,540,096 with the two norms
  EXPECT_EQ(c.name, std::filesystem::path(dir.path()).filename().string());

  nlohmann::json j = SmolLm2Config();
  j.erase("num_key_value_heads");
  j.erase("rope_theta");
  j["head_dim"] = nullptr;
  const ModelConfig d = ConfigFrom(dir, j);
  EXPECT_EQ(d.num_kv_heads, 9);
  EXPECT_EQ(d.rope_theta, 10000.0);
  EXPECT_EQ(d.head_dim, 64);
}

TEST(HfConfigTest, RopeScaling) {
  TempDir dir;
  nlohmann::json j = SmolLm2Config();
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 32.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  ModelConfig c = ConfigFrom(dir, j);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.original_context_length, 8192);
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  c = ConfigFrom(dir, j);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_EQ(c.rope_scaling.factor, 2.0);
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 2.0}};
  ExpectContains(ErrorOf([&] { ConfigFrom(dir, j); }), "rope_scaling type \"yarn\"");
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  ExpectContains(ErrorOf([&] { ConfigFrom(dir, j); }), "original_max_position_embeddings");
}

// transformers >= 5 writes rope_theta and the scaling under "rope_parameters".
TEST(HfConfigTest, RopeParameters) {
  TempDir dir;
  nlohmann::json j = SmolLm2Config();
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_theta", 1000000.0}, {"rope_type", "default"}};
  ModelConfig c = ConfigFrom(dir, j);
  EXPECT_EQ(c.rope_theta, 1000000.0);  // not the 10000 fallback
  EXPECT_EQ(c.rope_scaling.type, "none");

  j["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                          {"factor", 8.0},           {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  c = ConfigFrom(dir, j);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_context_length, 8192);

  // Both forms present: they must agree.
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = j["rope_parameters"];
  EXPECT_EQ(ConfigFrom(dir, j).rope_scaling.type, "llama3");
  j["rope_theta"] = 10000.0;
  ExpectContains(ErrorOf([&] { ConfigFrom(dir, j); }), "disagree");
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  ExpectContains(ErrorOf([&] { ConfigFrom(dir, j); }), "disagree");
  j.erase("rope_scaling");
  j.erase("rope_theta");

  // Clear refusals.
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 4.0}};
  ExpectContains(ErrorOf([&] { ConfigFrom(dir, j); }), "rope_parameters type \"yarn\"");
  j["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", 1e6}, {"partial_rotary_factor", 0.5}};
  ExpectContains(ErrorOf([&] { ConfigFrom(dir, j); }), "partial rotary");
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  ExpectContains(ErrorOf([&] { ConfigFrom(dir, j); }), "per-layer-type");
  j["rope_parameters"] = "big";
  ExpectContains(ErrorOf([&] { ConfigFrom(dir, j); }), "must be an object");
  j = SmolLm2Config();
  j["hidden_act"] = "gelu";
  ExpectContains(ErrorOf([&] { ConfigFrom(dir, j); }), "hidden_act \"gelu\" is not supported");
}

// Llama 3 rope scaling end to end: a tiny random Llama saved by transformers >= 5 itself
// (config.json with "rope_parameters" {rope_type "llama3", factor 8, original 32}) and
// transformers' fp32 logits for 96 ids (tools/make_rope_scaling_fixture.py). The scaling changes
// these logits by up to 9.2 (the script prints it), so a wrong or ignored scaling cannot pass;
// 1e-4 leaves room for fp32 summation order in two layers (logits |x| <= 6.8) and the fixture's
// 6 decimals. Three chunks through one cache: last-row logits at positions 15, 47 and 95.
TEST(HfRopeScalingTest, Llama3FromRopeParametersMatchesTransformers) {
  const std::string dir = std::string(SIFT_SOURCE_DIR) + "/tests/fixtures/reference/llama3_rope";
  std::ifstream in(dir + "/logits.json");
  ASSERT_TRUE(in) << dir;
  const nlohmann::json fx = nlohmann::json::parse(in);
  ModelOptions o;
  o.dtype = at::kFloat;
  const auto model = Model::Load(dir, o);
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.original_context_length, 32);
  EXPECT_EQ(c.rope_theta, 10000.0);
  const std::vector<TokenId> ids = fx["ids"];
  ASSERT_EQ(ids.size(), 96u);
  KvCache cache = model->NewCache();
  int64_t start = 0;
  for (const int64_t end : {16, 48, 96}) {
    const std::vector<TokenId> chunk(ids.begin() + start, ids.begin() + end);
    const at::Tensor got = model->Forward(chunk, start, cache);
    const std::vector<float> want = fx["logits"][static_cast<size_t>(end - 1)];
    const at::Tensor expected = at::tensor(want);
    EXPECT_LT((got - expected).abs().max().item<double>(), 1e-4) << "position " << end - 1;
    start = end;
  }
}

TEST(HfConfigTest, ArchitecturesAndErrors) {
  TempDir dir;
  nlohmann::json j = SmolLm2Config();
  j["model_type"] = "mistral";
  j["sliding_window"] = 4096;
  ModelConfig c = ConfigFrom(dir, j);
  EXPECT_EQ(c.architecture, "mistral");
  EXPECT_EQ(c.context_length, 4096);  // capped at the sliding window
  j["model_type"] = "qwen2";
  j["use_sliding_window"] = false;
  c = ConfigFrom(dir, j);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.context_length, 8192);
  EXPECT_EQ(c.LinearParamsPerLayer(), 3538944 + 576 + 2 * 192);

  j = SmolLm2Config();
  j["model_type"] = "gpt2";
  ExpectContains(ErrorOf([&] { ConfigFrom(dir, j); }), "model_type \"gpt2\" is not supported");
  j = SmolLm2Config();
  j.erase("hidden_size");
  std::string msg = ErrorOf([&] { ConfigFrom(dir, j); });
  ExpectContains(msg, dir.File("config.json"));
  ExpectContains(msg, "missing \"hidden_size\"");
  j = SmolLm2Config();
  j["num_key_value_heads"] = 4;
  ExpectContains(ErrorOf([&] { ConfigFrom(dir, j); }), "not a multiple of num_kv_heads");
  j = SmolLm2Config();
  j["vocab_size"] = "big";
  ExpectContains(ErrorOf([&] { ConfigFrom(dir, j); }), "\"vocab_size\" must be an integer");
  j = SmolLm2Config();
  j["num_hidden_layers"] = 0;
  ExpectContains(ErrorOf([&] { ConfigFrom(dir, j); }), "num_layers must be positive");
  testing::WriteText(dir.File("config.json"), "{not json");
  ExpectContains(ErrorOf([&] { ModelConfig::FromHfConfigJson(dir.File("config.json")); }),
                 "invalid JSON");
  ExpectContains(ErrorOf([&] { ModelConfig::FromHfConfigJson(dir.File("none.json")); }),
                 "cannot open");
}

}  // namespace
}  // namespace sift
