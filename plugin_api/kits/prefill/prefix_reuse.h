// SDK kit sift_kit_prefill: how a prefill stage starts from the host's prefix cache and stores
// its own prompt there (docs/context-cache.md). Used by prefill_full (the whole model) and
// prefill_partial (GemFilter's pass 1: the layers up to its filter layer).
//
// A prefill may take the KV of a cached prefix only for rows whose output nothing reads: the
// rows a planned statistic reads must run (ReusableTokens). Lookup and store never fail the
// request: when a copy cannot be allocated the prefill simply runs from position 0, or its prompt
// is not stored.
//
// THREADING: the functions are safe from any thread (the cache locks itself).
#ifndef SIFT_KITS_PREFILL_PREFIX_REUSE_H_
#define SIFT_KITS_PREFILL_PREFIX_REUSE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "sift/attention.h"
#include "sift/kv_cache.h"
#include "sift/stage.h"

namespace sift::plugins {

// How many leading tokens of an n-token prompt may come from the cache without changing what
// the prefill computes: at most n - 1 (the last token's logits are computed) and none of the
// rows a statistic reads (a window's last rows, the rows from max_from_query on); H2O's column
// sums read every row, so then nothing.
int64_t ReusableTokens(const std::map<int64_t, AttentionStatsRequest>& stats, int64_t n);

struct PrefixStart {
  std::unique_ptr<KvCache> cache;  // the cached prefix (then `reused` entries per layer) or empty
  int64_t reused = 0;              // prompt tokens taken from the cache
};

// The longest prefix of `tokens`, at most `max_reuse` long, cached under `access.scope` in a
// cache of exactly `shape`, copied with room for the rest of the prompt and `extra` more
// entries; else a fresh cache of `shape`. `access.cache` null: always a fresh cache.
PrefixStart StartFromPrefixCache(const PrefixCacheAccess& access,
                                 const std::vector<TokenId>& tokens, int64_t max_reuse,
                                 int64_t extra, const KvCacheShape& shape);

// Stores `cache` (every layer holds the KV of `tokens` in prompt order) under `access.scope`;
// nothing when `access.cache` is null or the copy cannot be allocated.
void StoreInPrefixCache(const PrefixCacheAccess& access, const std::vector<TokenId>& tokens,
                        const KvCache& cache);

}  // namespace sift::plugins

#endif  // SIFT_KITS_PREFILL_PREFIX_REUSE_H_
