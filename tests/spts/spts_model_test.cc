// SPTS on the real model ($SIFT_MODEL; skipped without it): proxy shapes from a small
// calibration run and the file round trip; a full-size proxy reproduces the FFN's update norms;
// skipped rows pass a skip layer bit for bit; active-set sizes per stage and pruning at stage
// ends (also in the per-layer caches); budgets that cover the prompt reproduce the full model
// exactly; the stage's parameters and its pipeline run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include "prefill_skip_stage.h"
#include "scores/score_ops.h"
#include "sift/error.h"
#include "sift/generate.h"
#include "sift/model.h"
#include "spts_calibration.h"
#include "spts_layer.h"
#include "spts_prefill.h"
#include "spts_proxy.h"

namespace sift::plugins {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<const Model> TestModel() {
  static std::shared_ptr<const Model> model = []() -> std::shared_ptr<const Model> {
    const char* path = std::getenv("SIFT_MODEL");
    if (path == nullptr || *path == '\0') return nullptr;
    return Model::Load(path, ModelOptions());
  }();
  return model;
}

#define REQUIRE_MODEL()                                                                  \
  do {                                                                                   \
    if (TestModel() == nullptr) GTEST_SKIP() << "set SIFT_MODEL to a GGUF model to run"; \
  } while (0)

// A small proxy calibrated once per binary on the repository's docs (d_low 64, rank 16).
const SptsProxy& SmallProxy() {
  static const SptsProxy proxy = [] {
    spts::CalibrationOptions o;
    o.d_low = 64;
    o.rank = 16;
    o.sequences = 2;
    o.seq_len = 48;
    std::vector<std::string> files;
    auto seqs =
        spts::CalibrationSequences(*TestModel(), std::string(SIFT_SOURCE_DIR) + "/docs", o, &files);
    return spts::Calibrate(*TestModel(), seqs, o, {{"folder", "docs"}});
  }();
  return proxy;
}

// A ~200-token chat prompt with a fact in the middle.
std::vector<TokenId> Prompt(const Model& model) {
  std::string text = "<|im_start|>user\n";
  for (int i = 0; i < 4; ++i) {
    text +=
        "The lighthouse keeper counted ships every evening and wrote their names in a "
        "leather book. ";
  }
  text += "The secret word is apricot. ";
  for (int i = 0; i < 4; ++i) {
    text += "Storms came from the west in autumn and the lamp burned all night long. ";
  }
  text += "What is the secret word?<|im_end|>\n<|im_start|>assistant\n";
  return model.tokenizer().Encode(text, true);
}

SptsSettings SmallBudgets() {
  SptsSettings s;
  s.budgets = {120, 90, 60, 30};
  s.prune_margin = 10;
  return s;
}

TEST(SptsProxyTest, ShapesFromASmallCalibrationAndRoundTrip) {
  REQUIRE_MODEL();
  const ModelConfig& c = TestModel()->config();
  const SptsProxy& proxy = SmallProxy();
  ASSERT_EQ(static_cast<int64_t>(proxy.layers.size()), c.num_layers);
  EXPECT_EQ(proxy.d_low(), 64);
  EXPECT_EQ(proxy.rank(), 16);
  for (const SptsLayerProxy& p : proxy.layers) {
    ASSERT_EQ(p.channels.sizes(), (at::IntArrayRef{64}));
    EXPECT_TRUE(at::all(p.channels.slice(0, 1).gt(p.channels.slice(0, 0, 63))).item<bool>());
    EXPECT_GE(p.channels.min().item<int64_t>(), 0);
    EXPECT_LT(p.channels.max().item<int64_t>(), c.intermediate_size);
    for (const at::Tensor* u : {&p.gate_u, &p.up_u, &p.down_u}) {
      EXPECT_EQ(u->sizes(), (at::IntArrayRef{c.hidden_size, 16}));
    }
    for (const at::Tensor* v : {&p.gate_v, &p.up_v, &p.down_v}) {
      EXPECT_EQ(v->sizes(), (at::IntArrayRef{16, 64}));
    }
  }
  EXPECT_EQ(proxy.header["model"]["num_layers"], c.num_layers);
  EXPECT_EQ(proxy.header["calibration"]["tokens"], 96);
  EXPECT_NO_THROW(proxy.CheckModel(c, "mem"));

  const fs::path path = fs::temp_directory_path() / ("spts-proxy-" + std::to_string(::getpid()));
  proxy.Save(path.string());
  const SptsProxy back = SptsProxy::Load(path.string());
  ASSERT_EQ(back.layers.size(), proxy.layers.size());
  EXPECT_TRUE(at::equal(back.layers[7].channels, proxy.layers[7].channels));
  EXPECT_TRUE(at::equal(back.layers[29].down_v, proxy.layers[29].down_v));
  EXPECT_EQ(back.header["rho"], 0.2);
  at::Tensor h = at::randn({5, c.hidden_size});
  EXPECT_TRUE(at::equal(back.Norms(3, h), proxy.Norms(3, h)));
  EXPECT_EQ(proxy.Norms(3, h).sizes(), (at::IntArrayRef{5}));
  fs::remove(path);
}

TEST(SptsProxyTest, FullSizeProxyReproducesFfnNorms) {
  REQUIRE_MODEL();
  const Model& model = *TestModel();
  const ModelConfig& c = model.config();
  // FFN inputs of layer 20 for a real prompt.
  std::vector<TokenId> ids = Prompt(model);
  at::Tensor x = model.Embed(at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong));
  at::Tensor pos = at::arange(x.size(0), at::kLong);
  x = model.RunLayers(0, 20, x, pos, nullptr);
  at::Tensor h = model.FfnNorm(20, x);
  spts::CalibrationOptions o;
  o.d_low = c.intermediate_size;
  o.rank = c.hidden_size;  // no reduction: f must equal the FFN
  SptsProxy proxy;
  proxy.layers.resize(c.num_layers);
  proxy.layers[20] = spts::LayerProxy(model.weights().layers[20], h, o);
  at::Tensor expected = model.Ffn(20, h).norm(2, {1});
  at::Tensor got = proxy.Norms(20, h);
  EXPECT_TRUE(at::allclose(got, expected, /*rtol=*/0.03, /*atol=*/0.02))
      << (got - expected).abs().max().item<float>();
}

