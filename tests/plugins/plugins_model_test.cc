// The plugins and pipelines on the real model: pipelines/full.toml equals a direct
// Forward + Generate; chunked prefill equals unchunked; parameters are checked with file, line
// and key; overrides; cancellation; a hot swap while an old snapshot still runs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "daemon/catalog.h"
#include "daemon/model_defaults.h"
#include "daemon/pipeline_config.h"
#include "daemon/plugin_loader.h"
#include "model_fixture.h"
#include "prefill_full_stage.h"
#include "sift/cost_report.h"
#include "sift/generate.h"
#include "support/temp_dir.h"
#include "test_context.h"

namespace sift::daemon {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using sift::testing::TestContext;
using sift::testing::TestModel;

const std::string kPipelines = std::string(SIFT_SOURCE_DIR) + "/pipelines";

RequestState NewRequest(const Model& model, int64_t max_tokens = 24) {
  RequestState state;
  state.id = "test";
  state.tokens = sift::testing::TestPrompt(model);
  state.prompt_length = static_cast<int64_t>(state.tokens.size());
  state.question_begin = state.prompt_length;
  state.generation.max_tokens = max_tokens;
  return state;
}

TEST(FullPipelineTest, EqualsDirectForwardAndGenerate) {
  SIFT_REQUIRE_MODEL();
  const Model& model = *TestModel();
  auto catalog = sift::testing::QuietCatalog(SIFT_PLUGIN_DIR, kPipelines);
  auto pipeline = catalog->Snapshot()->FindPipeline("full");
  ASSERT_NE(pipeline, nullptr) << catalog->Snapshot()->List().dump(2);

  RequestState state = NewRequest(model);
  TestContext context;
  const Status status = pipeline->Run(model, state, json::object(), context);
  ASSERT_TRUE(status.ok()) << status.ToString();

  KvCache cache = model.NewCache();
  at::Tensor logits = model.Forward(state.tokens, 0, cache);
  GenerationOptions options;
  options.max_tokens = 24;
  GenerationResult direct = Generate(model, cache, logits, state.prompt_length, options);

  EXPECT_FALSE(direct.tokens.empty());
  EXPECT_EQ(state.result.tokens, direct.tokens);
  EXPECT_EQ(state.result.text, direct.text);
  EXPECT_EQ(context.streamed, direct.text);  // every piece reached the client, in order
  EXPECT_TRUE(at::equal(state.last_logits, logits));
  const int64_t n = state.prompt_length;
  EXPECT_EQ(state.next_position, n);
  const CostReport cost = MakeCostReport(state, model);
  EXPECT_EQ(cost.tokens_kept, n);
  EXPECT_EQ(cost.kv_bytes, cost.kv_bytes_full);
  EXPECT_GT(cost.prefill_ms, 0);
  ASSERT_EQ(state.stats.stages.size(), 2u);
  EXPECT_EQ(state.stats.stages[0].stage, "prefill");
  EXPECT_EQ(state.stats.stages[0].plugin, "prefill_full@1.0.0");
  EXPECT_EQ(state.stats.stages[0].kind, StageKind::kPrefill);
  EXPECT_EQ(state.stats.stages[1].plugin, "decode_local@1.0.0");
  EXPECT_EQ(state.stats.stages[1].kind, StageKind::kDecode);
  EXPECT_GT(context.progress_calls, 0);
}

// Every prefill stage lets the host run other requests' decode steps between its layers
// (siftd's --decode-interval-ms decides whether it does), so a long prompt does not hold the
// batch for its whole prefill.
TEST(PrefillStagesTest, YieldBetweenLayers) {
  SIFT_REQUIRE_MODEL();
  const Model& model = *TestModel();
  auto catalog = sift::testing::QuietCatalog(SIFT_PLUGIN_DIR, kPipelines);
  // prefill_full, prefill_partial, prefill_streaming and prefill_skip, in that order.
  for (const char* name : {"full", "gemfilter", "ilre", "spts"}) {
    auto pipeline = catalog->Snapshot()->FindPipeline(name);
    ASSERT_NE(pipeline, nullptr) << name;
    RequestState state = NewRequest(model, 2);
    TestContext context;
    LocalExecution local;
    local.direct = true;  // the stages call this context themselves, Yield() included
    const Status status = pipeline->Run(model, state, json::object(), context, local);
    ASSERT_TRUE(status.ok()) << name << ": " << status.ToString();
    // Layer 0 starts at once; every later layer begins with a yield (gemfilter's prefill stops
    // at its filter layer, so it yields at least a few times).
    EXPECT_GE(context.yields, 4) << name;
  }
}

TEST(PrefillFullTest, ChunkedEqualsUnchunkedIncludingStatistics) {
  SIFT_REQUIRE_MODEL();
  const Model& model = *TestModel();
  auto run = [&](int64_t chunk) {
    StageParams params("test", "prefill", "prefill_full");
    params.Set("chunk_size", chunk, "test");
    plugins::PrefillFullStage stage(params, model);
    RequestState state = NewRequest(model);
    const int64_t n = state.prompt_length;
    state.plan.stats[0] = AttentionStatsRequest{24, true, true, n - 5, true};
    state.plan.stats[7] = AttentionStatsRequest{3, false, true, -1, false};
    TestContext context;
    const Status status = stage.Run(model, state, context);
    EXPECT_TRUE(status.ok()) << status.ToString();
    return state;
  };
  RequestState whole = run(0), chunked = run(17);  // 17 does not divide the prompt
  // In bf16, chunks of different sizes may take different matrix-product paths (the GGUF blocks
  // up to Model::native_max_rows() rows, the bf16 copy above, upcast to fp32 on CPUs without
  // hardware bf16), so values that went through the whole network agree to bf16 precision: the
  // reference test measures bf16 logits within 0.2 of fp32, keys within a few bf16 ulps.
  // Probabilities stay within 2e-2.
  const bool bf16 = model.options().dtype == at::kBFloat16;
  auto close = [](const at::Tensor& a, const at::Tensor& b, const char* what, double atol = 2e-2) {
    ASSERT_TRUE(a.defined() && b.defined()) << what;
    ASSERT_EQ(a.sizes(), b.sizes()) << what;
    EXPECT_TRUE(at::allclose(a.to(at::kFloat), b.to(at::kFloat), 2e-2, atol))
        << what << " max diff " << (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<float>();
  };
  close(whole.last_logits, chunked.last_logits, "logits", bf16 ? 0.5 : 2e-2);
  for (int64_t layer : {0, 7}) {
    const AttentionStats &a = whole.layer_stats.at(layer), &b = chunked.layer_stats.at(layer);
    close(a.window_sum, b.window_sum, "window_sum");
    // A column sum adds one probability per query row: mixed bf16 / fp32 paths added up to 0.059
    // over this prompt (measured on an AVX2-only AMD EPYC with 8 native rows).
    close(a.column_sum, b.column_sum, "column_sum", bf16 ? 0.1 : 2e-2);
  }
  close(whole.layer_stats[0].last_query, chunked.layer_stats[0].last_query, "last_query");
  close(whole.layer_stats[0].max_prob, chunked.layer_stats[0].max_prob, "max_prob");
  // A sum of one logit per key (~127 here): bf16-precision differences of each add up (0.51
  // measured on the AVX2-only AMD EPYC, where the whole prompt multiplies by the bf16 copy and
  // the 17-row chunks by the blocks).
  close(whole.layer_stats[0].last_query_logit_sum, chunked.layer_stats[0].last_query_logit_sum,
        "last_query_logit_sum", bf16 ? 1.0 : 2e-2);
  EXPECT_EQ(whole.layer_stats.size(), 2u);
  close(whole.cache->Keys(29), chunked.cache->Keys(29), "keys", bf16 ? 0.15 : 2e-2);
  EXPECT_TRUE(at::equal(whole.cache->Positions(29), chunked.cache->Positions(29)));
}

TEST(PrefillFullTest, RejectsBadPrompts) {
  SIFT_REQUIRE_MODEL();
  const Model& model = *TestModel();
  plugins::PrefillFullStage stage(StageParams(), model);
  TestContext context;
  RequestState empty;
  EXPECT_EQ(stage.Run(model, empty, context).reason(), "empty_prompt");
  RequestState bad;
  bad.tokens = {1, static_cast<TokenId>(model.config().vocab_size)};
  EXPECT_EQ(stage.Run(model, bad, context).reason(), "bad_token");
  RequestState cancelled = NewRequest(model);
  context.Cancel();
  EXPECT_EQ(stage.Run(model, cancelled, context).reason(), "test_cancel");
  EXPECT_EQ(cancelled.cache, nullptr);
}

class PipelineParamsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (TestModel() == nullptr) GTEST_SKIP() << "set SIFT_MODEL";
    for (const char* name : {"prefill_full", "keep_recent", "decode_local", "prefill_partial",
                             "gemfilter", "prefill_streaming", "ilre", "prefill_skip"}) {
      LoadOutcome out =
          loader_.Load(std::string(SIFT_PLUGIN_DIR) + "/" + name + ".so", TestModel().get());
      ASSERT_NE(out.plugin, nullptr) << out.error;
      plugins_[name] = out.plugin;
    }
  }
  std::string ErrorOf(const std::string& prefill_params, const std::string& select_params) {
    const std::string text =
        "[[stage]]\nname = \"prefill\"\nplugin = \"prefill_full\"\n"
        "[stage.params]\n" +
        prefill_params +
        "\n[[stage]]\nname = \"select\"\nplugin = \"keep_recent\"\n"
        "params = { " +
        select_params +
        " }\n"
        "[[stage]]\nplugin = \"decode_local\"\n";
    try {
      ValidatePipeline(ParsePipelineText(text, "pipelines/p.toml"), plugins_, TestModel().get());
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }
  sift::testing::TempDir staging_;
  PluginLoader loader_{staging_.path()};
  PluginMap plugins_;
};

TEST_F(PipelineParamsTest, ValidParameters) {
  EXPECT_EQ(ErrorOf("chunk_size = 512\nblock_size = 64", "keep = 100"), "");
}

TEST_F(PipelineParamsTest, BadTypeNamesFileLineAndKey) {
  EXPECT_EQ(ErrorOf("block_size = 64\nchunk_size = \"big\"", "keep = 100"),
            "pipelines/p.toml:6: stage 'prefill' (plugin prefill_full): key 'chunk_size': "
            "expected an integer >= 0, got \"big\"");
  EXPECT_EQ(ErrorOf("", "keep = 1.5"),
            "pipelines/p.toml:9: stage 'select' (plugin keep_recent): key 'keep': expected an "
            "integer in [1, 1048576], got 1.5");
}

TEST_F(PipelineParamsTest, OutOfRange) {
  EXPECT_EQ(ErrorOf("block_size = 0", "keep = 100"),
            "pipelines/p.toml:5: stage 'prefill' (plugin prefill_full): key 'block_size': "
            "expected an integer in [1, 65536], got 0");
  EXPECT_EQ(ErrorOf("", "keep = -3"),
            "pipelines/p.toml:9: stage 'select' (plugin keep_recent): key 'keep': expected an "
            "integer in [1, 1048576], got -3");
}

TEST_F(PipelineParamsTest, UnreadKeyIsATypo) {
  EXPECT_EQ(ErrorOf("chunk = 512", "keep = 100"),
            "pipelines/p.toml:5: stage 'prefill' (plugin prefill_full): key 'chunk': unknown "
            "parameter (prefill_full@1.0.0 does not read it)");
}

// Per-model defaults (daemon/model_defaults.h): <pipelines>/models/*.toml fills the keys a
// pipeline file leaves unset, for the loaded model only.
TEST_F(PipelineParamsTest, ModelDefaultsFillUnsetKeys) {
  sift::testing::TempDir dir;
  fs::create_directories(dir.File("models"));
  const ModelConfig& c = TestModel()->config();
  const auto defaults = [&](const std::string& file, int64_t layers, const std::string& body) {
    std::ofstream(dir.File("models/" + file))
        << "[match]\narchitecture = \"" << c.architecture << "\"\nnum_layers = " << layers << "\n"
        << body;
  };
  defaults("this.toml", c.num_layers, "[keep_recent]\nkeep = 17\n");
  defaults("other.toml", c.num_layers + 1, "[keep_recent]\nkeep = 99\n");
  const std::string chain =
      "[[stage]]\nname = \"prefill\"\nplugin = \"prefill_full\"\n"
      "[[stage]]\nname = \"select\"\nplugin = \"keep_recent\"\n";
  std::ofstream(dir.File("p.toml")) << chain << "[[stage]]\nplugin = \"decode_local\"\n";
  std::ofstream(dir.File("q.toml")) << chain << "params = { keep = 5 }\n"
                                    << "[[stage]]\nplugin = \"decode_local\"\n";
  const auto keep = [&](const std::string& file, const Model* model) {
    const auto stages = ValidatePipeline(ParsePipelineFile(dir.File(file)), plugins_, model);
    return stages.at(1).config.params.ToJson().value("keep", -1);
  };
  EXPECT_EQ(keep("p.toml", TestModel().get()), 17);
  EXPECT_EQ(keep("q.toml", TestModel().get()), 5);  // the pipeline file wins
  EXPECT_EQ(keep("p.toml", nullptr), -1);           // no model, no defaults

  // A typo in a defaults file fails the pipeline with the defaults file's line.
  defaults("this.toml", c.num_layers, "[keep_recent]\nkep = 17\n");
  try {
    keep("p.toml", TestModel().get());
    FAIL() << "expected an unknown-parameter error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("this.toml:5: stage 'select' (plugin keep_recent): key "
                                         "'kep': unknown parameter"),
              std::string::npos)
        << e.what();
  }
}

