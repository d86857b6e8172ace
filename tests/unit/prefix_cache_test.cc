// PrefixCache (sift/prefix_cache.h) and KvCache::ClonePrefix on small fp32 caches whose entries
// encode their token position, so every copy can be checked exactly: the longest prefix wins,
// caps and scopes hold, entries are superseded, other plugin generations dropped, and bytes are
// charged to and released from a budget (least recently used first); state entries serve only
// prompts that start with all of their tokens, and variants of one generation coexist.
#include "sift/prefix_cache.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "sift/error.h"

namespace sift {
namespace {

KvCacheShape Shape() {
  KvCacheShape s;
  s.num_layers = 2;
  s.num_kv_heads = 2;
  s.head_dim = 4;
  s.dtype = at::kFloat;
  return s;
}

// The full KV of `tokens` as a prefill would leave it: entry i of every layer holds token i at
// position i; keys are the token id plus 1000 x layer, values its negation.
KvCache CacheOf(const std::vector<TokenId>& tokens) {
  KvCache c(Shape());
  const int64_t n = static_cast<int64_t>(tokens.size());
  at::Tensor ids = at::tensor(std::vector<int64_t>(tokens.begin(), tokens.end())).to(at::kFloat);
  for (int64_t l = 0; l < 2; ++l) {
    at::Tensor k = (ids + 1000 * l).view({n, 1, 1}).expand({n, 2, 4}).clone();
    c.Append(l, k, -k, at::arange(n, at::kLong));
  }
  return c;
}

std::vector<TokenId> Seq(TokenId from, int64_t n) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), from);
  return t;
}

std::vector<TokenId> Concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const int64_t kEntryBytes = 2 * KvCache::EntryBytes(Shape());  // one token, both layers

PrefixCache::Options Opts(int64_t min_tokens = 4) {
  PrefixCache::Options o;
  o.min_tokens = min_tokens;
  return o;
}

TEST(KvCacheClonePrefixTest, CopiesTheFirstEntriesWithTheRequestedHeadroom) {
  const std::vector<TokenId> t = Seq(100, 50);
  KvCache c = CacheOf(t);
  KvCache p = c.ClonePrefix(20, 7);
  EXPECT_EQ(p.size(0), 20);
  EXPECT_EQ(p.size(1), 20);
  EXPECT_EQ(p.headroom(), 7);
  EXPECT_TRUE(p.Keys(1).equal(c.Keys(1).narrow(1, 0, 20)));
  EXPECT_TRUE(p.Positions(0).equal(c.Positions(0).narrow(1, 0, 20)));
  // A deep copy: editing the copy leaves the original alone.
  p.Keys(0).fill_(0);
  EXPECT_EQ(c.Keys(0)[0][3][0].item<float>(), 103);
  EXPECT_THROW(c.ClonePrefix(51, 0), Error);
}

TEST(PrefixCacheTest, TheLongestCommonPrefixIsServedUpToTheCap) {
  PrefixCache cache(Opts(), {});
  const std::vector<TokenId> doc = Seq(0, 40);
  ASSERT_TRUE(cache.Insert("p@1#a", Concat(doc, Seq(500, 10)), CacheOf(Concat(doc, Seq(500, 10)))));
  // A second question about the same document: the document is reused, its own question not.
  const std::vector<TokenId> q2 = Concat(doc, Seq(700, 5));
  auto hit = cache.Lookup("p@1#a", q2, 1000, 16);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 40);
  EXPECT_EQ(hit->cache.size(0), 40);
  EXPECT_EQ(hit->cache.headroom(), 5 + 16);  // the rest of the prompt and the decode budget
  EXPECT_EQ(hit->cache.Keys(1)[1][39][0].item<float>(), 1039);
  // The stage's cap (e.g. n - window) bounds the reuse.
  hit = cache.Lookup("p@1#a", q2, 25, 0);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 25);
  // Other scopes and short matches are misses.
  EXPECT_FALSE(cache.Lookup("q@1#a", q2, 1000, 0).has_value());
  EXPECT_FALSE(cache.Lookup("p@1#a", Concat(Seq(0, 3), Seq(900, 40)), 1000, 0).has_value());
  const PrefixCache::Stats s = cache.stats();
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.reused_tokens, 65);
  EXPECT_EQ(s.entries, 1);
  EXPECT_EQ(s.bytes, 50 * kEntryBytes);
}

