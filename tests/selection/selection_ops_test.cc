// Unit tests of the pure index arithmetic of the selection plugins: ChunkKV chunk selection
// (plugins/chunkkv/chunk_selection.h), the PyramidKV schedule (plugins/pyramidkv/
// pyramid_schedule.h), layer-wise reuse groups (plugins/layerwise/layerwise_stage.h) and budgets
// (plugin_api/kits/selection/selection_ops.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "chunk_selection.h"
#include "layerwise_stage.h"
#include "pyramid_schedule.h"
#include "selection/selection_ops.h"
#include "sift/error.h"

namespace sift::plugins {
namespace {

std::vector<int64_t> Row(const at::Tensor& t, int64_t r = 0) {
  at::Tensor c = t[r].contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

at::Tensor Scores(const std::vector<float>& v) { return at::tensor(v, at::kFloat).unsqueeze(0); }

TEST(SelectChunks, KeepsBestChunksInOriginalOrder) {
  // 3 chunks of 2: scores 1+1, 5+5, 3+3 -> best two are chunk 1 then chunk 2.
  at::Tensor idx = SelectChunks(Scores({1, 1, 5, 5, 3, 3}), 2, 4, ChunkScore::kSum);
  EXPECT_EQ(Row(idx), (std::vector<int64_t>{2, 3, 4, 5}));
}

TEST(SelectChunks, ChunkBoundariesAreFixedNotSliding) {
  // A high pair straddling a boundary (indices 1, 2) does not form a chunk: chunk 0 = {0,1},
  // chunk 1 = {2,3}; sums 9 and 9.5 -> with one chunk kept, chunk 1.
  at::Tensor idx = SelectChunks(Scores({0, 9, 9, 0.5f, 0, 0}), 2, 2, ChunkScore::kSum);
  EXPECT_EQ(Row(idx), (std::vector<int64_t>{2, 3}));
}

TEST(SelectChunks, PositionallyLastSelectedChunkIsTrimmed) {
  // chunk 3: keep 5 tokens = 2 chunks, the later one (chunk 2, tokens 6..8) trimmed to 2.
  at::Tensor idx = SelectChunks(Scores({5, 5, 5, 0, 0, 0, 4, 4, 4}), 3, 5, ChunkScore::kSum);
  EXPECT_EQ(Row(idx), (std::vector<int64_t>{0, 1, 2, 6, 7}));
}

TEST(SelectChunks, TrailingPartialChunkIsItsOwnChunk) {
  // n = 7, chunk 3: chunks {0,1,2} {3,4,5} {6}; token 6 alone has the highest sum.
  at::Tensor idx = SelectChunks(Scores({1, 1, 1, 0, 0, 0, 10}), 3, 4, ChunkScore::kSum);
  EXPECT_EQ(Row(idx), (std::vector<int64_t>{0, 1, 2, 6}));
  // Mean scoring: the partial chunk {6} scores 10/1; sum and mean agree here, but with
  // {6} = 2.5 the full chunk {0,1,2} (sum 3, mean 1) wins under sum and loses under mean.
  at::Tensor s = Scores({1, 1, 1, 0, 0, 0, 2.5f});
  EXPECT_EQ(Row(SelectChunks(s, 3, 3, ChunkScore::kSum)), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(Row(SelectChunks(s, 3, 1, ChunkScore::kMean)), (std::vector<int64_t>{6}));
}

TEST(SelectChunks, BudgetAtLeastInputKeepsAll) {
  at::Tensor idx = SelectChunks(Scores({3, 1, 2}), 2, 10, ChunkScore::kSum);
  EXPECT_EQ(Row(idx), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(SelectChunks(Scores({3, 1, 2}), 2, 0, ChunkScore::kSum).size(1), 0);
}

TEST(SelectChunks, PerRowIndependentAndTiesToLowerChunk) {
  at::Tensor s = at::tensor(std::vector<float>{1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0}, at::kFloat)
                     .reshape({2, 6});
  at::Tensor idx = SelectChunks(s, 2, 2, ChunkScore::kSum);
  EXPECT_EQ(Row(idx, 0), (std::vector<int64_t>{0, 1}));  // tie between chunks 0 and 1
  EXPECT_EQ(Row(idx, 1), (std::vector<int64_t>{2, 3}));
}

// The host loop SelectChunks used before it ran on the device (kept here as the reference):
// chunks by descending score (stable), taken while fewer than `keep` tokens are covered, then
// the first `keep` tokens of the taken chunks in original order.
std::vector<int64_t> ReferenceChunks(const std::vector<float>& s, int64_t chunk, int64_t keep,
                                     ChunkScore how) {
  const int64_t n = static_cast<int64_t>(s.size());
  if (keep >= n) {
    std::vector<int64_t> all(n);
    std::iota(all.begin(), all.end(), 0);
    return all;
  }
  const int64_t num_chunks = (n + chunk - 1) / chunk;
  std::vector<float> score(num_chunks, 0.0f);
  for (int64_t t = 0; t < n; ++t) score[t / chunk] += s[t];
  if (how == ChunkScore::kMean) {
    for (int64_t c = 0; c < num_chunks; ++c) {
      score[c] /= static_cast<float>(std::min(n, (c + 1) * chunk) - c * chunk);
    }
  }
  std::vector<int64_t> order(num_chunks);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return score[a] > score[b]; });
  std::vector<char> taken(num_chunks, 0);
  int64_t covered = 0;
  for (int64_t r = 0; r < num_chunks && covered < keep; ++r) {
    taken[order[r]] = 1;
    covered += std::min(n, (order[r] + 1) * chunk) - order[r] * chunk;
  }
  std::vector<int64_t> out;
  for (int64_t t = 0; t < n && static_cast<int64_t>(out.size()) < keep; ++t) {
    if (taken[t / chunk]) out.push_back(t);
  }
  return out;
}

TEST(SelectChunks, MatchesTheReferenceLoopOnRandomScoresWithTies) {
  at::manual_seed(7);
  int cases = 0;
  for (int64_t n : {1, 2, 5, 9, 16, 31, 64}) {
    for (int64_t chunk : {1, 2, 3, 7, 10}) {
      for (int64_t keep : {int64_t{0}, int64_t{1}, n / 3, n / 2, n - 1, n}) {
        for (ChunkScore how : {ChunkScore::kSum, ChunkScore::kMean}) {
          // Few distinct values: many ties between chunks.
          const at::Tensor s = at::randint(0, 4, {3, n}).to(at::kFloat);
          const at::Tensor got = SelectChunks(s, chunk, keep, how);
          ASSERT_EQ(got.size(0), 3);
          for (int64_t h = 0; h < 3; ++h) {
            at::Tensor row = s[h].contiguous();
            const std::vector<float> v(row.data_ptr<float>(), row.data_ptr<float>() + n);
            ASSERT_EQ(Row(got, h), ReferenceChunks(v, chunk, std::max<int64_t>(keep, 0), how))
                << "n=" << n << " chunk=" << chunk << " keep=" << keep << " head=" << h;
          }
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 7 * 5 * 6 * 2);
}

TEST(SelectTopK, OriginalOrder) {
  EXPECT_EQ(Row(SelectTopK(Scores({0.1f, 0.9f, 0.2f, 0.8f}), 2)), (std::vector<int64_t>{1, 3}));
}

TEST(PyramidPrefixBudgets, SumsToTotalAndShrinksWithDepth) {
  for (int64_t per_layer : {12, 100, 200, 997}) {
    for (double beta : {20.0, 5.0}) {
      std::vector<int64_t> b = PyramidPrefixBudgets(30, per_layer, 4000, beta);
      ASSERT_EQ(b.size(), 30u);
      EXPECT_EQ(std::accumulate(b.begin(), b.end(), int64_t{0}), 30 * per_layer)
          << per_layer << " " << beta;
      EXPECT_GT(b.front(), b.back());
      for (size_t l = 1; l < b.size(); ++l) EXPECT_LE(b[l], b[l - 1] + 1);
      EXPECT_LE(b.front(), 4000);
    }
  }
}

TEST(PyramidPrefixBudgets, LayerZeroKeepsTheMostAndTheSumIsExact) {
  // The docs' wording (issue 29): layer 0, the first, gets the largest budget; the schedule's sum
  // is exact where KVCache-Factory's integer floors (min = 367 // 20, step = 698 // 23) give
  // 24 * 716 - 30 * 276 = 8,904 prefix entries on 24 layers at a budget of 399 (window 32).
  std::vector<int64_t> b = PyramidPrefixBudgets(24, 399 - 32, 100000, 20);
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), int64_t{0}), 8808);
  EXPECT_EQ(*std::max_element(b.begin(), b.end()), b.front());
  EXPECT_EQ(*std::min_element(b.begin(), b.end()), b.back());
  EXPECT_EQ(b.back(), 18);  // min = 367 / 20 = 18.35 unrounded, floored last
  int64_t factory = 0;
  for (int64_t l = 0; l < 24; ++l) factory += 716 - l * 30;
  EXPECT_EQ(factory, 8904);
}

TEST(PyramidPrefixBudgets, LayerZeroCappedByPrefix) {
  // 2 * per_layer > prefix: layer 0 gets the whole prefix, the sum is still exact.
  std::vector<int64_t> b = PyramidPrefixBudgets(30, 700, 1000, 20);
  EXPECT_EQ(b.front(), 1000);
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), int64_t{0}), 30 * 700);
  for (int64_t x : b) EXPECT_LE(x, 1000);
}

