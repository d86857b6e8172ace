// Pipeline runner: one request through a validated pipeline's stages.
//
// Order of work: build every stage instance from its parameters plus the request's overrides
// (any bad override fails the request before anything runs), let each stage Plan() in order
// (RequestPlan::prompt_tokens and question_begin set first), call LocalExecution::after_plan,
// then hop stage by stage. Each hop is a ZeroMQ message (hop_protocol.h):
//   - in process: to the LocalStageHost, carrying a handle to the state (no copy);
//   - endpoint = "tcp://...": to a `siftd --worker` (over CURVE with a worker key), carrying
//     the state serialised (state_codec.h) both ways; the worker builds its own instance of the
//     same plugin version from the same parameters (the local instance only planned). Progress and
//     streamed text are relayed; cancellation is forwarded.
// After each stage (failed ones included) the runner records what it cost in state.stats.stages
// (sift::RecordStageCost: label, plugin@version, kind, wall time, and the cache the stage left:
// entries per layer and bytes); stages never do that bookkeeping themselves. A remote stage's
// reply is taken over with RequestState::AdoptProducts, so stats stay the caller's.
//
// Overrides: {"<stage label or plugin name>": {"key": value, ...}, ...}; a plugin-name entry
// applies to every stage of that plugin, a label entry to that stage (and wins).
//
// THREADING: runs on the caller's thread (blocked while each hop runs on its executor).
// ERRORS:    returns INVALID_ARGUMENT for bad overrides, the failing stage's status (its message
//            prefixed with the stage), UNAVAILABLE for an unreachable worker.
#ifndef SIFT_DAEMON_PIPELINE_RUNNER_H_
#define SIFT_DAEMON_PIPELINE_RUNNER_H_

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/hop_client.h"
#include "daemon/pipeline_config.h"
#include "sift/batch_engine.h"
#include "sift/prefix_cache.h"
#include "sift/stage.h"

namespace sift::daemon {

// How in-process stages run (local_stage_host.h). Default: each on a hop executor thread,
// talking to the request's context through hop messages. With `direct`, they call the request's
// context themselves; with an engine, decode stages join its batch through `decoder` (the engine
// itself when null) and the other stages run on its loop between decode steps.
struct LocalExecution {
  bool direct = false;
  BatchEngine* engine = nullptr;
  BatchDecoder* decoder = nullptr;
  int64_t slice_tokens = 0;
  PrefixCache* prefix_cache = nullptr;  // offered to in-process stages (StageContext::prefix_cache)
  // Called once, on the request's thread, after every stage planned and before any runs, with
  // the planned state (what its pipeline will hold at most: RequestPlan::kv_peak_entries); a
  // status that is not OK ends the request with it. For admission by KV memory.
  std::function<Status(const RequestState&)> after_plan;
  // Called once, on the request's thread, with the state the first decode stage is about to
  // receive (after every prefill, filter, select and reuse stage, local or remote); not called
  // when the run fails or is cancelled before. For `return_kept` (kept_report.h).
  std::function<void(const RequestState&)> before_decode;
};

// How remote stages are reached: liveness limits, and CURVE keys (this daemon's key pair and the
// default worker key; a stage's own worker_key replaces the default). A stage whose worker key
// is set needs the key pair, else it fails FAILED_PRECONDITION (the catalog refuses such a
// pipeline at load).
struct RemoteHops {
  HopTimeouts timeouts;
  CurveClientKeys curve;
};

Status RunPipeline(const std::string& pipeline, const std::vector<ResolvedStage>& stages,
                   const Model& model, RequestState& state, const nlohmann::json& overrides,
                   StageContext& context, const RemoteHops& remote = {},
                   const LocalExecution& local = {});

// What a worker checks before running a stage for a caller: the same architecture shapes.
nlohmann::json ModelSignature(const Model& model);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_PIPELINE_RUNNER_H_
