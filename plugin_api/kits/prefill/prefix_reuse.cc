#include "prefill/prefix_reuse.h"

#include <algorithm>
#include <exception>

#include "sift/prefix_cache.h"

namespace sift::plugins {
namespace {

bool SameShape(const KvCacheShape& a, const KvCacheShape& b) {
  return a.num_layers == b.num_layers && a.num_kv_heads == b.num_kv_heads &&
         a.head_dim == b.head_dim && a.dtype == b.dtype && a.device == b.device;
}

}  // namespace

int64_t ReusableTokens(const std::map<int64_t, AttentionStatsRequest>& stats, int64_t n) {
  int64_t limit = n - 1;
  for (const auto& [layer, r] : stats) {
    if (r.column_sum) return 0;
    if (r.window > 0) limit = std::min(limit, n - r.window);
    if (r.max_from_query >= 0) limit = std::min(limit, r.max_from_query);
  }
  return std::max<int64_t>(0, limit);
}

PrefixStart StartFromPrefixCache(const PrefixCacheAccess& access,
                                 const std::vector<TokenId>& tokens, int64_t max_reuse,
                                 int64_t extra, const KvCacheShape& shape) {
  PrefixStart start;
  if (access.cache != nullptr) {
    try {
      auto hit = access.cache->Lookup(access.scope, tokens, max_reuse, extra);
      if (hit && SameShape(hit->cache.shape(), shape)) {
        start.reused = hit->tokens;
        start.cache = std::make_unique<KvCache>(std::move(hit->cache));
      }
    } catch (const std::exception&) {
      start.reused = 0;  // no memory for the copy: prefill the whole prompt
    }
  }
  if (start.cache == nullptr) start.cache = std::make_unique<KvCache>(shape);
  return start;
}

void StoreInPrefixCache(const PrefixCacheAccess& access, const std::vector<TokenId>& tokens,
                        const KvCache& cache) {
  if (access.cache == nullptr) return;
  try {
    access.cache->Insert(access.scope, tokens, cache);
  } catch (const std::exception&) {
    // No memory for the copy: the request goes on, its prompt is not cached.
  }
}

}  // namespace sift::plugins
