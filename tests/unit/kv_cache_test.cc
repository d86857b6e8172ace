#include "sift/kv_cache.h"

#include <gtest/gtest.h>

#include <type_traits>

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

// k/v whose value encodes (position, head) so gathers can be checked exactly.
void AppendTokens(KvCache& c, int64_t layer, int64_t from, int64_t n) {
  at::Tensor pos = at::arange(from, from + n, at::kLong);
  at::Tensor k = pos.to(at::kFloat).view({n, 1, 1}).expand({n, 2, 4}).clone();
  k.select(1, 1).add_(1000);
  c.Append(layer, k, -k, pos);
}

TEST(KvCacheTest, AppendGrowsAndKeepsContent) {
  KvCache c(Shape());
  for (int64_t i = 0; i < 200; i += 50) AppendTokens(c, 0, i, 50);
  EXPECT_EQ(c.size(0), 200);
  EXPECT_EQ(c.size(1), 0);
  EXPECT_EQ(c.Keys(0).sizes(), (at::IntArrayRef{2, 200, 4}));
  EXPECT_EQ(c.Keys(0)[0][137][2].item<float>(), 137);
  EXPECT_EQ(c.Keys(0)[1][137][2].item<float>(), 1137);
  EXPECT_EQ(c.Values(0)[1][5][0].item<float>(), -1005);
  EXPECT_EQ(c.Positions(0)[1][199].item<int64_t>(), 199);
  EXPECT_EQ(c.NextPosition(), 200);
  EXPECT_EQ(c.Bytes(), 200 * 2 * (2 * 4 * 4 + 8));
}

TEST(KvCacheTest, SelectPerHeadKeepsGivenEntriesAndFreesMemory) {
  KvCache c(Shape());
  AppendTokens(c, 0, 0, 100);
  AppendTokens(c, 1, 0, 100);
  const int64_t before = c.AllocatedBytes();
  c.Select(0, at::tensor({1, 5, 7, 2, 3, 90}, at::kLong).view({2, 3}));
  EXPECT_EQ(c.size(0), 3);
  EXPECT_EQ(c.size(1), 100);  // other layers untouched: lengths differ per layer
  EXPECT_EQ(c.Positions(0)[0][2].item<int64_t>(), 7);
  EXPECT_EQ(c.Positions(0)[1][2].item<int64_t>(), 90);
  EXPECT_EQ(c.Keys(0)[1][0][0].item<float>(), 1002);
  EXPECT_EQ(c.Values(0)[0][1][3].item<float>(), -5);
  EXPECT_LT(c.AllocatedBytes(), before);
  // Original positions survive eviction, so decode continues after the uncompressed length.
  EXPECT_EQ(c.NextPosition(), 100);
  AppendTokens(c, 0, 100, 1);
  EXPECT_EQ(c.size(0), 4);
  EXPECT_EQ(c.Positions(0)[1][3].item<int64_t>(), 100);
}

TEST(KvCacheTest, SharedIndicesAndEdgeCases) {
  KvCache c(Shape());
  AppendTokens(c, 0, 0, 10);
  c.Select(0, at::tensor({0, 9}, at::kLong));
  EXPECT_EQ(c.Positions(0)[1][1].item<int64_t>(), 9);
  EXPECT_THROW(c.Select(0, at::tensor({2}, at::kLong)), std::exception);    // out of range
  EXPECT_THROW(c.Select(0, at::zeros({3, 1}, at::kLong)), std::exception);  // wrong head count
  c.Select(0, at::empty({0}, at::kLong));
  EXPECT_EQ(c.size(0), 0);
  c.Clear();
  EXPECT_EQ(c.AllocatedBytes(), 0);
  EXPECT_EQ(c.TotalEntries(), 0);
}

// A copy of the tensor handles would share storage with the original: copies are explicit.
static_assert(!std::is_copy_constructible_v<KvCache> && !std::is_copy_assignable_v<KvCache>);
static_assert(std::is_nothrow_move_constructible_v<KvCache> && std::is_move_assignable_v<KvCache>);

TEST(KvCacheTest, CloneIsADeepCopy) {
  KvCache c(Shape());
  c.set_headroom(7);
  AppendTokens(c, 0, 0, 10);
  AppendTokens(c, 1, 0, 10);
  c.Select(1, at::tensor({2, 4, 6}, at::kLong));
  KvCache d = c.Clone();
  EXPECT_EQ(d.headroom(), 7);
  EXPECT_EQ(d.size(0), 10);
  EXPECT_EQ(d.size(1), 3);
  EXPECT_TRUE(at::equal(d.Keys(1), c.Keys(1)));
  EXPECT_TRUE(at::equal(d.Values(0), c.Values(0)));
  EXPECT_TRUE(at::equal(d.Positions(1), c.Positions(1)));
  EXPECT_EQ(d.Bytes(), c.Bytes());

  // Editing the clone in place, appending to it and evicting from it leaves the original as it
  // was.
  const at::Tensor keys0 = c.Keys(0).clone(), pos0 = c.Positions(0).clone();
  d.Keys(0).fill_(-1);
  d.Positions(0).fill_(-1);
  AppendTokens(d, 1, 10, 2);
  d.Select(0, at::tensor({0}, at::kLong));
  EXPECT_TRUE(at::equal(c.Keys(0), keys0));
  EXPECT_TRUE(at::equal(c.Positions(0), pos0));
  EXPECT_EQ(c.size(0), 10);
  EXPECT_EQ(c.size(1), 3);
  EXPECT_EQ(c.Positions(1)[0][2].item<int64_t>(), 6);

  KvCache empty(Shape());
  EXPECT_EQ(empty.Clone().TotalEntries(), 0);
}

TEST(KvCacheTest, MovesTransferTheStorage) {
  KvCache c(Shape());
  AppendTokens(c, 0, 0, 5);
  const void* storage = c.Keys(0).data_ptr();  // host: a CPU cache, the address only
  KvCache moved(std::move(c));
  EXPECT_EQ(moved.size(0), 5);
  EXPECT_EQ(moved.Keys(0).data_ptr(), storage);  // host: a CPU cache, the address only
}

TEST(KvCacheTest, EntryBytesIsWhatBytesCounts) {
  KvCacheShape shape = Shape();
  EXPECT_EQ(KvCache::EntryBytes(shape), 2 * (2 * 4 * 4 + 8));  // Hkv * (k + v in fp32 + position)
  shape.dtype = at::kBFloat16;
  EXPECT_EQ(KvCache::EntryBytes(shape), 2 * (2 * 4 * 2 + 8));
  KvCache c(Shape());
  AppendTokens(c, 0, 0, 9);
  AppendTokens(c, 1, 0, 4);
  EXPECT_EQ(c.Bytes(), 13 * KvCache::EntryBytes(Shape()));
}

}  // namespace
}  // namespace sift
