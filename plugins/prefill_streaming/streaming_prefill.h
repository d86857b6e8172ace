// Streaming prefill with intermediate-layer retrieval scores (ILRe §3.3, Figure 4).
//
// The prompt is tokens[0, question_begin) = context C and tokens[question_begin, n) = query
// part q. Layers are 0-based here (layer l is the paper's layer l + 1). With R the deepest layer
// in `score_layers`:
//   - the context runs in chunks (the first chunk `chunk + sink` rows, then `chunk` rows; the
//     query part is the last chunk) through layers 0..R-1, each chunk attending under the
//     Λ mask (key j visible to query i when pos j < sink or pos i - pos j < window). Between
//     chunks each layer's cache is trimmed to its sink and window entries, so memory is
//     O((sink + window + chunk) × R) plus the key buffers;
//   - at every score layer, the RoPE'd keys of the whole context are written chunk by chunk into
//     a buffer preallocated for |C| entries, and the query part's RoPE'd queries are kept;
//   - then A_l = max over query heads and query rows of softmax(q·Kᵀ/√d) (ILRe eq. 3-4), the
//     softmax taken over the context keys (optionally also over the query part's own keys,
//     causally), fp32, one value per context token, sink included (callers drop it).
// Nothing past R is computed. Cost is linear in |C| for fixed sink, window, chunk and |q|.
//
// With an `archive` (a cache of R + 1 layers, for the host's prefix cache) every row the pass
// runs also leaves its KV there, in prompt order: layers 0..R-1 as computed under the Λ mask,
// layer R its RoPE'd keys and its values, so memory grows by (R + 1) layers of the prompt's KV.
// If the archive already holds `cached` rows (a cached prefix of this prompt, cached <= |C|)
// those rows are not run: each layer's streaming cache starts as the archive's sink and window
// entries at `cached`, and the score layers' keys as the archive's keys. This is exact because
// the Λ mask is causal: a row's KV at every layer depends on the rows before it only, and the
// trimmed cache holds every entry a later row can see (only floating-point grouping differs).
//
// With no query part (question_begin == n) the last `fallback_query` tokens act as the query.
// With no context (question_begin <= 0, or a prompt no longer than fallback_query) nothing is
// computed: every score layer gets an empty tensor and context_length is 0, so a filter keeps
// the whole (short) prompt.
//
// THREADING: pure function of its inputs (the model is const).
// ERRORS:    throws sift::Error for bad options (empty prompt, no score layer, layer out of
//            range, chunk < 1, window < 1, an archive of another depth, `cached` outside
//            [0, |C|] or more than the archive holds). `cancelled` (may be empty) is polled
//            before every layer of every chunk; when it returns true the function returns false.
#ifndef SIFT_PLUGINS_PREFILL_STREAMING_STREAMING_PREFILL_H_
#define SIFT_PLUGINS_PREFILL_STREAMING_STREAMING_PREFILL_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "sift/kv_cache.h"
#include "sift/model.h"

namespace sift::plugins {

struct StreamingPrefillOptions {
  int64_t sink = 4;                 // S: Λ-mask sink entries
  int64_t window = 512;             // W: Λ-mask recent entries
  int64_t chunk = 1024;             // context rows per chunk (the first chunk gets `sink` more)
  int64_t block_size = 256;         // AttentionOptions::block_size
  bool include_query_keys = false;  // softmax over context + query keys (else context only)
  int64_t fallback_query = 32;  // query rows taken from the prompt's end when there is no question
  KvCache* archive = nullptr;   // not owned; R + 1 layers; receives every row's KV (see above)
  int64_t cached = 0;           // rows [0, cached) already in `archive`, not run (needs archive)
  std::function<bool()> cancelled;
  std::function<void(int64_t done, int64_t total)> progress;
};

struct StreamingScores {
  std::map<int64_t, at::Tensor> scores;  // per score layer (0-based): A [context_length] fp32
  int64_t context_length = 0;            // |C| (the query part starts here)
  int64_t peak_cache_entries = 0;        // most streaming-cache entries held at once (all layers)
};

// StreamingLLM's streaming setting (Xiao et al. 2024, §3.2) through the whole model: tokens
// [begin, n) run in chunks (as above: `chunk` rows, the prompt's first chunk `sink` more)
// through every layer under the Λ mask, attending to `cache`, which holds the rolling state after
// tokens [0, begin) (empty when begin is 0). After each chunk every layer keeps its first `sink`
// positions and its last `window` (TrimToLambda), so `cache` ends as the rolling state after all
// n tokens, at most sink + window entries per layer whatever n is, and *last_logits is the last
// row's logits [vocab] fp32. With begin < snapshot_at < n a chunk ends at snapshot_at, and
// *snapshot (may be null) receives a copy of the rolling state after tokens [0, snapshot_at). The
// state after a prefix depends on that prefix alone (the mask is causal), so running [0, n) and
// running [b, n) from the state after [0, b) give the same result up to floating-point grouping.
// Returns false when `options.cancelled` said so (polled before every layer of every chunk).
// ERRORS: throws sift::Error for an empty prompt, begin outside [0, n), a cache of another depth.
bool StreamingForward(const Model& model, const std::vector<TokenId>& tokens, int64_t begin,
                      int64_t snapshot_at, const StreamingPrefillOptions& options, KvCache* cache,
                      KvCache* snapshot, at::Tensor* last_logits);

// Returns true when done.
bool StreamingPrefill(const Model& model, const std::vector<TokenId>& tokens,
                      int64_t question_begin, const std::set<int64_t>& score_layers,
                      const StreamingPrefillOptions& options, StreamingScores* out);

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_PREFILL_STREAMING_STREAMING_PREFILL_H_
