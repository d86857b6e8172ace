#include "chunk_selection.h"

#include "sift/error.h"

namespace sift::plugins {

ChunkScore ParseChunkScore(const std::string& name) {
  if (name == "sum") return ChunkScore::kSum;
  if (name == "mean") return ChunkScore::kMean;
  throw Error("chunk_score: expected \"sum\" or \"mean\", got \"" + name + "\"");
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
  // Each chunk's flag over its tokens: an expand, not repeat_interleave (which reads its output
  // size from the device: a host synchronisation per layer on a GPU).
  const at::Tensor token_taken = taken.unsqueeze(-1)
                                     .expand({taken.size(0), taken.size(1), chunk})
                                     .reshape({taken.size(0), -1})
                                     .narrow(1, 0, n);
  const at::Tensor rank = token_taken.to(at::kLong).cumsum(-1);
  const at::Tensor kept = at::logical_and(token_taken, rank <= keep);
  const at::Tensor position = at::arange(n, index_options).expand({heads, n});
  const at::Tensor key = at::where(kept, position, position + n);
  return std::get<0>(key.sort(-1)).narrow(-1, 0, keep).contiguous();
}

}  // namespace sift::plugins
