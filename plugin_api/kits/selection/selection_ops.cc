#include "selection/selection_ops.h"

#include <algorithm>
#include <cmath>

#include "scores/score_ops.h"
#include "sift/error.h"

namespace sift::plugins {

ChunkScore ParseChunkScore(const std::string& name) {
  if (name == "sum") return ChunkScore::kSum;
  if (name == "mean") return ChunkScore::kMean;
  throw Error("chunk_score: expected \"sum\" or \"mean\", got \"" + name + "\"");
}

at::Tensor SelectTopK(const at::Tensor& scores, int64_t keep) {
  SIFT_CHECK(scores.dim() == 2, "SelectTopK: scores must be [H, n]");
  return TopKSorted(scores, keep);
}

at::Tensor SelectChunks(const at::Tensor& scores, int64_t chunk, int64_t keep, ChunkScore how) {
  SIFT_CHECK(scores.dim() == 2, "SelectChunks: scores must be [H, n]");
  SIFT_CHECK(chunk >= 1, "SelectChunks: chunk must be >= 1, got ", chunk);
  SIFT_CHECK(keep >= 0, "SelectChunks: keep must be >= 0, got ", keep);
  const int64_t heads = scores.size(0), n = scores.size(1);
  const at::TensorOptions index_options = scores.options().dtype(at::kLong);
  if (keep >= n) return at::arange(n, index_options).expand({heads, n}).contiguous();
  if (keep == 0) return at::empty({heads, 0}, index_options);
  const int64_t num_chunks = (n + chunk - 1) / chunk;
  const int64_t padded = num_chunks * chunk;
  at::Tensor s = scores.to(at::kFloat);
  if (padded > n) s = at::constant_pad_nd(s, {0, padded - n}, 0.0);
  at::Tensor chunk_scores = s.reshape({heads, num_chunks, chunk}).sum(-1);
  const int64_t last_size = n - (num_chunks - 1) * chunk;
  // Tokens per chunk (the last one may be partial).
  at::Tensor sizes = at::full({num_chunks}, chunk, index_options);
  sizes.narrow(0, num_chunks - 1, 1).fill_(last_size);
  if (how == ChunkScore::kMean) chunk_scores = chunk_scores / sizes.to(at::kFloat);
  // Descending, stable: ties go to the lower chunk index. Chunks are taken in that order while
  // fewer than `keep` tokens are covered, i.e. chunk r of the order is taken iff the chunks
  // before it cover fewer than `keep` tokens.
  at::Tensor order = std::get<1>(chunk_scores.sort(/*stable=*/true, -1, /*descending=*/true));
  const at::Tensor ordered_sizes = sizes.index_select(0, order.reshape({-1})).view_as(order);
  const at::Tensor covered_before = ordered_sizes.cumsum(-1) - ordered_sizes;
  const at::Tensor taken = at::zeros_like(order, order.options().dtype(at::kBool))
                               .scatter_(1, order, covered_before < keep);
  // Original order, the first `keep` tokens of the taken chunks: rank the taken tokens, then move
  // them ahead of the others (key = index, + n when not kept) and cut.
  const at::Tensor token_taken = taken.repeat_interleave(chunk, 1).narrow(1, 0, n);
  const at::Tensor rank = token_taken.to(at::kLong).cumsum(-1);
  const at::Tensor kept = at::logical_and(token_taken, rank <= keep);
  const at::Tensor position = at::arange(n, index_options).expand({heads, n});
  const at::Tensor key = at::where(kept, position, position + n);
  return std::get<0>(key.sort(-1)).narrow(-1, 0, keep).contiguous();
}

std::vector<int64_t> PyramidPrefixBudgets(int64_t num_layers, int64_t per_layer, int64_t prefix_len,
                                          double beta) {
  SIFT_CHECK(num_layers >= 1 && per_layer >= 0 && prefix_len >= 0 && beta > 0,
             "PyramidPrefixBudgets: bad arguments");
  if (per_layer >= prefix_len) return std::vector<int64_t>(num_layers, prefix_len);
  if (num_layers == 1) return {per_layer};
  const double total = static_cast<double>(per_layer);
  double min_num = total / beta;
  double max_num = 2 * total - min_num;
  if (max_num > static_cast<double>(prefix_len)) {
    max_num = static_cast<double>(prefix_len);
    min_num = 2 * total - max_num;
  }
  const double step = (max_num - min_num) / static_cast<double>(num_layers - 1);
  std::vector<int64_t> out(num_layers);
  int64_t sum = 0;
  for (int64_t l = 0; l < num_layers; ++l) {
    const double b = max_num - step * static_cast<double>(l);
    out[l] = std::clamp<int64_t>(static_cast<int64_t>(std::floor(b + 1e-9)), 0, prefix_len);
    sum += out[l];
  }
  int64_t rest = num_layers * per_layer - sum;
  // Floors only lose tokens; hand them back to the lowest layers, never above prefix_len.
  while (rest > 0) {
    bool gave = false;
    for (int64_t l = 0; l < num_layers && rest > 0; ++l) {
      if (out[l] < prefix_len) {
        ++out[l];
        --rest;
        gave = true;
      }
    }
    if (!gave) break;
  }
  return out;
}

int64_t ReuseLeader(int64_t layer, int64_t n_reuse) {
  SIFT_CHECK(layer >= 0 && n_reuse >= 1, "ReuseLeader: bad arguments");
  return layer / n_reuse * n_reuse;
}

int64_t Budget::Resolve(int64_t n) const {
  if (n <= 0) return 0;
  int64_t k =
      tokens > 0 ? tokens : static_cast<int64_t>(std::floor(keep_ratio * static_cast<double>(n)));
  return std::clamp<int64_t>(k, 1, n);
}

}  // namespace sift::plugins
