// RepoRelativePath and the results meta (tools/bench/results.h): paths inside the repository are
// written relative to it, paths beside it as "../...", everything else as given, so committed
// results name no machine's folders.
#include "results.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

namespace sift::bench {
namespace {

TEST(RepoRelativePathTest, InsideTheRootIsRelativeToIt) {
  EXPECT_EQ(RepoRelativePath("/r/repo/models/x.gguf", "/r/repo"), "models/x.gguf");
  EXPECT_EQ(RepoRelativePath("/r/repo/docs/results/bench/raw", "/r/repo/"),
            "docs/results/bench/raw");
  EXPECT_EQ(RepoRelativePath("/r/repo/./build/../models/x.gguf", "/r/repo"), "models/x.gguf");
  EXPECT_EQ(RepoRelativePath("/r/repo", "/r/repo"), ".");
}

TEST(RepoRelativePathTest, BesideTheRootGoesThroughItsParent) {
  EXPECT_EQ(RepoRelativePath("/r/shared/data/pg_essays", "/r/repo"), "../shared/data/pg_essays");
  // A sibling whose name starts like the root's is beside it, not inside it.
  EXPECT_EQ(RepoRelativePath("/r/repo2/x", "/r/repo"), "../repo2/x");
}

TEST(RepoRelativePathTest, AnythingElseIsKeptAsGiven) {
  EXPECT_EQ(RepoRelativePath("/tmp/run", "/r/repo"), "/tmp/run");
  EXPECT_EQ(RepoRelativePath("", "/r/repo"), "");
  EXPECT_EQ(RepoRelativePath("tcp://127.0.0.1:7700", "/r/repo"), "tcp://127.0.0.1:7700");
  // A root directly under "/" has no "beside": its parent is the whole file system.
  EXPECT_EQ(RepoRelativePath("/tmp/run", "/repo"), "/tmp/run");
  EXPECT_EQ(RepoRelativePath("/repo/models/x", "/repo"), "models/x");
}

TEST(RepoRelativePathTest, RelativePathsResolveAgainstTheCurrentDirectory) {
  const std::string cwd = std::filesystem::current_path().string();
  EXPECT_EQ(RepoRelativePath("a/b.txt", cwd), "a/b.txt");
  EXPECT_EQ(RepoRelativePath("a/../c", cwd), "c");
  EXPECT_EQ(RepoRelativePath("a/b.txt", "/no/such/root/anywhere"), "a/b.txt");
}

TEST(RepoRelativePathTest, DefaultRootIsThisSourceTree) {
  EXPECT_EQ(RepoRelativePath(std::string(SIFT_SOURCE_DIR) + "/models/x.gguf"), "models/x.gguf");
}

TEST(ResultsMetaTest, ModelAndCommandArePathsRelativeToTheRepository) {
  const std::string src = SIFT_SOURCE_DIR;
  const std::string beside = std::filesystem::path(src).parent_path().string();
  std::vector<std::string> args = {src + "/build/bin/sift-bench",
                                   "accuracy",
                                   "--out",
                                   src + "/docs/results/x",
                                   "--haystack=" + beside + "/data/essays",
                                   "--endpoint",
                                   "tcp://127.0.0.1:7700"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  const nlohmann::json meta =
      MakeMeta(static_cast<int>(argv.size()), argv.data(), src + "/models/m.gguf");
  EXPECT_EQ(meta["model"], "models/m.gguf");
  EXPECT_EQ(meta["model_file"], "m.gguf");
  const std::string parent_name = std::filesystem::path(beside).has_parent_path() &&
                                          beside != std::filesystem::path(beside).root_path()
                                      ? "../data/essays"
                                      : beside + "/data/essays";
  EXPECT_EQ(meta["command"], "build/bin/sift-bench accuracy --out docs/results/x --haystack=" +
                                 parent_name + " --endpoint tcp://127.0.0.1:7700");
}

}  // namespace
}  // namespace sift::bench