TEST(PrefixCacheTest, ANewPromptSupersedesTheEntriesItSharesHalfOf) {
  PrefixCache cache(Opts(), {});
  const std::vector<TokenId> doc = Seq(0, 40);
  const std::vector<TokenId> q1 = Concat(doc, Seq(500, 10));
  const std::vector<TokenId> q2 = Concat(doc, Seq(600, 10));
  const std::vector<TokenId> other = Seq(5000, 30);
  ASSERT_TRUE(cache.Insert("p@1#a", q1, CacheOf(q1)));
  ASSERT_TRUE(cache.Insert("p@1#a", other, CacheOf(other)));
  // q2 shares 40 of q1's 50 tokens: it replaces q1 (one entry per document), not `other`.
  ASSERT_TRUE(cache.Insert("p@1#a", q2, CacheOf(q2)));
  EXPECT_EQ(cache.stats().entries, 2);
  auto hit = cache.Lookup("p@1#a", q1, 1000, 0);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 40);  // q1's own question is gone; the document is served by q2
  // A prompt already covered by an entry is not stored again.
  EXPECT_FALSE(cache.Insert("p@1#a", Seq(5000, 20), CacheOf(Seq(5000, 20))));
  // Too short to cache.
  EXPECT_FALSE(cache.Insert("p@1#a", Seq(9000, 3), CacheOf(Seq(9000, 3))));
}

TEST(PrefixCacheTest, AnotherGenerationOfThePluginDropsTheOldEntries) {
  PrefixCache cache(Opts(), {});
  const std::vector<TokenId> a = Seq(0, 20), b = Seq(100, 20);
  ASSERT_TRUE(cache.Insert("prefill_full@1.0.0#old", a, CacheOf(a)));
  ASSERT_TRUE(cache.Insert("other@1.0.0#x", a, CacheOf(a)));
  // The reloaded plugin never sees the old entries, and its first insert drops them.
  EXPECT_FALSE(cache.Lookup("prefill_full@1.0.0#new", a, 1000, 0).has_value());
  ASSERT_TRUE(cache.Insert("prefill_full@1.0.0#new", b, CacheOf(b)));
  EXPECT_EQ(cache.stats().entries, 2);
  EXPECT_FALSE(cache.Lookup("prefill_full@1.0.0#old", a, 1000, 0).has_value());
  EXPECT_TRUE(cache.Lookup("other@1.0.0#x", a, 1000, 0).has_value());
  EXPECT_EQ(PrefixCachePlugin("prefill_full@1.0.0#new"), "prefill_full");
}

// A state after `tokens` that is not their full KV: each layer holds only the first two and the
// last three tokens' entries (a streaming prefill's sink and window).
KvCache RollingStateOf(const std::vector<TokenId>& tokens) {
  KvCache full = CacheOf(tokens);
  const int64_t n = static_cast<int64_t>(tokens.size());
  const at::Tensor keep = at::tensor(std::vector<int64_t>{0, 1, n - 3, n - 2, n - 1});
  for (int64_t l = 0; l < 2; ++l) full.Select(l, keep);
  return full;
}

TEST(PrefixCacheTest, StateEntriesServeOnlyPromptsThatStartWithAllOfTheirTokens) {
  PrefixCache cache(Opts(), {});
  const std::vector<TokenId> doc = Seq(0, 30);
  ASSERT_TRUE(cache.InsertState("s@1#a/rolling", doc, RollingStateOf(doc), 0));
  EXPECT_EQ(cache.stats().bytes, RollingStateOf(doc).Bytes());
  // The same tokens are held already.
  EXPECT_FALSE(cache.InsertState("s@1#a/rolling", doc, RollingStateOf(doc), 0));
  const std::vector<TokenId> longer = Concat(doc, Seq(500, 10));
  auto hit = cache.LookupState("s@1#a/rolling", longer, 1000, 5);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 30);
  const KvCache want = RollingStateOf(doc);
  for (int64_t l = 0; l < 2; ++l) {
    ASSERT_EQ(hit->cache.size(l), 5);
    EXPECT_TRUE(at::equal(hit->cache.Keys(l), want.Keys(l)));
    EXPECT_TRUE(at::equal(hit->cache.Positions(l), want.Positions(l)));
  }
  EXPECT_GE(hit->cache.AllocatedBytes(), want.Bytes() + 15 * 2 * KvCache::EntryBytes(Shape()));
  // Not a prefix of the prompt (it stops short of the entry's end, or differs), above the cap,
  // or asked as a prefix entry: a miss.
  EXPECT_FALSE(cache.LookupState("s@1#a/rolling", Seq(0, 29), 1000, 0).has_value());
  EXPECT_FALSE(cache.LookupState("s@1#a/rolling", Concat(Seq(0, 20), Seq(900, 20)), 1000, 0));
  EXPECT_FALSE(cache.LookupState("s@1#a/rolling", longer, 29, 0).has_value());
  EXPECT_FALSE(cache.Lookup("s@1#a/rolling", longer, 1000, 0).has_value());
  // Of two state entries that begin the prompt, the longer one serves it.
  const std::vector<TokenId> turn2 = Concat(longer, Seq(700, 4));
  ASSERT_TRUE(cache.InsertState("s@1#a/rolling", longer, RollingStateOf(longer), -1));
  EXPECT_EQ(cache.stats().entries, 2);
  EXPECT_EQ(cache.LookupState("s@1#a/rolling", turn2, 1000, 0)->tokens, 40);
  // `least`: the state after exactly a given prefix (a compressed context), not a shorter one.
  EXPECT_EQ(cache.LookupState("s@1#a/rolling", longer, 40, 0, 40)->tokens, 40);
  EXPECT_FALSE(cache.LookupState("s@1#a/rolling", Concat(longer, Seq(1, 1)), 41, 0, 41));
  EXPECT_EQ(cache.LookupState("s@1#a/rolling", Concat(doc, Seq(2, 9)), 39, 0, 30)->tokens, 30);
  // Superseding drops the scope's state entries that share at least half of theirs, except the
  // one of the kept prefix (the document's, for its next question).
  ASSERT_TRUE(cache.InsertState("s@1#a/rolling", turn2, RollingStateOf(turn2), 30));
  EXPECT_EQ(cache.stats().entries, 2);
  EXPECT_EQ(cache.LookupState("s@1#a/rolling", Concat(turn2, Seq(1, 1)), 1000, 0)->tokens, 44);
  EXPECT_EQ(cache.LookupState("s@1#a/rolling", Concat(doc, Seq(2, 9)), 1000, 0)->tokens, 30);
  ASSERT_TRUE(cache.InsertState("s@1#a/rolling", Concat(turn2, Seq(1, 2)),
                                RollingStateOf(Concat(turn2, Seq(1, 2))), 0));
  EXPECT_EQ(cache.stats().entries, 1);
}