// The shipped filter and SPTS pipelines leave the layer parameters to pipelines/models; with the
// SmolLM2 model they get SmolLM2's (its file's values), with another model that model's.
TEST_F(PipelineParamsTest, ShippedPipelinesTakeTheModelsLayerParameters) {
  const auto params = [&](const std::string& pipeline, size_t stage) {
    return ValidatePipeline(ParsePipelineFile(kPipelines + "/" + pipeline + ".toml"), plugins_,
                            TestModel().get())
        .at(stage)
        .config.params.ToJson();
  };
  const std::vector<ModelDefaults> all = LoadModelDefaults(kPipelines + "/models");
  const ModelDefaults* mine = MatchModelDefaults(all, TestModel()->config());
  ASSERT_NE(mine, nullptr) << "no pipelines/models file for " << TestModel()->config().name;
  EXPECT_EQ(params("gemfilter", 1)["layer"], mine->plugins.at("gemfilter").at("layer").value);
  EXPECT_EQ(params("ilre", 1)["retrieval_layer"],
            mine->plugins.at("ilre").at("retrieval_layer").value);
  const json spts = params("spts", 0);
  for (const char* key : {"skip_start", "stage_ends", "budgets", "prune_margin"}) {
    EXPECT_EQ(spts[key], mine->plugins.at("prefill_skip").at(key).value) << key;
  }
}

