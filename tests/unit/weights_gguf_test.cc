// Tests for ModelConfig::FromGguf and LoadWeightsFromGguf on a tiny llama-shaped GGUF this test
// writes itself: metadata defaults, shapes, exact values through F32 and Q8_0 tensors, the q/k row
// un-permutation (convert_hf_to_gguf.py, LlamaModel.permute) for weights and biases, tied/untied
// heads, and errors.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "sift/error.h"
#include "sift/ggml_types.h"
#include "sift/gguf.h"
#include "sift/model_config.h"
#include "sift/weights.h"
#include "support/gguf_writer.h"
#include "support/temp_dir.h"

namespace sift {
namespace {

using ::sift::testing::GgufWriter;
using ::sift::testing::TempDir;

constexpr int64_t kVocab = 32, kHidden = 64, kHeads = 4, kKvHeads = 2, kHeadDim = 16, kFf = 96,
                  kLayers = 2;

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

void ExpectContains(const std::string& haystack, const std::string& needle) {
  EXPECT_NE(haystack.find(needle), std::string::npos) << "'" << needle << "' not in: " << haystack;
}

// Known values of a tensor as stored in the file (GGUF row order), multiples of 1/16.
std::vector<float> FileValues(const std::string& name, int64_t n) {
  uint32_t seed = 0;
  for (char c : name) seed = seed * 131 + static_cast<uint8_t>(c);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[static_cast<size_t>(i)] = static_cast<float>(static_cast<int>((i * 7 + seed) % 61) - 30) / 16;
  }
  return v;
}

std::vector<uint8_t> F32Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Q8_0 encoding of values that are multiples of 1/16 in [-127/16, 127/16]: d = 1/16 exactly.
std::vector<uint8_t> Q8_0Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b;
  for (size_t i = 0; i < v.size(); i += 32) {
    const uint16_t d = FloatToHalf(1.0f / 16);
    b.push_back(static_cast<uint8_t>(d & 0xFF));
    b.push_back(static_cast<uint8_t>(d >> 8));
    for (size_t j = 0; j < 32; ++j) {
      b.push_back(static_cast<uint8_t>(static_cast<int8_t>(v[i + j] * 16)));
    }
  }
  return b;
}

struct TinyGguf {
  std::string arch = "llama";
  bool tied = true;
  bool bias = false;
  bool q8 = false;  // attn_q / attn_k / ffn_down stored as Q8_0
  bool write_optional_keys = true;

  // GGUF dims (ne0 = in, ne1 = out) of every tensor.
  std::vector<std::pair<std::string, std::vector<int64_t>>> Tensors() const {
    std::vector<std::pair<std::string, std::vector<int64_t>>> t;
    t.push_back({"token_embd.weight", {kHidden, kVocab}});
    for (int i = 0; i < kLayers; ++i) {
      const std::string p = "blk." + std::to_string(i) + ".";
      t.push_back({p + "attn_norm.weight", {kHidden}});
      t.push_back({p + "attn_q.weight", {kHidden, kHeads * kHeadDim}});
      t.push_back({p + "attn_k.weight", {kHidden, kKvHeads * kHeadDim}});
      t.push_back({p + "attn_v.weight", {kHidden, kKvHeads * kHeadDim}});
      t.push_back({p + "attn_output.weight", {kHeads * kHeadDim, kHidden}});
      if (bias) {
        t.push_back({p + "attn_q.bias", {kHeads * kHeadDim}});
        t.push_back({p + "attn_k.bias", {kKvHeads * kHeadDim}});
        t.push_back({p + "attn_v.bias", {kKvHeads * kHeadDim}});
      }
      t.push_back({p + "ffn_norm.weight", {kHidden}});
      t.push_back({p + "ffn_gate.weight", {kHidden, kFf}});
      t.push_back({p + "ffn_up.weight", {kHidden, kFf}});
      t.push_back({p + "ffn_down.weight", {kFf, kHidden}});
    }
    t.push_back({"output_norm.weight", {kHidden}});
    if (!tied) t.push_back({"output.weight", {kHidden, kVocab}});
    return t;
  }

