// SptsSchedule (no model): active-set and candidate sizes per stage, pruning at stage ends,
// the ablations without MSDP, proportional budgets, and setting validation.
#include <gtest/gtest.h>

#include "sift/error.h"
#include "spts_schedule.h"

namespace sift::plugins {
namespace {

constexpr int64_t kLayers = 30;

TEST(SptsScheduleTest, DefaultsAt8K) {
  SptsSettings s;  // skip 9, stage ends 12/17/22/26, budgets 2304/1792/1024/512, margin 256
  const auto plans = SptsSchedule::Make(s, kLayers, 8192);
  ASSERT_EQ(plans.size(), 30u);
  for (int l = 0; l < 9; ++l) {
    EXPECT_FALSE(plans[l].skip) << l;
    EXPECT_EQ(plans[l].active, 8192) << l;
  }
  // Stage 0: layers 9..12, all 8192 candidates, 2304 active; pruned to 2304 - 256 at 12.
  for (int l = 9; l <= 12; ++l) {
    EXPECT_TRUE(plans[l].skip);
    EXPECT_EQ(plans[l].stage, 0);
    EXPECT_EQ(plans[l].candidates, 8192);
    EXPECT_EQ(plans[l].active, 2304);
    EXPECT_EQ(plans[l].prune_to, l == 12 ? 2048 : 0);
  }
  for (int l = 13; l <= 17; ++l) {
    EXPECT_EQ(plans[l].stage, 1);
    EXPECT_EQ(plans[l].candidates, 2048);
    EXPECT_EQ(plans[l].active, 1792);
  }
  EXPECT_EQ(plans[17].prune_to, 1536);
  for (int l = 18; l <= 22; ++l) EXPECT_EQ(plans[l].active, 1024);
  EXPECT_EQ(plans[22].prune_to, 768);
  for (int l = 23; l <= 26; ++l) {
    EXPECT_EQ(plans[l].candidates, 768);
    EXPECT_EQ(plans[l].active, 512);
  }
  EXPECT_EQ(plans[26].prune_to, 256);
  for (int l = 27; l < 30; ++l) {  // tail: every remaining candidate is active
    EXPECT_EQ(plans[l].stage, 4);
    EXPECT_EQ(plans[l].candidates, 256);
    EXPECT_EQ(plans[l].active, 256);
    EXPECT_EQ(plans[l].prune_to, 0);
  }
}

TEST(SptsScheduleTest, TheFloor) {
  // Issue 29: at or below the floor every layer is dense (no skipping, no LTP); above it no
  // stage activates or keeps fewer than the floor, here with proportional budgets that would
  // give a 512-token prompt 16 tail tokens.
  SptsSettings s;
  s.floor = 128;
  for (int64_t n : {34, 128}) {
    for (const SptsLayerPlan& p : SptsSchedule::Make(s, kLayers, n)) {
      EXPECT_FALSE(p.skip) << n;
      EXPECT_EQ(p.active, n);
      EXPECT_EQ(p.candidates, n);
    }
  }
  s.fractions = true;
  s.budgets = {2304.0 / 8192, 1792.0 / 8192, 1024.0 / 8192, 512.0 / 8192};
  s.prune_margin = 256.0 / 8192;
  const auto plans = SptsSchedule::Make(s, kLayers, 512);
  EXPECT_TRUE(plans[9].skip);
  EXPECT_EQ(plans[9].active, 144);     // 28 % of 512 is above the floor
  EXPECT_EQ(plans[20].active, 128);    // 12.5 % would be 64
  EXPECT_EQ(plans[26].prune_to, 128);  // 6.25 % - 3.1 % would be 16
  EXPECT_EQ(plans[29].active, 128);
  s.floor = 0;  // no floor: the fractions as they are
  EXPECT_EQ(SptsSchedule::Make(s, kLayers, 512)[29].active, 16);
}

TEST(SptsScheduleTest, ShortPromptsClampBudgets) {
  SptsSettings s;
  const auto plans = SptsSchedule::Make(s, kLayers, 2000);
  EXPECT_EQ(plans[9].active, 2000);     // budget 2304 > n
  EXPECT_EQ(plans[12].prune_to, 2000);  // 2304 - 256 > n: nothing pruned
  EXPECT_EQ(plans[13].active, 1792);
  EXPECT_EQ(plans[17].prune_to, 1536);
  EXPECT_EQ(plans[29].active, 256);
}

TEST(SptsScheduleTest, WithoutMsdpCandidatesStayTheWholePrompt) {
  SptsSettings s;
  s.msdp = false;
  const auto plans = SptsSchedule::Make(s, kLayers, 8192);
  for (int l = 0; l < 30; ++l) {
    EXPECT_EQ(plans[l].candidates, 8192) << l;
    EXPECT_EQ(plans[l].prune_to, 0) << l;
  }
  EXPECT_EQ(plans[9].active, 2304);
  EXPECT_EQ(plans[20].active, 1024);
  EXPECT_EQ(plans[28].active, 256);  // same KV budget in the tail as with MSDP
}

TEST(SptsScheduleTest, ProportionalBudgets) {
  SptsSettings s;
  s.fractions = true;
  s.budgets = {0.25, 0.125};
  s.stage_ends = {14, 20};
  s.prune_margin = 0.0625;
  s.skip_start = 10;
  const auto plans = SptsSchedule::Make(s, kLayers, 1024);
  EXPECT_FALSE(plans[9].skip);
  EXPECT_EQ(plans[10].active, 256);
  EXPECT_EQ(plans[14].prune_to, 192);
  EXPECT_EQ(plans[15].candidates, 192);
  EXPECT_EQ(plans[15].active, 128);
  EXPECT_EQ(plans[20].prune_to, 64);
  EXPECT_EQ(plans[29].active, 64);
}

TEST(SptsScheduleTest, NoStagesMeansDense) {
  SptsSettings s;
  s.skip_start = kLayers;
  s.stage_ends = {};
  s.budgets = {};
  for (const auto& p : SptsSchedule::Make(s, kLayers, 100)) {
    EXPECT_FALSE(p.skip);
    EXPECT_EQ(p.active, 100);
  }
}

TEST(SptsScheduleTest, RejectsBadSettings) {
  SptsSettings s;
  s.budgets = {100, 50};  // 4 stage ends
  EXPECT_THROW(SptsSchedule::Validate(s, kLayers), Error);
  s = SptsSettings();
  s.stage_ends = {12, 11, 22, 26};
  EXPECT_THROW(SptsSchedule::Validate(s, kLayers), Error);
  s = SptsSettings();
  s.stage_ends = {8, 17, 22, 26};  // before skip_start
  EXPECT_THROW(SptsSchedule::Validate(s, kLayers), Error);
  s = SptsSettings();
  s.stage_ends = {12, 17, 22, 30};  // past the last layer
  EXPECT_THROW(SptsSchedule::Validate(s, kLayers), Error);
  s = SptsSettings();
  s.fractions = true;
  s.budgets = {0.5, 0.4, 1.5, 0.1};
  EXPECT_THROW(SptsSchedule::Validate(s, kLayers), Error);
  EXPECT_NO_THROW(SptsSchedule::Validate(SptsSettings(), kLayers));
}

}  // namespace
}  // namespace sift::plugins
