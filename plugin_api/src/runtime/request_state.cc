#include "sift/request_state.h"

#include <utility>

namespace sift {
namespace {

at::Tensor Clone(const at::Tensor& t) { return t.defined() ? t.clone() : t; }

AttentionStats Clone(const AttentionStats& s) {
  AttentionStats c;
  c.window_sum = Clone(s.window_sum);
  c.last_query = Clone(s.last_query);
  c.column_sum = Clone(s.column_sum);
  c.max_prob = Clone(s.max_prob);
  c.last_query_logit_sum = Clone(s.last_query_logit_sum);
  return c;
}

}  // namespace

RequestState RequestState::Clone() const {
  RequestState c;
  c.id = id;
  c.tokens = tokens;
  c.question_begin = question_begin;
  c.prompt_length = prompt_length;
  c.generation = generation;
  if (cache) c.cache = std::make_unique<KvCache>(cache->Clone());
  c.next_position = next_position;
  c.last_logits = sift::Clone(last_logits);
  for (const auto& [layer, s] : layer_stats) c.layer_stats[layer] = sift::Clone(s);
  c.cached_tokens = cached_tokens;
  c.context_state_hit = context_state_hit;
  for (const auto& [layer, t] : kept_indices) c.kept_indices[layer] = sift::Clone(t);
  c.plan = plan;
  c.result = result;
  c.stats = stats;
  return c;
}

void RequestState::DropProducts() {
  cache.reset();
  next_position = 0;
  last_logits = at::Tensor();
  layer_stats.clear();
  kept_indices.clear();
  context_state_hit = false;
}

void RequestState::ResetForNewTokens(std::vector<TokenId> new_tokens, int64_t new_question_begin) {
  if (prompt_length == 0) prompt_length = static_cast<int64_t>(tokens.size());
  tokens = std::move(new_tokens);
  question_begin = new_question_begin;
  DropProducts();
}

void RequestState::AdoptPrefill(std::unique_ptr<KvCache> new_cache, at::Tensor new_last_logits,
                                std::map<int64_t, AttentionStats> new_layer_stats) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  cache = std::move(new_cache);
  last_logits = std::move(new_last_logits);
  next_position = n;
  layer_stats = std::move(new_layer_stats);
  kept_indices.clear();
  context_state_hit = false;
  if (prompt_length == 0) prompt_length = n;
}

void RequestState::AdoptContextState(std::unique_ptr<KvCache> context_cache) {
  DropProducts();
  cache = std::move(context_cache);
  context_state_hit = true;
  cached_tokens += question_begin;
  if (prompt_length == 0) prompt_length = static_cast<int64_t>(tokens.size());
}

void RequestState::AdoptScores(std::map<int64_t, AttentionStats> new_layer_stats) {
  DropProducts();
  layer_stats = std::move(new_layer_stats);
  if (prompt_length == 0) prompt_length = static_cast<int64_t>(tokens.size());
}

void RequestState::AdoptProducts(RequestState&& from) {
  tokens = std::move(from.tokens);
  question_begin = from.question_begin;
  prompt_length = from.prompt_length;
  cache = std::move(from.cache);
  next_position = from.next_position;
  last_logits = std::move(from.last_logits);
  layer_stats = std::move(from.layer_stats);
  cached_tokens = from.cached_tokens;
  context_state_hit = from.context_state_hit;
  kept_indices = std::move(from.kept_indices);
  result = std::move(from.result);
}

}  // namespace sift