  bool IsQ8(const std::string& name) const {
    return q8 && (name.find("attn_q.weight") != std::string::npos ||
                  name.find("attn_k.weight") != std::string::npos ||
                  name.find("ffn_down") != std::string::npos);
  }

  GgufWriter Writer() const {
    GgufWriter w;
    w.AddString("general.architecture", arch);
    w.AddString("general.name", "tiny");
    const std::string a = arch + ".";
    w.AddU32(a + "context_length", 128);
    w.AddU32(a + "embedding_length", kHidden);
    w.AddU32(a + "block_count", kLayers);
    w.AddU32(a + "feed_forward_length", kFf);
    w.AddU32(a + "attention.head_count", kHeads);
    w.AddF32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
    if (write_optional_keys) {
      w.AddU32(a + "attention.head_count_kv", kKvHeads);
      w.AddF32(a + "rope.freq_base", 100000.0f);
      w.AddU32(a + "rope.dimension_count", kHeadDim);
      w.AddU32(a + "vocab_size", kVocab);
    }
    std::vector<std::string> tokens;
    for (int i = 0; i < kVocab; ++i) tokens.push_back("t" + std::to_string(i));
    w.AddStringArray("tokenizer.ggml.tokens", tokens);
    for (const auto& [name, ne] : Tensors()) {
      int64_t n = 1;
      for (int64_t d : ne) n *= d;
      const std::vector<float> v = FileValues(name, n);
      if (IsQ8(name)) {
        w.AddTensor(name, static_cast<uint32_t>(GgmlType::kQ8_0), ne, Q8_0Bytes(v));
      } else {
        w.AddTensor(name, static_cast<uint32_t>(GgmlType::kF32), ne, F32Bytes(v));
      }
    }
    return w;
  }
};

// Expected HF-order tensor: the file's values, reshaped to the torch shape (dims reversed).
at::Tensor FileTensor(const std::string& name, const std::vector<int64_t>& torch_shape) {
  int64_t n = 1;
  for (int64_t d : torch_shape) n *= d;
  return at::tensor(FileValues(name, n), at::kFloat).reshape(torch_shape);
}

// HF row of GGUF row r inside a permuted q/k tensor: GGUF row 2i + j of a head is HF row
// j * hd/2 + i (llama.cpp convert_hf_to_gguf.py, LlamaModel.permute), written out element by
// element, independent of the loader.
int64_t HfRowOfGgufRow(int64_t r) {
  const int64_t head = r / kHeadDim, within = r % kHeadDim;
  const int64_t i = within / 2, j = within % 2;
  return head * kHeadDim + j * (kHeadDim / 2) + i;
}

void ExpectUnpermuted(const at::Tensor& hf, const std::string& name, int64_t rows) {
  const bool matrix = hf.dim() == 2;
  const at::Tensor file = matrix ? FileTensor(name, {rows, kHidden}) : FileTensor(name, {rows});
  const at::Tensor got = hf.to(at::kFloat);
  for (int64_t r = 0; r < rows; ++r) {
    ASSERT_TRUE(at::equal(got[HfRowOfGgufRow(r)], file[r])) << name << " GGUF row " << r;
  }
  // The permutation really moves rows (row 1 of a head goes to hd/2).
  EXPECT_FALSE(at::equal(got, file));
}

