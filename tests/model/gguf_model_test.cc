// Pins the real model file ($SIFT_MODEL, SmolLM2-135M-Instruct.Q4_1.gguf; skipped when unset): its
// metadata, tensor table and per-type counts as actually read (GGUF keys as in ggml docs/gguf.md;
// SmolLM2-135M's published configuration), and LoadWeightsFromGguf's shapes and q/k un-permutation
// against raw dequantised rows.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sift/ggml_types.h"
#include "sift/gguf.h"
#include "sift/model_config.h"
#include "sift/weights.h"
#include "support/model_path.h"

namespace sift {
namespace {

using ::sift::testing::ModelPath;

// The GGUF file and its weights, loaded once for the whole suite (loading takes a second or two).
class GgufModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (ModelPath().empty()) return;
    file_ = GgufFile::Open(ModelPath()).release();
    LoadOptions options;
    options.dtype = at::kFloat;  // exact comparison with DequantizeRow below
    const auto start = std::chrono::steady_clock::now();
    weights_ = new ModelWeights(LoadWeightsFromGguf(ModelPath(), options));
    load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  static void TearDownTestSuite() {
    delete weights_;
    delete file_;
    weights_ = nullptr;
    file_ = nullptr;
  }

  // Raw GGUF row `row` of a tensor, dequantised without the loader.
  static std::vector<float> RawRow(const GgufTensorInfo& t, int64_t row) {
    std::vector<float> out(static_cast<size_t>(t.ne[0]));
    const uint64_t row_bytes = GgmlRowBytes(t.type, t.ne[0]);
    DequantizeRow(t.type, t.data + static_cast<uint64_t>(row) * row_bytes, out.data(), t.ne[0]);
    return out;
  }

  static GgufFile* file_;
  static ModelWeights* weights_;
  static double load_seconds_;
};

GgufFile* GgufModelTest::file_ = nullptr;
ModelWeights* GgufModelTest::weights_ = nullptr;
double GgufModelTest::load_seconds_ = 0;

TEST_F(GgufModelTest, Metadata) {
  SIFT_SKIP_WITHOUT_MODEL();
  const GgufFile& f = *file_;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_FALSE(f.Has("general.alignment"));
  EXPECT_EQ(f.file_size(), 98362432u);
  EXPECT_EQ(f.GetString("general.architecture"), "llama");
  EXPECT_EQ(f.GetInt("general.file_type"), 3);  // MOSTLY_Q4_1
  EXPECT_EQ(f.GetInt("general.quantization_version"), 2);
  EXPECT_EQ(f.GetInt("llama.context_length"), 8192);
  EXPECT_EQ(f.GetInt("llama.embedding_length"), 576);
  EXPECT_EQ(f.GetInt("llama.block_count"), 30);
  EXPECT_EQ(f.GetInt("llama.feed_forward_length"), 1536);
  EXPECT_EQ(f.GetInt("llama.attention.head_count"), 9);
  EXPECT_EQ(f.GetInt("llama.attention.head_count_kv"), 3);
  EXPECT_EQ(f.GetFloat("llama.rope.freq_base"), 100000.0);
  EXPECT_FLOAT_EQ(static_cast<float>(f.GetFloat("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(f.GetInt("llama.rope.dimension_count"), 64);
  EXPECT_EQ(f.GetInt("llama.vocab_size"), 49152);
  EXPECT_EQ(f.GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.GetString("tokenizer.ggml.pre"), "smollm");
  EXPECT_EQ(f.Find("tokenizer.ggml.tokens")->array_size(), 49152u);
  EXPECT_EQ(f.Find("tokenizer.ggml.merges")->array_size(), 48900u);
  EXPECT_EQ(f.GetInt("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(f.GetInt("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_FALSE(f.GetBool("tokenizer.ggml.add_bos_token", true));

  const ModelConfig c = ModelConfig::FromGguf(f);
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.context_length, 8192);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.rope_theta, 100000.0);
  EXPECT_EQ(c.rope_scaling.type, "none");
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.attention_bias);
  // 134,515,008 parameters in all (the figure published for SmolLM2-135M).
  EXPECT_EQ(c.num_layers * (c.LinearParamsPerLayer() + 2 * c.hidden_size) +
                c.vocab_size * c.hidden_size + c.hidden_size,
            134515008);
}

TEST_F(GgufModelTest, TensorTable) {
  SIFT_SKIP_WITHOUT_MODEL();
  const GgufFile& f = *file_;
  EXPECT_EQ(f.tensors().size(), 272u);
  std::map<std::string, int> counts;
  uint64_t data_bytes = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    ++counts[GgmlTypeName(t.type)];
    data_bytes += t.nbytes;
  }
  // Pinned from the file as read (llama-quantize's choice for Q4_1: F32 norms, Q8_0 token_embd
  // (Q6_K falls back because 576 is not a multiple of 256), Q4_1 elsewhere).
  EXPECT_EQ(counts, (std::map<std::string, int>{{"F32", 61}, {"Q4_1", 210}, {"Q8_0", 1}}));
  EXPECT_EQ(data_bytes, 96576768u);
  EXPECT_EQ(f.file_size() - f.data_offset(), 96576768u);  // no inter-tensor padding needed

  EXPECT_EQ(f.FindTensor("output.weight"), nullptr);
  const GgufTensorInfo* embd = f.FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, GgmlType::kQ8_0);
  EXPECT_EQ(embd->ne, (std::vector<int64_t>{576, 49152}));
  const GgufTensorInfo* q = f.FindTensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, GgmlType::kQ4_1);
  EXPECT_EQ(q->torch_shape(), (std::vector<int64_t>{576, 576}));
  EXPECT_EQ(f.FindTensor("blk.29.attn_k.weight")->torch_shape(), (std::vector<int64_t>{192, 576}));
  EXPECT_EQ(f.FindTensor("blk.29.ffn_down.weight")->torch_shape(),
            (std::vector<int64_t>{576, 1536}));
  EXPECT_EQ(f.FindTensor("output_norm.weight")->type, GgmlType::kF32);
}

