// RequestState: everything one request carries from stage to stage, and the one place that says
// how it is reset, copied and handed over.
//
// Stages read and write it in pipeline order: a prefill fills the cache (and the statistics the
// plan asks for), a filter replaces the tokens and drops what the old prompt produced, a select
// evicts entries, a reuse copies a leader layer's kept indices to its followers, and decode
// generates. Who writes what:
//   input     id, generation: the daemon's request builder; read-only for stages.
//             tokens, question_begin, prompt_length: the builder; a filter replaces the prompt
//             (ResetForNewTokens), and prompt_length keeps the original length.
//   products  cache, next_position, last_logits, layer_stats, kept_indices: a prefill sets them
//             (AdoptPrefill, or AdoptScores for a scoring-only pass); select and reuse edit the
//             cache and kept_indices; decode appends to the cache. cached_tokens: every prefill
//             that started from the host's prefix cache adds the prompt tokens it took from it
//             (a filter's scoring pass included; a filter or a later prefill keeps the count).
//   plan      every stage's Plan(), before any stage runs; read-only in Run().
//   result    decode.
//   stats     the pipeline runner only, after each stage (RecordStageCost, sift/cost_report.h);
//             a stage never writes it.
// A stage changes fields through the helpers below wherever one fits, so that what "drop the
// products" or "a fresh prefill" means is written once; a stage that grows a new product adds it
// here (and to the helpers, Clone and the daemon's state codec) rather than resetting it by hand.
//
// OWNERSHIP: the daemon owns the RequestState for the request's whole life; a stage borrows it
//            for the duration of Run() and must not keep pointers into it afterwards. The state
//            owns its cache and tensors: it is move-only, and Clone() is the one deep copy.
// THREADING: only one stage touches it at a time (hops are sequential); nothing here locks.
// ERRORS:    Clone() throws what LibTorch throws when an allocation fails; the other helpers do
//            not fail.
#ifndef SIFT_REQUEST_STATE_H_
#define SIFT_REQUEST_STATE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sift/attention.h"
#include "sift/generate.h"
#include "sift/kv_cache.h"
#include "sift/stage_kind.h"
#include "sift/status.h"
#include "sift/tokenizer.h"

namespace sift {

struct RequestState;

// What the prefill should collect, decided before the request runs by the pipeline's stages
// (Stage::Plan) in pipeline order.
struct RequestPlan {
  std::map<int64_t, AttentionStatsRequest> stats;  // per layer; absent = collect nothing
  // Layer-wise index reuse: leader layer of each follower layer (absent = scores itself).
  std::map<int64_t, int64_t> reuse_leader;
  // A cached state of the context (docs/context-cache.md#compressed-contexts): a stage whose
  // product depends on the context tokens[0, question_begin) alone (a context-only select: its
  // compressed context) names the prefix-cache scope it files that product under. The stage's
  // Plan() writes a variant ("context"); the host makes it a scope of that stage's generation, the
  // pipeline and every parameter up to it (empty where the stage runs without the host's cache).
  // A prefill that supports it (prefill_full) serves a cached state of exactly the context
  // instead of prefilling (RequestState::AdoptContextState) and stores no full prefix; a later
  // stage that changes what the naming stage made (a reuse stage) clears it. Empty: none.
  std::string context_state;