TEST(GgufConfigTest, ReadsMetadataAndDefaults) {
  TempDir dir;
  TinyGguf m;
  m.Writer().Write(dir.File("m.gguf"));
  auto f = GgufFile::Open(dir.File("m.gguf"));
  ModelConfig c = ModelConfig::FromGguf(*f);
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.name, "tiny");
  EXPECT_EQ(c.context_length, 128);
  EXPECT_EQ(c.hidden_size, kHidden);
  EXPECT_EQ(c.num_layers, kLayers);
  EXPECT_EQ(c.intermediate_size, kFf);
  EXPECT_EQ(c.num_heads, kHeads);
  EXPECT_EQ(c.num_kv_heads, kKvHeads);
  EXPECT_EQ(c.head_dim, kHeadDim);
  EXPECT_EQ(c.vocab_size, kVocab);
  EXPECT_EQ(c.rope_theta, 100000.0);
  EXPECT_FLOAT_EQ(static_cast<float>(c.rms_norm_eps), 1e-5f);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.attention_bias);

  m.write_optional_keys = false;  // head_count_kv, freq_base, head dim and vocab fall back
  m.tied = false;
  m.bias = true;
  m.Writer().Write(dir.File("d.gguf"));
  f = GgufFile::Open(dir.File("d.gguf"));
  c = ModelConfig::FromGguf(*f);
  EXPECT_EQ(c.num_kv_heads, kHeads);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.head_dim, kHidden / kHeads);
  EXPECT_EQ(c.vocab_size, kVocab);  // length of tokenizer.ggml.tokens
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_TRUE(c.attention_bias);
}

TEST(GgufConfigTest, Errors) {
  TempDir dir;
  TinyGguf m;
  m.arch = "gpt2";
  m.Writer().Write(dir.File("a.gguf"));
  auto f = GgufFile::Open(dir.File("a.gguf"));
  std::string msg = ErrorOf([&] { ModelConfig::FromGguf(*f); });
  ExpectContains(msg, dir.File("a.gguf") + ": architecture 'gpt2' is not supported");

  m.arch = "llama";
  GgufWriter w = m.Writer();
  w.AddString("llama.rope.scaling.type", "yarn");
  w.Write(dir.File("b.gguf"));
  f = GgufFile::Open(dir.File("b.gguf"));
  ExpectContains(ErrorOf([&] { ModelConfig::FromGguf(*f); }), "rope.scaling.type 'yarn'");

  w = m.Writer();
  w.AddTensor("rope_freqs.weight", static_cast<uint32_t>(GgmlType::kF32), {8},
              F32Bytes(std::vector<float>(8, 1.0f)));
  w.Write(dir.File("c.gguf"));
  f = GgufFile::Open(dir.File("c.gguf"));
  ExpectContains(ErrorOf([&] { ModelConfig::FromGguf(*f); }), "rope_freqs.weight");

  w = m.Writer();
  w.AddU32("llama.attention.key_length", 32);  // disagrees with rope.dimension_count 16
  w.Write(dir.File("d.gguf"));
  f = GgufFile::Open(dir.File("d.gguf"));
  ExpectContains(ErrorOf([&] { ModelConfig::FromGguf(*f); }), "partial rotary");

  w = GgufWriter();
  w.AddString("general.architecture", "llama");
  w.Write(dir.File("e.gguf"));
  f = GgufFile::Open(dir.File("e.gguf"));
  ExpectContains(ErrorOf([&] { ModelConfig::FromGguf(*f); }),
                 "missing metadata key 'llama.context_length'");

  w = m.Writer();
  w.AddF32("llama.rope.scaling.factor", 4.0f);
  w.AddString("llama.rope.scaling.type", "linear");
  w.Write(dir.File("f.gguf"));
  f = GgufFile::Open(dir.File("f.gguf"));
  const ModelConfig c = ModelConfig::FromGguf(*f);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_EQ(c.rope_scaling.factor, 4.0);
}