// A changed model defaults file revalidates the pipelines that use it (catalog rescan).
TEST(ModelDefaultsReloadTest, ChangedDefaultsApplyAfterARescan) {
  SIFT_REQUIRE_MODEL();
  const Model& model = *TestModel();
  sift::testing::TempDir pipelines;
  fs::create_directories(pipelines.File("models"));
  fs::copy_file(kPipelines + "/recent.toml", pipelines.File("recent.toml"));
  // recent.toml sets keep = 256 itself; drop that line so that the model file decides.
  {
    std::ifstream in(pipelines.File("recent.toml"));
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const size_t at = text.find("params = { keep = 256 }");
    ASSERT_NE(at, std::string::npos) << text;
    text.erase(at, text.find('\n', at) - at);
    std::ofstream(pipelines.File("recent.toml")) << text;
  }
  const auto write_defaults = [&](int keep) {
    std::ofstream(pipelines.File("models/this.toml"))
        << "[match]\narchitecture = \"" << model.config().architecture
        << "\"\n[keep_recent]\nkeep = " << keep << "\n";
  };
  write_defaults(17);
  auto catalog = sift::testing::QuietCatalog(SIFT_PLUGIN_DIR, pipelines.path());
  const auto kept = [&]() {
    auto pipeline = catalog->Snapshot()->FindPipeline("recent");
    EXPECT_NE(pipeline, nullptr) << catalog->Snapshot()->List().dump();
    if (pipeline == nullptr) return int64_t{-1};
    RequestState state = NewRequest(model, 1);
    TestContext context;
    EXPECT_TRUE(pipeline->Run(model, state, json::object(), context).ok());
    return MakeCostReport(state, model).tokens_kept;
  };
  EXPECT_EQ(kept(), 17);
  write_defaults(23);
  catalog->Rescan();
  EXPECT_EQ(kept(), 23);
}

