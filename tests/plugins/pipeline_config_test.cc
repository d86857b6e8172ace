// Pipeline files: every error names the file, the line and the key; kinds must be in a legal
// order. (Parameter types and ranges need a model: plugins_model_test.cc.)
#include "daemon/pipeline_config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "daemon/model_defaults.h"
#include "sift/error.h"
#include "support/temp_dir.h"

namespace sift::daemon {
namespace {

// A plugin of a given kind that is never instantiated (no model is passed to validation).
std::shared_ptr<const Plugin> FakePlugin(const std::string& name, StageKind kind) {
  Plugin::Info info;
  info.name = name;
  info.version = "1.0.0";
  info.kind = kind;
  return std::make_shared<Plugin>(info, nullptr, nullptr);
}

PluginMap Plugins() {
  PluginMap m;
  m["prefill_full"] = FakePlugin("prefill_full", StageKind::kPrefill);
  m["gemfilter"] = FakePlugin("gemfilter", StageKind::kFilter);
  m["snapkv"] = FakePlugin("snapkv", StageKind::kSelect);
  m["layerwise"] = FakePlugin("layerwise", StageKind::kReuse);
  m["decode_local"] = FakePlugin("decode_local", StageKind::kDecode);
  return m;
}

// The error of parsing + validating `text` as pipelines/t.toml ("" when valid).
std::string ErrorOf(const std::string& text) {
  try {
    PipelineConfig config = ParsePipelineText(text, "pipelines/t.toml");
    ValidatePipeline(config, Plugins(), nullptr);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

// A pipeline of the given plugins, one [[stage]] each (stage i's header on line 2 + 3*i).
std::string Chain(const std::vector<std::string>& plugins) {
  std::string text = "name = \"t\"\n";
  for (const std::string& p : plugins) text += "[[stage]]\nplugin = \"" + p + "\"\n\n";
  return text;
}

TEST(PipelineConfigTest, ParsesTheDocumentedSchema) {
  const std::string text = R"(name = "snap"
description = "SnapKV"
model = "default"

[[stage]]
name = "prefill"
plugin = "prefill_full"
[stage.params]
chunk_size = 4096
ratios = [0.5, 0.25]

[[stage]]
name = "select"
plugin = "snapkv"
params = { window = 32, pooling = "max", per_head = true }

[[stage]]
plugin = "decode_local"
endpoint = "tcp://127.0.0.1:5601"
)";
  PipelineConfig c = ParsePipelineText(text, "pipelines/snap.toml");
  EXPECT_EQ(c.name, "snap");
  EXPECT_EQ(c.description, "SnapKV");
  ASSERT_EQ(c.stages.size(), 3u);
  EXPECT_EQ(c.stages[0].label, "prefill");
  EXPECT_EQ(c.stages[0].where, "pipelines/snap.toml:5");
  EXPECT_EQ(c.stages[0].params.ToJson(),
            nlohmann::json({{"chunk_size", 4096}, {"ratios", {0.5, 0.25}}}));
  EXPECT_EQ(c.stages[1].params.ToJson(),
            nlohmann::json({{"window", 32}, {"pooling", "max"}, {"per_head", true}}));
  EXPECT_EQ(c.stages[2].label, "decode_local");  // default label: the plugin name
  EXPECT_EQ(c.stages[2].endpoint, "tcp://127.0.0.1:5601");
  std::vector<ResolvedStage> stages = ValidatePipeline(c, Plugins(), nullptr);
  EXPECT_EQ(stages[1].plugin->name(), "snapkv");
}

TEST(PipelineConfigTest, NameDefaultsToTheFileStem) {
  PipelineConfig c = ParsePipelineText(Chain({"prefill_full", "decode_local"}).substr(11),
                                       "pipelines/my_pipe.toml");
  EXPECT_EQ(c.name, "my_pipe");
}

TEST(PipelineConfigTest, ParamsCarryTheirOwnLines) {
  PipelineConfig c = ParsePipelineText(
      "[[stage]]\nplugin = \"snapkv\"\n[stage.params]\nwindow = 32\nbudget = 128\n",
      "pipelines/p.toml");
  try {
    c.stages[0].params.Fail("budget", "too big");
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(),
                 "pipelines/p.toml:5: stage 'snapkv' (plugin snapkv): key 'budget': "
                 "too big");
  }
}

TEST(PipelineConfigTest, TomlSyntaxErrorNamesTheLine) {
  const std::string error = ErrorOf("name = \"t\"\n\n[[stage]]\nplugin = prefill_full\n");
  EXPECT_EQ(error.rfind("pipelines/t.toml:4: ", 0), 0u) << error;
}

// toml++ 3.3.0 has undefined behaviour on some non-ASCII characters outside comments and
// string values (found by fuzz_pipeline_toml); the loader refuses them before parsing.
TEST(PipelineConfigTest, NonAsciiOnlyInCommentsAndStringValues) {
  const std::string stages =
      "[[stage]]\nplugin = \"prefill_full\"\n[[stage]]\nplugin = \"decode_local\"\n";
  PipelineConfig c = ParsePipelineText(
      "# \xce\x9b mask, caf\xc3\xa9\ndescription = \"caf\xc3\xa9 \xce\x9b\"\n" + stages,
      "pipelines/u.toml");
  EXPECT_EQ(c.description, "caf\xc3\xa9 \xce\x9b");
  for (const std::string& bad : {std::string("\"caf\xc3\xa9\" = 1\n"),   // a quoted key
                                 std::string("name\xc2\xa7 = \"x\"\n"),  // after a bare key
                                 std::string("description = \"\"\"\xc3\xa9\"\"\"\n")}) {
    try {
      ParsePipelineText(bad + stages, "pipelines/u.toml");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("pipelines/u.toml:1: character U+00"), std::string::npos)
          << e.what();
    }
  }
}

TEST(PipelineConfigTest, UnknownPluginListsTheKnownOnes) {
  EXPECT_EQ(ErrorOf(Chain({"prefill_full", "snapk", "decode_local"})),
            "pipelines/t.toml:5: stage 'snapk': unknown plugin 'snapk' (known: decode_local, "
            "gemfilter, layerwise, prefill_full, snapkv)");
}

TEST(PipelineConfigTest, UnknownKeysAreRejectedWithTheirLine) {
  EXPECT_EQ(ErrorOf("name = \"t\"\nmodle = \"x\"\n" + Chain({"prefill_full"}).substr(11)),
            "pipelines/t.toml:2: unknown key 'modle' (expected: description, model, name, "
            "stage)");
  EXPECT_EQ(ErrorOf("[[stage]]\nplugin = \"prefill_full\"\nendpiont = \"tcp://a:1\"\n"),
            "pipelines/t.toml:3: stage 1: unknown key 'endpiont' (expected: endpoint, name, "
            "params, plugin, worker_key)");
}

TEST(PipelineConfigTest, MissingAndMistypedValues) {
  EXPECT_EQ(ErrorOf("[[stage]]\nname = \"p\"\n"),
            "pipelines/t.toml:1: stage 1: missing key 'plugin'");
  EXPECT_EQ(ErrorOf("[[stage]]\nplugin = 3\n"),
            "pipelines/t.toml:2: stage 1: key 'plugin' must be a plugin name");
  EXPECT_EQ(ErrorOf("[[stage]]\nplugin = \"prefill_full\"\nparams = 3\n"),
            "pipelines/t.toml:3: stage 'prefill_full': key 'params' must be a table");
  EXPECT_EQ(ErrorOf("name = \"t\"\n"), "pipelines/t.toml:1: no stages: add [[stage]] tables");
  EXPECT_EQ(ErrorOf("model = \"llama\"\n[[stage]]\nplugin = \"prefill_full\"\n"),
            "pipelines/t.toml:1: key 'model': unknown model 'llama' (this siftd serves "
            "\"default\")");
  EXPECT_EQ(ErrorOf("[[stage]]\nplugin = \"prefill_full\"\n[stage.params]\nwhen = 1979-05-27\n"),
            "pipelines/t.toml:4: parameter 'when': dates and times are not supported");
}

// Found by fuzz_pipeline_toml: without a 'name' the default (the plugin's or the file's name) was
// checked and the error pointed at the absent key (a null dereference).
TEST(PipelineConfigTest, InvalidDefaultNamesAreErrorsNotCrashes) {
  EXPECT_EQ(ErrorOf("[[stage]]\nplugin = \"h2o\xef\xbb\xbf\"\n"),
            "pipelines/t.toml:1: stage 1: the plugin name (the stage's default name) must be "
            "[A-Za-z0-9_.-]+");
  try {
    ParsePipelineText("[[stage]]\nplugin = \"prefill_full\"\n", "pipelines/my pipe.toml");
    ADD_FAILURE() << "accepted a file name with a space as the pipeline's name";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "pipelines/my pipe.toml:1: the file name (the pipeline's default name) must be "
                 "[A-Za-z0-9_.-]+");
  }
}

