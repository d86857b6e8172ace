// sift::DecodePool on the real model ($SIFT_MODEL; skipped when unset): its steps (the operators a
// CUDA graph captures, run eagerly here) against Model::DecodeStep on each request's own cache,
// with requests of different lengths and per-layer lengths joining and leaving, padded buckets,
// a pool that grows, the caches it hands back, its errors, and the BatchEngine's greedy answers
// through a pool against those without one. On a CUDA machine the same comparison runs with the
// captured graphs and the flash varlen attention.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "sift/batch_engine.h"
#include "sift/decode_pool.h"
#include "sift/error.h"
#include "sift/generate.h"
#include "sift/model.h"
#include "support/model_path.h"

namespace sift {
namespace {

using ::sift::testing::ModelPath;

const char* const kPrompts[] = {
    "The capital of France is",
    "Once upon a time, in a small village near the mountains, there lived an old clockmaker who",
    "def fibonacci(n):\n    ",
    "List three prime numbers: 2, 3,",
};

// Per-layer lengths that differ, as after PyramidKV or SnapKV.
void Compress(KvCache& cache) {
  for (int64_t l = 0; l < cache.num_layers(); ++l) {
    const int64_t n = cache.size(l);
    cache.Select(l, l % 2 ? at::arange(0, n, 2, at::kLong) : at::arange(n / 2, n, at::kLong));
  }
}

// A prompt prefilled twice: one cache for Model::DecodeStep, one for the pool.
struct Request {
  std::unique_ptr<KvCache> own, pooled;
  TokenId next = 0;
  int64_t position = 0;
};

Request Prefill(const Model& model, const std::string& text, bool compress) {
  Request r;
  const std::vector<TokenId> ids = model.tokenizer().Encode(text);
  r.own = std::make_unique<KvCache>(model.NewCache());
  const at::Tensor logits = model.Forward(ids, 0, *r.own);
  if (compress) Compress(*r.own);
  r.pooled = std::make_unique<KvCache>(r.own->Clone());
  r.next = static_cast<TokenId>(logits.argmax().item<int64_t>());
  r.position = static_cast<int64_t>(ids.size());
  return r;
}

std::shared_ptr<const Model> LoadModel(at::ScalarType dtype, at::Device device) {
  ModelOptions options;
  options.dtype = dtype;
  options.device = device;
  options.cpu_kernels = false;  // LibTorch operators: what the pool and a GPU run
  return Model::Load(ModelPath(), options);
}

// Steps `requests` greedily through the pool and through DecodeStep side by side: request i
// joins at step join[i] and leaves after leave[i] steps (released: its cache must then equal
// the one DecodeStep appended to, within `key_tolerance`). Returns the largest logit difference.
double CompareSteps(const Model& model, DecodePool& pool, std::vector<Request>& requests,
                    const std::vector<int>& join, const std::vector<int>& leave, int steps,
                    double key_tolerance) {
  double worst = 0;
  std::vector<int> done(requests.size(), 0);
  for (int step = 0; step < steps; ++step) {
    std::vector<TokenId> ids;
    std::vector<int64_t> positions;
    std::vector<KvCache*> own, pooled;
    std::vector<size_t> which;
    for (size_t i = 0; i < requests.size(); ++i) {
      Request& r = requests[i];
      if (step == join[i]) pool.Admit(*r.pooled, leave[i]);
      if (step < join[i] || done[i] >= leave[i]) continue;
      ids.push_back(r.next);
      positions.push_back(r.position);
      own.push_back(r.own.get());
      pooled.push_back(r.pooled.get());
      which.push_back(i);
    }
    if (ids.empty()) continue;
    const at::Tensor expected = model.DecodeStep(ids, positions, own).to(at::kCPU);
    const at::Tensor got = pool.Step(ids, positions, pooled).to(at::kCPU);
    EXPECT_EQ(got.sizes(), expected.sizes());
    worst = std::max(worst, (got - expected).abs().max().item<double>());
    for (size_t row = 0; row < which.size(); ++row) {
      Request& r = requests[which[row]];
      r.next = static_cast<TokenId>(expected[static_cast<int64_t>(row)].argmax().item<int64_t>());
      ++r.position;
      if (++done[which[row]] == leave[which[row]]) {
        pool.Release(*r.pooled);
        for (int64_t l = 0; l < r.own->num_layers(); ++l) {
          EXPECT_EQ(r.pooled->size(l), r.own->size(l)) << "layer " << l;
          if (r.pooled->size(l) != r.own->size(l)) continue;
          EXPECT_TRUE(at::allclose(r.pooled->Keys(l).to(at::kFloat), r.own->Keys(l).to(at::kFloat),
                                   key_tolerance, key_tolerance))
              << "layer " << l;
          EXPECT_TRUE(at::equal(r.pooled->Positions(l), r.own->Positions(l))) << "layer " << l;
        }
      }
    }
  }
  return worst;
}

class DecodePoolTest : public ::testing::Test {
 protected:
  void SetUp() override { SIFT_SKIP_WITHOUT_MODEL(); }
};

// Requests of different lengths (one with per-layer lengths) join at steps 0, 0, 2 and 4 and
// leave after 3 to 9 steps: buckets of 1, 2 and 4 rows (3 rows run padded), and a pool that
// starts at 16 entries grows while regions are live.
TEST_F(DecodePoolTest, StepsEqualDecodeStepOnOwnCaches) {
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(DtypeName(dtype));
    const std::shared_ptr<const Model> model = LoadModel(dtype, at::kCPU);
    DecodePoolOptions options;
    options.initial_entries = 16;
    DecodePool pool(*model, options);
    EXPECT_NE(pool.Describe().find("eager"), std::string::npos) << pool.Describe();
    std::vector<Request> requests;
    for (int i = 0; i < 4; ++i) requests.push_back(Prefill(*model, kPrompts[i], i == 1));
    // fp32: the same values up to the attention's summation order. bf16: DecodeStep's attention
    // multiplies in bf16 and the pool's gathered one in fp32, and every later layer's k/v is
    // rounded to bf16 (one bf16 step at 1.0 is 0.008), so differences grow to a few tenths of a
    // logit, as bf16 against fp32 (docs/engine.md).
    const bool fp32 = dtype == at::kFloat;
    const double worst =
        CompareSteps(*model, pool, requests, {0, 0, 2, 4}, {9, 3, 6, 5}, 10, fp32 ? 1e-4 : 0.1);
    EXPECT_LT(worst, fp32 ? 1e-3 : 0.5) << "largest logit difference";
    EXPECT_GT(pool.capacity(0), 16) << "the pool never grew";
    for (int64_t l = 0; l < model->config().num_layers; ++l) EXPECT_EQ(pool.in_use(l), 0);
  }
}

// A cache whose layers hold from 1 to 13 entries, as PyramidKV leaves them: each layer's region
// is as long as that layer plus the new tokens (what the daemon's KV budget charges), not as
// long as the longest layer. A second request admitted after it starts at a different offset in
// each layer; the steps of both still equal DecodeStep's.
TEST_F(DecodePoolTest, RegionsAreAsLongAsEachLayer) {
  const std::shared_ptr<const Model> model = LoadModel(at::kFloat, at::kCPU);
  DecodePoolOptions options;
  options.initial_entries = 64;
  DecodePool pool(*model, options);
  std::vector<Request> requests;
  requests.push_back(Prefill(*model, kPrompts[1], false));
  requests.push_back(Prefill(*model, kPrompts[0], false));
  KvCache& own = *requests[0].own;
  const int64_t prompt = own.size(0), second = requests[1].own->size(0);
  ASSERT_GE(prompt, 13);
  std::vector<int64_t> held;
  for (int64_t l = 0; l < own.num_layers(); ++l) {
    held.push_back(1 + (l % 4) * 4);  // 1, 5, 9, 13, 1, ...
    own.Select(l, at::arange(prompt - held.back(), prompt, at::kLong));
  }
  *requests[0].pooled = own.Clone();
  const int64_t new_tokens = 3;
  pool.Admit(*requests[0].pooled, new_tokens);
  pool.Admit(*requests[1].pooled, new_tokens);
  for (int64_t l = 0; l < own.num_layers(); ++l) {
    EXPECT_EQ(pool.in_use(l), held[static_cast<size_t>(l)] + second + 2 * new_tokens)
        << "layer " << l;
  }
  for (Request& r : requests) {
    pool.Release(*r.pooled);
    *r.pooled = r.own->Clone();
  }
  for (int64_t l = 0; l < own.num_layers(); ++l) EXPECT_EQ(pool.in_use(l), 0) << "layer " << l;
  EXPECT_LT(
      CompareSteps(*model, pool, requests, {0, 0}, {new_tokens, new_tokens}, new_tokens, 1e-4),
      1e-3);
}

TEST_F(DecodePoolTest, MisuseIsAClearError) {
  const std::shared_ptr<const Model> model = LoadModel(at::kFloat, at::kCPU);
  DecodePool pool(*model);
  Request r = Prefill(*model, kPrompts[0], false);
  EXPECT_THROW(pool.Step({r.next}, {r.position}, {r.pooled.get()}), Error);  // not admitted
  const int64_t before = r.pooled->size(0);
  pool.Admit(*r.pooled, 1);
  EXPECT_EQ(r.pooled->size(0), 0) << "the entries moved into the pool";
  EXPECT_THROW(pool.Admit(*r.pooled, 1), Error);  // twice
  pool.Step({r.next}, {r.position}, {r.pooled.get()});
  EXPECT_THROW(pool.Step({r.next}, {r.position + 1}, {r.pooled.get()}), Error);  // region full
  EXPECT_THROW(pool.Step({}, {}, {}), Error);
  pool.Release(*r.pooled);
  EXPECT_EQ(r.pooled->size(0), before + 1) << "the one step that ran is handed back";
  EXPECT_FALSE(pool.Holds(*r.pooled));
  pool.Release(*r.pooled);  // not admitted: nothing happens

  // The host path (native weights with the CPU kernels) has buffers of its own.
  const std::shared_ptr<const Model> native = Model::Load(ModelPath(), ModelOptions{});
  EXPECT_FALSE(DecodePool::Unsupported(*native).empty());
  EXPECT_THROW(DecodePool pool2(*native), Error);
  std::string why;
  EXPECT_FALSE(DecodePool::GraphsAvailable(*model, &why));
  EXPECT_FALSE(why.empty());

  // Which batches use one: kOn wherever one runs, kAuto only where steps are graphs, kOff never.
  EXPECT_TRUE(DecodePool::Wanted(*model, DecodePoolMode::kOn, &why)) << why;
  EXPECT_TRUE(why.empty());
  EXPECT_FALSE(DecodePool::Wanted(*model, DecodePoolMode::kAuto, &why));
  EXPECT_NE(why.find("CUDA"), std::string::npos) << why;
  EXPECT_FALSE(DecodePool::Wanted(*model, DecodePoolMode::kOff, &why));
  EXPECT_EQ(why, "decode pool off");
  EXPECT_FALSE(DecodePool::Wanted(*native, DecodePoolMode::kOn, &why));
  EXPECT_EQ(why, DecodePool::Unsupported(*native));
  DecodePoolMode mode = DecodePoolMode::kOff;
  EXPECT_TRUE(ParseDecodePoolMode("on", &mode));
  EXPECT_EQ(mode, DecodePoolMode::kOn);
  EXPECT_TRUE(ParseDecodePoolMode("auto", &mode));
  EXPECT_EQ(mode, DecodePoolMode::kAuto);
  EXPECT_TRUE(ParseDecodePoolMode("off", &mode));
  EXPECT_EQ(mode, DecodePoolMode::kOff);
  EXPECT_FALSE(ParseDecodePoolMode("On", &mode));
  EXPECT_FALSE(ParseDecodePoolMode("", &mode));
  EXPECT_EQ(mode, DecodePoolMode::kOff) << "untouched on a bad value";
}

// The BatchEngine with its batch's KV in a pool (DecodePoolMode::kOn: eager steps on the CPU)
// gives every request the greedy answer it gives without one, and hands back caches that hold
// the decoded tokens.
TEST_F(DecodePoolTest, BatchEngineThroughAPoolEqualsWithout) {
  const std::shared_ptr<const Model> model = LoadModel(at::kFloat, at::kCPU);
  const int n = 4;
  auto run = [&](DecodePoolMode mode, std::vector<int64_t>* sizes) {
    BatchEngineOptions eo;
    eo.max_batch = 3;  // fewer rows than requests: one joins when another leaves
    eo.decode_pool = mode;
    BatchEngine engine(model, eo);
    std::vector<GenerationResult> results(n);
    std::vector<std::thread> threads;
    sizes->assign(n, 0);
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        const std::vector<TokenId> ids = model->tokenizer().Encode(kPrompts[i]);
        KvCache cache = model->NewCache();
        const at::Tensor first = model->Forward(ids, 0, cache);
        if (i == 1) Compress(cache);
        GenerationOptions options;
        options.max_tokens = 6 + 3 * i;
        options.ignore_eog = true;
        results[i] =
            engine.Decode(*model, cache, first, static_cast<int64_t>(ids.size()), options, {});
        (*sizes)[i] = cache.size(0);
      });
    }
    for (std::thread& t : threads) t.join();
    return results;
  };
  std::vector<int64_t> pooled_sizes, own_sizes;
  const std::vector<GenerationResult> pooled = run(DecodePoolMode::kOn, &pooled_sizes);
  const std::vector<GenerationResult> own = run(DecodePoolMode::kOff, &own_sizes);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(pooled[i].tokens, own[i].tokens) << "request " << i;
    EXPECT_EQ(pooled[i].text, own[i].text) << "request " << i;
    EXPECT_EQ(pooled_sizes[i], own_sizes[i]) << "request " << i << "'s cache";
  }
}

