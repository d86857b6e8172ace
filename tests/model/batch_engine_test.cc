// Continuous batching on the real model ($SIFT_MODEL; skipped when unset): Model::DecodeStep
// against one-row Forward calls, and the BatchEngine's greedy answers against sift::Generate's
// for the same caches, with requests joining and leaving mid-batch, cancelled ones, stop
// strings, compressed caches, and exclusive tasks yielding to decode steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "sift/batch_engine.h"
#include "sift/generate.h"
#include "sift/model.h"
#include "support/model_path.h"

namespace sift {
namespace {

using ::sift::testing::ModelPath;

const char* const kPrompts[] = {
    "The capital of France is",
    "Write a short poem about the sea. The sea",
    "List three prime numbers: 2, 3,",
    "Once upon a time, in a small village near the mountains, there lived an old clockmaker who",
    "def fibonacci(n):\n    ",
    "Water boils at",
};

// A prefilled prompt: its cache and the logits after its last token.
struct Prefilled {
  std::unique_ptr<KvCache> cache;
  at::Tensor logits;
  int64_t next_position = 0;
};

Prefilled Prefill(const Model& model, const std::string& text) {
  Prefilled p;
  const std::vector<TokenId> ids = model.tokenizer().Encode(text);
  p.cache = std::make_unique<KvCache>(model.NewCache());
  p.logits = model.Forward(ids, 0, *p.cache);
  p.next_position = static_cast<int64_t>(ids.size());
  return p;
}

// Keeps every other entry of the odd layers and the first half of the even ones: per-layer
// lengths differ, as after a compressing pipeline.
void Compress(KvCache& cache) {
  for (int64_t l = 0; l < cache.num_layers(); ++l) {
    const int64_t n = cache.size(l);
    at::Tensor keep =
        l % 2 ? at::arange(0, n, 2, at::kLong) : at::arange(0, (n + 1) / 2, at::kLong);
    cache.Select(l, keep);
  }
}

// Per dtype, with fp32 activations in the block products and with int8 ones
// (ModelOptions::int8_activations: the packed AVX-512 VNNI rows where the CPU has them).
class BatchEngineTest : public ::testing::TestWithParam<std::tuple<at::ScalarType, bool>> {
 protected:
  void SetUp() override {
    SIFT_SKIP_WITHOUT_MODEL();
    ModelOptions options;
    options.dtype = std::get<0>(GetParam());
    options.int8_activations = std::get<1>(GetParam());
    model_ = Model::Load(ModelPath(), options);
  }
  std::shared_ptr<const Model> model_;
};

// A thread that decodes 40 tokens of one request in `engine`; returns once its first token is out.
std::thread StartDecoding(const Model& model, BatchEngine& engine) {
  auto decoding = std::make_shared<std::atomic<bool>>(false);
  std::thread decoder([&model, &engine, decoding] {
    GenerationOptions options;
    options.max_tokens = 40;
    options.ignore_eog = true;
    Prefilled p = Prefill(model, kPrompts[2]);
    engine.Decode(model, *p.cache, p.logits, p.next_position, options,
                  [decoding](const std::string&, TokenId) {
                    *decoding = true;
                    return true;
                  });
  });
  while (!*decoding) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return decoder;
}

TEST_P(BatchEngineTest, DecodeStepRowsEqualOneRowForwards) {
  const Model& model = *model_;
  std::vector<Prefilled> batch, alone;
  for (int i = 0; i < 4; ++i) {
    batch.push_back(Prefill(model, kPrompts[i]));
    alone.push_back(Prefill(model, kPrompts[i]));
  }
  Compress(*batch[1].cache);
  Compress(*alone[1].cache);
  std::vector<TokenId> ids;
  std::vector<int64_t> positions;
  std::vector<KvCache*> caches;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(static_cast<TokenId>(batch[i].logits.argmax().item<int64_t>()));
    positions.push_back(batch[i].next_position);
    caches.push_back(batch[i].cache.get());
  }
  const at::Tensor rows = model.DecodeStep(ids, positions, caches);
  ASSERT_EQ(rows.size(0), 4);
  for (int i = 0; i < 4; ++i) {
    const at::Tensor one = model.Forward({ids[i]}, positions[i], *alone[i].cache);
    const double diff = (rows[i] - one).abs().max().item<double>();
    // Batch invariance: the product kernels sum each row in the same order whatever its group
    // of rows, and the batch's attention splits each request's keys as it would alone, so a
    // row's logits are the same bits in a batch as on its own (fp32 and bf16, every CPU level;
    // before, 1.9e-5 / 2.3e-3 apart, enough to flip bf16 near-ties on an AVX-512 Xeon).
    EXPECT_EQ(diff, 0.0) << "row " << i;
    std::printf("row %d: max |logit diff| %.3g\n", i, diff);
    EXPECT_EQ(rows[i].argmax().item<int64_t>(), one.argmax().item<int64_t>()) << "row " << i;
    for (int64_t l = 0; l < model.config().num_layers; ++l) {
      ASSERT_EQ(batch[i].cache->size(l), alone[i].cache->size(l));
    }
  }
  EXPECT_THROW(model.DecodeStep({1, 2}, {0}, {caches[0]}), Error);
}

// The batch's buffers stay at their addresses while the batch shrinks and grows within what they
// hold, grow (to the next power of two) past it, and change no result: the same bits as steps
// with buffers of their own.
TEST_P(BatchEngineTest, DecodeBuffersKeepTheirAddressesAndChangeNoResult) {
  const Model& model = *model_;
  std::vector<Prefilled> with, without;
  std::vector<TokenId> next;
  std::vector<int64_t> position;
  for (int i = 0; i < 5; ++i) {
    with.push_back(Prefill(model, kPrompts[i]));
    without.push_back(Prefill(model, kPrompts[i]));
    next.push_back(static_cast<TokenId>(with[i].logits.argmax().item<int64_t>()));
    position.push_back(with[i].next_position);
  }
  DecodeBuffers buffers;
  const void* ids_at = nullptr;
  const void* logits_at = nullptr;
  const void* x_at = nullptr;
  for (const int rows : {3, 2, 4, 1, 5}) {
    std::vector<TokenId> ids(next.begin(), next.begin() + rows);
    std::vector<int64_t> positions(position.begin(), position.begin() + rows);
    std::vector<KvCache*> mine, theirs;
    for (int i = 0; i < rows; ++i) {
      mine.push_back(with[i].cache.get());
      theirs.push_back(without[i].cache.get());
    }
    const at::Tensor got = model.DecodeStep(ids, positions, mine, {}, &buffers);
    const at::Tensor want = model.DecodeStep(ids, positions, theirs);
    ASSERT_EQ(got.size(0), rows);
    EXPECT_TRUE(at::equal(got, want)) << rows << " rows";
    EXPECT_EQ(buffers.rows, rows <= 4 ? 4 : 8) << rows << " rows";
    if (rows <= 4) {
      if (ids_at == nullptr) ids_at = buffers.ids.data_ptr();
      EXPECT_EQ(buffers.ids.data_ptr(), ids_at) << rows << " rows";
    }
    if (model.native_weights()) {  // the host path: activations and logits in the buffers too
      EXPECT_EQ(got.data_ptr(), buffers.logits.data_ptr()) << rows << " rows";
      if (rows <= 4) {
        if (logits_at == nullptr) logits_at = buffers.logits.data_ptr();
        if (x_at == nullptr) x_at = buffers.x.data_ptr();
        EXPECT_EQ(buffers.logits.data_ptr(), logits_at) << rows << " rows";
        EXPECT_EQ(buffers.x.data_ptr(), x_at) << rows << " rows";
      }
    }
    for (int i = 0; i < rows; ++i) {
      next[i] = static_cast<TokenId>(want[i].argmax().item<int64_t>());
      ++position[i];
    }
  }
}

// Greedy answers in the batch equal Generate's, for requests that join at different times, leave
// at different lengths, stop on a stop string, or decode from a compressed cache.
TEST_P(BatchEngineTest, BatchedGreedyEqualsGenerate) {
  const Model& model = *model_;
  const int n = 6;
  std::vector<GenerationOptions> options(n);
  for (int i = 0; i < n; ++i) options[i].max_tokens = 8 + 6 * i;
  options[2].stop_strings = {"7"};
  options[4].ignore_eog = true;

  std::vector<GenerationResult> expected(n);
  for (int i = 0; i < n; ++i) {
    Prefilled p = Prefill(model, kPrompts[i]);
    if (i == 3) Compress(*p.cache);
    expected[i] = Generate(model, *p.cache, p.logits, p.next_position, options[i]);
  }

  BatchEngine engine(model_, BatchEngineOptions{4});  // fewer rows than requests: some wait
  std::vector<GenerationResult> got(n);
  std::vector<std::string> streamed(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      std::this_thread::sleep_for(std::chrono::milliseconds(15 * i));  // join mid-batch
      Prefilled p = Prefill(model, kPrompts[i]);
      if (i == 3) Compress(*p.cache);
      got[i] = engine.Decode(model, *p.cache, p.logits, p.next_position, options[i],
                             [&, i](const std::string& piece, TokenId) {
                               streamed[i] += piece;
                               return true;
                             });
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(got[i].tokens, expected[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].text, expected[i].text) << "request " << i;
    EXPECT_EQ(streamed[i], expected[i].text) << "request " << i;
    EXPECT_EQ(got[i].finish, expected[i].finish) << "request " << i;
  }
  const BatchEngineStats stats = engine.stats();
  EXPECT_GT(stats.max_rows, 1) << "the requests never shared a step";
  EXPECT_LE(stats.max_rows, 4);
  EXPECT_EQ(stats.decoding, 0);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BatchEngineTest,
                         ::testing::Combine(::testing::Values(at::kFloat, at::kBFloat16),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(DtypeName(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_int8" : "");
                         });

class BatchEngineFlowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SIFT_SKIP_WITHOUT_MODEL();
    model_ = Model::Load(ModelPath(), ModelOptions{});
  }
  std::shared_ptr<const Model> model_;
};

// A request whose callback refuses a piece leaves the batch as cancelled after that token; the
// others go on to their full length.
TEST_F(BatchEngineFlowTest, CancelledRequestLeavesOthersGoOn) {
  const Model& model = *model_;
  BatchEngine engine(model_);
  GenerationOptions long_run;
  long_run.max_tokens = 24;
  long_run.ignore_eog = true;
  GenerationResult cancelled, kept;
  int pieces = 0;
  std::thread a([&] {
    Prefilled p = Prefill(model, kPrompts[0]);
    cancelled = engine.Decode(model, *p.cache, p.logits, p.next_position, long_run,
                              [&](const std::string&, TokenId) { return ++pieces < 3; });
  });
  std::thread b([&] {
    Prefilled p = Prefill(model, kPrompts[1]);
    kept = engine.Decode(model, *p.cache, p.logits, p.next_position, long_run, nullptr);
  });
  a.join();
  b.join();
  EXPECT_EQ(cancelled.finish, FinishReason::kCancelled);
  EXPECT_EQ(cancelled.tokens.size(), 3u);
  EXPECT_EQ(kept.finish, FinishReason::kLength);
  EXPECT_EQ(kept.tokens.size(), 24u);
}

// Greedy rows take their tokens from one argmax over the batch (BatchEngine::GreedyTokens, one
// host read); seeded sampled rows in the same steps sample alone. Each equals Generate's answer.
TEST_F(BatchEngineFlowTest, GreedyAndSampledRowsInOneBatchEqualGenerate) {
  const Model& model = *model_;
  const int n = 4;
  std::vector<GenerationOptions> options(n);
  for (int i = 0; i < n; ++i) {
    options[i].max_tokens = 12;
    options[i].ignore_eog = true;
    if (i % 2) {  // sampled, seeded
      options[i].sampling.temperature = 0.9;
      options[i].sampling.top_k = 40;
      options[i].sampling.seed = 7 + i;
    }
  }
  std::vector<GenerationResult> expected(n), got(n);
  for (int i = 0; i < n; ++i) {
    Prefilled p = Prefill(model, kPrompts[i]);
    expected[i] = Generate(model, *p.cache, p.logits, p.next_position, options[i]);
  }
  BatchEngine engine(model_);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      Prefilled p = Prefill(model, kPrompts[i]);
      got[i] = engine.Decode(model, *p.cache, p.logits, p.next_position, options[i], nullptr);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < n; ++i) EXPECT_EQ(got[i].tokens, expected[i].tokens) << "request " << i;
  EXPECT_GT(engine.stats().max_rows, 2) << "the requests never shared a step";
}

