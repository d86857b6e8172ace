// CatalogBackend: the real Backend. Resolves pipelines in the hot-reloadable catalog and runs
// admitted requests on the shared model: build the RequestState (request_builder.h), run the
// pipeline with a RequestContext, and answer with one `final` (text, usage, stats) or `error`.
//
// Cost (tokens and KV bytes kept, prefill and decode time, per-stage times) comes from
// sift::MakeCostReport (sift/cost_report.h), the function sift-bench's in-process rows use too.
// Timings (all from the daemon's monotonic clock, in ms): queue = arrival -> a worker starts
// it; ttft = arrival -> first generated token; prefill = the stages before decode; decode =
// generating after the first token (the decode stage's time if it did not say); e2e = arrival
// -> final.
//
// THREADING: FindPipeline/List/Describe on the I/O thread, Execute on workers (concurrently);
//            the model and catalog are thread-safe.
// ERRORS:    every failure becomes the request's terminal error: the builder's and the
//            pipeline's Status as they are, cancellation as CANCELLED / DEADLINE_EXCEEDED /
//            UNAVAILABLE, exceptions as INTERNAL (bad_alloc as RESOURCE_EXHAUSTED).
#ifndef SIFT_DAEMON_REQUEST_RUNNER_H_
#define SIFT_DAEMON_REQUEST_RUNNER_H_

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "daemon/backend.h"
#include "daemon/catalog.h"
#include "daemon/request_builder.h"
#include "sift/model.h"

namespace sift::daemon {

class CatalogBackend final : public Backend {
 public:
  CatalogBackend(std::shared_ptr<const Model> model, Catalog& catalog, BuildOptions options);

  std::shared_ptr<const void> FindPipeline(const std::string& name, uint64_t* generation) override;
  nlohmann::json List() override;
  nlohmann::json Describe() override;
  void Execute(const std::shared_ptr<LiveRequest>& request, ReplySink& sink) override;

  // Model facts for `listing` and /health.
  nlohmann::json ModelInfo() const;

 private:
  std::shared_ptr<const Model> model_;
  Catalog& catalog_;
  BuildOptions options_;
};

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_REQUEST_RUNNER_H_