  // Selection layer by layer inside the prefill (docs/engine.md#selection-inside-the-prefill):
  // a prefill that computes the prompt one layer at a time can hand each layer to a select stage
  // as soon as that layer holds the whole prompt, so the request never holds the full KV of
  // every layer at once.
  //   prompt_tokens, question_begin  the host, before any Plan(): the prompt as it arrived.
  //   prefill_offers_layers          a prefill that can do it and was asked to (prefill_full,
  //                                  select_by_layer = true).
  //   select_layer                   a select stage that takes the offer (query-aware selection,
  //                                  no reuse stage): the prefill calls it on its own thread once
  //                                  per layer, in order, right after layer `layer` holds the
  //                                  whole prompt and its statistics are in
  //                                  state.layer_stats[layer]; it evicts that layer. It borrows
  //                                  the stage instance that set it (alive for the request's
  //                                  run). A reuse stage that follows, or a stage that runs on
  //                                  a remote worker, clears it: the prefill then runs as usual.
  //   kv_peak_entries                set with select_layer: the most cache entries the request
  //                                  holds, summed over layers (headroom not counted), so that
  //                                  admission by KV budget reserves that instead of the whole
  //                                  prompt in every layer; 0 = the whole prompt in every layer.
  int64_t prompt_tokens = 0;
  int64_t question_begin = 0;
  bool prefill_offers_layers = false;
  std::function<Status(int64_t layer, RequestState& state)> select_layer;
  int64_t kv_peak_entries = 0;
};

// What one stage cost, measured by the pipeline runner right after the stage returned (failed
// stages included).
struct StageCost {
  std::string stage;   // label in the pipeline
  std::string plugin;  // name@version
  StageKind kind = StageKind::kPrefill;
  double ms = 0;            // wall time of the hop
  int64_t tokens_kept = 0;  // KV entries per layer and KV head (mean); no cache: prompt tokens
  int64_t kv_bytes = 0;     // live cache bytes (KvCache::Bytes); no cache: 0
};

struct RequestStats {
  std::vector<StageCost> stages;  // in the order the stages ran
};

struct RequestState {
  RequestState() = default;
  RequestState(RequestState&&) = default;
  RequestState& operator=(RequestState&&) = default;
  RequestState(const RequestState&) = delete;  // it owns a cache: Clone() copies
  RequestState& operator=(const RequestState&) = delete;

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
  int64_t cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache, summed over
                              // the request's prefills (kept through filters and prefills)
  // The prefill served plan.context_state: `cache` is the naming stage's product for the context
  // (e.g. a compressed context), not a prefill's, and that stage finishes from it.
  bool context_state_hit = false;

  // ---- selection products ----
  std::map<int64_t, at::Tensor> kept_indices;  // per layer: [Hkv, m] indices kept (sorted)
  RequestPlan plan;

  // ---- output ----
  GenerationResult result;
  RequestStats stats;

  // A deep copy: every tensor (the cache's included) in storage of its own, so that editing the
  // copy never shows in this state. For running several continuations of one prefill.
  RequestState Clone() const;

  // Drops everything computed from the prompt: cache, next_position, last_logits, layer_stats,
  // kept_indices and context_state_hit. Input, plan, cached_tokens, result and stats stay.
  void DropProducts();

  // What a filter does: the prompt becomes `new_tokens` with the question at `new_question_begin`
  // (== size: none), prompt_length keeps the original length (set to the old prompt's length if
  // it was unset), and the products of the old prompt are dropped (DropProducts).
  void ResetForNewTokens(std::vector<TokenId> new_tokens, int64_t new_question_begin);

  // What a prefill of the whole prompt ends with: takes the cache, the logits after the last
  // prompt token and the statistics it collected; next_position = tokens.size(); kept_indices
  // are dropped (cached_tokens stays: a prefill that reused cached KV adds to it after);
  // prompt_length is set to tokens.size() if unset.
  void AdoptPrefill(std::unique_ptr<KvCache> new_cache, at::Tensor new_last_logits,
                    std::map<int64_t, AttentionStats> new_layer_stats);

  // What a prefill that found plan.context_state in the prefix cache ends with: the products are
  // dropped (DropProducts), `context_cache` (the state of tokens[0, question_begin)) becomes the
  // cache, context_state_hit is set and cached_tokens grows by question_begin.
  void AdoptContextState(std::unique_ptr<KvCache> context_cache);

  // What a scoring-only pass (a prefill that keeps no cache, for a filter) ends with: the
  // statistics it collected and no other product (DropProducts); prompt_length is set to
  // tokens.size() if unset.
  void AdoptScores(std::map<int64_t, AttentionStats> new_layer_stats);

  // Takes from `from` everything a stage may change: the prompt (tokens, question_begin,
  // prompt_length), the products and the result. id, generation, plan and stats stay this
  // state's. For a stage that ran on another copy of the request (a remote hop's reply).
  void AdoptProducts(RequestState&& from);
};

}  // namespace sift

#endif  // SIFT_REQUEST_STATE_H_
