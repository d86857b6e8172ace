#include "streaming_prefill.h"

#include <algorithm>
#include <utility>

#include "sift/error.h"
#include "sift/kv_cache.h"

namespace sift::plugins {
namespace {

// Keeps the entries of `layer` that a query at position >= next can still see: pos < sink or
// pos >= next - window.
void TrimToLambda(KvCache& cache, int64_t layer, int64_t next, int64_t sink, int64_t window) {
  const at::Tensor pos = cache.Positions(layer).select(0, 0);
  const at::Tensor keep = at::logical_or(pos < sink, pos >= next - window);
  const at::Tensor indices = keep.nonzero().view({-1});
  if (indices.size(0) < pos.size(0)) cache.Select(layer, indices);
}

void SetEmptyScores(const at::Device& device, const std::set<int64_t>& score_layers,
                    StreamingScores* out) {
  out->scores.clear();
  const at::TensorOptions on_device = at::TensorOptions().dtype(at::kFloat).device(device);
  for (int64_t l : score_layers) out->scores[l] = at::zeros({0}, on_device);
  out->context_length = 0;
  out->peak_cache_entries = 0;
}

// Chunks of [from, to): `chunk` rows each, the prompt's first (from 0) `sink` more.
void AddChunks(int64_t from, int64_t to, const StreamingPrefillOptions& options,
               std::vector<std::pair<int64_t, int64_t>>* out) {
  for (int64_t c0 = from; c0 < to;) {
    const int64_t c1 = std::min(to, c0 + (c0 == 0 ? options.chunk + options.sink : options.chunk));
    out->emplace_back(c0, c1);
    c0 = c1;
  }
}

// The segments the prompt streams in from row `begin` on: context chunks (the first one of the
// prompt also holds the sink), then the query part [ctx, n).
std::vector<std::pair<int64_t, int64_t>> Segments(int64_t begin, int64_t ctx, int64_t n,
                                                  const StreamingPrefillOptions& options) {
  std::vector<std::pair<int64_t, int64_t>> segments;
  AddChunks(begin, ctx, options, &segments);
  segments.emplace_back(ctx, n);
  return segments;
}

// Each score layer's score per context token: the maximum attention probability any query
// token gives it, over the full (un-windowed) keys. Releases the keys.
void ScoreContext(int64_t ctx, int64_t n, int64_t block_size, std::map<int64_t, at::Tensor>& keys,
                  const std::map<int64_t, at::Tensor>& queries, StreamingScores* out) {
  const at::TensorOptions host_options = at::TensorOptions().dtype(at::kLong).device(at::kCPU);
  AttentionOptions full;
  full.block_size = block_size;
  const at::Tensor q_pos = at::arange(ctx, n, host_options);
  for (auto& [l, k] : keys) {
    const at::Tensor k_pos = at::arange(k.size(1), host_options);
    AttentionStatsRequest request;
    request.max_from_query = 0;
    AttentionStats stats;
    Attention(queries.at(l), k, k, q_pos, k_pos, full, request, &stats);
    out->scores[l] = stats.max_prob.narrow(0, 0, ctx).contiguous();
    k = at::Tensor();
  }
}

}  // namespace

bool StreamingForward(const Model& model, const std::vector<TokenId>& tokens, int64_t begin,
                      int64_t snapshot_at, const StreamingPrefillOptions& options, KvCache* cache,
                      KvCache* snapshot, at::Tensor* last_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t layers = model.config().num_layers;
  SIFT_CHECK(n > 0, "streaming forward: empty prompt");
  SIFT_CHECK(0 <= begin && begin < n, "streaming forward: begin ", begin, " outside [0, ", n, ")");
  SIFT_CHECK(options.chunk >= 1 && options.window >= 1 && options.sink >= 0,
             "streaming forward: chunk and window must be >= 1, sink >= 0");
  SIFT_CHECK(cache != nullptr && cache->num_layers() == layers, "streaming forward: a cache of ",
             cache ? cache->num_layers() : 0, " layers for a model of ", layers);
  // A chunk always ends at snapshot_at, with or without a snapshot: a prompt then runs in the same
  // chunks whether or not it starts from a cached state there, so their results are bit-equal.
  const bool split = snapshot_at > begin && snapshot_at < n;
  const bool snap = split && snapshot != nullptr;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  AddChunks(begin, split ? snapshot_at : n, options, &chunks);
  if (split) AddChunks(snapshot_at, n, options, &chunks);

  AttentionOptions lambda;
  lambda.block_size = options.block_size;
  lambda.sink = options.sink;
  lambda.window = options.window;
  const at::TensorOptions host_options = at::TensorOptions().dtype(at::kLong).device(at::kCPU);
  const int64_t total = static_cast<int64_t>(chunks.size()) * layers;
  int64_t step = 0;
  for (const auto& [c0, c1] : chunks) {
    const at::Tensor positions = at::arange(c0, c1, host_options);
    at::Tensor x = model.EmbedTokens(tokens, c0, c1);
    for (int64_t l = 0; l < layers; ++l, ++step) {
      if (options.cancelled && options.cancelled()) return false;
      if (options.progress) options.progress(step, total);
      x = model.Layer(l, x, positions, cache, lambda);
      TrimToLambda(*cache, l, c1, options.sink, options.window);
    }
    if (c1 == n) *last_logits = model.Logits(x.narrow(0, c1 - c0 - 1, 1)).select(0, 0);
    if (snap && c1 == snapshot_at) *snapshot = cache->Clone();
  }
  if (options.progress) options.progress(total, total);
  return true;
}

bool StreamingPrefill(const Model& model, const std::vector<TokenId>& tokens,
                      int64_t question_begin, const std::set<int64_t>& score_layers,
                      const StreamingPrefillOptions& options, StreamingScores* out) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  SIFT_CHECK(n > 0, "streaming prefill: empty prompt");
  SIFT_CHECK(!score_layers.empty(), "streaming prefill: no score layer");
  SIFT_CHECK(options.chunk >= 1 && options.window >= 1 && options.sink >= 0,
             "streaming prefill: chunk and window must be >= 1, sink >= 0");
  const ModelConfig& config = model.config();
  const int64_t last = *score_layers.rbegin();
  SIFT_CHECK(*score_layers.begin() >= 0 && last < config.num_layers, "streaming prefill: layer ",
             last, " outside [0, ", config.num_layers, ")");
  int64_t ctx = std::clamp<int64_t>(question_begin, 0, n);
  if (ctx == n) ctx = std::max<int64_t>(0, n - options.fallback_query);
  if (ctx == 0) {
    // A prompt that is all question (e.g. shorter than the question span): no context to score.
    // Empty scores let the filter keep the whole prompt, uncompressed.
    SetEmptyScores(model.options().device, score_layers, out);
    return true;
  }

