// RequestState: everything one request carries from stage to stage.
//
// Stages read and write it in pipeline order: a prefill fills the cache (and the statistics the
// plan asks for), a filter replaces the tokens and clears the cache, a select evicts entries, a
// reuse copies a leader layer's kept indices to its followers, and decode generates.
//
// OWNERSHIP: the daemon owns the RequestState for the request's whole life; a stage borrows it
//            for the duration of Run() and must not keep pointers into it afterwards.
// THREADING: only one stage touches it at a time (hops are sequential).
#ifndef SIFT_REQUEST_STATE_H_
#define SIFT_REQUEST_STATE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sift/attention.h"
#include "sift/generate.h"
#include "sift/kv_cache.h"
#include "sift/tokenizer.h"

namespace sift {

// What the prefill should collect, decided before the request runs by the pipeline's stages
// (Stage::Plan) in pipeline order.
struct RequestPlan {
  std::map<int64_t, AttentionStatsRequest> stats;  // per layer; absent = collect nothing
  // Layer-wise index reuse: leader layer of each follower layer (absent = scores itself).
  std::map<int64_t, int64_t> reuse_leader;
};

struct StageTiming {
  std::string stage;   // label in the pipeline
  std::string plugin;  // name@version
  double ms = 0;
};

struct RequestStats {
  double queue_ms = 0, prefill_ms = 0, ttft_ms = 0, decode_ms = 0, e2e_ms = 0;
  int64_t prompt_tokens = 0;  // tokens of the prompt as received
  int64_t tokens_kept = 0;    // KV entries per layer per head after compression (mean)
  int64_t kv_bytes_full = 0;  // what an uncompressed cache of the prompt would take
  int64_t kv_bytes = 0;       // cache bytes after the last compressing stage
  std::vector<StageTiming> stages;
};

struct RequestState {
  // ---- input ----
  std::string id;                // client's request id
  std::vector<TokenId> tokens;   // the prompt as the model will see it (a filter replaces it)
  int64_t question_begin = 0;    // tokens[question_begin:] is the question (== size: none)
  int64_t prompt_length = 0;     // the original prompt length (before any filter)
  GenerationOptions generation;  // sampling, limits, stops

  // ---- prefill products ----
  std::unique_ptr<KvCache> cache;
  int64_t next_position = 0;                      // RoPE position of the next token to decode
  at::Tensor last_logits;                         // [vocab] fp32 after the last prompt token
  std::map<int64_t, AttentionStats> layer_stats;  // per layer, as the plan asked
  at::Tensor hidden;         // [n, hidden] fp32 when a partial prefill stopped early
  int64_t layer_cursor = 0;  // the first layer not yet applied to `hidden`

  // ---- selection products ----
  std::map<int64_t, at::Tensor> kept_indices;  // per layer: [Hkv, m] indices kept (sorted)
  RequestPlan plan;

  // ---- output ----
  GenerationResult result;
  RequestStats stats;
};

}  // namespace sift

#endif  // SIFT_REQUEST_STATE_H_