TEST(OverridesTest, PerRequestParametersAreCheckedAndApplied) {
  SIFT_REQUIRE_MODEL();
  const Model& model = *TestModel();
  auto catalog = sift::testing::QuietCatalog(SIFT_PLUGIN_DIR, kPipelines);
  auto pipeline = catalog->Snapshot()->FindPipeline("recent");
  ASSERT_NE(pipeline, nullptr);

  RequestState state = NewRequest(model, 4);
  TestContext context;
  ASSERT_TRUE(pipeline->Run(model, state, {{"select", {{"keep", 16}}}}, context).ok());
  const CostReport cost = MakeCostReport(state, model);
  EXPECT_EQ(cost.tokens_kept, 16);
  EXPECT_EQ(state.kept_indices.at(3).sizes(), (std::vector<int64_t>{3, 16}));
  EXPECT_LT(cost.kv_bytes, cost.kv_bytes_full);

  RequestState by_plugin = NewRequest(model, 1);
  ASSERT_TRUE(pipeline->Run(model, by_plugin, {{"keep_recent", {{"keep", 20}}}}, context).ok());
  EXPECT_EQ(MakeCostReport(by_plugin, model).tokens_kept, 20);

  RequestState typo = NewRequest(model, 1);
  Status st = pipeline->Run(model, typo, {{"select", {{"kep", 16}}}}, context);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "request: stage 'select' (plugin keep_recent): key 'kep': unknown parameter "
            "(keep_recent@1.0.0 does not read it)");
  EXPECT_EQ(typo.cache, nullptr);  // nothing ran

  st = pipeline->Run(model, typo, {{"select", {{"keep", 0}}}}, context);
  EXPECT_EQ(st.message(),
            "request: stage 'select' (plugin keep_recent): key 'keep': expected "
            "an integer in [1, 1048576], got 0");
  st = pipeline->Run(model, typo, {{"snapkv", {{"keep", 1}}}}, context);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("no stage or plugin 'snapkv' (stages: prefill, select, decode)"),
            std::string::npos);
}