  KvCache* archive = options.archive;
  const int64_t begin = archive != nullptr ? options.cached : 0;
  SIFT_CHECK(archive == nullptr || archive->num_layers() == last + 1,
             "streaming prefill: an archive of ", archive ? archive->num_layers() : 0,
             " layers for layers 0..", last);
  SIFT_CHECK(0 <= begin && begin <= ctx && (begin == 0 || archive->size(0) == begin),
             "streaming prefill: ", begin, " cached rows for a context of ", ctx);
  const std::vector<std::pair<int64_t, int64_t>> segments = Segments(begin, ctx, n, options);

  AttentionOptions lambda;
  lambda.block_size = options.block_size;
  lambda.sink = options.sink;
  lambda.window = options.window;

  KvCache cache = model.NewCache();
  const int64_t kv_heads = config.num_kv_heads, head_dim = config.head_dim;
  const at::Device device = model.options().device;
  // Token ids and RoPE positions live on the host (sift/model.h); Embed moves the ids over.
  const at::TensorOptions host_options = at::TensorOptions().dtype(at::kLong).device(at::kCPU);
  std::map<int64_t, at::Tensor> keys;     // [Hkv, ctx (+ query), hd] per score layer
  std::map<int64_t, at::Tensor> queries;  // [Lq, Hq, hd]
  for (int64_t l : score_layers) {
    const int64_t rows = options.include_query_keys ? n : ctx;
    keys[l] = at::empty({kv_heads, rows, head_dim},
                        at::TensorOptions().dtype(model.options().dtype).device(device));
  }
  if (begin > 0) {
    // A cached prefix: each layer starts from what a row at `begin` can see, the score layers'
    // keys from the prefix's keys.
    for (int64_t l = 0; l < last; ++l) {
      cache.Set(l, archive->Keys(l), archive->Values(l), archive->Positions(l));
      TrimToLambda(cache, l, begin, options.sink, options.window);
    }
    for (auto& [l, k] : keys) k.narrow(1, 0, begin).copy_(archive->Keys(l));
  }
  int64_t peak = 0;
  const int64_t total = static_cast<int64_t>(segments.size()) * (last + 1);
  int64_t step = 0;
  for (const auto& [c0, c1] : segments) {
    const bool is_query = c0 == ctx;
    if (c1 <= c0) continue;
    const at::Tensor positions = at::arange(c0, c1, host_options);
    at::Tensor x = model.EmbedTokens(tokens, c0, c1);
    for (int64_t l = 0; l <= last; ++l, ++step) {
      if (options.cancelled && options.cancelled()) return false;
      if (options.progress) options.progress(step, total);
      if (score_layers.count(l)) {
        const at::Tensor h = model.AttnNorm(l, x);
        Model::Qkv qkv = model.ProjectQkv(l, h);
        const bool keep_keys = !is_query || options.include_query_keys;
        const bool archive_here = l == last && archive != nullptr;
        if (keep_keys || archive_here) {
          const at::Tensor k = model.ApplyRope(qkv.k, positions);  // [rows, Hkv, hd]
          if (keep_keys) keys[l].narrow(1, c0, c1 - c0).copy_(k.permute({1, 0, 2}));
          if (archive_here) archive->Append(l, k, qkv.v, positions);
        }
        if (is_query) queries[l] = model.ApplyRope(qkv.q, positions);
      }
      if (l == last) break;
      x = model.Layer(l, x, positions, &cache, lambda);
      if (archive != nullptr) {
        // The rows just appended (the layer appends them last), before the trim drops them.
        const int64_t rows = c1 - c0, size = cache.size(l);
        archive->Append(l, cache.Keys(l).narrow(1, size - rows, rows).permute({1, 0, 2}),
                        cache.Values(l).narrow(1, size - rows, rows).permute({1, 0, 2}), positions);
      }
      int64_t held = 0;
      for (int64_t j = 0; j <= l; ++j) held += cache.size(j);
      peak = std::max(peak, held);
      TrimToLambda(cache, l, c1, options.sink, options.window);
    }
  }
  if (options.progress) options.progress(total, total);

  out->scores.clear();
  out->context_length = ctx;
  out->peak_cache_entries = peak;
  ScoreContext(ctx, n, options.block_size, keys, queries, out);
  return true;
}

}  // namespace sift::plugins
