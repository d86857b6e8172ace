// RequestState's helpers (sift/request_state.h): Clone is a deep copy, the resets clear exactly
// what they say, and AdoptProducts takes what a stage may change and nothing else.
#include "sift/request_state.h"

#include <gtest/gtest.h>

#include <type_traits>

namespace sift {
namespace {

static_assert(!std::is_copy_constructible_v<RequestState>, "Clone() is the one copy");
static_assert(std::is_move_constructible_v<RequestState>);

KvCacheShape Shape() { return KvCacheShape{2, 2, 4, at::kFloat, at::kCPU}; }

std::unique_ptr<KvCache> Cache(int64_t n) {
  auto cache = std::make_unique<KvCache>(Shape());
  const at::Tensor pos = at::arange(n, at::kLong);
  const at::Tensor k = pos.to(at::kFloat).view({n, 1, 1}).expand({n, 2, 4}).contiguous();
  for (int64_t l = 0; l < 2; ++l) cache->Append(l, k, -k, pos);
  return cache;
}

AttentionStats Stats(int64_t n) {
  AttentionStats s;
  s.window_sum = at::ones({3, n});
  s.column_sum = at::full({3, n}, 2.0);
  s.max_prob = at::arange(n, at::kFloat);
  return s;
}

// A state as it is after a prefill and a select, with every field set.
RequestState Filled() {
  RequestState s;
  s.id = "r1";
  s.tokens = {5, 6, 7, 8, 9, 10};
  s.question_begin = 4;
  s.prompt_length = 6;
  s.generation.max_tokens = 12;
  s.generation.stop_strings = {"\n\n"};
  s.cache = Cache(6);
  s.next_position = 6;
  s.last_logits = at::arange(10, at::kFloat);
  s.layer_stats[0] = Stats(6);
  s.kept_indices[1] = at::tensor({0, 2, 4}, at::kLong).expand({2, 3}).contiguous();
  s.plan.stats[0].window = 2;
  s.plan.reuse_leader[1] = 0;
  s.result.tokens = {42};
  s.result.text = "x";
  s.stats.stages.push_back(StageCost{"prefill", "prefill_full@1.0.0", StageKind::kPrefill, 3.5, 6,
                                     6 * 2 * KvCache::EntryBytes(Shape())});
  return s;
}

TEST(RequestStateTest, CloneCopiesEveryField) {
  const RequestState a = Filled();
  const RequestState b = a.Clone();
  EXPECT_EQ(b.id, a.id);
  EXPECT_EQ(b.tokens, a.tokens);
  EXPECT_EQ(b.question_begin, 4);
  EXPECT_EQ(b.prompt_length, 6);
  EXPECT_EQ(b.generation.max_tokens, 12);
  EXPECT_EQ(b.generation.stop_strings, a.generation.stop_strings);
  ASSERT_NE(b.cache, nullptr);
  EXPECT_NE(b.cache.get(), a.cache.get());
  EXPECT_TRUE(at::equal(b.cache->Keys(1), a.cache->Keys(1)));
  EXPECT_TRUE(at::equal(b.cache->Positions(0), a.cache->Positions(0)));
  EXPECT_EQ(b.next_position, 6);
  EXPECT_TRUE(at::equal(b.last_logits, a.last_logits));
  ASSERT_EQ(b.layer_stats.count(0), 1u);
  EXPECT_TRUE(at::equal(b.layer_stats.at(0).window_sum, a.layer_stats.at(0).window_sum));
  EXPECT_TRUE(at::equal(b.layer_stats.at(0).max_prob, a.layer_stats.at(0).max_prob));
  EXPECT_FALSE(b.layer_stats.at(0).last_query.defined());  // undefined stays undefined
  EXPECT_TRUE(at::equal(b.kept_indices.at(1), a.kept_indices.at(1)));
  EXPECT_EQ(b.plan.stats.at(0).window, 2);
  EXPECT_EQ(b.plan.reuse_leader.at(1), 0);
  EXPECT_EQ(b.result.tokens, a.result.tokens);
  EXPECT_EQ(b.result.text, "x");
  ASSERT_EQ(b.stats.stages.size(), 1u);
  EXPECT_EQ(b.stats.stages[0].plugin, "prefill_full@1.0.0");
  EXPECT_EQ(b.stats.stages[0].kv_bytes, a.stats.stages[0].kv_bytes);
}

TEST(RequestStateTest, MutatingACloneLeavesTheOriginalUnchanged) {
  const RequestState a = Filled();
  const at::Tensor keys = a.cache->Keys(0).clone(), logits = a.last_logits.clone();
  const at::Tensor window = a.layer_stats.at(0).window_sum.clone();
  const at::Tensor kept = a.kept_indices.at(1).clone();

  RequestState b = a.Clone();
  // In place, through every tensor the clone holds ...
  b.cache->Keys(0).fill_(-7);
  b.cache->Positions(0).fill_(-7);
  b.last_logits.fill_(-7);
  b.layer_stats.at(0).window_sum.fill_(-7);
  b.kept_indices.at(1).fill_(-7);
  // ... and by editing the cache and the plain fields.
  b.cache->Select(1, at::tensor({0}, at::kLong));
  b.cache->Append(0, at::zeros({1, 2, 4}), at::zeros({1, 2, 4}), at::tensor({6}, at::kLong));
  b.tokens.push_back(11);
  b.plan.stats[5].column_sum = true;
  b.stats.stages.clear();

  EXPECT_TRUE(at::equal(a.cache->Keys(0), keys));
  EXPECT_TRUE(at::equal(a.cache->Positions(0), at::arange(6, at::kLong).expand({2, 6})));
  EXPECT_EQ(a.cache->size(0), 6);
  EXPECT_EQ(a.cache->size(1), 6);
  EXPECT_TRUE(at::equal(a.last_logits, logits));
  EXPECT_TRUE(at::equal(a.layer_stats.at(0).window_sum, window));
  EXPECT_TRUE(at::equal(a.kept_indices.at(1), kept));
  EXPECT_EQ(a.tokens.size(), 6u);
  EXPECT_EQ(a.plan.stats.count(5), 0u);
  EXPECT_EQ(a.stats.stages.size(), 1u);
}

TEST(RequestStateTest, CloneWithoutACache) {
  RequestState a;
  a.tokens = {1, 2};
  const RequestState b = a.Clone();
  EXPECT_EQ(b.cache, nullptr);
  EXPECT_FALSE(b.last_logits.defined());
  EXPECT_EQ(b.tokens, a.tokens);
}

// Input, plan, result and stats survive; every product goes.
void ExpectNoProducts(const RequestState& s) {
  EXPECT_EQ(s.cache, nullptr);
  EXPECT_EQ(s.next_position, 0);
  EXPECT_FALSE(s.last_logits.defined());
  EXPECT_TRUE(s.kept_indices.empty());
}
void ExpectInputPlanResultStatsKept(const RequestState& s) {
  EXPECT_EQ(s.id, "r1");
  EXPECT_EQ(s.generation.max_tokens, 12);
  EXPECT_EQ(s.plan.reuse_leader.at(1), 0);
  EXPECT_EQ(s.result.tokens, (std::vector<TokenId>{42}));
  EXPECT_EQ(s.stats.stages.size(), 1u);
}

TEST(RequestStateTest, DropProductsClearsWhatThePromptProduced) {
  RequestState s = Filled();
  s.DropProducts();
  ExpectNoProducts(s);
  EXPECT_TRUE(s.layer_stats.empty());
  EXPECT_EQ(s.tokens.size(), 6u);
  EXPECT_EQ(s.question_begin, 4);
  EXPECT_EQ(s.prompt_length, 6);
  ExpectInputPlanResultStatsKept(s);
}

TEST(RequestStateTest, ResetForNewTokensIsWhatAFilterDoes) {
  RequestState s = Filled();
  s.ResetForNewTokens({6, 9, 10}, 1);
  EXPECT_EQ(s.tokens, (std::vector<TokenId>{6, 9, 10}));
  EXPECT_EQ(s.question_begin, 1);
  EXPECT_EQ(s.prompt_length, 6);  // the original length stays
  ExpectNoProducts(s);
  EXPECT_TRUE(s.layer_stats.empty());
  ExpectInputPlanResultStatsKept(s);

  // A second filter keeps the first original length; an unset one becomes the old prompt's.
  s.ResetForNewTokens({10}, 1);
  EXPECT_EQ(s.prompt_length, 6);
  RequestState unset;
  unset.tokens = {1, 2, 3, 4};
  unset.ResetForNewTokens({4}, 1);
  EXPECT_EQ(unset.prompt_length, 4);
}

TEST(RequestStateTest, AdoptPrefillTakesAFreshPrefillsProducts) {
  RequestState s = Filled();
  s.ResetForNewTokens({6, 9, 10}, 1);  // as after a filter
  std::map<int64_t, AttentionStats> stats;
  stats[3] = Stats(3);
  auto cache = Cache(3);
  const KvCache* raw = cache.get();
  s.AdoptPrefill(std::move(cache), at::ones({10}), std::move(stats));
  EXPECT_EQ(s.cache.get(), raw);
  EXPECT_EQ(s.next_position, 3);
  EXPECT_TRUE(at::equal(s.last_logits, at::ones({10})));
  EXPECT_EQ(s.layer_stats.size(), 1u);
  EXPECT_EQ(s.layer_stats.count(3), 1u);
  EXPECT_TRUE(s.kept_indices.empty());
  EXPECT_EQ(s.prompt_length, 6);

  RequestState fresh = Filled();  // a select's kept indices do not survive a new prefill
  fresh.AdoptPrefill(Cache(6), at::ones({10}), {});
  EXPECT_TRUE(fresh.kept_indices.empty());
  EXPECT_TRUE(fresh.layer_stats.empty());

  RequestState unset;
  unset.tokens = {1, 2, 3};
  unset.AdoptPrefill(Cache(3), at::ones({10}), {});
  EXPECT_EQ(unset.prompt_length, 3);
}

TEST(RequestStateTest, AdoptScoresKeepsOnlyTheStatistics) {
  RequestState s = Filled();
  std::map<int64_t, AttentionStats> stats;
  stats[9] = Stats(6);
  s.AdoptScores(std::move(stats));
  ExpectNoProducts(s);
  EXPECT_EQ(s.layer_stats.size(), 1u);
  EXPECT_TRUE(s.layer_stats.at(9).max_prob.defined());
  ExpectInputPlanResultStatsKept(s);

  RequestState unset;
  unset.tokens = {1, 2, 3};
  unset.AdoptScores({});
  EXPECT_EQ(unset.prompt_length, 3);
}

TEST(RequestStateTest, AdoptProductsTakesWhatAStageMayChange) {
  RequestState mine = Filled();
  RequestState reply = Filled();  // a worker's copy after its stage ran
  reply.id = "other";
  reply.generation.max_tokens = 1;
  reply.plan.reuse_leader.clear();
  reply.stats.stages.clear();
  reply.tokens = {7, 8};
  reply.question_begin = 1;
  reply.prompt_length = 9;
  reply.cache = Cache(2);
  reply.next_position = 2;
  reply.last_logits = at::zeros({10});
  reply.layer_stats.clear();
  reply.kept_indices.clear();
  reply.kept_indices[0] = at::zeros({2, 1}, at::kLong);
  reply.result.text = "answer";
  const KvCache* cache = reply.cache.get();

  mine.AdoptProducts(std::move(reply));
  EXPECT_EQ(mine.tokens, (std::vector<TokenId>{7, 8}));
  EXPECT_EQ(mine.question_begin, 1);
  EXPECT_EQ(mine.prompt_length, 9);
  EXPECT_EQ(mine.cache.get(), cache);
  EXPECT_EQ(mine.next_position, 2);
  EXPECT_TRUE(at::equal(mine.last_logits, at::zeros({10})));
  EXPECT_TRUE(mine.layer_stats.empty());
  EXPECT_EQ(mine.kept_indices.count(1), 0u);
  EXPECT_EQ(mine.kept_indices.count(0), 1u);
  EXPECT_EQ(mine.result.text, "answer");
  // Not a stage's to change: the request's identity, options, plan and the runner's records.
  EXPECT_EQ(mine.id, "r1");
  EXPECT_EQ(mine.generation.max_tokens, 12);
  EXPECT_EQ(mine.plan.reuse_leader.at(1), 0);
  EXPECT_EQ(mine.stats.stages.size(), 1u);
}

}  // namespace
}  // namespace sift