TEST(PipelineConfigTest, EndpointMustBeTcpHostPort) {
  EXPECT_EQ(ErrorOf("[[stage]]\nplugin = \"prefill_full\"\nendpoint = \"localhost:5\"\n"),
            "pipelines/t.toml:3: stage 'prefill_full': key 'endpoint' must look like "
            "\"tcp://host:port\", got \"localhost:5\"");
}

TEST(PipelineConfigTest, WorkerKeyIsAZ85KeyBesideAnEndpoint) {
  const std::string key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";  // a valid Z85 public key
  const PipelineConfig c = ParsePipelineText(
      "[[stage]]\nplugin = \"prefill_full\"\nendpoint = \"tcp://10.0.0.2:7800\"\n"
      "worker_key = \"" +
          key + "\"\n",
      "pipelines/t.toml");
  EXPECT_EQ(c.stages[0].worker_key, key);
  EXPECT_EQ(ErrorOf("[[stage]]\nplugin = \"prefill_full\"\nworker_key = \"" + key + "\"\n"),
            "pipelines/t.toml:3: stage 'prefill_full': key 'worker_key' needs an 'endpoint'");
  EXPECT_EQ(ErrorOf("[[stage]]\nplugin = \"prefill_full\"\nendpoint = \"tcp://h:1\"\n"
                    "worker_key = \"workers.pub\"\n"),
            "pipelines/t.toml:4: stage 'prefill_full': key 'worker_key' must be the worker's "
            "CURVE public key: 40 Z85 characters (the .pub file of siftd --make-curve-keys)");
}

