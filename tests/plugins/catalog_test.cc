// Catalog without a model: plugins and pipelines appear, change and disappear on Rescan; broken
// files are listed with their error while the previous good version keeps serving; snapshots
// are immutable.
#include "daemon/catalog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "daemon/plugin_loader.h"
#include "support/temp_dir.h"

namespace sift::daemon {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Served(const std::string& name) {
  return std::string(SIFT_PLUGIN_DIR) + "/" + name + ".so";
}
std::string Fixture(const std::string& name) {
  return std::string(SIFT_FIXTURE_PLUGIN_DIR) + "/" + name + ".so";
}

// Installs a file the way a careful user does: write aside, then rename into place.
void Install(const std::string& from, const std::string& to) {
  const std::string tmp = to + ".part";
  fs::copy_file(from, tmp, fs::copy_options::overwrite_existing);
  fs::rename(tmp, to);
}
void Write(const std::string& path, const std::string& text) {
  std::ofstream(path + ".part") << text;
  fs::rename(path + ".part", path);
}

const char kRecent[] = R"(name = "recent"
[[stage]]
plugin = "prefill_full"
[[stage]]
name = "select"
plugin = "keep_recent"
params = { keep = 8 }
[[stage]]
plugin = "decode_local"
)";

class CatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(plugins_);
    fs::create_directories(pipelines_);
    for (const char* name : {"prefill_full", "decode_local", "keep_recent"}) {
      Install(Served(name), plugins_ + "/" + name + ".so");
    }
    Write(pipelines_ + "/recent.toml", kRecent);
    CatalogOptions options;
    options.plugins_dir = plugins_;
    options.pipelines_dir = pipelines_;
    options.poll_interval_ms = 0;
    options.log = [this](const std::string& level, const json& fields) {
      log_.push_back(level + " " + fields.value("event", "") + " " + fields.value("message", ""));
    };
    catalog_ = Catalog::Create(options, nullptr);
  }

  json PluginItem(const std::shared_ptr<const CatalogSnapshot>& s, const std::string& file) {
    const json list = s->List();
    for (const json& p : list["plugins"]) {
      if (p["file"] == plugins_ + "/" + file) return p;
    }
    return json();
  }
  json PipelineItem(const std::shared_ptr<const CatalogSnapshot>& s, const std::string& file) {
    const json list = s->List();
    for (const json& p : list["pipelines"]) {
      if (p["file"] == pipelines_ + "/" + file) return p;
    }
    return json();
  }
  bool Logged(const std::string& needle) const {
    for (const std::string& line : log_) {
      if (line.find(needle) != std::string::npos) return true;
    }
    return false;
  }

  sift::testing::TempDir dir_;
  std::string plugins_ = dir_.File("plugins"), pipelines_ = dir_.File("pipelines");
  std::vector<std::string> log_;
  std::unique_ptr<Catalog> catalog_;
};

TEST_F(CatalogTest, LoadsPluginsAndPipelines) {
  auto snap = catalog_->Snapshot();
  EXPECT_EQ(snap->generation(), 1u);
  auto pipeline = snap->FindPipeline("recent");
  ASSERT_NE(pipeline, nullptr);
  ASSERT_EQ(pipeline->stages().size(), 3u);
  EXPECT_EQ(pipeline->stages()[1].label, "select");
  EXPECT_EQ(pipeline->stages()[1].kind, StageKind::kSelect);
  EXPECT_EQ(pipeline->stages()[1].plugin_version, "1.0.0");
  EXPECT_EQ(pipeline->file(), pipelines_ + "/recent.toml");
  EXPECT_EQ(snap->FindPipeline("nope"), nullptr);
  ASSERT_NE(snap->FindPlugin("keep_recent"), nullptr);
  const json item = PluginItem(snap, "keep_recent.so");
  EXPECT_EQ(item["name"], "keep_recent");
  EXPECT_EQ(item["version"], "1.0.0");
  EXPECT_EQ(item["kind"], "select");
  EXPECT_EQ(item["ok"], true);
  EXPECT_TRUE(Logged("plugin_loaded"));
  EXPECT_TRUE(Logged("pipeline_loaded"));
  EXPECT_EQ(catalog_->Rescan(), "no changes\n");
  EXPECT_EQ(catalog_->Snapshot(), snap);  // nothing changed: same snapshot
}

