#include "sift/cost_report.h"

#include <algorithm>
#include <utility>

namespace sift {

int64_t FullKvBytes(const Model& model, int64_t tokens) {
  const KvCacheShape shape = model.CacheShape();
  return tokens * shape.num_layers * KvCache::EntryBytes(shape);
}

void RecordStageCost(RequestState& state, std::string label, std::string plugin, StageKind kind,
                     double ms) {
  StageCost cost{std::move(label), std::move(plugin), kind, ms, 0, 0};
  if (state.cache) {
    cost.tokens_kept =
        state.cache->TotalEntries() / std::max<int64_t>(1, state.cache->num_layers());
    cost.kv_bytes = state.cache->Bytes();
  } else {
    cost.tokens_kept = static_cast<int64_t>(state.tokens.size());
  }
  state.stats.stages.push_back(std::move(cost));
}

CostReport MakeCostReport(const RequestState& state, const Model& model) {
  CostReport r;
  r.tokens_before = state.prompt_length;
  r.kv_bytes_full = FullKvBytes(model, r.tokens_before);
  r.stages = state.stats.stages;
  const StageCost* before_decode = nullptr;  // the last stage before the first decode
  bool seen_decode = false;
  double decode_stages_ms = 0;
  for (const StageCost& s : state.stats.stages) {
    if (s.kind == StageKind::kDecode) {
      seen_decode = true;
      decode_stages_ms += s.ms;
    } else if (!seen_decode) {
      r.prefill_ms += s.ms;
      before_decode = &s;
    }
  }
  if (before_decode != nullptr) {
    r.tokens_kept = before_decode->tokens_kept;
    r.kv_bytes = before_decode->kv_bytes;
  } else if (state.cache && state.cache->num_layers() > 0) {
    // Every generated token but the last went into the cache.
    const int64_t appended =
        std::max<int64_t>(0, static_cast<int64_t>(state.result.tokens.size()) - 1);
    r.tokens_kept =
        std::max<int64_t>(0, state.cache->TotalEntries() / state.cache->num_layers() - appended);
    r.kv_bytes = FullKvBytes(model, r.tokens_kept);
  } else {
    r.tokens_kept = static_cast<int64_t>(state.tokens.size());
    r.kv_bytes = FullKvBytes(model, r.tokens_kept);
  }
  r.decode_ms = state.result.decode_ms > 0 ? state.result.decode_ms : decode_stages_ms;
  return r;
}

}  // namespace sift