TEST(PipelineConfigTest, DuplicateStageNames) {
  EXPECT_EQ(ErrorOf(Chain({"prefill_full", "snapkv", "snapkv", "decode_local"})),
            "pipelines/t.toml:8: stage 'snapkv': a stage with this name already exists (set "
            "distinct 'name's)");
}

TEST(PipelineConfigTest, LegalKindOrders) {
  EXPECT_EQ(ErrorOf(Chain({"prefill_full", "decode_local"})), "");
  EXPECT_EQ(ErrorOf(Chain({"prefill_full", "snapkv", "decode_local"})), "");
  EXPECT_EQ(ErrorOf(Chain({"prefill_full", "snapkv", "layerwise", "decode_local"})), "");
}

TEST(PipelineConfigTest, IllegalKindOrders) {
  EXPECT_EQ(ErrorOf(Chain({"snapkv", "decode_local"})),
            "pipelines/t.toml:2: stage 'snapkv' (select snapkv): the first stage must be a "
            "prefill");
  EXPECT_EQ(ErrorOf(Chain({"prefill_full", "gemfilter", "decode_local"})),
            "pipelines/t.toml:5: stage 'gemfilter' (filter gemfilter): a filter must be "
            "followed by a prefill (it replaces the prompt and clears the cache)");
  EXPECT_EQ(ErrorOf(Chain({"prefill_full", "layerwise", "decode_local"})),
            "pipelines/t.toml:5: stage 'layerwise' (reuse layerwise): a reuse must come right "
            "after a select");
  EXPECT_EQ(ErrorOf(Chain({"prefill_full", "decode_local", "snapkv"})),
            "pipelines/t.toml:5: stage 'decode_local' (decode decode_local): the decode stage "
            "must be the last stage");
  EXPECT_EQ(ErrorOf(Chain({"prefill_full", "snapkv"})),
            "pipelines/t.toml:5: stage 'snapkv' (select snapkv): the last stage must be a "
            "decode, not a select");
}

