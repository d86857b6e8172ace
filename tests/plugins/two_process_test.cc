// Two processes: a real worker process (RunWorker, as `siftd --worker` runs it) on a loopback
// port serves stages whose pipeline entry has `endpoint = ...`; the request state crosses as
// frames both ways. The output must equal the single-process output.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "daemon/pipeline_config.h"
#include "daemon/pipeline_runner.h"
#include "model_fixture.h"
#include "sift/cost_report.h"
#include "support/temp_dir.h"
#include "test_context.h"

extern char** environ;

namespace sift::daemon {
namespace {

using nlohmann::json;
using sift::testing::TestContext;
using sift::testing::TestModel;

// Starts the worker binary and reads its log until it reports the endpoint it bound.
class WorkerProcess {
 public:
  bool Start(std::string* error) {
    int fds[2];
    if (pipe(fds) != 0) return false;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    std::vector<std::string> args = {
        SIFT_TEST_WORKER, "--worker",      "--bind",  "tcp://127.0.0.1:*",
        "--plugins",      SIFT_PLUGIN_DIR, "--model", sift::testing::ModelPath()};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    if (rc != 0) {
      *error = "posix_spawn failed";
      close(fds[0]);
      return false;
    }
    log_ = fdopen(fds[0], "r");
    char line[8192];
    while (fgets(line, sizeof(line), log_) != nullptr) {
      *error += line;
      json j = json::parse(line, nullptr, false);
      if (j.is_object() && j.value("event", "") == "worker_ready") {
        endpoint_ = j.value("endpoint", "");
        // Keep draining its log so that the worker never blocks on a full pipe.
        drain_ = std::thread([this] {
          char rest[8192];
          while (fgets(rest, sizeof(rest), log_) != nullptr) {
          }
        });
        return true;
      }
    }
    return false;  // exited before becoming ready
  }
  // SIGTERM, then the exit status.
  int Stop() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    if (drain_.joinable()) drain_.join();
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  ~WorkerProcess() {
    Stop();
    if (log_ != nullptr) fclose(log_);
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  pid_t pid_ = -1;
  FILE* log_ = nullptr;
  std::thread drain_;
  std::string endpoint_;
};

class TwoProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (TestModel() == nullptr) return;
    worker_ = new WorkerProcess;
    std::string log;
    if (!worker_->Start(&log)) {
      start_error_ = "the worker did not start:\n" + log;
    }
  }
  static void TearDownTestSuite() {
    if (worker_ != nullptr) {
      EXPECT_EQ(worker_->Stop(), 0);  // SIGTERM is a clean stop
      delete worker_;
      worker_ = nullptr;
    }
  }
  void SetUp() override {
    SIFT_REQUIRE_MODEL();
    ASSERT_TRUE(start_error_.empty()) << start_error_;
  }

  // A catalog over the built plugins and one pipeline file written from `text`.
  std::shared_ptr<const Pipeline> MakePipeline(const std::string& name, const std::string& text) {
    std::ofstream(dir_.File(name + ".toml")) << text;
    catalogs_.push_back(sift::testing::QuietCatalog(SIFT_PLUGIN_DIR, dir_.path()));
    auto pipeline = catalogs_.back()->Snapshot()->FindPipeline(name);
    EXPECT_NE(pipeline, nullptr) << catalogs_.back()->Snapshot()->List().dump(2);
    return pipeline;
  }

  RequestState Run(const Pipeline& pipeline, TestContext& context, Status* status,
                   int64_t max_tokens = 24) {
    const Model& model = *TestModel();
    RequestState state;
    state.tokens = sift::testing::TestPrompt(model);
    state.prompt_length = static_cast<int64_t>(state.tokens.size());
    state.generation.max_tokens = max_tokens;
    *status = pipeline.Run(model, state, json::object(), context);
    return state;
  }

  static WorkerProcess* worker_;
  static std::string start_error_;
  sift::testing::TempDir dir_;
  std::vector<std::unique_ptr<Catalog>> catalogs_;
};
WorkerProcess* TwoProcessTest::worker_ = nullptr;
std::string TwoProcessTest::start_error_;

const char kLocal[] = R"([[stage]]
name = "prefill"
plugin = "prefill_full"
[[stage]]
name = "select"
plugin = "keep_recent"
params = { keep = 40 }
[[stage]]
name = "decode"
plugin = "decode_local"
)";