TEST_F(GgufModelTest, WeightShapesAndTiedHead) {
  SIFT_SKIP_WITHOUT_MODEL();
  const ModelWeights& w = *weights_;
  std::printf("[ info ] LoadWeightsFromGguf (fp32, %d threads): %.2f s\n", at::get_num_threads(),
              load_seconds_);
  EXPECT_EQ(w.embed.sizes().vec(), (std::vector<int64_t>{49152, 576}));
  EXPECT_TRUE(w.lm_head.is_same(w.embed));
  EXPECT_EQ(w.final_norm.sizes().vec(), (std::vector<int64_t>{576}));
  ASSERT_EQ(w.layers.size(), 30u);
  for (const LayerWeights& l : w.layers) {
    EXPECT_EQ(l.attn_norm.sizes().vec(), (std::vector<int64_t>{576}));
    EXPECT_EQ(l.wq.sizes().vec(), (std::vector<int64_t>{576, 576}));
    EXPECT_EQ(l.wk.sizes().vec(), (std::vector<int64_t>{192, 576}));
    EXPECT_EQ(l.wv.sizes().vec(), (std::vector<int64_t>{192, 576}));
    EXPECT_EQ(l.wo.sizes().vec(), (std::vector<int64_t>{576, 576}));
    EXPECT_EQ(l.w_gate.sizes().vec(), (std::vector<int64_t>{1536, 576}));
    EXPECT_EQ(l.w_up.sizes().vec(), (std::vector<int64_t>{1536, 576}));
    EXPECT_EQ(l.w_down.sizes().vec(), (std::vector<int64_t>{576, 1536}));
    EXPECT_FALSE(l.bq.defined());
  }
  // fp32: 134,515,008 parameters, the tied head counted once.
  EXPECT_EQ(w.Bytes(), 134515008ll * 4);
  // Norm weights of a trained model are not all zero or one.
  EXPECT_GT(w.final_norm.abs().max().item<float>(), 0.1f);
}

// HF row j*32 + i of a head equals GGUF row 2i + j (llama.cpp convert_hf_to_gguf.py,
// LlamaModel.permute), compared with rows dequantised straight from the file.
TEST_F(GgufModelTest, QkRowsAreUnpermuted) {
  SIFT_SKIP_WITHOUT_MODEL();
  const int64_t hd = 64;
  for (int layer : {0, 17, 29}) {
    for (const auto& [suffix, heads] : {std::pair<std::string, int64_t>{"attn_q.weight", 9},
                                        std::pair<std::string, int64_t>{"attn_k.weight", 3}}) {
      const std::string name = "blk." + std::to_string(layer) + "." + suffix;
      SCOPED_TRACE(name);
      const GgufTensorInfo& t = *file_->FindTensor(name);
      const LayerWeights& l = weights_->layers[static_cast<size_t>(layer)];
      const at::Tensor& w = suffix == "attn_q.weight" ? l.wq : l.wk;
      int64_t moved = 0;
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < hd / 2; ++i) {
          for (int64_t j = 0; j < 2; ++j) {
            const int64_t gguf_row = h * hd + 2 * i + j;
            const int64_t hf_row = h * hd + j * (hd / 2) + i;
            const std::vector<float> raw = RawRow(t, gguf_row);
            const at::Tensor expected = at::tensor(raw, at::kFloat);
            ASSERT_TRUE(at::equal(w[hf_row], expected)) << "GGUF row " << gguf_row;
            moved += gguf_row != hf_row;
          }
        }
      }
      EXPECT_EQ(moved, heads * (hd - 2));  // only rows 0 and 63 of each head stay in place
    }
  }
  // v is not permuted.
  const GgufTensorInfo& v = *file_->FindTensor("blk.3.attn_v.weight");
  for (int64_t r : {0, 1, 63, 191}) {
    EXPECT_TRUE(at::equal(weights_->layers[3].wv[r], at::tensor(RawRow(v, r), at::kFloat)));
  }
}

TEST(GgufModelLoadTest, Bf16LoadIsFast) {
  SIFT_SKIP_WITHOUT_MODEL();
  LoadOptions options;  // bf16, the default
  const auto start = std::chrono::steady_clock::now();
  const ModelWeights w = LoadWeights(ModelPath(), options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ info ] LoadWeights (bf16, %d threads): %.2f s, %.1f MiB\n", at::get_num_threads(),
              seconds, static_cast<double>(w.Bytes()) / 1048576.0);
  EXPECT_EQ(w.layers[0].wq.scalar_type(), at::kBFloat16);
  EXPECT_EQ(w.layers[0].attn_norm.scalar_type(), at::kFloat);
  EXPECT_LT(seconds, 20.0);  // generous: a few seconds on 2 shared cores
}

}  // namespace
}  // namespace sift