TEST(PipelineConfigTest, PrefillAgainOnlyAfterAFilter) {
  std::string text =
      "[[stage]]\nname = \"p1\"\nplugin = \"prefill_full\"\n"
      "[[stage]]\nname = \"p2\"\nplugin = \"prefill_full\"\n"
      "[[stage]]\nplugin = \"decode_local\"\n";
  EXPECT_EQ(ErrorOf(text),
            "pipelines/t.toml:4: stage 'p2' (prefill prefill_full): a prefill "
            "must be the first stage or come right after a filter");
  text =
      "[[stage]]\nname = \"p1\"\nplugin = \"prefill_full\"\n"
      "[[stage]]\nplugin = \"gemfilter\"\n"
      "[[stage]]\nname = \"p2\"\nplugin = \"prefill_full\"\n"
      "[[stage]]\nplugin = \"snapkv\"\n"
      "[[stage]]\nplugin = \"decode_local\"\n";
  EXPECT_EQ(ErrorOf(text), "");
}

TEST(PipelineConfigTest, ShippedPipelinesParse) {
  for (const char* name : {"full", "recent"}) {
    const std::string path = std::string(SIFT_SOURCE_DIR) + "/pipelines/" + name + ".toml";
    PipelineConfig c = ParsePipelineFile(path);
    EXPECT_EQ(c.name, name);
    EXPECT_EQ(c.stages.front().plugin, "prefill_full");
    EXPECT_EQ(c.stages.back().plugin, "decode_local");
  }
}

// ---- per-model defaults (daemon/model_defaults.h) ------------------------------------------

ModelConfig Config(const std::string& arch, int64_t layers, int64_t hidden, std::string name) {
  ModelConfig c;
  c.architecture = arch;
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.name = std::move(name);
  return c;
}

void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string DefaultsError(const std::string& text) {
  sift::testing::TempDir dir;
  Write(dir.File("m.toml"), text);
  try {
    LoadModelDefaults(dir.path());
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

TEST(ModelDefaultsTest, MatchingAndPrecedence) {
  sift::testing::TempDir dir;
  Write(dir.File("a.toml"),
        "description = \"A\"\n[match]\narchitecture = \"qwen2\"\nnum_layers = 24\n"
        "[gemfilter]\nlayer = 12\ntopk = 512\n[ilre]\nretrieval_layer = 5\n");
  Write(dir.File("b.toml"),
        "[match]\narchitecture = \"llama\"\nhidden_size = 576\nname = \"smollm2\"\n"
        "[gemfilter]\nlayer = 15\n");
  Write(dir.File("notes.txt"), "not a defaults file");
  const std::vector<ModelDefaults> all = LoadModelDefaults(dir.path());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].description, "A");
  EXPECT_EQ(MatchModelDefaults(all, Config("qwen2", 24, 896, "Qwen2.5 Coder")), &all[0]);
  EXPECT_EQ(MatchModelDefaults(all, Config("qwen2", 28, 896, "Qwen2.5 7B")), nullptr);
  EXPECT_EQ(MatchModelDefaults(all, Config("llama", 30, 576, "SmolLM2 135M Instruct")), &all[1]);
  EXPECT_EQ(MatchModelDefaults(all, Config("llama", 30, 576, "Other")), nullptr);  // name
  EXPECT_EQ(MatchModelDefaults(LoadModelDefaults(dir.File("absent")), Config("llama", 1, 1, "")),
            nullptr);

  // Keys the stage already has (pipeline file, request) win; the rest carry the file's line.
  StageParams params("pipelines/g.toml", "filter", "gemfilter");
  params.Set("topk", 1024, "pipelines/g.toml:9");
  ApplyModelDefaults(all[0], "gemfilter", &params);
  EXPECT_EQ(params.ToJson(), (nlohmann::json{{"layer", 12}, {"topk", 1024}}));
  EXPECT_EQ(params.GetInt("topk", 0), 1024);
  try {
    params.GetString("layer", "");
    FAIL() << "expected a type error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.File("a.toml") + ":6"), std::string::npos) << e.what();
  }
  StageParams other("pipelines/s.toml", "select", "snapkv");
  ApplyModelDefaults(all[0], "snapkv", &other);
  EXPECT_TRUE(other.ToJson().empty());

  // Two files for one model: an error naming both.
  Write(dir.File("c.toml"), "[match]\narchitecture = \"qwen2\"\n");
  const std::vector<ModelDefaults> twice = LoadModelDefaults(dir.path());
  try {
    MatchModelDefaults(twice, Config("qwen2", 24, 896, "Qwen"));
    FAIL() << "expected an ambiguity error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("c.toml: matches the model 'Qwen' as"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("a.toml"), std::string::npos) << e.what();
  }
}