TEST(PrefixCacheTest, VariantsOfOneGenerationLiveSideBySide) {
  PrefixCache cache(Opts(), {});
  const std::vector<TokenId> a = Seq(0, 20);
  ASSERT_TRUE(cache.Insert("s@1#a/layers=8", a, CacheOf(a)));
  ASSERT_TRUE(cache.InsertState("s@1#a/rolling", a, RollingStateOf(a), 0));
  ASSERT_TRUE(cache.Insert("s@1#a/layers=4", a, CacheOf(a)));
  EXPECT_EQ(cache.stats().entries, 3);
  EXPECT_TRUE(cache.Lookup("s@1#a/layers=8", Concat(a, Seq(50, 1)), 1000, 0).has_value());
  // Another generation of the plugin drops every variant of the old one.
  ASSERT_TRUE(cache.InsertState("s@1#b/rolling", a, RollingStateOf(a), 0));
  EXPECT_EQ(cache.stats().entries, 1);
  EXPECT_EQ(PrefixCacheGeneration("s@1#b/rolling"), "s@1#b");
  EXPECT_EQ(PrefixCacheGeneration("s@1#b"), "s@1#b");
}

TEST(PrefixCacheTest, EntriesAreChargedToTheBudgetAndEvictedLeastRecentlyUsed) {
  int64_t budget = 50 * kEntryBytes, used = 0;
  PrefixCache::Budget b;
  b.try_charge = [&](int64_t bytes) {
    if (used + bytes > budget) return false;
    used += bytes;
    return true;
  };
  b.release = [&](int64_t bytes) { used -= bytes; };
  {
    PrefixCache cache(Opts(), b);
    const std::vector<TokenId> a = Seq(0, 20), c = Seq(100, 20), d = Seq(200, 20);
    ASSERT_TRUE(cache.Insert("p@1#h", a, CacheOf(a)));
    ASSERT_TRUE(cache.Insert("p@1#h", c, CacheOf(c)));
    EXPECT_EQ(used, 40 * kEntryBytes);
    ASSERT_TRUE(cache.Lookup("p@1#h", a, 1000, 0).has_value());  // a is now the most recent
    // d does not fit beside both: the least recently used (c) goes.
    ASSERT_TRUE(cache.Insert("p@1#h", d, CacheOf(d)));
    EXPECT_EQ(used, 40 * kEntryBytes);
    EXPECT_TRUE(cache.Lookup("p@1#h", a, 1000, 0).has_value());
    EXPECT_FALSE(cache.Lookup("p@1#h", c, 1000, 0).has_value());
    EXPECT_EQ(cache.stats().evictions, 1);
    // An entry larger than the whole budget is skipped (after evicting everything).
    EXPECT_FALSE(cache.Insert("p@1#h", Seq(1000, 60), CacheOf(Seq(1000, 60))));
    EXPECT_EQ(cache.stats().skipped, 1);
    EXPECT_EQ(used, 0);
    // Reclaim, as a request waiting for the budget asks.
    ASSERT_TRUE(cache.Insert("p@1#h", a, CacheOf(a)));
    ASSERT_TRUE(cache.Insert("p@1#h", c, CacheOf(c)));
    EXPECT_EQ(cache.Reclaim(1), 20 * kEntryBytes);  // one entry, the older
    EXPECT_EQ(used, 20 * kEntryBytes);
    EXPECT_TRUE(cache.Lookup("p@1#h", c, 1000, 0).has_value());
  }
  EXPECT_EQ(used, 0);  // the destructor gives everything back
}

}  // namespace
}  // namespace sift
