// pipelines/spts.toml through the real siftd (started as a process with this build's plugins and
// the repository's pipelines): a generate request answers with compressed KV statistics, using a
// proxy file the test calibrates itself (given as a per-request override, so the test does not
// depend on models/*.spts.bin); the Table 2 ablations answer too; a bad override is rejected.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "client.h"
#include "spts_calibration.h"
#include "support/siftd_process.h"
#include "support/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using sift::client::SiftClient;

const char* kContext =
    "Maria keeps her bicycle in the blue shed behind the library. The shed's code is 4417. "
    "On Sundays she rides along the river to the old mill and back before lunch. The library "
    "closes at six, and the shed is locked every evening by the caretaker, Mr. Osei.";

class SptsSiftdTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string model_path = sift::testing::ModelPath();
    if (model_path.empty() ||
        !fs::exists(std::string(SIFT_BINARY_DIR) + "/plugins/prefill_skip.so")) {
      return;
    }
    dir_ = new sift::testing::TempDir();
    proxy_ = dir_->path() + "/small.spts.bin";
    auto model = sift::Model::Load(model_path, sift::ModelOptions());
    sift::spts::CalibrationOptions o;
    o.d_low = 64;
    o.rank = 16;
    o.sequences = 2;
    o.seq_len = 32;
    std::vector<std::string> files;
    auto seqs =
        sift::spts::CalibrationSequences(*model, std::string(SIFT_SOURCE_DIR) + "/docs", o, &files);
    sift::spts::Calibrate(*model, seqs, o, {{"folder", "docs"}}).Save(proxy_);
    daemon_ = new sift::testing::SiftdProcess();
    start_error_ = daemon_->Start({"--workers", "1"});
  }
  static void TearDownTestSuite() {
    delete daemon_;
    delete dir_;
    daemon_ = nullptr;
    dir_ = nullptr;
  }
  void SetUp() override {
    SIFT_SKIP_WITHOUT_MODEL();
    if (!daemon_) GTEST_SKIP() << "prefill_skip.so not built";
    ASSERT_EQ(start_error_, "");
  }

  // Sends one generate request to `pipeline` and returns its terminal reply.
  json Generate(const std::string& id, const json& params) {
    sift::client::ClientOptions o;
    o.endpoint = daemon_->endpoint();
    SiftClient c(ctx_, o);
    c.Send({{"type", "generate"},
            {"id", id},
            {"pipeline", "spts"},
            {"context", kContext},
            {"question", "What is the shed's code?"},
            {"max_tokens", 8},
            {"params", params}});
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    json h;
    while (std::chrono::steady_clock::now() < end) {
      if (!c.Recv(&h, 100) || h.value("id", json()) != json(id)) continue;
      if (h["type"] == "final" || h["type"] == "error") return h;
    }
    return {{"type", "timeout"}};
  }

  static inline sift::testing::TempDir* dir_ = nullptr;
  static inline sift::testing::SiftdProcess* daemon_ = nullptr;
  static inline std::string proxy_, start_error_;
  zmq::context_t ctx_{1};
};

TEST_F(SptsSiftdTest, AnswersWithCompressedCache) {
  // Budgets small enough for this ~90-token prompt to be compressed (floor 0: no floor).
  const json f = Generate(
      "a",
      {{"prefill",
        {{"proxy", proxy_}, {"budgets", {48, 40, 32, 24}}, {"prune_margin", 8}, {"floor", 0}}}});
  ASSERT_EQ(f["type"], "final") << f.dump() << "\n" << daemon_->log();
  EXPECT_FALSE(f["text"].get<std::string>().empty());
  EXPECT_GE(f["usage"]["completion_tokens"].get<int>(), 1);
  const json& s = f["stats"];
  const int64_t prompt = f["usage"]["prompt_tokens"];
  EXPECT_GT(prompt, 48);
  EXPECT_LT(s["kv_bytes"].get<int64_t>(), s["kv_bytes_full"].get<int64_t>());
  EXPECT_LT(s["tokens_kept"].get<int64_t>(), prompt);
  EXPECT_GT(s["ttft_ms"].get<double>(), 0);
  EXPECT_EQ(s["stages"][0]["kind"], "prefill");
}

TEST_F(SptsSiftdTest, AblationsAnswer) {
  for (const json& p : {json{{"ltp", false}, {"msdp", false}}, json{{"msdp", false}}}) {
    json params = p;
    params["proxy"] = proxy_;
    params["budgets"] = {48, 40, 32, 24};
    params["floor"] = 0;  // below the ~90-token prompt: compress it
    const json f = Generate("ab" + p.dump(), {{"prefill", params}});
    ASSERT_EQ(f["type"], "final") << p.dump() << ": " << f.dump();
    EXPECT_LT(f["stats"]["kv_bytes"].get<int64_t>(), f["stats"]["kv_bytes_full"].get<int64_t>());
  }
}

TEST_F(SptsSiftdTest, BadOverrideIsRejected) {
  const json f = Generate("bad", {{"prefill", {{"proxy", proxy_}, {"budgets", {48, 40}}}}});
  ASSERT_EQ(f["type"], "error") << f.dump();
  EXPECT_EQ(f["code"], "INVALID_ARGUMENT") << f.dump();
  EXPECT_NE(f.dump().find("budgets"), std::string::npos) << f.dump();
}

}  // namespace