TEST(SptsLayerTest, SkippedRowsAreBitIdentical) {
  REQUIRE_MODEL();
  const Model& model = *TestModel();
  std::vector<TokenId> ids = Prompt(model);
  const int64_t n = static_cast<int64_t>(ids.size());
  at::Tensor pos = at::arange(n, at::kLong);
  at::Tensor x = model.Embed(at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong));
  x = model.RunLayers(0, 10, x, pos, nullptr);
  const at::Tensor input = x.clone();
  KvCache cache = model.NewCache();
  SptsLayerOptions o;
  o.active = 40;
  o.proxy = &SmallProxy();
  SptsLayerResult r = SptsSkipLayer(model, 10, x, pos, cache, o);

  ASSERT_EQ(r.attn_active.size(0), 40);
  ASSERT_EQ(r.ffn_active.size(0), 40);
  EXPECT_EQ(r.attn_active[39].item<int64_t>(), n - 1);  // the last token is always active
  EXPECT_EQ(r.ffn_active[39].item<int64_t>(), n - 1);
  EXPECT_NEAR(r.scores.sum().item<float>(), 1.0f, 1e-4);  // a mean of softmax rows
  // Only the active rows' k/v are cached, at their original positions.
  ASSERT_EQ(cache.size(10), 40);
  EXPECT_TRUE(at::equal(cache.Positions(10)[0], r.attn_active));
  EXPECT_EQ(cache.size(11), 0);

  std::set<int64_t> touched;
  for (int64_t i = 0; i < 40; ++i) {
    touched.insert(r.attn_active[i].item<int64_t>());
    touched.insert(r.ffn_active[i].item<int64_t>());
  }
  int64_t skipped = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (touched.count(i)) {
      EXPECT_FALSE(at::equal(x[i], input[i])) << "active row " << i << " was not updated";
    } else {
      EXPECT_TRUE(at::equal(x[i], input[i])) << "skipped row " << i << " changed";
      ++skipped;
    }
  }
  EXPECT_GE(skipped, n - 80);
  EXPECT_GT(skipped, 0);
}