TEST_F(CatalogTest, NewVersionSwapsInAndHeldSnapshotsKeepTheOld) {
  auto old_snap = catalog_->Snapshot();
  Install(Fixture("v2/keep_recent"), plugins_ + "/keep_recent.so");
  const std::string summary = catalog_->Rescan();
  EXPECT_NE(summary.find("loaded keep_recent@2.0.0"), std::string::npos) << summary;
  auto new_snap = catalog_->Snapshot();
  EXPECT_GT(new_snap->generation(), old_snap->generation());
  EXPECT_EQ(new_snap->FindPlugin("keep_recent")->version(), "2.0.0");
  EXPECT_EQ(new_snap->FindPipeline("recent")->stages()[1].plugin_version, "2.0.0");
  EXPECT_EQ(old_snap->FindPlugin("keep_recent")->version(), "1.0.0");
  EXPECT_EQ(old_snap->FindPipeline("recent")->stages()[1].plugin_version, "1.0.0");
  EXPECT_EQ(PluginItem(new_snap, "keep_recent.so")["generations"], 2);
}

TEST_F(CatalogTest, BrokenRebuildIsListedAndThePreviousVersionKeepsServing) {
  Install(Fixture("abi_mismatch"), plugins_ + "/keep_recent.so");
  catalog_->Rescan();
  auto snap = catalog_->Snapshot();
  const json item = PluginItem(snap, "keep_recent.so");
  EXPECT_EQ(item["ok"], false);
  EXPECT_NE(item["error"].get<std::string>().find("plugin ABI version 999"), std::string::npos);
  EXPECT_EQ(item["version"], "1.0.0");  // still serving
  EXPECT_EQ(snap->FindPlugin("keep_recent")->version(), "1.0.0");
  ASSERT_NE(snap->FindPipeline("recent"), nullptr);
  EXPECT_TRUE(Logged("warn plugin_rejected"));
  EXPECT_TRUE(Logged("(keeps serving keep_recent@1.0.0)"));
  // Fixing the file heals it.
  Install(Served("keep_recent"), plugins_ + "/keep_recent.so");
  catalog_->Rescan();
  EXPECT_EQ(PluginItem(catalog_->Snapshot(), "keep_recent.so")["ok"], true);
}

TEST_F(CatalogTest, BadNewPluginsAreListedWithTheirErrors) {
  for (const char* f : {"missing_entry", "wrong_torch_version"}) {
    Install(Fixture(f), plugins_ + "/" + f + ".so");
  }
  catalog_->Rescan();
  auto snap = catalog_->Snapshot();
  json item = PluginItem(snap, "missing_entry.so");
  EXPECT_EQ(item["ok"], false);
  EXPECT_EQ(item["name"], "missing_entry");
  EXPECT_NE(item["error"].get<std::string>().find("does not export 'sift_plugin_entry'"),
            std::string::npos);
  item = PluginItem(snap, "wrong_torch_version.so");
  EXPECT_NE(item["error"].get<std::string>().find("built against LibTorch 0.0.0-fixture"),
            std::string::npos);
  EXPECT_NE(snap->FindPipeline("recent"), nullptr);
}

TEST_F(CatalogTest, APluginMustLiveInAFileOfItsName) {
  // keep_recent's bytes under another name are refused and never displace keep_recent.so.
  Install(Served("keep_recent"), plugins_ + "/aa_copy.so");
  Install(Served("prefill_full"), plugins_ + "/zz_other.so");
  catalog_->Rescan();
  auto snap = catalog_->Snapshot();
  json item = PluginItem(snap, "aa_copy.so");
  EXPECT_EQ(item["ok"], false);
  EXPECT_NE(item["error"].get<std::string>().find(
                "its descriptor names plugin 'keep_recent' but the file is named aa_copy.so"),
            std::string::npos)
      << item.dump();
  EXPECT_EQ(PluginItem(snap, "zz_other.so")["ok"], false);
  EXPECT_EQ(snap->FindPlugin("keep_recent")->info().source_path, plugins_ + "/keep_recent.so");
  EXPECT_EQ(snap->FindPlugin("prefill_full")->info().source_path, plugins_ + "/prefill_full.so");
  // The rejected copies do not pile up in the staging folder.
  EXPECT_TRUE(fs::exists(snap->FindPlugin("keep_recent")->info().staged_path));
}

TEST_F(CatalogTest, RescansWithoutChangesKeepTheGeneration) {
  const uint64_t generation = catalog_->Snapshot()->generation();
  EXPECT_EQ(catalog_->Rescan(), "no changes\n");
  EXPECT_EQ(catalog_->Rescan(), "no changes\n");
  EXPECT_EQ(catalog_->Snapshot()->generation(), generation);
  Install(Fixture("abi_mismatch"), plugins_ + "/keep_recent.so");  // a failing change
  catalog_->Rescan();
  const uint64_t after = catalog_->Snapshot()->generation();
  catalog_->Rescan();
  EXPECT_EQ(catalog_->Snapshot()->generation(), after);
}