std::string WithEndpoint(const std::string& text, const std::string& label,
                         const std::string& endpoint) {
  std::string out = text;
  const std::string needle = "name = \"" + label + "\"\n";
  out.insert(out.find(needle) + needle.size(), "endpoint = \"" + endpoint + "\"\n");
  return out;
}

TEST_F(TwoProcessTest, RemoteStagesGiveTheSingleProcessOutput) {
  auto local = MakePipeline("local", kLocal);
  auto remote_decode =
      MakePipeline("remote_decode", WithEndpoint(kLocal, "decode", worker_->endpoint()));
  auto remote_prefill =
      MakePipeline("remote_prefill", WithEndpoint(kLocal, "prefill", worker_->endpoint()));
  ASSERT_TRUE(local && remote_decode && remote_prefill);
  EXPECT_EQ(remote_decode->stages()[2].endpoint, worker_->endpoint());

  Status status;
  TestContext local_context;
  RequestState expected = Run(*local, local_context, &status);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_FALSE(expected.result.tokens.empty());

  for (const auto& pipeline : {remote_decode, remote_prefill}) {
    TestContext context;
    RequestState got = Run(*pipeline, context, &status);
    ASSERT_TRUE(status.ok()) << pipeline->name() << ": " << status.ToString();
    EXPECT_EQ(got.result.tokens, expected.result.tokens) << pipeline->name();
    EXPECT_EQ(got.result.text, expected.result.text) << pipeline->name();
    EXPECT_EQ(context.streamed, expected.result.text) << pipeline->name();  // relayed
    // The caller measured the remote stages' cost too, on the state they sent back.
    const CostReport cost = MakeCostReport(got, *TestModel());
    EXPECT_EQ(cost.tokens_kept, 40);
    EXPECT_EQ(cost.kv_bytes, MakeCostReport(expected, *TestModel()).kv_bytes);
    ASSERT_EQ(got.stats.stages.size(), 3u);
    EXPECT_EQ(got.stats.stages[0].plugin, "prefill_full@1.0.0");
    EXPECT_EQ(got.stats.stages[1].tokens_kept, 40);
    EXPECT_GT(context.progress_calls, 0);
  }
}

TEST_F(TwoProcessTest, CancellationReachesTheWorker) {
  auto pipeline =
      MakePipeline("remote_cancel", WithEndpoint(kLocal, "decode", worker_->endpoint()));
  ASSERT_NE(pipeline, nullptr);
  Status status;
  TestContext context;
  context.cancel_after_emits = 2;
  RequestState state = Run(*pipeline, context, &status, 200);
  EXPECT_EQ(status.code(), StatusCode::kCancelled) << status.ToString();
  EXPECT_EQ(status.reason(), "test_cancel");
  EXPECT_LT(state.result.tokens.size(), 200u);  // the worker stopped early
}

TEST_F(TwoProcessTest, UnreachableWorkerIsUnavailable) {
  // Port 1 on loopback: nothing listens there.
  const std::string text = WithEndpoint(kLocal, "decode", "tcp://127.0.0.1:1");
  std::ofstream(dir_.File("dead.toml")) << text;
  PluginLoader loader(dir_.File("staging"));
  PluginMap plugins;
  for (const char* name : {"prefill_full", "keep_recent", "decode_local"}) {
    plugins[name] = loader.Load(std::string(SIFT_PLUGIN_DIR) + "/" + name + ".so", nullptr).plugin;
  }
  auto stages = ValidatePipeline(ParsePipelineFile(dir_.File("dead.toml")), plugins, nullptr);
  const Model& model = *TestModel();
  RequestState state;
  state.tokens = sift::testing::TestPrompt(model);
  state.prompt_length = static_cast<int64_t>(state.tokens.size());
  TestContext context;
  HopTimeouts timeouts;
  timeouts.connect_ms = 300;
  const auto start = std::chrono::steady_clock::now();
  Status status =
      RunPipeline("dead", stages, model, state, json::object(), context, RemoteHops{timeouts, {}});
  EXPECT_EQ(status.code(), StatusCode::kUnavailable) << status.ToString();
  EXPECT_NE(status.message().find("tcp://127.0.0.1:1: cannot connect within 300 ms"),
            std::string::npos)
      << status.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  // The endpoint's circuit is now open: the next request fails at once, saying so.
  status =
      RunPipeline("dead", stages, model, state, json::object(), context, RemoteHops{timeouts, {}});
  EXPECT_EQ(status.code(), StatusCode::kUnavailable) << status.ToString();
  EXPECT_NE(status.message().find("circuit open"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace sift::daemon