// Exclusive tasks run on the loop thread; Yield() inside one runs decode steps for the requests
// in the batch (every time, with a zero decode_interval), and a task's exception reaches the
// caller.
TEST_F(BatchEngineFlowTest, TasksRunOnTheLoopAndYieldToDecodeSteps) {
  const Model& model = *model_;
  BatchEngineOptions eo;
  eo.decode_interval = std::chrono::milliseconds(0);
  BatchEngine engine(model_, eo);
  std::thread decoder = StartDecoding(model, engine);
  int64_t steps_during_yields = 0;
  bool on_loop = false;
  engine.RunExclusive([&] {
    on_loop = engine.OnLoopThread();
    const int64_t before = engine.stats().steps;
    for (int i = 0; i < 5; ++i) engine.Yield();
    steps_during_yields = engine.stats().steps - before;
  });
  EXPECT_TRUE(on_loop);
  EXPECT_EQ(steps_during_yields, 5);
  EXPECT_FALSE(engine.OnLoopThread());
  EXPECT_THROW(engine.RunExclusive([] { throw Error("task failed"); }), Error);
  decoder.join();
  EXPECT_EQ(engine.stats().decoding, 0);
}

// With a decode_interval, Yield() runs a step only once that long has passed since the last one:
// yields in quick succession run none, a yield after the interval runs one.
TEST_F(BatchEngineFlowTest, YieldStepsOnlyOnceTheIntervalHasPassed) {
  const Model& model = *model_;
  BatchEngineOptions eo;
  eo.decode_interval = std::chrono::milliseconds(1000);
  BatchEngine engine(model_, eo);
  std::thread decoder = StartDecoding(model, engine);
  int64_t quick = -1, late = -1;
  engine.RunExclusive([&] {
    // The loop ran a step just before this task (tasks and steps alternate).
    const int64_t before = engine.stats().steps;
    for (int i = 0; i < 5; ++i) engine.Yield();
    quick = engine.stats().steps - before;
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    engine.Yield();
    late = engine.stats().steps - before - quick;
  });
  EXPECT_EQ(quick, 0);
  EXPECT_EQ(late, 1);
  decoder.join();
}

