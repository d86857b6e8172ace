// The streaming (Λ-mask, chunked, trimmed-cache) prefill against a dense reference that runs
// the whole prompt at once under the same mask (ILRe's scoring pass, and StreamingLLM's prefill
// of the whole model), both resumed from cached states, and the partial prefill against a full
// forward.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "model_env.h"
#include "partial_prefill.h"
#include "sift/error.h"
#include "sift/kv_cache.h"
#include "streaming_prefill.h"

namespace sift::plugins {
namespace {

using sift::testing::FillerPrompt;
using sift::testing::Fp32Model;

// A^C at layer `r` computed densely: every layer below r sees the whole prompt at once under the
// Λ mask (nothing trimmed, nothing chunked), then softmax(q·Kᵀ/√d) over the context keys, max
// over heads and query rows, written out without the blocked kernel.
at::Tensor DenseReference(const Model& model, const std::vector<TokenId>& tokens, int64_t ctx,
                          int64_t r, int64_t sink, int64_t window) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const at::Tensor pos = at::arange(n, at::kLong);
  at::Tensor x = model.Embed(at::tensor(std::vector<int64_t>(tokens.begin(), tokens.end())));
  AttentionOptions lambda;
  lambda.sink = sink;
  lambda.window = window;
  for (int64_t l = 0; l < r; ++l) x = model.Layer(l, x, pos, nullptr, lambda);
  Model::Qkv qkv = model.ProjectQkv(r, model.AttnNorm(r, x));
  const at::Tensor k = model.ApplyRope(qkv.k, pos).narrow(0, 0, ctx).to(at::kFloat);
  const at::Tensor q = model.ApplyRope(qkv.q, pos).narrow(0, ctx, n - ctx).to(at::kFloat);
  const int64_t hq = q.size(1), group = hq / k.size(1);
  const at::Tensor k_rep = k.repeat_interleave(group, 1);  // [ctx, Hq, hd]
  const at::Tensor logits = at::einsum("ihd,jhd->hij", {q, k_rep}) / std::sqrt(q.size(2));
  return std::get<0>(logits.softmax(-1).amax({0}).max(0));
}

TEST(StreamingPrefill, MatchesDenseLambdaReference) {
  SIFT_FILTERS_REQUIRE_MODEL();
  const Model& model = *Fp32Model();
  int64_t qb = 0;
  const std::vector<TokenId> tokens = FillerPrompt(model, 12, &qb);
  StreamingPrefillOptions o;
  o.sink = 2;
  o.window = 8;
  o.chunk = 16;
  StreamingScores got;
  ASSERT_TRUE(StreamingPrefill(model, tokens, qb, {1, 3}, o, &got));
  EXPECT_EQ(got.context_length, qb);
  for (int64_t r : {1, 3}) {
    const at::Tensor want = DenseReference(model, tokens, qb, r, 2, 8);
    ASSERT_EQ(got.scores.at(r).sizes(), want.sizes());
    EXPECT_TRUE(at::allclose(got.scores.at(r), want, 1e-4, 1e-5))
        << "layer " << r << " max diff " << (got.scores.at(r) - want).abs().max().item<float>();
  }
  // Memory: every layer below the deepest held at most sink + window + one chunk (+ sink).
  EXPECT_LE(got.peak_cache_entries, 3 * (2 * o.sink + o.window + o.chunk));
  // The Λ mask changes the result at layer 3 (so the comparison above is not vacuous).
  const at::Tensor causal = DenseReference(model, tokens, qb, 3, 0, 0);
  EXPECT_FALSE(at::allclose(got.scores.at(3), causal, 1e-3, 1e-4));
  // Asking for one layer only gives that layer's scores unchanged.
  StreamingScores alone;
  ASSERT_TRUE(StreamingPrefill(model, tokens, qb, {3}, o, &alone));
  EXPECT_TRUE(at::allclose(alone.scores.at(3), got.scores.at(3), 1e-5, 1e-6));
}

// The prefix cache's use of the pass: a run that keeps an archive (layers 0..R of every row)
// scores exactly as one without, and a run that starts from a prefix of that archive (short of
// the window, inside the first chunk, and the whole context) gives the same scores and the same
// archive as running every row.
TEST(StreamingPrefill, StartsFromACachedPrefixAsIfEveryRowRan) {
  SIFT_FILTERS_REQUIRE_MODEL();
  const Model& model = *Fp32Model();
  int64_t qb = 0;
  const std::vector<TokenId> tokens = FillerPrompt(model, 12, &qb);
  const int64_t n = static_cast<int64_t>(tokens.size());
  StreamingPrefillOptions o;
  o.sink = 2;
  o.window = 8;
  o.chunk = 16;
  const std::set<int64_t> layers = {1, 3};
  KvCacheShape shape = model.CacheShape();
  shape.num_layers = 4;

  StreamingScores plain;
  ASSERT_TRUE(StreamingPrefill(model, tokens, qb, layers, o, &plain));
  KvCache whole(shape);
  StreamingPrefillOptions archived = o;
  archived.archive = &whole;
  StreamingScores with_archive;
  ASSERT_TRUE(StreamingPrefill(model, tokens, qb, layers, archived, &with_archive));
  for (int64_t r : layers) EXPECT_TRUE(at::equal(with_archive.scores.at(r), plain.scores.at(r)));
  for (int64_t l = 0; l < 4; ++l) {
    ASSERT_EQ(whole.size(l), n) << "layer " << l;
    EXPECT_TRUE(at::equal(whole.Positions(l).select(0, 0), at::arange(n, at::kLong)));
  }

  ASSERT_GT(qb, 24);
  for (int64_t cached : {int64_t{5}, int64_t{13}, qb - 3, qb}) {
    SCOPED_TRACE("cached " + std::to_string(cached));
    KvCache prefix = whole.ClonePrefix(cached, n - cached);
    StreamingPrefillOptions resumed = o;
    resumed.archive = &prefix;
    resumed.cached = cached;
    StreamingScores got;
    ASSERT_TRUE(StreamingPrefill(model, tokens, qb, layers, resumed, &got));
    EXPECT_EQ(got.context_length, qb);
    for (int64_t r : layers) {
      EXPECT_TRUE(at::allclose(got.scores.at(r), plain.scores.at(r), 1e-4, 1e-5))
          << "layer " << r << " max diff "
          << (got.scores.at(r) - plain.scores.at(r)).abs().max().item<float>();
    }
    for (int64_t l = 0; l < 4; ++l) {
      ASSERT_EQ(prefix.size(l), n) << "layer " << l;
      EXPECT_TRUE(at::equal(prefix.Positions(l), whole.Positions(l))) << "layer " << l;
      EXPECT_TRUE(at::allclose(prefix.Keys(l), whole.Keys(l), 1e-4, 1e-5)) << "layer " << l;
      EXPECT_TRUE(at::allclose(prefix.Values(l), whole.Values(l), 1e-4, 1e-5)) << "layer " << l;
    }
  }
  // A prefix reaching into the query part, or an archive of another depth, is refused.
  KvCache too_long = whole.ClonePrefix(qb + 1, n);
  StreamingPrefillOptions bad = o;
  bad.archive = &too_long;
  bad.cached = qb + 1;
  StreamingScores unused;
  EXPECT_THROW(StreamingPrefill(model, tokens, qb, layers, bad, &unused), Error);
  KvCache shallow(model.CacheShape());
  bad.archive = &shallow;
  bad.cached = 0;
  EXPECT_THROW(StreamingPrefill(model, tokens, qb, layers, bad, &unused), Error);
}

// StreamingLLM's streaming prefill of the whole model: the last logits equal a dense forward
// under the same Λ mask (nothing trimmed, one chunk), the rolling cache holds the dense cache's
// sink and window entries only, and resuming from the state after the context, or after the
// whole prompt for a longer one (the next turn), gives the same logits and state.
TEST(StreamingForward, MatchesADenseLambdaForwardAndResumesFromAState) {
  SIFT_FILTERS_REQUIRE_MODEL();
  const Model& model = *Fp32Model();
  int64_t qb = 0;
  const std::vector<TokenId> tokens = FillerPrompt(model, 12, &qb);
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t layers = model.config().num_layers;
  StreamingPrefillOptions o;
  o.sink = 2;
  o.window = 8;
  o.chunk = 16;

  ForwardOptions dense;
  dense.attention.sink = 2;
  dense.attention.window = 8;
  KvCache full = model.NewCache();
  const at::Tensor want = model.Forward(tokens, 0, full, dense);
  KvCache causal_cache = model.NewCache();
  const at::Tensor causal = model.Forward(tokens, 0, causal_cache);
  EXPECT_FALSE(at::allclose(want, causal, 1e-3, 1e-4));  // the mask matters here

  KvCache rolling = model.NewCache(), at_context = model.NewCache();
  at::Tensor logits;
  ASSERT_TRUE(StreamingForward(model, tokens, 0, qb, o, &rolling, &at_context, &logits));
  EXPECT_TRUE(at::allclose(logits, want, 1e-4, 1e-4))
      << "max diff " << (logits - want).abs().max().item<float>();
  const at::Tensor kept = at::cat({at::arange(2), at::arange(n - 8, n)});
  for (int64_t l = 0; l < layers; ++l) {
    ASSERT_EQ(rolling.size(l), 10) << "layer " << l;
    EXPECT_TRUE(at::equal(rolling.Positions(l).select(0, 0), kept));
    // fp32 summation order differs between 16-row chunks and one forward: about 1e-6 of the
    // keys' scale (seen up to 2.7e-5 on keys of magnitude 10, on an element near 0).
    const at::Tensor want_keys = full.Keys(l).index_select(1, kept);
    const double atol = 1e-5 * want_keys.abs().max().item<double>();
    EXPECT_TRUE(at::allclose(rolling.Keys(l), want_keys, 1e-4, atol))
        << "layer " << l << ": max diff " << (rolling.Keys(l) - want_keys).abs().max().item<float>()
        << " of max " << want_keys.abs().max().item<float>();
    EXPECT_LE(at_context.size(l), 10);
  }

  // Another question about the same context, from the state after the context.
  KvCache resumed = at_context.Clone();
  at::Tensor again;
  ASSERT_TRUE(StreamingForward(model, tokens, qb, 0, o, &resumed, nullptr, &again));
  EXPECT_TRUE(at::allclose(again, logits, 1e-4, 1e-4));
  for (int64_t l = 0; l < layers; ++l) {
    EXPECT_TRUE(at::equal(resumed.Positions(l), rolling.Positions(l)));
    EXPECT_TRUE(at::allclose(resumed.Values(l), rolling.Values(l), 1e-4, 1e-5));
  }

  // The next turn: the prompt plus more text, from the state after the whole prompt.
  std::vector<TokenId> turn2 = tokens;
  const std::vector<TokenId> more = model.tokenizer().Encode(" It is 7341. And the red door?");
  turn2.insert(turn2.end(), more.begin(), more.end());
  KvCache fresh = model.NewCache();
  at::Tensor fresh_logits, next_logits;
  ASSERT_TRUE(StreamingForward(model, turn2, 0, 0, o, &fresh, nullptr, &fresh_logits));
  ASSERT_TRUE(StreamingForward(model, turn2, n, 0, o, &rolling, nullptr, &next_logits));
  EXPECT_TRUE(at::allclose(next_logits, fresh_logits, 1e-4, 1e-4));
  for (int64_t l = 0; l < layers; ++l) {
    EXPECT_TRUE(at::equal(rolling.Positions(l), fresh.Positions(l)));
    EXPECT_TRUE(at::allclose(rolling.Keys(l), fresh.Keys(l), 1e-4, 1e-5));
  }
  // A cache of another depth is refused.
  KvCacheShape shallow = model.CacheShape();
  shallow.num_layers = 2;
  KvCache wrong(shallow);
  EXPECT_THROW(StreamingForward(model, tokens, 0, 0, o, &wrong, nullptr, &logits), Error);
}

TEST(PartialPrefill, LastQueryScoresMatchFullForward) {
  SIFT_FILTERS_REQUIRE_MODEL();
  const Model& model = *Fp32Model();
  int64_t qb = 0;
  const std::vector<TokenId> tokens = FillerPrompt(model, 8, &qb);
  AttentionStatsRequest raw;
  raw.last_query_logit_sum = true;
  AttentionStatsRequest soft;
  soft.last_query = true;
  std::map<int64_t, AttentionStats> got;
  ASSERT_TRUE(PartialPrefill(model, tokens, {{2, soft}, {4, raw}}, {}, &got));

  KvCache cache = model.NewCache();
  ForwardOptions f;
  std::map<int64_t, AttentionStats> want;
  f.hooks.stats_request = [&](int64_t layer) {
    return layer == 4 ? raw : layer == 2 ? soft : AttentionStatsRequest{};
  };
  f.hooks.on_stats = [&](int64_t layer, AttentionStats&& s) { want[layer] = std::move(s); };
  model.Forward(tokens, 0, cache, f);
  const at::Tensor a = got.at(4).last_query_logit_sum, b = want.at(4).last_query_logit_sum;
  ASSERT_EQ(a.sizes(), b.sizes());
  EXPECT_TRUE(at::allclose(a, b, 1e-3, 1e-3)) << (a - b).abs().max().item<float>();
  EXPECT_TRUE(at::allclose(got.at(2).last_query, want.at(2).last_query, 1e-4, 1e-6));
}

// With a cache the pass keeps layers 0..r's KV; a second run that starts from the first run's
// prefix (the prefix cache's case) runs only the rest and scores as the whole pass does, and
// its cache holds what a whole run's would.
TEST(PartialPrefill, StartingFromACachedPrefixScoresAsTheWholePass) {
  SIFT_FILTERS_REQUIRE_MODEL();
  const Model& model = *Fp32Model();
  int64_t qb = 0;
  const std::vector<TokenId> tokens = FillerPrompt(model, 8, &qb);
  const int64_t n = static_cast<int64_t>(tokens.size()), prefix = n - 12;
  AttentionStatsRequest raw;
  raw.last_query_logit_sum = true;
  std::map<int64_t, AttentionStats> whole;
  ASSERT_TRUE(PartialPrefill(model, tokens, {{4, raw}}, {}, &whole));

  KvCacheShape shape = model.CacheShape();
  shape.num_layers = 5;
  KvCache first(shape);
  PartialPrefillOptions o;
  o.cache = &first;
  std::map<int64_t, AttentionStats> got;
  ASSERT_TRUE(PartialPrefill(model, tokens, {{4, raw}}, o, &got));
  for (int64_t l = 0; l < 5; ++l) EXPECT_EQ(first.size(l), n);
  EXPECT_TRUE(
      at::allclose(got.at(4).last_query_logit_sum, whole.at(4).last_query_logit_sum, 1e-3, 1e-3));

  KvCache second = first.ClonePrefix(prefix, n - prefix);
  o.cache = &second;
  o.cached = prefix;
  std::map<int64_t, AttentionStats> resumed;
  ASSERT_TRUE(PartialPrefill(model, tokens, {{4, raw}}, o, &resumed));
  const at::Tensor a = resumed.at(4).last_query_logit_sum, b = whole.at(4).last_query_logit_sum;
  ASSERT_EQ(a.sizes(), b.sizes());
  EXPECT_TRUE(at::allclose(a, b, 1e-3, 1e-3)) << (a - b).abs().max().item<float>();
  for (int64_t l = 0; l < 5; ++l) {
    EXPECT_EQ(second.size(l), n);
    EXPECT_TRUE(at::allclose(second.Keys(l), first.Keys(l), 1e-4, 1e-5)) << "layer " << l;
    EXPECT_TRUE(at::allclose(second.Values(l), first.Values(l), 1e-4, 1e-5)) << "layer " << l;
  }
  // A cache of the wrong depth is a caller's error.
  KvCache shallow(model.CacheShape());
  o.cache = &shallow;
  o.cached = 0;
  EXPECT_THROW(PartialPrefill(model, tokens, {{4, raw}}, o, &got), Error);
}

}  // namespace
}  // namespace sift::plugins
