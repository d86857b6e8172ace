// Worker: the `siftd --worker` side of a cross-process pipeline hop.
//
// A worker binds a ZeroMQ ROUTER socket on `bind` (e.g. "tcp://127.0.0.1:5601"), loads the
// plugins of `plugins_dir` (the same way the catalog does, without pipelines) and serves stage
// hops: a caller sends one stage's plugin name, parameters and the serialised RequestState
// (daemon/state_codec.h); the worker runs the stage on its own copy of the model and sends the
// updated state back. Progress and streamed text (StageContext::Progress / Emit) are relayed to
// the caller as they happen; a cancel frame from the caller makes Cancelled() true. With
// `curve` enabled the port is a CURVE server that admits only the listed daemons' keys (the same
// key files and ZAP rules as the client port, daemon/curve.h); siftd binds a non-loopback
// address only then.
//
// OWNERSHIP: the worker owns its socket and its plugin libraries; `model` is shared.
// THREADING: RunWorker blocks the calling thread; hops are served one at a time per worker
//            thread pool slot (see worker.cc for the exact policy).
// ERRORS:    a failing hop is answered with its Status; a bind failure or a fatal error makes
//            RunWorker log the reason and return a non-zero exit code.
#ifndef SIFT_DAEMON_WORKER_H_
#define SIFT_DAEMON_WORKER_H_

#include <memory>
#include <string>

#include "daemon/curve.h"
#include "daemon/plugin_preflight.h"
#include "sift/model.h"

namespace sift::daemon {

struct WorkerOptions {
  std::string bind;         // tcp://127.0.0.1:PORT
  std::string plugins_dir;  // folder of stage plugins (*.so)
  std::shared_ptr<const Model> model;
  PreflightOptions preflight;  // plugin pre-flight (plugin_preflight.h); empty = none
  CurveConfig curve;  // enabled: CURVE on the port (--curve-secret-key, --curve-client-keys)
};

// Serves stage hops until SIGTERM or SIGINT arrives (or RequestWorkerStop() is called).
// Returns the process exit code (0 on a clean stop).
int RunWorker(const WorkerOptions& options);

// Asks every running RunWorker in this process to stop (async-signal-safe; tests use it).
void RequestWorkerStop();

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_WORKER_H_