TEST(GgufWeightsTest, LoadsAndUnpermutesQk) {
  for (bool q8 : {false, true}) {
    SCOPED_TRACE(q8 ? "Q8_0" : "F32");
    TempDir dir;
    TinyGguf m;
    m.q8 = q8;
    m.Writer().Write(dir.File("m.gguf"));
    LoadOptions options;
    options.dtype = at::kFloat;
    const ModelWeights w = LoadWeights(dir.File("m.gguf"), options);
    ASSERT_EQ(w.layers.size(), 2u);
    EXPECT_TRUE(at::equal(w.embed, FileTensor("token_embd.weight", {kVocab, kHidden})));
    EXPECT_TRUE(w.lm_head.is_same(w.embed));
    EXPECT_TRUE(at::equal(w.final_norm, FileTensor("output_norm.weight", {kHidden})));
    for (int i = 0; i < kLayers; ++i) {
      const std::string p = "blk." + std::to_string(i) + ".";
      const LayerWeights& l = w.layers[static_cast<size_t>(i)];
      EXPECT_EQ(l.wq.sizes().vec(), (std::vector<int64_t>{kHeads * kHeadDim, kHidden}));
      EXPECT_EQ(l.wk.sizes().vec(), (std::vector<int64_t>{kKvHeads * kHeadDim, kHidden}));
      ExpectUnpermuted(l.wq, p + "attn_q.weight", kHeads * kHeadDim);
      ExpectUnpermuted(l.wk, p + "attn_k.weight", kKvHeads * kHeadDim);
      // v, o and the MLP are not permuted.
      EXPECT_TRUE(at::equal(l.wv, FileTensor(p + "attn_v.weight", {kKvHeads * kHeadDim, kHidden})));
      EXPECT_TRUE(
          at::equal(l.wo, FileTensor(p + "attn_output.weight", {kHidden, kHeads * kHeadDim})));
      EXPECT_TRUE(at::equal(l.w_gate, FileTensor(p + "ffn_gate.weight", {kFf, kHidden})));
      EXPECT_TRUE(at::equal(l.w_up, FileTensor(p + "ffn_up.weight", {kFf, kHidden})));
      EXPECT_TRUE(at::equal(l.w_down, FileTensor(p + "ffn_down.weight", {kHidden, kFf})));
      EXPECT_TRUE(at::equal(l.attn_norm, FileTensor(p + "attn_norm.weight", {kHidden})));
      EXPECT_TRUE(at::equal(l.ffn_norm, FileTensor(p + "ffn_norm.weight", {kHidden})));
      EXPECT_FALSE(l.bq.defined());
    }
  }
}

TEST(GgufWeightsTest, DtypesBiasesAndUntiedHead) {
  TempDir dir;
  TinyGguf m;
  m.tied = false;
  m.bias = true;
  m.Writer().Write(dir.File("m.gguf"));
  LoadOptions options;
  options.dtype = at::kBFloat16;
  const ModelWeights w = LoadWeightsFromGguf(dir.File("m.gguf"), options);
  EXPECT_EQ(w.embed.scalar_type(), at::kBFloat16);
  EXPECT_EQ(w.layers[0].wq.scalar_type(), at::kBFloat16);
  EXPECT_EQ(w.layers[0].attn_norm.scalar_type(), at::kFloat);
  EXPECT_EQ(w.final_norm.scalar_type(), at::kFloat);
  EXPECT_FALSE(w.lm_head.is_same(w.embed));
  EXPECT_TRUE(at::equal(w.lm_head.to(at::kFloat), FileTensor("output.weight", {kVocab, kHidden})));
  // Values are multiples of 1/16 below 2: exact in bf16.
  ExpectUnpermuted(w.layers[1].wq, "blk.1.attn_q.weight", kHeads * kHeadDim);
  ASSERT_TRUE(w.layers[0].bq.defined());
  EXPECT_EQ(w.layers[0].bq.scalar_type(), at::kFloat);
  ExpectUnpermuted(w.layers[0].bq, "blk.0.attn_q.bias", kHeads * kHeadDim);
  ExpectUnpermuted(w.layers[0].bk, "blk.0.attn_k.bias", kKvHeads * kHeadDim);
  EXPECT_TRUE(at::equal(w.layers[0].bv, FileTensor("blk.0.attn_v.bias", {kKvHeads * kHeadDim})));
}