TEST(ModelDefaultsTest, ErrorsNameTheFileAndLine) {
  EXPECT_NE(DefaultsError("[gemfilter]\nlayer = 3\n").find("m.toml:1: missing [match] table"),
            std::string::npos);
  EXPECT_NE(DefaultsError("[match]\nnum_layers = 3\n").find("[match] needs architecture"),
            std::string::npos);
  EXPECT_NE(DefaultsError("[match]\narchitecture = \"llama\"\nlayers = 3\n")
                .find("m.toml:3: [match]: unknown key 'layers'"),
            std::string::npos);
  EXPECT_NE(DefaultsError("[match]\narchitecture = \"llama\"\nnum_layers = 0\n")
                .find("'num_layers' must be a positive integer"),
            std::string::npos);
  EXPECT_NE(DefaultsError("model = 3\n[match]\narchitecture = \"llama\"\n")
                .find("m.toml:1: unknown key 'model'"),
            std::string::npos);
  EXPECT_NE(DefaultsError("[match\n").find("m.toml:1:"), std::string::npos);
  EXPECT_EQ(DefaultsError("[match]\narchitecture = \"llama\"\n"), "");
}

TEST(ModelDefaultsTest, ShippedFilesParseAndMatchTheirModels) {
  const std::vector<ModelDefaults> all =
      LoadModelDefaults(std::string(SIFT_SOURCE_DIR) + "/pipelines/models");
  ASSERT_GE(all.size(), 2u);
  const ModelDefaults* smol =
      MatchModelDefaults(all, Config("llama", 30, 576, "SmolLM2 135M Instruct"));
  const ModelDefaults* qwen =
      MatchModelDefaults(all, Config("qwen2", 24, 896, "Qwen2.5 Coder 0.5B Instruct AWQ"));
  ASSERT_NE(smol, nullptr);
  ASSERT_NE(qwen, nullptr);
  for (const ModelDefaults* d : {smol, qwen}) {
    EXPECT_FALSE(d->evidence.empty()) << d->file;
    for (const char* plugin : {"gemfilter", "ilre", "prefill_skip"}) {
      EXPECT_EQ(d->plugins.count(plugin), 1u) << d->file << " has no [" << plugin << "]";
    }
  }
  EXPECT_EQ(smol->plugins.at("gemfilter").at("layer").value, 15);
  EXPECT_EQ(smol->plugins.at("ilre").at("retrieval_layer").value, 8);
}

TEST(PipelineConfigTest, MissingFileIsAnError) {
  EXPECT_THROW(ParsePipelineFile("/nonexistent/x.toml"), Error);
}

}  // namespace
}  // namespace sift::daemon
