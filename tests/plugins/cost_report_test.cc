// The cost report (sift/cost_report.h) on real requests: every shipped pipeline, the real plugins
// and the real pipeline runner. The report must give the numbers the daemon's `final` gave while
// each stage kept its own books: tokens_kept and kv_bytes as the last compressing stage left the
// cache (decode appends to it afterwards), kv_bytes_full from the bytes of one cache entry and
// the original prompt length (also after a filter shortened the prompt), prefill_ms the stages
// before decode, decode_ms the generation's own time. The expected values are computed here from
// the model's shape, not through KvCache::EntryBytes or FullKvBytes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "daemon/catalog.h"
#include "model_fixture.h"
#include "sift/cost_report.h"
#include "test_context.h"

namespace sift::daemon {
namespace {

using nlohmann::json;
using sift::testing::TestContext;
using sift::testing::TestModel;

// k + v in the compute dtype plus an int64 position, for every KV head: one entry of one layer.
int64_t BytesPerEntry(const Model& model) {
  const ModelConfig& c = model.config();
  return c.num_kv_heads *
         (2 * c.head_dim * static_cast<int64_t>(c10::elementSize(model.options().dtype)) + 8);
}

TEST(CostReportTest, RealPipelinesReportWhatTheStagesUsedToReport) {
  SIFT_REQUIRE_MODEL();
  const Model& model = *TestModel();
  auto catalog =
      sift::testing::QuietCatalog(SIFT_PLUGIN_DIR, std::string(SIFT_SOURCE_DIR) + "/pipelines");
  const int64_t layers = model.config().num_layers;
  const int64_t generated = 4;
  for (const char* name : {"full", "recent", "snapkv", "streamingllm", "h2o", "pyramidkv",
                           "chunkkv", "chunkkv_reuse", "gemfilter", "ilre", "spts"}) {
    SCOPED_TRACE(name);
    auto pipeline = catalog->Snapshot()->FindPipeline(name);
    ASSERT_NE(pipeline, nullptr) << catalog->Snapshot()->List().dump(1);
    RequestState state;
    state.id = name;
    state.tokens = sift::testing::TestPrompt(model);
    const int64_t n = static_cast<int64_t>(state.tokens.size());
    state.prompt_length = n;
    state.question_begin = n;
    state.generation.max_tokens = generated;
    state.generation.ignore_eog = true;
    TestContext context;
    const Status status = pipeline->Run(model, state, json::object(), context);
    ASSERT_TRUE(status.ok()) << status.ToString();
    ASSERT_EQ(static_cast<int64_t>(state.result.tokens.size()), generated);
    ASSERT_NE(state.cache, nullptr);

    // Decode appended every generated token but the last to every layer.
    const int64_t entries = state.cache->TotalEntries() - layers * (generated - 1);
    const CostReport cost = MakeCostReport(state, model);
    EXPECT_EQ(cost.tokens_before, n);
    EXPECT_EQ(cost.kv_bytes_full, n * layers * BytesPerEntry(model));
    EXPECT_EQ(cost.tokens_kept, entries / layers);
    EXPECT_EQ(cost.kv_bytes, entries * BytesPerEntry(model));
    EXPECT_LE(cost.kv_bytes, cost.kv_bytes_full);
    if (std::string(name) == "full") {
      EXPECT_EQ(cost.kv_bytes, cost.kv_bytes_full);
    }
    if (std::string(name) == "gemfilter" || std::string(name) == "ilre") {
      // A filter's kept prompt was prefilled whole: the cache holds exactly its tokens.
      EXPECT_EQ(cost.tokens_kept, static_cast<int64_t>(state.tokens.size()));
    }

    // One record per stage, in order, with the stage's kind; the decode time is generation's.
    const std::vector<StageInfo>& stages = pipeline->stages();
    ASSERT_EQ(cost.stages.size(), stages.size());
    double before_decode = 0;
    for (size_t i = 0; i < stages.size(); ++i) {
      EXPECT_EQ(cost.stages[i].stage, stages[i].label);
      EXPECT_EQ(cost.stages[i].kind, stages[i].kind);
      EXPECT_GT(cost.stages[i].ms, 0);
      if (stages[i].kind != StageKind::kDecode) before_decode += cost.stages[i].ms;
    }
    EXPECT_DOUBLE_EQ(cost.prefill_ms, before_decode);
    EXPECT_GT(cost.decode_ms, 0);
    EXPECT_EQ(cost.decode_ms, state.result.decode_ms);
  }
}

// A state no runner measured (stages run by hand) is measured as it is: the cache less what
// decode appended.
TEST(CostReportTest, UnmeasuredStateIsMeasuredAsItIs) {
  SIFT_REQUIRE_MODEL();
  const Model& model = *TestModel();
  RequestState state;
  state.tokens = {1, 2, 3, 4, 5};
  state.prompt_length = 9;  // as after a filter kept 5 of 9
  state.cache = std::make_unique<KvCache>(model.NewCache());
  const int64_t layers = model.config().num_layers;
  for (int64_t l = 0; l < layers; ++l) {
    const at::Tensor k = at::zeros({7, model.config().num_kv_heads, model.config().head_dim},
                                   at::TensorOptions().dtype(model.options().dtype));
    state.cache->Append(l, k, k, at::arange(7, at::kLong));
  }
  state.result.tokens = {10, 11, 12};  // two of them appended to the 5 prompt entries
  const CostReport cost = MakeCostReport(state, model);
  EXPECT_EQ(cost.tokens_before, 9);
  EXPECT_EQ(cost.tokens_kept, 5);
  EXPECT_EQ(cost.kv_bytes, 5 * layers * BytesPerEntry(model));
  EXPECT_EQ(cost.kv_bytes_full, 9 * layers * BytesPerEntry(model));
  EXPECT_EQ(cost.prefill_ms, 0);
  EXPECT_TRUE(cost.stages.empty());

  // Recorded by hand as the runner records: the record wins over the cache as it is now.
  RecordStageCost(state, "prefill", "by_hand@0", StageKind::kPrefill, 2.5);
  EXPECT_EQ(state.stats.stages.back().tokens_kept, 7);
  EXPECT_EQ(MakeCostReport(state, model).tokens_kept, 7);
  EXPECT_EQ(MakeCostReport(state, model).prefill_ms, 2.5);
}

}  // namespace
}  // namespace sift::daemon
