// Backend: what the front end and the scheduler need from the model side, as an interface so
// that the ZeroMQ front end, the queue and their tests stay free of LibTorch. The real backend
// (request_runner.h) wraps the catalog and the model; tests use fakes.
//
// THREADING: FindPipeline, List and Describe are called on the front end's I/O thread and must
//            be quick; Execute is called on worker threads, concurrently for different requests.
// ERRORS:    Execute reports every failure as the request's terminal error through the sink;
//            an exception escaping it is turned into INTERNAL by the scheduler.
#ifndef SIFT_DAEMON_BACKEND_H_
#define SIFT_DAEMON_BACKEND_H_

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "daemon/live_request.h"

namespace sift::daemon {

class Backend {
 public:
  virtual ~Backend() = default;
  // The named pipeline of the current catalog generation (kept alive by the returned handle,
  // so the request finishes on it even if a reload replaces it), or nullptr if unknown.
  virtual std::shared_ptr<const void> FindPipeline(const std::string& name,
                                                   uint64_t* generation) = 0;
  // Body of a `listing` reply: {"pipelines": [...], "plugins": [...], "model": {...}}, as
  // clients may see it (file names, no directories: public_listing.h).
  virtual nlohmann::json List() = 0;
  // Small facts for `pong`: {"model": name, "catalog_generation": n, ...}.
  virtual nlohmann::json Describe() = 0;
  // Runs an admitted request; sends chunks and exactly one terminal through `sink`.
  virtual void Execute(const std::shared_ptr<LiveRequest>& request, ReplySink& sink) = 0;
};

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_BACKEND_H_