// The tasks' order by size (RunExclusive's `work`). Their bodies only record that they ran.
class TaskOrder {
 public:
  void Ran(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    order_.push_back(name);
  }
  std::vector<std::string> order() {
    std::lock_guard<std::mutex> lock(mu_);
    return order_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> order_;
};

// Holds the loop in a task until Release(), so that the tasks handed over meanwhile all wait.
class LoopBlocker {
 public:
  explicit LoopBlocker(BatchEngine& engine)
      : thread_([this, &engine] {
          engine.RunExclusive([this] {
            blocking_ = true;
            while (!release_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          });
        }) {
    while (!blocking_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~LoopBlocker() { Release(); }
  void Release() {
    release_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> blocking_{false};
  std::atomic<bool> release_{false};
  std::thread thread_;  // last: started once the flags exist
};

// Hands `work` over from a new thread and returns once the engine counts it as waiting, so the
// threads' tasks arrive in the order of the calls.
std::thread HandOver(BatchEngine& engine, TaskOrder& log, const std::string& name, int64_t work) {
  const int64_t waiting = engine.stats().tasks_waiting;
  std::thread t(
      [&engine, &log, name, work] { engine.RunExclusive([&log, name] { log.Ran(name); }, work); });
  while (engine.stats().tasks_waiting == waiting) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return t;
}

// A task at most half the running one's size starts inside that one's Yield() and ends before
// it goes on: a short prompt does not wait for a long prefill.
TEST_F(BatchEngineFlowTest, AMuchShorterTaskRunsInsideALongerOnesYield) {
  BatchEngineOptions eo;
  eo.decode_interval = std::chrono::milliseconds(0);
  BatchEngine engine(model_, eo);
  TaskOrder log;
  std::atomic<bool> long_started{false};
  std::atomic<bool> short_ran{false};
  std::thread long_caller([&] {
    engine.RunExclusive(
        [&] {
          long_started = true;
          for (int i = 0; i < 5000 && !short_ran; ++i) {
            engine.Yield();
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          log.Ran("long");
        },
        1000);
  });
  while (!long_started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  engine.RunExclusive(
      [&] {
        log.Ran("short");
        short_ran = true;
      },
      500);
  long_caller.join();
  EXPECT_EQ(log.order(), (std::vector<std::string>{"short", "long"}));
  EXPECT_EQ(engine.stats().tasks_nested, 1);
}

// Tasks more than half the running one's size, or of unknown size, wait for it to end; then the
// smaller known size goes first.
TEST_F(BatchEngineFlowTest, SimilarOrUnknownSizesWaitForTheRunningTask) {
  BatchEngineOptions eo;
  eo.decode_interval = std::chrono::milliseconds(0);
  BatchEngine engine(model_, eo);
  TaskOrder log;
  std::atomic<bool> long_started{false};
  std::thread long_caller([&] {
    engine.RunExclusive(
        [&] {
          long_started = true;
          for (int i = 0; i < 5000 && engine.stats().tasks_waiting < 2; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          for (int i = 0; i < 20; ++i) engine.Yield();
          log.Ran("long");
        },
        1000);
  });
  while (!long_started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::thread unknown = HandOver(engine, log, "unknown", 0);
  std::thread similar = HandOver(engine, log, "similar", 600);
  long_caller.join();
  unknown.join();
  similar.join();
  EXPECT_EQ(log.order(), (std::vector<std::string>{"long", "similar", "unknown"}));
  EXPECT_EQ(engine.stats().tasks_nested, 0);
}

// Waiting tasks start smallest first, but one passed over kMaxBypass times goes next.
TEST_F(BatchEngineFlowTest, SmallestWaitingTaskFirstAndNoneWaitsForever) {
  BatchEngine engine(model_);
  TaskOrder log;
  const int smalls = BatchEngine::kMaxBypass + 2;
  LoopBlocker blocker(engine);
  std::vector<std::thread> callers;
  callers.push_back(HandOver(engine, log, "big", 1000));
  for (int i = 0; i < smalls; ++i) callers.push_back(HandOver(engine, log, "small", 10));
  blocker.Release();
  for (std::thread& t : callers) t.join();
  std::vector<std::string> expected(BatchEngine::kMaxBypass, "small");
  expected.push_back("big");
  expected.resize(smalls + 1, "small");
  EXPECT_EQ(log.order(), expected);
}

// An in-steps task: `steps` steps through RunSteps(), each recorded as "<name><index>"; `before`
// runs before each step (with its index).
std::function<void()> Stepped(BatchEngine& engine, TaskOrder& log, const std::string& name,
                              int steps, std::function<void(int)> before = nullptr) {
  return [&engine, &log, name, steps, before] {
    int i = 0;
    engine.RunSteps(
        [&] {
          if (before) before(i);
          log.Ran(name + std::to_string(i));
          return ++i < steps;
        },
        steps);
  };
}

// Hands an in-steps task over from a new thread; returns once it waits.
std::thread HandOverStepped(BatchEngine& engine, std::function<void()> task, int64_t work) {
  const int64_t waiting = engine.stats().tasks_waiting;
  std::thread t([&engine, task, work] { engine.RunExclusive(task, work, true); });
  while (engine.stats().tasks_waiting == waiting) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return t;
}

// Where `entry` is in `order` (order.size() when absent).
size_t IndexOf(const std::vector<std::string>& order, const std::string& entry) {
  return std::find(order.begin(), order.end(), entry) - order.begin();
}

// In-steps tasks of one size handed over together run side by side: every one has made its first
// step before any makes its last, and they take turns.
TEST_F(BatchEngineFlowTest, InStepsTasksOfASizeRunSideBySide) {
  BatchEngine engine(model_);
  TaskOrder log;
  LoopBlocker blocker(engine);
  std::vector<std::thread> callers;
  for (const char* name : {"a", "b", "c"}) {
    callers.push_back(HandOverStepped(engine, Stepped(engine, log, name, 20), 1000));
  }
  blocker.Release();
  for (std::thread& t : callers) t.join();
  const std::vector<std::string> order = log.order();
  ASSERT_EQ(order.size(), 60u);
  for (const char* first : {"a0", "b0", "c0"}) {
    for (const char* last : {"a19", "b19", "c19"}) {
      EXPECT_LT(IndexOf(order, first), IndexOf(order, last)) << first << " after " << last;
    }
  }
  // Taking turns: no task runs three steps in a row once all three run.
  for (size_t i = 3; i + 2 < order.size(); ++i) {
    EXPECT_FALSE(order[i][0] == order[i + 1][0] && order[i][0] == order[i + 2][0])
        << "three steps of " << order[i][0] << " in a row at " << i;
  }
  EXPECT_EQ(engine.stats().tasks_interleaved, 2);
}

// A much shorter in-steps task runs alone to its end; a task of the same size that arrives when
// the running one is half done waits for it (else the running one would wait for the late one's
// whole work).
TEST_F(BatchEngineFlowTest, AShortInStepsTaskGoesFirstAndALateOneWaits) {
  BatchEngine engine(model_);
  TaskOrder log;
  std::thread short_caller, late_caller;
  std::thread long_caller([&] {
    engine.RunExclusive(
        Stepped(engine, log, "long", 10,
                [&](int i) {
                  if (i == 2) {
                    short_caller = HandOverStepped(engine, Stepped(engine, log, "short", 3), 100);
                  }
                  if (i == 6) {
                    late_caller = HandOverStepped(engine, Stepped(engine, log, "late", 3), 1000);
                  }
                }),
        1000, true);
  });
  long_caller.join();
  short_caller.join();
  late_caller.join();
  const std::vector<std::string> order = log.order();
  const std::vector<std::string> want = {"long0", "long1", "long2", "short0", "short1", "short2",
                                         "long3", "long4", "long5", "long6",  "long7",  "long8",
                                         "long9", "late0", "late1", "late2"};
  EXPECT_EQ(order, want);
}

// A step's exception ends its own task (rethrown to its caller), whichever task's loop ran the
// step; the task beside it runs every step.
TEST_F(BatchEngineFlowTest, AStepsExceptionReachesItsOwnCaller) {
  BatchEngine engine(model_);
  TaskOrder log;
  LoopBlocker blocker(engine);
  bool threw = false;
  std::thread failing = HandOverStepped(
      engine,
      [&] {
        try {
          Stepped(engine, log, "f", 20, [](int i) {
            if (i == 4) throw Error("step failed");
          })();
        } catch (const Error&) {
          threw = true;
        }
      },
      1000);
  std::thread fine = HandOverStepped(engine, Stepped(engine, log, "g", 20), 1000);
  blocker.Release();
  failing.join();
  fine.join();
  EXPECT_TRUE(threw);
  const std::vector<std::string> order = log.order();
  EXPECT_EQ(IndexOf(order, "f4"), order.size()) << "the failing step recorded itself";
  EXPECT_LT(IndexOf(order, "g19"), order.size());
  EXPECT_EQ(engine.stats().tasks_interleaved, 1);
}

// Off the loop thread RunSteps() calls the steps in turn.
TEST_F(BatchEngineFlowTest, RunStepsElsewhereCallsTheStepsInTurn) {
  BatchEngine engine(model_);
  TaskOrder log;
  Stepped(engine, log, "s", 3)();
  EXPECT_EQ(log.order(), (std::vector<std::string>{"s0", "s1", "s2"}));
}

}  // namespace
}  // namespace sift
