// Partial prefill (GemFilter pass 1): the prompt through decoder layers 0..R only, with no KV
// cache, collecting attention statistics on the way.
//
// R is the deepest layer in `requests`. Layers before R run in full (causal attention among the
// prompt's rows, nothing cached) and collect what `requests` asks of them; layer R computes only
// what its request needs: when that is last-query statistics only (last_query,
// last_query_logit_sum), just the RoPE'd queries of the last row and the keys of all rows, so
// pass-1 memory is one layer's activations plus one layer's keys. Any other statistic at R runs
// the full layer R. Layers after R are never touched.
//
// With a cache (options.cache: R + 1 layers) the pass keeps the keys and values of layers 0..R
// in it, so that the prompt can be stored in the host's prefix cache, and a cache that already
// holds the KV of tokens [0, options.cached) (a cached prefix) lets only the rest run: causal
// attention makes those layers' KV of a prefix independent of what follows it. The caller
// reuses no row a statistic reads (prefill/prefix_reuse.h, ReusableTokens). Layer R's keys are
// then read from the cache (its dtype), not from the fp32 projection.
//
// THREADING: pure function of its inputs (the model is const).
// ERRORS:    throws sift::Error for an empty prompt or request map, or a layer out of range;
//            `cancelled` (may be empty) is polled before each layer and, when it returns true,
//            the function returns false with `out` unspecified.
#ifndef SIFT_PLUGINS_PREFILL_PARTIAL_PARTIAL_PREFILL_H_
#define SIFT_PLUGINS_PREFILL_PARTIAL_PARTIAL_PREFILL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "sift/attention.h"
#include "sift/model.h"

namespace sift::plugins {

struct PartialPrefillOptions {
  int64_t block_size = 256;  // AttentionOptions::block_size
  KvCache* cache = nullptr;  // optional: R + 1 layers, the first `cached` entries of each filled
  int64_t cached = 0;        // prompt tokens already in `cache` (only the rest runs)
  std::function<bool()> cancelled;
  std::function<void(int64_t done, int64_t total)> progress;
};

// Returns true when done; fills *out with one entry per requested layer.
bool PartialPrefill(const Model& model, const std::vector<TokenId>& tokens,
                    const std::map<int64_t, AttentionStatsRequest>& requests,
                    const PartialPrefillOptions& options, std::map<int64_t, AttentionStats>* out);

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_PREFILL_PARTIAL_PARTIAL_PREFILL_H_