TEST(CancellationTest, CancelAndClientGoneStopDecoding) {
  SIFT_REQUIRE_MODEL();
  const Model& model = *TestModel();
  auto catalog = sift::testing::QuietCatalog(SIFT_PLUGIN_DIR, kPipelines);
  auto pipeline = catalog->Snapshot()->FindPipeline("full");
  ASSERT_NE(pipeline, nullptr);

  RequestState state = NewRequest(model, 64);
  TestContext cancelling;
  cancelling.cancel_after_emits = 2;
  Status st = pipeline->Run(model, state, json::object(), cancelling);
  EXPECT_EQ(st.code(), StatusCode::kCancelled);
  EXPECT_EQ(st.reason(), "test_cancel");
  EXPECT_LT(state.result.tokens.size(), 64u);

  RequestState gone = NewRequest(model, 64);
  TestContext leaving;
  leaving.refuse_after_emits = 2;
  st = pipeline->Run(model, gone, json::object(), leaving);
  EXPECT_EQ(st.code(), StatusCode::kCancelled);
  EXPECT_EQ(st.reason(), "client_gone");
  EXPECT_LT(gone.result.tokens.size(), 64u);
}

void Install(const std::string& from, const std::string& to) {
  fs::copy_file(from, to + ".part", fs::copy_options::overwrite_existing);
  fs::rename(to + ".part", to);
}

