// PluginLoader: one broken fixture per failure, each refused with a precise error; a good
// plugin loads from a private staged copy.
#include "daemon/plugin_loader.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "sift/plugin.h"
#include "support/temp_dir.h"

namespace sift::daemon {
namespace {

namespace fs = std::filesystem;

std::string Fixture(const std::string& name) {
  return std::string(SIFT_FIXTURE_PLUGIN_DIR) + "/" + name + ".so";
}
std::string Served(const std::string& name) {
  return std::string(SIFT_PLUGIN_DIR) + "/" + name + ".so";
}

class PluginLoaderTest : public ::testing::Test {
 protected:
  sift::testing::TempDir staging_;
  PluginLoader loader_{staging_.path()};

  std::string LoadError(const std::string& path) {
    LoadOutcome out = loader_.Load(path, nullptr);
    EXPECT_EQ(out.plugin, nullptr);
    return out.error;
  }
};

TEST_F(PluginLoaderTest, GoodPluginLoadsFromAStagedCopy) {
  const std::string path = Served("keep_recent");
  LoadOutcome out = loader_.Load(path, nullptr);
  ASSERT_NE(out.plugin, nullptr) << out.error;
  EXPECT_EQ(out.error, "");
  const Plugin::Info& info = out.plugin->info();
  EXPECT_EQ(info.name, "keep_recent");
  EXPECT_EQ(info.version, "1.0.0");
  EXPECT_EQ(info.kind, StageKind::kSelect);
  EXPECT_EQ(out.plugin->id(), "keep_recent@1.0.0");
  EXPECT_EQ(info.source_path, path);
  EXPECT_EQ(info.content_hash, HashFile(path));
  EXPECT_NE(info.staged_path, path);
  EXPECT_EQ(fs::path(info.staged_path).parent_path(), fs::path(staging_.path()));
  EXPECT_NE(info.staged_path.find(info.content_hash), std::string::npos);
  EXPECT_TRUE(fs::exists(info.staged_path));
  EXPECT_EQ(fs::file_size(info.staged_path), fs::file_size(path));
}

TEST_F(PluginLoaderTest, EveryLoadGetsItsOwnPath) {
  LoadOutcome a = loader_.Load(Served("keep_recent"), nullptr);
  LoadOutcome b = loader_.Load(Served("keep_recent"), nullptr);
  ASSERT_NE(a.plugin, nullptr) << a.error;
  ASSERT_NE(b.plugin, nullptr) << b.error;
  EXPECT_NE(a.plugin->info().staged_path, b.plugin->info().staged_path);
  EXPECT_EQ(a.plugin->info().content_hash, b.plugin->info().content_hash);
}

TEST_F(PluginLoaderTest, SourceMayChangeAfterLoading) {
  // The staged copy is what runs: replacing the source file cannot disturb it.
  fs::create_directories(staging_.File("source"));
  const std::string copy = staging_.File("source/keep_recent.so");
  fs::copy_file(Served("keep_recent"), copy);
  LoadOutcome out = loader_.Load(copy, nullptr);
  ASSERT_NE(out.plugin, nullptr) << out.error;
  fs::remove(copy);
  std::ofstream(copy) << "garbage";
  EXPECT_TRUE(fs::exists(out.plugin->info().staged_path));
  EXPECT_EQ(out.plugin->name(), "keep_recent");
}

TEST_F(PluginLoaderTest, AbiMismatchIsRefusedBeforeReadingTheRest) {
  const std::string error = LoadError(Fixture("abi_mismatch"));
  EXPECT_NE(error.find(Fixture("abi_mismatch") + ": plugin ABI version 999, this siftd expects " +
                       std::to_string(SIFT_PLUGIN_ABI_VERSION)),
            std::string::npos)
      << error;
}

TEST_F(PluginLoaderTest, MissingEntryIsRefused) {
  const std::string error = LoadError(Fixture("missing_entry"));
  EXPECT_NE(error.find("not a sift plugin: it does not export 'sift_plugin_entry'"),
            std::string::npos)
      << error;
}

TEST_F(PluginLoaderTest, WrongTorchVersionIsRefused) {
  const std::string error = LoadError(Fixture("wrong_torch_version"));
  EXPECT_NE(error.find(std::string("built against LibTorch 0.0.0-fixture, this siftd uses ") +
                       HostTorchVersion()),
            std::string::npos)
      << error;
}

TEST_F(PluginLoaderTest, PluginBuiltAgainstOtherHeadersIsRefused) {
  const std::string error = LoadError(Fixture("stale_headers"));
  EXPECT_NE(error.find(std::string("built against sift headers 0000000000000000, this siftd has ") +
                       SIFT_API_HASH),
            std::string::npos)
      << error;
}

TEST_F(PluginLoaderTest, NotALibraryIsRefusedWithTheLoadersOwnMessage) {
  const std::string path = staging_.File("text.so");
  std::ofstream(path) << std::string(4096, 'x');
  std::string error = LoadError(path);
  EXPECT_NE(error.find(path + ": cannot load: "), std::string::npos) << error;
  EXPECT_NE(error.find("invalid ELF header"), std::string::npos) << error;  // dlerror()'s
  std::ofstream(path) << "short\n";
  error = LoadError(path);
  EXPECT_NE(error.find("file too short"), std::string::npos) << error;
  EXPECT_EQ(error.find("No such file or directory"), std::string::npos) << error;
}

TEST_F(PluginLoaderTest, APluginInAFileOfAnotherNameIsRefused) {
  const std::string path = staging_.File("prefill_full.so");
  fs::copy_file(Served("keep_recent"), path);
  const std::string error = LoadError(path);
  EXPECT_NE(error.find("its descriptor names plugin 'keep_recent' but the file is named "
                       "prefill_full.so"),
            std::string::npos)
      << error;
}

TEST_F(PluginLoaderTest, RejectedStagedCopiesAreDeleted) {
  LoadError(Fixture("abi_mismatch"));
  LoadError(Fixture("missing_entry"));
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(staging_.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 0u);
}

TEST_F(PluginLoaderTest, MissingFileIsRefused) {
  const std::string error = LoadError(staging_.File("absent.so"));
  EXPECT_NE(error.find("cannot read"), std::string::npos) << error;
}

TEST_F(PluginLoaderTest, ThrowingFactoryIsRefusedWithItsMessage) {
  const char* model_path = std::getenv("SIFT_MODEL");
  if (model_path == nullptr || *model_path == '\0') {
    GTEST_SKIP() << "the factory check needs a model: set SIFT_MODEL";
  }
  auto model = Model::Load(model_path, ModelOptions());
  LoadOutcome out = loader_.Load(Fixture("throws_in_factory"), model.get());
  EXPECT_EQ(out.plugin, nullptr);
  EXPECT_NE(out.error.find("plugin throws_in_factory@1.0.0: the stage factory failed with "
                           "default parameters: throws_in_factory: this constructor always "
                           "throws"),
            std::string::npos)
      << out.error;
  // Without the factory check the same library loads: the failure is the factory's.
  EXPECT_NE(loader_.Load(Fixture("throws_in_factory"), nullptr).plugin, nullptr);
}

}  // namespace
}  // namespace sift::daemon
