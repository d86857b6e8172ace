// LocalStageHost: the in-process executor of stage hops.
//
// One HopServer per process bound to an inproc endpoint and served by a background thread
// (started on first use, never stopped: it lives as long as the process). A local hop's `run`
// message carries, as its only payload frame, a handle: the address of the caller's LocalHopJob.
// The request state is never copied; the caller blocks in CallHop until `done`, so the job
// outlives its use. Only this inproc server accepts handles; a tcp worker never does.
//
// The executor thread adopts the caller's LibTorch thread-local state (grad mode, inference
// mode, ...) for the duration of the stage.
//
// A job may name the request's own context (`direct`): the stage then talks to it directly
// (cancellation, progress, streamed text) instead of through hop messages relayed by the caller's
// thread, which stays blocked in CallHop until `done`. With a batch engine (`engine`), a decode
// stage is offered the engine's batch (StageContext::batch_decoder(), through `decoder`) and every
// other stage runs on the engine's loop thread between decode steps (BatchEngine::RunExclusive),
// yielding to them between slices of `slice_tokens` prompt tokens where it can.
//
// THREADING: LocalStageEndpoint() is thread-safe.
#ifndef SIFT_DAEMON_LOCAL_STAGE_HOST_H_
#define SIFT_DAEMON_LOCAL_STAGE_HOST_H_

#include <ATen/ThreadLocalState.h>

#include <string>

#include "sift/batch_engine.h"
#include "sift/model.h"
#include "sift/prefix_cache.h"
#include "sift/request_state.h"
#include "sift/stage.h"

namespace sift::daemon {

struct LocalHopJob {
  Stage* stage = nullptr;
  const Model* model = nullptr;
  RequestState* state = nullptr;
  at::ThreadLocalState thread_state;  // captured on the caller's thread
  StageContext* direct = nullptr;     // the request's context; null: relay through hop messages
  StageKind kind = StageKind::kPrefill;
  BatchEngine* engine = nullptr;        // null: no batching, the stage runs on the executor
  BatchDecoder* decoder = nullptr;      // what a decode stage hands its request to (with engine)
  int64_t slice_tokens = 0;             // StageContext::slice_tokens() for stages on the engine
  PrefixCache* prefix_cache = nullptr;  // StageContext::prefix_cache(), under prefix_scope
  std::string prefix_scope;
};

// The endpoint to send local hops to (starts the host on first call).
const std::string& LocalStageEndpoint();

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_LOCAL_STAGE_HOST_H_
