#include "partial_prefill.h"

#include "sift/error.h"

namespace sift::plugins {
namespace {

bool LastQueryOnly(const AttentionStatsRequest& r) {
  return r.window == 0 && !r.column_sum && r.max_from_query < 0;
}

}  // namespace

bool PartialPrefill(const Model& model, const std::vector<TokenId>& tokens,
                    const std::map<int64_t, AttentionStatsRequest>& requests,
                    const PartialPrefillOptions& options, std::map<int64_t, AttentionStats>* out) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  SIFT_CHECK(n > 0, "partial prefill: empty prompt");
  SIFT_CHECK(!requests.empty(), "partial prefill: no layer asked for statistics");
  const int64_t last = requests.rbegin()->first;
  SIFT_CHECK(requests.begin()->first >= 0 && last < model.config().num_layers,
             "partial prefill: layer ", last, " outside [0, ", model.config().num_layers, ")");
  KvCache* cache = options.cache;
  const int64_t begin = cache != nullptr ? options.cached : 0;
  SIFT_CHECK(0 <= begin && begin < n, "partial prefill: ", begin, " cached tokens of ", n);
  SIFT_CHECK(cache == nullptr || cache->num_layers() == last + 1, "partial prefill: a cache of ",
             cache ? cache->num_layers() : 0, " layers for layers 0..", last);
  out->clear();
  AttentionOptions attention;
  attention.block_size = options.block_size;

  // RoPE positions live on the host (sift/model.h).
  const at::TensorOptions host_options = at::TensorOptions().dtype(at::kLong).device(at::kCPU);
  const at::Tensor positions = at::arange(begin, n, host_options);
  const int64_t rows = n - begin;
  at::Tensor x = model.EmbedTokens(tokens, begin, n);
  for (int64_t layer = 0; layer < last; ++layer) {
    if (options.cancelled && options.cancelled()) return false;
    if (options.progress) options.progress(layer, last + 1);
    auto it = requests.find(layer);
    if (it == requests.end() || !it->second.any()) {
      x = model.Layer(layer, x, positions, cache, attention);
    } else {
      AttentionStats stats;
      x = model.Layer(layer, x, positions, cache, attention, it->second, &stats);
      (*out)[layer] = std::move(stats);
    }
  }
  if (options.cancelled && options.cancelled()) return false;
  const AttentionStatsRequest& request = requests.at(last);
  AttentionStats stats;
  if (LastQueryOnly(request)) {
    // Layer R: the last row's query against every row's key; nothing else of the layer (with a
    // cache, its values too, for the entry a later prompt starts from).
    const at::Tensor h = model.AttnNorm(last, x);
    x = at::Tensor();
    Model::Qkv qkv = model.ProjectQkv(last, h);
    const at::Tensor last_position = positions.narrow(0, rows - 1, 1);
    const at::Tensor q = model.ApplyRope(qkv.q.narrow(0, rows - 1, 1), last_position);
    const at::Tensor k = model.ApplyRope(qkv.k, positions);  // [rows, Hkv, hd]
    if (cache != nullptr) {
      cache->Append(last, k, qkv.v, positions);
      Attention(q, cache->Keys(last), cache->Keys(last), last_position, cache->Positions(last),
                attention, request, &stats);
    } else {
      const at::Tensor keys = k.permute({1, 0, 2});  // [Hkv, n, hd]
      Attention(q, keys, keys, last_position, positions, attention, request, &stats);
    }
  } else {
    model.Layer(last, x, positions, cache, attention, request, &stats);
  }
  (*out)[last] = std::move(stats);
  if (options.progress) options.progress(last + 1, last + 1);
  return true;
}

}  // namespace sift::plugins
