// Both filter pipelines answer through the real siftd (started as a process with this build's
// plugins and the repository's pipelines), with small budgets so that a short prompt is really
// filtered: the final reply reports the original prompt length, fewer kept tokens, smaller KV
// bytes, four timed stages and generated text.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "client.h"
#include "support/siftd_process.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string Context() {
  std::string c;
  for (int i = 0; i < 24; ++i) {
    c += i == 9 ? "The pass key is 68217. Remember it. 68217 is the pass key. "
                : "The grass is green. The sky is blue. The sun is yellow. Here we go. ";
  }
  return c;
}

class FiltersSiftdTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (sift::testing::ModelPath().empty()) return;
    for (const char* p : {"prefill_full", "decode_local", "prefill_partial", "gemfilter",
                          "prefill_streaming", "ilre"}) {
      if (!std::filesystem::exists(std::string(SIFT_BINARY_DIR) + "/plugins/" + p + ".so")) {
        return;
      }
    }
    daemon_ = new sift::testing::SiftdProcess();
    start_error_ = daemon_->Start({"--n-ctx", "1024", "--workers", "1"});
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override {
    SIFT_SKIP_WITHOUT_MODEL();
    if (!daemon_) GTEST_SKIP() << "filter plugins not built";
    ASSERT_EQ(start_error_, "");
  }
  json Ask(const std::string& pipeline, const json& params) {
    sift::client::ClientOptions o;
    o.endpoint = daemon_->endpoint();
    sift::client::SiftClient c(ctx_, o);
    const std::string id = pipeline + "-1";
    c.Send({{"type", "generate"},
            {"id", id},
            {"pipeline", pipeline},
            {"context", Context()},
            {"question", "What is the pass key? The pass key is"},
            {"max_tokens", 8},
            {"params", params}});
    const auto end = Clock::now() + std::chrono::seconds(60);
    json h;
    while (Clock::now() < end) {
      if (!c.Recv(&h, 100) || h.value("id", json()) != json(id)) continue;
      if (h["type"] == "final" || h["type"] == "error") return h;
    }
    return json{{"type", "timeout"}};
  }

  static inline sift::testing::SiftdProcess* daemon_ = nullptr;
  static inline std::string start_error_;
  zmq::context_t ctx_{1};
};

void ExpectFiltered(const json& reply, int64_t max_kept) {
  ASSERT_EQ(reply["type"], "final") << reply.dump();
  const json& stats = reply["stats"];
  EXPECT_GT(stats["tokens_before"].get<int64_t>(), 400) << stats.dump();
  EXPECT_LE(stats["tokens_kept"].get<int64_t>(), max_kept) << stats.dump();
  EXPECT_LT(stats["kv_bytes"].get<int64_t>(), stats["kv_bytes_full"].get<int64_t>());
  // SmolLM2-135M does not recall the key even with the full cache on this prompt (checked
  // against pipeline "full"), so the text is not compared; accuracy is the bench's job.
  EXPECT_FALSE(reply["text"].get<std::string>().empty());
  EXPECT_GT(reply["usage"]["completion_tokens"].get<int64_t>(), 0);
  ASSERT_EQ(stats["stages"].size(), 4u);
  EXPECT_EQ(stats["stages"][1]["kind"], "filter");
}

TEST_F(FiltersSiftdTest, GemFilterAnswers) {
  // topk counts the question too; layer 13 as the paper.
  ExpectFiltered(Ask("gemfilter", {{"filter", {{"topk", 160}}}}), 160);
}

TEST_F(FiltersSiftdTest, IlreAnswers) {
  // 4 sink + 128 context + the query part (about 40 tokens with the chat template's tail).
  ExpectFiltered(Ask("ilre", {{"filter", {{"budget", 128}}}}), 4 + 128 + 60);
}

}  // namespace
