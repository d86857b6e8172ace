// sift-bench end to end on the real model ($SIFT_MODEL; skipped when unset), real plugins and
// the real siftd:
//   - the CI quick mode (`sift-bench accuracy --quick --spawn`, pipeline full) writes its raw
//     results and full KV scores above chance on the shortest passkey task;
//   - --first-sample N starts the sample indices at N (extending an earlier run);
//   - a run stopped (SIGTERM) after some samples keeps their rows in complete result files;
//   - in-process runs with a shared prefill give exactly the outputs of separate runs, and
//     the same outputs as the daemon for a couple of configs (spot check).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "backend.h"
#include "bench_config.h"
#include "in_process_backend.h"
#include "sift/gguf.h"
#include "sift/tokenizer.h"
#include "support/temp_dir.h"
#include "tasks.h"

namespace sift::bench {
namespace {

const char* Model() {
  const char* m = std::getenv("SIFT_MODEL");
  return m != nullptr && *m != '\0' ? m : nullptr;
}

TEST(BenchQuickTest, QuickModeOnSpawnedSiftdScoresAboveChance) {
  if (Model() == nullptr) GTEST_SKIP() << "SIFT_MODEL is not set";
  sift::testing::TempDir dir;
  const std::string out = dir.path() + "/quick";
  const std::string cmd = std::string(SIFT_BINARY_DIR) + "/bin/sift-bench accuracy --quick " +
                          "--spawn --out '" + out + "' > '" + dir.path() + "/log' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream log(dir.path() + "/log");
  const std::string log_text((std::istreambuf_iterator<char>(log)), {});
  ASSERT_EQ(rc, 0) << log_text;
  EXPECT_NE(log_text.find("[accuracy 3/3]"), std::string::npos) << log_text;  // progress
  ASSERT_TRUE(std::filesystem::exists(out + "/accuracy.csv"));
  std::ifstream in(out + "/accuracy.json");
  const nlohmann::json doc = nlohmann::json::parse(in);
  ASSERT_EQ(doc["rows"].size(), 3u);
  EXPECT_FALSE(doc["meta"]["model_sha256"].get<std::string>().empty());
  // The default haystack is the corpus committed in the tree, named by its repository path.
  EXPECT_EQ(doc["meta"]["settings"]["haystack"], "tools/bench/corpus/world-english-bible")
      << doc["meta"].dump();
  double sum = 0;
  for (const auto& row : doc["rows"]) {
    EXPECT_TRUE(row["ok"].get<bool>()) << row.dump();
    EXPECT_EQ(row["config"], "full");
    EXPECT_EQ(row["task"], "passkey");
    EXPECT_LE(row["prompt_tokens"].get<int64_t>() + 32, 512);
    sum += row["score"].get<double>();
  }
  // Guessing a 6-digit passkey succeeds with probability 1e-6 per sample.
  EXPECT_GE(sum, 2.0) << doc["rows"].dump(1);
}

TEST(BenchQuickTest, AMissingHaystackFolderIsAnError) {
  if (Model() == nullptr) GTEST_SKIP() << "SIFT_MODEL is not set";
  sift::testing::TempDir dir;
  const std::string cmd =
      std::string(SIFT_BINARY_DIR) + "/bin/sift-bench accuracy --quick --in-process --haystack '" +
      dir.path() + "/nowhere' --out '" + dir.path() + "/out' > '" + dir.path() + "/log' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream log(dir.path() + "/log");
  const std::string log_text((std::istreambuf_iterator<char>(log)), {});
  EXPECT_NE(rc, 0) << log_text;
  EXPECT_NE(log_text.find("/nowhere: not a folder"), std::string::npos) << log_text;
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/out/accuracy.json"));
}

TEST(BenchQuickTest, FirstSampleStartsTheRunAtThatIndex) {
  if (Model() == nullptr) GTEST_SKIP() << "SIFT_MODEL is not set";
  sift::testing::TempDir dir;
  const std::string out = dir.path() + "/acc";
  const std::string cmd = std::string(SIFT_BINARY_DIR) + "/bin/sift-bench accuracy --in-process " +
                          "--pipelines full --tasks passkey --lengths 512 --depths 50 " +
                          "--first-sample 2 --samples 2 --max-tokens 4 --out '" + out + "' > '" +
                          dir.path() + "/log' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream log(dir.path() + "/log");
  const std::string log_text((std::istreambuf_iterator<char>(log)), {});
  ASSERT_EQ(rc, 0) << log_text;
  std::ifstream in(out + "/accuracy.json");
  const nlohmann::json doc = nlohmann::json::parse(in);
  ASSERT_EQ(doc["rows"].size(), 2u) << log_text;
  EXPECT_EQ(doc["rows"][0]["index"], 2);
  EXPECT_EQ(doc["rows"][0]["id"], "passkey/512/d50/2");
  EXPECT_EQ(doc["rows"][1]["index"], 3);
  EXPECT_EQ(doc["meta"]["settings"]["first_sample"], 2);
}

TEST(BenchQuickTest, AStoppedRunKeepsTheSamplesItFinished) {
  if (Model() == nullptr) GTEST_SKIP() << "SIFT_MODEL is not set";
  sift::testing::TempDir dir;
  const std::string out = dir.path() + "/acc";
  // 200 samples take minutes; the run is stopped once the first ones are on disk.
  const std::string cmd = "exec '" + std::string(SIFT_BINARY_DIR) +
                          "/bin/sift-bench' accuracy --in-process --pipelines full --tasks " +
                          "passkey --lengths 512 --depths 50 --samples 200 --max-tokens 4 --out '" +
                          out + "' > '" + dir.path() + "/log' 2>&1";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Poll the results file: every read must parse (files are replaced whole, never half-written).
  size_t seen = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (seen < 2 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::ifstream in(out + "/accuracy.json");
    if (!in) continue;
    const nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(doc.is_discarded()) << "a half-written accuracy.json";
    seen = doc["rows"].size();
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_GE(seen, 2u) << "no samples written within 5 minutes";
  std::ifstream in(out + "/accuracy.json");
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_GE(doc["rows"].size(), seen);
  EXPECT_LT(doc["rows"].size(), 200u);  // it was stopped, not finished
  for (const auto& row : doc["rows"]) EXPECT_TRUE(row["ok"].get<bool>()) << row.dump();
  std::ifstream csv(out + "/accuracy.csv");
  const std::string text((std::istreambuf_iterator<char>(csv)), {});
  // Complete: the header and one line per row (an output may hold quoted line breaks).
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  EXPECT_GE(std::count(text.begin(), text.end(), '\n'), 1 + static_cast<long>(doc["rows"].size()));
}

TEST(BenchQuickTest, SharedPrefillEqualsSeparateRunsAndTheDaemon) {
  if (Model() == nullptr) GTEST_SKIP() << "SIFT_MODEL is not set";
  const std::unique_ptr<GgufFile> gguf = GgufFile::Open(Model());
  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::FromGguf(*gguf);
  const Sample sample =
      MakeSample(TaskOptions{"passkey", 320, 50, 3, DefaultHaystackDir(), 0}, *tokenizer, 0);
  // recent (keep 256) and recent with keep 64 share prefill_full's default parameters; the
  // select stage of the first evicts from its copy only. The third prefills in chunks of 128
  // (same result, different parameters), so it must run alone. snapkv asks for statistics on
  // every layer and chunkkv_reuse on every other one (plus a reuse_leader map): they share too.
  const std::vector<BenchConfig> configs = {
      ParseConfig("recent"), ParseConfig("k64=recent:{\"select\":{\"keep\":64}}"),
      ParseConfig("chunked=full:{\"prefill\":{\"chunk_size\":128}}"), ParseConfig("snapkv"),
      ParseConfig("chunkkv_reuse")};
  RunOptions ro;
  ro.max_tokens = 8;
  InProcessOptions io;
  io.model = Model();
  io.plugins_dir = std::string(SIFT_BINARY_DIR) + "/plugins";
  io.pipelines_dir = std::string(SIFT_SOURCE_DIR) + "/pipelines";
  std::vector<RunResult> shared, separate;
  {
    auto backend = MakeInProcessBackend(io);
    shared = backend->Run(configs, sample, ro);
  }
  io.share_prefill = false;
  {
    auto backend = MakeInProcessBackend(io);
    separate = backend->Run(configs, sample, ro);
  }
  ASSERT_EQ(shared.size(), configs.size());
  for (size_t i = 0; i < configs.size(); ++i) {
    SCOPED_TRACE(configs[i].label);
    ASSERT_TRUE(shared[i].ok) << shared[i].error;
    ASSERT_TRUE(separate[i].ok) << separate[i].error;
    EXPECT_EQ(shared[i].text, separate[i].text);
    EXPECT_EQ(shared[i].stats["tokens_kept"], separate[i].stats["tokens_kept"]);
    EXPECT_FALSE(separate[i].shared_prefill);
  }
  EXPECT_TRUE(shared[0].shared_prefill);
  EXPECT_TRUE(shared[1].shared_prefill);
  EXPECT_FALSE(shared[2].shared_prefill);
  EXPECT_TRUE(shared[3].shared_prefill);
  EXPECT_TRUE(shared[4].shared_prefill);
  EXPECT_EQ(shared[1].stats["tokens_kept"], 64);
  EXPECT_NE(shared[1].text, shared[2].text);  // the selection mattered

  // Spot check against the real daemon.
  DaemonOptions d;
  d.spawn = true;
  d.siftd = std::string(SIFT_BINARY_DIR) + "/bin/siftd";
  d.model = Model();
  d.plugins_dir = io.plugins_dir;
  d.pipelines_dir = io.pipelines_dir;
  auto daemon = MakeDaemonBackend(d);
  const std::vector<BenchConfig> spot = {configs[1], configs[2]};
  const std::vector<RunResult> via_daemon = daemon->Run(spot, sample, ro);
  for (size_t i = 0; i < spot.size(); ++i) {
    SCOPED_TRACE(spot[i].label);
    ASSERT_TRUE(via_daemon[i].ok) << via_daemon[i].error;
    EXPECT_EQ(via_daemon[i].text, shared[i + 1].text);
    EXPECT_EQ(via_daemon[i].stats["tokens_kept"], shared[i + 1].stats["tokens_kept"]);
  }
  EXPECT_GT(PeakRssKb(daemon->DaemonPid()), 0);
  EXPECT_TRUE(ResetPeakRss(daemon->DaemonPid()));
}

}  // namespace
}  // namespace sift::bench