// The pre-flight: files are first loaded by `siftd --preflight` in a child process; a file
// that kills that process is refused, and this process (which never maps it) is unaffected.
TEST(CatalogPreflightTest, FilesThatCrashTheCheckerAreRefused) {
  sift::testing::TempDir dir;
  const std::string plugins = dir.File("plugins");
  fs::create_directories(plugins);
  for (const char* name : {"prefill_full", "keep_recent"}) {
    Install(Served(name), plugins + "/" + name + ".so");
  }
  std::ifstream in(Served("decode_local"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(plugins + "/decode_local.so", std::ios::binary) << bytes.substr(0, 64 << 10);
  Install(Fixture("aborts_on_load"), plugins + "/aborts_on_load.so");
  std::ofstream(plugins + "/garbage.so") << std::string(4096, 'x');
  CatalogOptions options;
  options.plugins_dir = plugins;
  options.poll_interval_ms = 0;
  options.staging_dir = dir.File("staging");
  options.preflight.command = {SIFT_SIFTD, "--model", "", "--log-level", "error", "--preflight"};
  options.preflight.file_timeout_ms = 5000;
  std::vector<std::string> lines;
  options.log = [&lines](const std::string& level, const json& fields) {
    lines.push_back(level + " " + fields.value("message", ""));
  };
  auto catalog = Catalog::Create(options, nullptr);
  auto snap = catalog->Snapshot();
  EXPECT_NE(snap->FindPlugin("prefill_full"), nullptr);
  EXPECT_NE(snap->FindPlugin("keep_recent"), nullptr);
  EXPECT_EQ(snap->FindPlugin("decode_local"), nullptr);
  const json list = snap->List();
  auto error_of = [&](const std::string& file) {
    for (const json& p : list["plugins"]) {
      if (fs::path(p.value("file", "")).filename() == file) return p.value("error", "");
    }
    return std::string("(not listed)");
  };
  EXPECT_NE(error_of("aborts_on_load.so").find("killed by SIGABRT"), std::string::npos)
      << error_of("aborts_on_load.so");
  EXPECT_NE(error_of("aborts_on_load.so").find(plugins + "/aborts_on_load.so"), std::string::npos);
  const std::string truncated = error_of("decode_local.so");
  EXPECT_TRUE(truncated.find("SIGBUS") != std::string::npos ||
              truncated.find("cannot load") != std::string::npos)
      << truncated;
  EXPECT_NE(error_of("garbage.so").find("invalid ELF header"), std::string::npos)
      << error_of("garbage.so");
  // Only the two files that passed left staged copies.
  size_t staged = 0;
  for (const auto& e : fs::directory_iterator(options.staging_dir)) staged += e.is_regular_file();
  EXPECT_EQ(staged, 2u);
}

TEST_F(CatalogTest, PipelineFilesComeChangeAndGo) {
  Write(pipelines_ + "/full.toml",
        "[[stage]]\nplugin = \"prefill_full\"\n[[stage]]\nplugin = \"decode_local\"\n");
  catalog_->Rescan();
  ASSERT_NE(catalog_->Snapshot()->FindPipeline("full"), nullptr);

  // A broken edit: rejected with file and line, the old version keeps serving.
  auto before = catalog_->Snapshot()->FindPipeline("recent");
  Write(pipelines_ + "/recent.toml", std::string(kRecent) + "[[stage]]\nplugin = \"snapk\"\n");
  catalog_->Rescan();
  auto snap = catalog_->Snapshot();
  EXPECT_EQ(snap->FindPipeline("recent"), before);
  json item = PipelineItem(snap, "recent.toml");
  EXPECT_EQ(item["ok"], false);
  EXPECT_NE(item["error"].get<std::string>().find(pipelines_ + "/recent.toml:10: stage 'snapk': "
                                                               "unknown plugin 'snapk'"),
            std::string::npos)
      << item["error"];
  EXPECT_TRUE(Logged("(keeps serving the previous version)"));

  // A good edit replaces it.
  std::string edited = kRecent;
  edited.replace(edited.find("keep = 8"), 8, "keep = 16");
  Write(pipelines_ + "/recent.toml", edited);
  catalog_->Rescan();
  snap = catalog_->Snapshot();
  EXPECT_NE(snap->FindPipeline("recent"), before);
  EXPECT_EQ(PipelineItem(snap, "recent.toml")["ok"], true);

  // Deleting removes it.
  fs::remove(pipelines_ + "/full.toml");
  catalog_->Rescan();
  EXPECT_EQ(catalog_->Snapshot()->FindPipeline("full"), nullptr);
  EXPECT_TRUE(PipelineItem(catalog_->Snapshot(), "full.toml").is_null());
}

TEST_F(CatalogTest, NewBadPipelineIsListedButNotServed) {
  Write(pipelines_ + "/bad.toml", "[[stage]]\nplugin = \"keep_recent\"\n");
  catalog_->Rescan();
  auto snap = catalog_->Snapshot();
  EXPECT_EQ(snap->FindPipeline("bad"), nullptr);
  const json item = PipelineItem(snap, "bad.toml");
  EXPECT_EQ(item["name"], "bad");
  EXPECT_NE(item["error"].get<std::string>().find("the first stage must be a prefill"),
            std::string::npos);
}

// Remote stages that cannot be reached as configured are refused at load, before a request
// finds out: a worker key without this daemon's key pair, a non-loopback worker without a key.
TEST_F(CatalogTest, RemoteStagesNeedTheirCurveKeys) {
  const std::string stage =
      "[[stage]]\nplugin = \"prefill_full\"\n[[stage]]\nplugin = "
      "\"decode_local\"\nendpoint = ";
  Write(pipelines_ + "/keyed.toml", stage +
                                        "\"tcp://127.0.0.1:7800\"\nworker_key = "
                                        "\"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\"\n");
  Write(pipelines_ + "/far.toml", stage + "\"tcp://10.0.0.2:7800\"\n");
  Write(pipelines_ + "/near.toml", stage + "\"tcp://127.0.0.1:7800\"\n");
  catalog_->Rescan();
  auto snap = catalog_->Snapshot();
  EXPECT_EQ(snap->FindPipeline("keyed"), nullptr);
  EXPECT_NE(PipelineItem(snap, "keyed.toml")["error"].get<std::string>().find(
                "a worker key is set, but siftd has no key pair for stage hops "
                "(--hop-curve-secret-key)"),
            std::string::npos)
      << PipelineItem(snap, "keyed.toml");
  EXPECT_EQ(snap->FindPipeline("far"), nullptr);
  EXPECT_NE(PipelineItem(snap, "far.toml")["error"].get<std::string>().find(
                "tcp://10.0.0.2:7800 is not a loopback address"),
            std::string::npos)
      << PipelineItem(snap, "far.toml");
  EXPECT_NE(snap->FindPipeline("near"), nullptr);  // loopback without CURVE: as before
}

TEST_F(CatalogTest, DeletingAPluginKeepsItsPipelinesOnTheLoadedGeneration) {
  fs::remove(plugins_ + "/keep_recent.so");
  catalog_->Rescan();
  auto snap = catalog_->Snapshot();
  EXPECT_EQ(snap->FindPlugin("keep_recent"), nullptr);
  EXPECT_TRUE(PluginItem(snap, "keep_recent.so").is_null());
  ASSERT_NE(snap->FindPipeline("recent"), nullptr);  // last good version
  EXPECT_EQ(PipelineItem(snap, "recent.toml")["ok"], false);
}

TEST_F(CatalogTest, GenerationsPerFileAreCapped) {
  // Trailing bytes change the hash but not the library, so each append is a "rebuild".
  const std::string path = plugins_ + "/keep_recent.so";
  for (int i = 1; i < kMaxGenerationsPerFile; ++i) {
    std::ofstream(path, std::ios::app | std::ios::binary) << 'x';
    catalog_->Rescan();
  }
  EXPECT_EQ(PluginItem(catalog_->Snapshot(), "keep_recent.so")["ok"], true);
  std::ofstream(path, std::ios::app | std::ios::binary) << 'x';
  catalog_->Rescan();
  const json item = PluginItem(catalog_->Snapshot(), "keep_recent.so");
  EXPECT_EQ(item["ok"], false);
  EXPECT_NE(item["error"].get<std::string>().find("restart siftd"), std::string::npos);
  EXPECT_NE(catalog_->Snapshot()->FindPlugin("keep_recent"), nullptr);
}

TEST(CatalogWatchTest, PollingPicksUpSettledChanges) {
  sift::testing::TempDir dir;
  const std::string plugins = dir.File("plugins"), pipelines = dir.File("pipelines");
  fs::create_directories(plugins);
  fs::create_directories(pipelines);
  for (const char* name : {"prefill_full", "decode_local"}) {
    Install(Served(name), plugins + "/" + name + ".so");
  }
  CatalogOptions options;
  options.plugins_dir = plugins;
  options.pipelines_dir = pipelines;
  options.poll_interval_ms = 50;
  options.log = [](const std::string&, const json&) {};
  auto catalog = Catalog::Create(options, nullptr);
  Write(pipelines + "/full.toml",
        "[[stage]]\nplugin = \"prefill_full\"\n[[stage]]\nplugin = \"decode_local\"\n");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (catalog->Snapshot()->FindPipeline("full") == nullptr &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(catalog->Snapshot()->FindPipeline("full"), nullptr);
}

TEST(CatalogCreateTest, MissingFolderThrows) {
  CatalogOptions options;
  options.plugins_dir = "/nonexistent/plugins";
  EXPECT_THROW(Catalog::Create(options, nullptr), std::exception);
}

}  // namespace
}  // namespace sift::daemon