TEST(GgufWeightsTest, Qwen2IsNotPermuted) {
  TempDir dir;
  TinyGguf m;
  m.arch = "qwen2";
  m.bias = true;
  m.Writer().Write(dir.File("m.gguf"));
  LoadOptions options;
  options.dtype = at::kFloat;
  const ModelWeights w = LoadWeightsFromGguf(dir.File("m.gguf"), options);
  EXPECT_TRUE(w.config.attention_bias);
  EXPECT_TRUE(
      at::equal(w.layers[0].wq, FileTensor("blk.0.attn_q.weight", {kHeads * kHeadDim, kHidden})));
  EXPECT_TRUE(at::equal(w.layers[0].bk, FileTensor("blk.0.attn_k.bias", {kKvHeads * kHeadDim})));
}

TEST(GgufWeightsTest, Errors) {
  TempDir dir;
  LoadOptions options;
  TinyGguf m;
  m.tied = false;
  // Writes the tiny model with tensor `bad_name` replaced (or dropped when `bytes` is empty).
  auto write_with = [&](const std::string& bad_name, GgmlType type, std::vector<int64_t> ne,
                        std::vector<uint8_t> bytes) {
    GgufWriter out;
    out.AddString("general.architecture", "llama");
    out.AddU32("llama.context_length", 128);
    out.AddU32("llama.embedding_length", kHidden);
    out.AddU32("llama.block_count", kLayers);
    out.AddU32("llama.feed_forward_length", kFf);
    out.AddU32("llama.attention.head_count", kHeads);
    out.AddU32("llama.attention.head_count_kv", kKvHeads);
    out.AddF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    out.AddU32("llama.vocab_size", kVocab);
    for (const auto& [name, dims] : m.Tensors()) {
      if (name == bad_name) {
        if (!bytes.empty()) out.AddTensor(name, static_cast<uint32_t>(type), ne, bytes);
        continue;
      }
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      out.AddTensor(name, static_cast<uint32_t>(GgmlType::kF32), dims,
                    F32Bytes(FileValues(name, n)));
    }
    out.Write(dir.File("bad.gguf"));
  };

  write_with("blk.1.ffn_up.weight", GgmlType::kF32, {kHidden, kFf - 1},
             std::vector<uint8_t>(static_cast<size_t>(kHidden * (kFf - 1) * 4)));
  std::string msg = ErrorOf([&] { LoadWeightsFromGguf(dir.File("bad.gguf"), options); });
  ExpectContains(msg, dir.File("bad.gguf"));
  ExpectContains(msg, "tensor 'blk.1.ffn_up.weight' has shape (95, 64), expected (96, 64)");

  write_with("blk.0.attn_v.weight", GgmlType::kF32, {}, {});
  ExpectContains(ErrorOf([&] { LoadWeightsFromGguf(dir.File("bad.gguf"), options); }),
                 "missing tensor 'blk.0.attn_v.weight'");

  write_with("blk.0.ffn_gate.weight", GgmlType::kQ8_1, {kHidden, kFf},
             std::vector<uint8_t>(static_cast<size_t>(36 * 2 * kFf)));
  ExpectContains(ErrorOf([&] { LoadWeightsFromGguf(dir.File("bad.gguf"), options); }),
                 "tensor 'blk.0.ffn_gate.weight' has type Q8_1, which sift cannot dequantise");

  ExpectContains(ErrorOf([&] { LoadWeights(dir.File("absent.gguf"), options); }),
                 "no such file or directory");
  GgufWriter::WriteFile(dir.File("x.safetensors"), {});
  ExpectContains(ErrorOf([&] { LoadWeights(dir.File("x.safetensors"), options); }),
                 "pass its directory");
}

}  // namespace
}  // namespace sift