TEST(HotSwapTest, InFlightRequestsFinishOnTheOldVersion) {
  SIFT_REQUIRE_MODEL();
  const Model& model = *TestModel();
  sift::testing::TempDir dir;
  const std::string plugins = dir.File("plugins"), pipelines = dir.File("pipelines");
  fs::create_directories(plugins);
  fs::create_directories(pipelines);
  for (const char* name : {"prefill_full", "decode_local", "keep_recent"}) {
    Install(std::string(SIFT_PLUGIN_DIR) + "/" + name + ".so", plugins + "/" + name + ".so");
  }
  fs::copy_file(kPipelines + "/recent.toml", pipelines + "/recent.toml");
  auto catalog = sift::testing::QuietCatalog(plugins, pipelines);
  auto old_snapshot = catalog->Snapshot();
  auto old_pipeline = old_snapshot->FindPipeline("recent");
  ASSERT_NE(old_pipeline, nullptr);

  // A request in flight on version 1 while version 2 is dropped in and swapped.
  RequestState in_flight = NewRequest(model, 16);
  Status in_flight_status;
  TestContext context;
  std::thread request(
      [&] { in_flight_status = old_pipeline->Run(model, in_flight, json::object(), context); });
  Install(std::string(SIFT_FIXTURE_PLUGIN_DIR) + "/v2/keep_recent.so", plugins + "/keep_recent.so");
  const std::string summary = catalog->Rescan();
  request.join();
  EXPECT_NE(summary.find("loaded keep_recent@2.0.0"), std::string::npos) << summary;

  ASSERT_TRUE(in_flight_status.ok()) << in_flight_status.ToString();
  EXPECT_EQ(in_flight.stats.stages[1].plugin, "keep_recent@1.0.0");

  auto new_pipeline = catalog->Snapshot()->FindPipeline("recent");
  ASSERT_NE(new_pipeline, nullptr);
  EXPECT_EQ(new_pipeline->stages()[1].plugin_version, "2.0.0");
  RequestState fresh = NewRequest(model, 16);
  TestContext fresh_context;
  ASSERT_TRUE(new_pipeline->Run(model, fresh, json::object(), fresh_context).ok());
  EXPECT_EQ(fresh.stats.stages[1].plugin, "keep_recent@2.0.0");
  EXPECT_EQ(fresh.result.tokens, in_flight.result.tokens);  // same code, same answer

  // The held snapshot still runs version 1 after the swap.
  RequestState late = NewRequest(model, 2);
  TestContext late_context;
  ASSERT_TRUE(
      old_snapshot->FindPipeline("recent")->Run(model, late, json::object(), late_context).ok());
  EXPECT_EQ(late.stats.stages[1].plugin, "keep_recent@1.0.0");
}

TEST(FactoryCheckTest, ThrowingPluginIsListedWithItsError) {
  SIFT_REQUIRE_MODEL();
  sift::testing::TempDir dir;
  const std::string plugins = dir.File("plugins");
  fs::create_directories(plugins);
  Install(std::string(SIFT_FIXTURE_PLUGIN_DIR) + "/throws_in_factory.so",
          plugins + "/throws_in_factory.so");
  auto catalog = sift::testing::QuietCatalog(plugins, "");
  const json item = catalog->Snapshot()->List()["plugins"][0];
  EXPECT_EQ(item["ok"], false);
  EXPECT_NE(item["error"].get<std::string>().find(
                "the stage factory failed with default parameters: throws_in_factory: this "
                "constructor always throws"),
            std::string::npos)
      << item.dump();
}

}  // namespace
}  // namespace sift::daemon