TEST(SptsPrefillTest, ActiveSetsPerStageAndPruningAtStageEnds) {
  REQUIRE_MODEL();
  const Model& model = *TestModel();
  std::vector<TokenId> ids = Prompt(model);
  const int64_t n = static_cast<int64_t>(ids.size());
  ASSERT_GT(n, 130);  // stage 0 (120 active) must skip
  std::vector<SptsLayerTrace> trace;
  SptsPrefillOptions o;
  o.settings = SmallBudgets();
  o.proxy = &SmallProxy();
  o.trace = &trace;
  KvCache cache = model.NewCache();
  at::Tensor logits;
  ASSERT_TRUE(SptsPrefill(model, ids, o, cache, &logits));
  ASSERT_EQ(logits.sizes(), (at::IntArrayRef{model.config().vocab_size}));
  ASSERT_EQ(trace.size(), 30u);

  const int64_t expected_active[30] = {n,   n,   n,   n,  n,  n,  n,  n,  n,  120,
                                       120, 120, 120, 90, 90, 90, 90, 90, 60, 60,
                                       60,  60,  60,  30, 30, 30, 30, 20, 20, 20};
  const int64_t expected_candidates[30] = {n,  n,  n,  n,   n,   n,   n,   n,   n,  n,
                                           n,  n,  n,  110, 110, 110, 110, 110, 80, 80,
                                           80, 80, 80, 50,  50,  50,  50,  20,  20, 20};
  for (int64_t l = 0; l < 30; ++l) {
    const SptsLayerTrace& t = trace[l];
    EXPECT_EQ(t.candidates.size(0), expected_candidates[l]) << "layer " << l;
    EXPECT_EQ(t.attn_active.size(0), expected_active[l]) << "layer " << l;
    EXPECT_EQ(t.ffn_active.size(0), expected_active[l]) << "layer " << l;
    EXPECT_EQ(cache.size(l), expected_active[l]) << "layer " << l;
    // Cached entries are the attention-active tokens at their original positions.
    EXPECT_TRUE(at::equal(cache.Positions(l)[0], t.attn_active)) << "layer " << l;
    EXPECT_EQ(t.attn_active[-1].item<int64_t>(), n - 1);
  }
  // Pruning at stage ends: the next stage's candidates are the top N_{s+1} of the stage's last
  // S^MHA (the last token forced in), in original order.
  for (int64_t end : {12, 17, 22, 26}) {
    at::Tensor s = trace[end].scores.clone();
    s[-1] = std::numeric_limits<float>::infinity();
    at::Tensor keep =
        trace[end].candidates.index_select(0, TopKSorted(s, trace[end].plan.prune_to));
    EXPECT_TRUE(at::equal(trace[end + 1].candidates, keep)) << "stage end " << end;
  }
  // Pruned tokens never come back.
  for (int64_t l = 13; l < 30; ++l) {
    std::set<int64_t> prev;
    for (int64_t i = 0; i < trace[l - 1].candidates.size(0); ++i) {
      prev.insert(trace[l - 1].candidates[i].item<int64_t>());
    }
    for (int64_t i = 0; i < trace[l].candidates.size(0); ++i) {
      EXPECT_TRUE(prev.count(trace[l].candidates[i].item<int64_t>())) << "layer " << l;
    }
  }
}

TEST(SptsPrefillTest, WithoutMsdpEveryLayerSeesTheWholePrompt) {
  REQUIRE_MODEL();
  const Model& model = *TestModel();
  std::vector<TokenId> ids = Prompt(model);
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<SptsLayerTrace> trace;
  SptsPrefillOptions o;
  o.settings = SmallBudgets();
  o.settings.msdp = false;
  o.trace = &trace;  // no proxy: PAP only, FFN on every candidate
  KvCache cache = model.NewCache();
  at::Tensor logits;
  ASSERT_TRUE(SptsPrefill(model, ids, o, cache, &logits));
  for (int64_t l = 0; l < 30; ++l) {
    EXPECT_EQ(trace[l].candidates.size(0), n);
    EXPECT_EQ(trace[l].ffn_active.size(0), n);
  }
  EXPECT_EQ(cache.size(9), 120);
  EXPECT_EQ(cache.size(29), 20);
}