// On a CUDA machine: the captured graphs (and, in bf16, the flash varlen attention) against
// DecodeStep on the same GPU.
TEST_F(DecodePoolTest, CudaGraphsEqualDecodeStep) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(DtypeName(dtype));
    const std::shared_ptr<const Model> model = LoadModel(dtype, at::Device(at::kCUDA));
    std::string why;
    ASSERT_TRUE(DecodePool::GraphsAvailable(*model, &why)) << why;
    DecodePoolOptions options;
    options.initial_entries = 16;
    DecodePool pool(*model, options);
    std::vector<Request> requests;
    for (int i = 0; i < 4; ++i) requests.push_back(Prefill(*model, kPrompts[i], i == 1));
    const bool fp32 = dtype == at::kFloat;
    const double worst =
        CompareSteps(*model, pool, requests, {0, 0, 2, 4}, {9, 3, 6, 5}, 10, fp32 ? 1e-3 : 0.1);
    EXPECT_LT(worst, fp32 ? 1e-2 : 0.5) << pool.Describe();
    EXPECT_GT(pool.graphs_captured(), 0) << pool.Describe();
    std::printf("[pool] %s: %s, largest logit difference %.4g\n", DtypeName(dtype),
                pool.Describe().c_str(), worst);
  }
}

}  // namespace
}  // namespace sift
