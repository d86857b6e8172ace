// sift-bench task generators and scorers (tools/bench/tasks.h) with the real tokenizer of
// $SIFT_MODEL (skipped when unset): deterministic from the seed, prompts fit the requested
// length (never over, within the documented slack), needles sit in the context at the requested
// depth, and every scorer gives 1 to the references and 0 to a wrong answer.
#include "tasks.h"
#include "haystack.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "sift/gguf.h"
#include "sift/tokenizer.h"

namespace sift::bench {
namespace {

class TasksTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* path = std::getenv("SIFT_MODEL");
    if (path == nullptr || *path == '\0') return;
    file_ = GgufFile::Open(path).release();
    tokenizer_ = Tokenizer::FromGguf(*file_).release();
  }
  void SetUp() override {
    if (tokenizer_ == nullptr) GTEST_SKIP() << "SIFT_MODEL is not set";
  }
  static Sample Make(const std::string& task, int64_t length, int depth, int64_t index,
                     const std::string& dir = DefaultHaystackDir(), uint64_t seed = 7) {
    TaskOptions o;
    o.task = task;
    o.length = length;
    o.depth_percent = depth;
    o.seed = seed;
    o.haystack_dir = dir;
    return MakeSample(o, *tokenizer_, index);
  }
  static std::string Joined(const Sample& s) {
    std::string out = "Sure: ";
    for (const std::string& a : s.answers) out += a + ", ";
    return out;
  }
  // Checks the length contract and the needles of one sample.
  static void CheckFits(const Sample& s, int64_t slack) {
    SCOPED_TRACE(s.id);
    const int64_t total = PromptTokens(*tokenizer_, s.context, s.question) + s.max_tokens;
    EXPECT_EQ(total - s.max_tokens, s.prompt_tokens);
    EXPECT_LE(total, s.length);
    EXPECT_GE(total, s.length - slack);
    for (const std::string& n : s.needles) {
      EXPECT_NE(s.context.find(n), std::string::npos) << n;
    }
  }
  static inline const GgufFile* file_ = nullptr;
  static inline const Tokenizer* tokenizer_ = nullptr;
};

TEST_F(TasksTest, EveryTaskFitsIsDeterministicAndScores) {
  for (const std::string& task : TaskNames()) {
    SCOPED_TRACE(task);
    const Sample a = Make(task, 1024, -1, 0);
    const Sample again = Make(task, 1024, -1, 0);
    const Sample b = Make(task, 1024, -1, 1);
    const Sample other_seed = Make(task, 1024, -1, 0, DefaultHaystackDir(), 8);
    EXPECT_EQ(a.context, again.context);
    EXPECT_EQ(a.question, again.question);
    EXPECT_EQ(a.answers, again.answers);
    if (task == "needle") {  // one fixed needle: the haystack position differs instead
      EXPECT_NE(a.context, b.context);
    } else {
      EXPECT_NE(a.answers, b.answers);
      EXPECT_NE(a.answers, other_seed.answers);
    }
    EXPECT_EQ(a.task, task);
    EXPECT_GT(a.max_tokens, 0);
    ASSERT_FALSE(a.answers.empty());
    const bool stream =
        task == "passkey" || task == "needle" ||
        (task.rfind("niah_", 0) == 0 && task != "niah_multikey_2" && task != "niah_multikey_3");
    CheckFits(a, stream ? kStreamSlack : kUnitSlack);
    CheckFits(b, stream ? kStreamSlack : kUnitSlack);
    EXPECT_DOUBLE_EQ(Score(a, Joined(a)), 1.0);
    EXPECT_DOUBLE_EQ(Score(a, "I do not know the answer."), 0.0);
    // Another sample's answers (substring matching may credit a shared word of the list tasks).
    if (task != "needle") {
      EXPECT_LT(Score(a, Joined(b)), 0.5);
    }
    // The answers of a RULER task appear in the context (the task is answerable).
    if (task != "cwe" && task != "fwe" && task != "needle") {
      for (const std::string& ans : a.answers) {
        EXPECT_NE(a.context.find(ans), std::string::npos) << ans;
      }
    }
  }
}

TEST_F(TasksTest, NeedleSamplesAtOneDepthDiffer) {
  // --samples N with --depths D: each sample at a depth is another prompt (the needle is fixed,
  // so the haystack differs); sample 0 stays the classic prompt, the haystack from its start.
  const Sample a = Make("needle", 1024, 50, 0);
  const Sample b = Make("needle", 1024, 50, 1);
  const Sample c = Make("needle", 1024, 50, 2);
  EXPECT_NE(a.context, b.context);
  EXPECT_NE(b.context, c.context);
  const auto hay = LoadHaystack(DefaultHaystackDir(), *tokenizer_, false);
  EXPECT_EQ(a.context.substr(0, 200), hay->Prefix(400).substr(0, 200));
  CheckFits(b, kStreamSlack);
}