TEST(SptsPrefillTest, BudgetsCoveringThePromptEqualTheFullModel) {
  REQUIRE_MODEL();
  const Model& model = *TestModel();
  std::vector<TokenId> ids = Prompt(model);
  const int64_t n = static_cast<int64_t>(ids.size());
  SptsPrefillOptions o;
  o.settings.budgets = {4096, 4096, 4096, 4096};
  o.settings.prune_margin = 0;
  o.proxy = &SmallProxy();
  KvCache cache = model.NewCache();
  at::Tensor logits;
  ASSERT_TRUE(SptsPrefill(model, ids, o, cache, &logits));
  KvCache full = model.NewCache();
  at::Tensor expected = model.Forward(ids, 0, full);
  // Bit-equal where every product runs on one path whatever its rows. On CPUs without hardware
  // bf16 (ModelOptions::upcast_min_rows), products of up to Model::native_max_rows() rows read
  // the GGUF blocks and larger ones run in fp32 from the bf16 copy, and SPTS multiplies other
  // row counts (and by the bf16 copy) than the full forward: the two agree to bf16 precision
  // there (measured on an AVX2-only AMD EPYC: logits within 0.29) and give the same greedy
  // tokens (checked below).
  const bool exact = !model.UpcastsToFp32(int64_t{1} << 20);
  auto same = [&](const at::Tensor& a, const at::Tensor& b, double atol) {
    return exact ? at::equal(a, b) : at::allclose(a.to(at::kFloat), b.to(at::kFloat), 2e-2, atol);
  };
  EXPECT_TRUE(same(logits, expected, 0.5)) << (logits - expected).abs().max().item<float>();
  for (int64_t l = 0; l < 30; ++l) {
    ASSERT_EQ(cache.size(l), n);
    EXPECT_TRUE(same(cache.Keys(l), full.Keys(l), 0.15)) << l;
    EXPECT_TRUE(same(cache.Values(l), full.Values(l), 0.5))
        << l << " " << (cache.Values(l) - full.Values(l)).abs().max().item<float>();
  }
  GenerationOptions g;
  g.max_tokens = 6;
  EXPECT_EQ(Generate(model, cache, logits, n, g).tokens,
            Generate(model, full, expected, n, g).tokens);
}

TEST(PrefillSkipStageTest, ParametersAreChecked) {
  REQUIRE_MODEL();
  const Model& model = *TestModel();
  auto make = [&](const std::string& key, nlohmann::json value) {
    StageParams p("spts.toml", "prefill", "prefill_skip");
    p.Set(key, std::move(value), "spts.toml:3");
    PrefillSkipStage stage(p, model);
    return p.UnreadKeys().size();
  };
  EXPECT_EQ(make("budgets", {100, 50, 20, 10}), 0u);
  EXPECT_THROW(make("budgets", {100, 50}), Error);  // four stage ends
  EXPECT_THROW(make("stage_ends", {12, 10, 22, 26}), Error);
  EXPECT_THROW(make("budget_mode", "ratio"), Error);
  try {
    make("proxy", "/nonexistent/x.spts.bin");
    ADD_FAILURE() << "a missing proxy file passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("proxy"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sift-spts-calibrate"), std::string::npos) << e.what();
  }
  EXPECT_EQ(make("ltp", false), 0u);
  // Relative proxy paths are relative to the model's folder; the default sits next to it.
  const std::string dir = fs::path(model.path()).parent_path().string();
  EXPECT_EQ(PrefillSkipStage::ResolveProxyPath("p.bin", model), dir + "/p.bin");
  EXPECT_EQ(PrefillSkipStage::ResolveProxyPath("/a/p.bin", model), "/a/p.bin");
  const std::string def = PrefillSkipStage::ResolveProxyPath("", model);
  EXPECT_EQ(def.substr(def.size() - 9), ".spts.bin");
  EXPECT_EQ(def.find(".gguf"), std::string::npos);
}

TEST(PrefillSkipStageTest, BuiltInScheduleFitsAModelOfAnotherDepth) {
  // Without per-model settings the schedule is the paper's scaled to the model's layers: a
  // 24-layer model gets one that validates (SmolLM2's 30-layer stage ends, up to 26, do not),
  // so the plugin passes siftd's load check on that model too.
  const char* path = std::getenv("SIFT_MODEL_QWEN");
  if (path == nullptr || *path == '\0') {
    GTEST_SKIP()
        << "SIFT_MODEL_QWEN is not set (fetch the model with: bash tools/setup.sh model qwen)";
  }
  const std::shared_ptr<const Model> qwen = Model::Load(path, ModelOptions());
  ASSERT_EQ(qwen->config().num_layers, 24);
  StageParams defaults("spts.toml", "prefill", "prefill_skip");
  EXPECT_NO_THROW(PrefillSkipStage(defaults, *qwen));
  StageParams smollm2_ends("spts.toml", "prefill", "prefill_skip");
  smollm2_ends.Set("stage_ends", {12, 17, 22, 26}, "spts.toml:3");
  EXPECT_THROW(PrefillSkipStage(smollm2_ends, *qwen), Error);
}

}  // namespace
}  // namespace sift::plugins