TEST(PyramidPrefixBudgets, NoCompressionWhenBudgetCoversPrefix) {
  std::vector<int64_t> b = PyramidPrefixBudgets(30, 500, 400, 20);
  for (int64_t x : b) EXPECT_EQ(x, 400);
}

TEST(ReuseLeader, GroupsFromLayerZeroWithShortLastGroup) {
  EXPECT_EQ(ReuseLeader(0, 2), 0);
  EXPECT_EQ(ReuseLeader(29, 2), 28);
  EXPECT_EQ(ReuseLeader(28, 4), 28);  // 30 layers, N = 4: last group {28, 29}
  EXPECT_EQ(ReuseLeader(29, 4), 28);
  EXPECT_EQ(ReuseLeader(27, 4), 24);
  EXPECT_EQ(ReuseLeader(29, 7), 28);  // N = 7: groups 0,7,14,21,28; last group {28, 29}
  EXPECT_EQ(ReuseLeader(27, 7), 21);
  EXPECT_EQ(ReuseLeader(17, 1), 17);
}

TEST(Budget, AbsoluteOrRatio) {
  Budget b;
  b.keep_ratio = 0.1;
  EXPECT_EQ(b.Resolve(4096), 409);
  EXPECT_EQ(b.Resolve(5), 1);  // at least one entry
  b.tokens = 128;
  EXPECT_EQ(b.Resolve(4096), 128);
  EXPECT_EQ(b.Resolve(100), 100);  // never more than the input
}

TEST(ApplyFloor, NothingAtOrBelowTheFloorAndNeverBelowItAbove) {
  EXPECT_EQ(kDefaultFloor, 128);
  EXPECT_EQ(ApplyFloor(34, 3, 128, 0), 34);        // a short chat: left whole
  EXPECT_EQ(ApplyFloor(128, 12, 128, 0), 128);     // at the floor: left whole
  EXPECT_EQ(ApplyFloor(129, 12, 128, 0), 128);     // above: never below the floor
  EXPECT_EQ(ApplyFloor(2048, 204, 128, 32), 204);  // the tables' smallest budget: unchanged
  EXPECT_EQ(ApplyFloor(300, 10, 0, 40), 40);       // floor 0: the hard minimum still holds
  EXPECT_EQ(ApplyFloor(30, 10, 0, 40), 30);        // never more than the span
  EXPECT_THROW(ApplyFloor(10, -1, 0, 0), Error);
}

}  // namespace
}  // namespace sift::plugins
