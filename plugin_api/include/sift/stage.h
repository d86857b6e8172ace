// Stage: the interface every pipeline stage (and so every plugin) implements.
//
// A stage instance is created per request from the pipeline's parameters plus the request's
// overrides (creation is cheap; heavy shared data lives in the Model or in plugin statics).
// Construction validates parameters and throws sift::Error on bad ones (see StageParams); Run
// never throws: it returns a Status. The plugin shim (sift/plugin.h) converts any exception that
// escapes anyway into an INTERNAL status, so no exception crosses the .so boundary.
//
// THREADING: one instance is used by one request on one thread; different instances of the same
//            stage run concurrently and must not share mutable state.
#ifndef SIFT_STAGE_H_
#define SIFT_STAGE_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <string>

#include "sift/model.h"
#include "sift/request_state.h"
#include "sift/stage_kind.h"
#include "sift/stage_params.h"
#include "sift/status.h"

namespace sift {

class BatchDecoder;  // sift/batch_engine.h
class PrefixCache;   // sift/prefix_cache.h

// The host's cache of prefilled prompts as one stage may use it: the cache, and the scope the
// stage files its entries under (its plugin, version and file hash). cache null: none.
struct PrefixCacheAccess {
  PrefixCache* cache = nullptr;
  std::string scope;
};

// Services the daemon offers a running stage.
class StageContext {
 public:
  virtual ~StageContext() = default;
  // True once the request was cancelled or its deadline passed; long loops check it between
  // layers or chunks and return Status(kCancelled / kDeadlineExceeded) via CancelStatus().
  virtual bool Cancelled() const = 0;
  virtual Status CancelStatus() const = 0;
  // Progress of long work (e.g. layers done of total); the daemon turns it into heartbeats.
  virtual void Progress(const std::string& what, int64_t done, int64_t total) = 0;
  // Streams generated text to the client (decode stages). Returns false if the client is gone.
  virtual bool Emit(const std::string& text, TokenId token) = 0;
  // The host's shared decode batch (sift/batch_engine.h), or nullptr: then a decode stage
  // generates on its own thread with sift::Generate. A decode stage that uses it hands the
  // request over and blocks until it leaves the batch; its stream callback runs on the batch's
  // thread and may call Cancelled() and Emit() there (the one exception to "call these from the
  // thread that runs Run").
  virtual BatchDecoder* batch_decoder() { return nullptr; }
  // Stages with long work call this between bounded slices of it (a prefill before each layer):
  // the host may run other requests' decode steps before it returns (siftd does when its
  // --decode-interval-ms has passed since the last one). Default: returns at once.
  virtual void Yield() {}
  // Long work cut into steps instead: `step` does one bounded slice (a prefill: one layer of one
  // chunk) and sets *more to false after the last one; an error it returns ends the series and
  // is returned. `total_steps` says how many there are. The host may run other requests' steps
  // between two of them (siftd interleaves the steps of prefills of similar size, when the
  // request's stage was handed to its loop as in-steps: docs/engine.md) and decode steps, as at
  // Yield(). Default: the steps one after the other with Yield() between them.
  virtual Status RunSteps(const std::function<Status(bool* more)>& step, int64_t total_steps) {
    for (;;) {
      bool more = false;
      Status status = step(&more);
      if (!status.ok() || !more) return status;
      Yield();
    }
  }
  // The slice, in prompt tokens, the host asks long stages to work in between Yield() calls
  // (0: no preference, work in one piece).
  virtual int64_t slice_tokens() const { return 0; }
  // The host's prefix cache (siftd's, for stages it runs in process; none on a remote worker):
  // a prefill of the whole prompt from position 0 may start from a cached prefix's KV and store
  // its own (docs/context-cache.md). Default: none.
  virtual PrefixCacheAccess prefix_cache() { return {}; }
};

class Stage {
 public:
  virtual ~Stage() = default;
  // Adds what this stage needs collected before it runs (e.g. a select stage asks the prefill
  // for window statistics at every layer). Called once per request, in pipeline order, before
  // any stage runs. Default: nothing.
  virtual Status Plan(const Model& model, RequestPlan& plan) const { return Status::Ok(); }
  // Does the stage's work on `state`: the prompt, the products and the result, through
  // RequestState's helpers where one fits (sift/request_state.h says who writes what). id,
  // generation and plan are read-only here, and stats belong to the pipeline runner.
  virtual Status Run(const Model& model, RequestState& state, StageContext& context) = 0;
};

}  // namespace sift

#endif  // SIFT_STAGE_H_