// The default haystack is the committed World English Bible corpus, read in name order from its
// start.
TEST_F(TasksTest, DefaultHaystackIsTheCommittedCorpus) {
  const std::string dir = DefaultHaystackDir();
  ASSERT_FALSE(dir.empty())
      << "tools/bench/corpus/world-english-bible is missing from the source tree";
  EXPECT_EQ(std::filesystem::path(dir).filename(), "world-english-bible");
  const auto hay = LoadHaystack(dir, *tokenizer_, false, 65536);
  EXPECT_TRUE(hay->essays);
  EXPECT_EQ(hay->text.rfind("In the beginning, God created the heavens and the earth.", 0), 0u);
  EXPECT_GE(hay->tokens.size(), 65536u);
}

TEST_F(TasksTest, LongPromptsGetTheirLength) {
  // The corpus prefix grows with the prompt: a 32K needle prompt has ~32K tokens (it had 21K when
  // the prefix was fixed), while an 8K prompt keeps exactly the prefix it always had.
  ASSERT_FALSE(DefaultHaystackDir().empty());
  const Sample s = Make("needle", 32768, 50, 0);
  EXPECT_GE(s.prompt_tokens, 32768 * 9 / 10);
  CheckFits(s, kStreamSlack);
  EXPECT_EQ(LoadHaystack(DefaultHaystackDir(), *tokenizer_, false, 8192).get(),
            LoadHaystack(DefaultHaystackDir(), *tokenizer_, false).get());
}

TEST_F(TasksTest, NeedlesSitAtTheRequestedDepth) {
  for (const char* task : {"passkey", "needle", "niah_single_2"}) {
    for (int depth : {0, 25, 50, 75, 100}) {
      const Sample s = Make(task, 2048, depth, 3);
      SCOPED_TRACE(s.id);
      EXPECT_EQ(s.depth_percent, depth);
      CheckFits(s, kStreamSlack);
      ASSERT_EQ(s.needles.size(), 1u);
      const size_t at = s.context.find(s.needles[0]);
      ASSERT_NE(at, std::string::npos);
      const double frac = static_cast<double>(at) / static_cast<double>(s.context.size());
      // Moved back to a sentence start: a little before the depth, never after.
      EXPECT_LE(frac, depth / 100.0 + 0.02);
      EXPECT_GE(frac, depth / 100.0 - 0.06);
    }
  }
}

TEST_F(TasksTest, PasskeyFollowsIlreFormat) {
  const Sample s = Make("passkey", 512, -1, 4);
  CheckFits(s, kStreamSlack);
  EXPECT_EQ(s.depth_percent, 20);  // index % 20 segments of 5 %
  ASSERT_EQ(s.answers.size(), 1u);
  EXPECT_EQ(s.answers[0].size(), 6u);
  EXPECT_NE(s.needles[0].find(" magic passkey is " + s.answers[0] + "."), std::string::npos);
  EXPECT_EQ(s.question.rfind("# What's the ", 0), 0u);
  // A whole digit run: a longer number that contains the key does not count.
  EXPECT_DOUBLE_EQ(Score(s, "The passkey is " + s.answers[0] + "."), 1.0);
  EXPECT_DOUBLE_EQ(Score(s, "It is 9" + s.answers[0]), 0.0);
  TaskOptions o{"passkey", 1024, 50, 1, "", 12};
  const Sample longer = MakeSample(o, *tokenizer_, 0);
  EXPECT_EQ(longer.answers[0].size(), 12u);
}

TEST_F(TasksTest, NoiseHaystackWithoutAFolder) {
  const Sample s = Make("needle", 1024, 50, 0, "/nonexistent-folder");
  CheckFits(s, kStreamSlack);
  EXPECT_NE(s.context.find("The grass is green. The sky is blue."), std::string::npos);
}

TEST_F(TasksTest, RulerScoringIsStringMatchAll) {
  Sample s;
  s.task = "niah_multivalue";
  s.answers = {"1234567", "7654321"};
  EXPECT_DOUBLE_EQ(Score(s, "  1234567 and 7654321\n"), 1.0);
  EXPECT_DOUBLE_EQ(Score(s, "1234567"), 0.5);
  EXPECT_DOUBLE_EQ(Score(s, ""), 0.0);
  s.task = "cwe";
  s.answers = {"Apple"};
  EXPECT_DOUBLE_EQ(Score(s, "1. apple"), 1.0);
}

TEST_F(TasksTest, UnknownTaskAndTooShortLengthThrow) {
  EXPECT_ANY_THROW(Make("nope", 1024, -1, 0));
  EXPECT_ANY_THROW(Make("niah_single_1", 100, -1, 0));
}

}  // namespace
}  // namespace sift::bench
