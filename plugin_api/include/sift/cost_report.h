// Cost report: what one request's pipeline cost, computed in one place for every reader (the
// daemon's `final` stats, sift-bench's in-process rows, the method benches).
//
// The pipeline runner measures after each stage (RecordStageCost): the stage's wall time and the
// cache the stage left. MakeCostReport turns a finished state into the report:
//   tokens_before  state.prompt_length: the prompt as received, before any filter
//   tokens_kept    KV entries per layer and KV head (mean) after the last stage before decode
//   kv_bytes       live cache bytes (KvCache::Bytes: k + v + positions) after that stage
//   kv_bytes_full  FullKvBytes(model, tokens_before): an uncompressed cache of the prompt
//   prefill_ms     wall time of the stages before the first decode (prefill, filter, select,
//                  reuse)
//   decode_ms      state.result.decode_ms (generating after the first token) when decode set
//                  it, else the decode stages' wall time
//   stages         the runner's records, in order
// A state with no record before decode (stages run by hand, without the runner) is measured as
// it is: the cache's mean entries per layer less the tokens decode appended to it (every
// generated token but the last), or, without a cache, the prompt's tokens.
//
// THREADING: functions of their arguments only. ERRORS: none.
#ifndef SIFT_COST_REPORT_H_
#define SIFT_COST_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sift/model.h"
#include "sift/request_state.h"
#include "sift/stage_kind.h"

namespace sift {

struct CostReport {
  int64_t tokens_before = 0;
  int64_t tokens_kept = 0;
  int64_t kv_bytes = 0;
  int64_t kv_bytes_full = 0;
  double prefill_ms = 0;
  double decode_ms = 0;
  std::vector<StageCost> stages;
};

// Bytes an uncompressed cache of `tokens` entries in every layer takes for `model`.
int64_t FullKvBytes(const Model& model, int64_t tokens);

// Appends the cost of a stage that just ran on `state`: {label, plugin, kind, ms} and the cache
// as it is now (StageCost). The pipeline runner calls it after every stage.
void RecordStageCost(RequestState& state, std::string label, std::string plugin, StageKind kind,
                     double ms);

CostReport MakeCostReport(const RequestState& state, const Model& model);

}  // namespace sift

#endif  // SIFT_COST_REPORT_H_
