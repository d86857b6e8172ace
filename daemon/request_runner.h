// CatalogBackend: the real Backend. Resolves pipelines in the hot-reloadable catalog and runs
// admitted requests on the shared model: build the RequestState (request_builder.h), run the
// pipeline with a RequestContext, and answer with one `final` (text, usage, stats) or `error`.
//
// Cost (tokens and KV bytes kept, prefill and decode time, per-stage times) comes from
// sift::MakeCostReport (sift/cost_report.h), the function sift-bench's in-process rows use too.
// Timings (all from the daemon's monotonic clock, in ms): queue = arrival -> its pipeline starts
// (the admission queue, then the wait for KV budget); ttft = arrival -> first generated token;
// prefill = the stages before decode; decode = generating after the first token (the decode stage's
// time if it did not say); e2e = arrival
// -> final.
//
// Batching (Batching below; siftd's default): in-process stages talk to the request's context
// directly, decode joins the shared BatchEngine's batch and every other stage runs on the
// engine's loop between decode steps. Admission by KV memory: before its pipeline runs, a request
// reserves its peak KV bytes in the KvBudget (kv_budget.h) and waits while they do not fit; one
// that can never fit fails at once with RESOURCE_EXHAUSTED / kv_budget. When it joins the decode
// batch the reservation shrinks to the cache its pipeline left plus max_tokens more entries.
//
// THREADING: FindPipeline/List/Describe on the I/O thread, Execute on workers (concurrently);
//            the model, catalog, engine and budget are thread-safe.
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
#include "daemon/kv_budget.h"
#include "daemon/request_builder.h"
#include "sift/batch_engine.h"
#include "sift/model.h"
#include "sift/prefix_cache.h"

namespace sift::daemon {

// What the daemon shares between requests for continuous batching (all optional).
struct Batching {
  BatchEngine* engine = nullptr;  // null: each request decodes on its own worker (--max-batch 0)
  KvBudget* budget = nullptr;     // null: no admission by KV memory
  int64_t slice_tokens = 0;       // prompt tokens per prefill slice between decode steps
  PrefixCache* prefix_cache = nullptr;  // null: no prefix cache (--prefix-cache off)
};

// KV bytes of the whole prompt plus max_tokens, every layer.
int64_t PeakKvBytes(const Model& model, int64_t prompt_tokens, int64_t max_tokens);
// KV bytes a planned request reserves at admission: PeakKvBytes, or, when its prefill hands each
// layer to its select stage (RequestPlan::kv_peak_entries), that peak plus max_tokens of decode
// headroom in every layer.
int64_t AdmissionKvBytes(const Model& model, const RequestState& planned);

class CatalogBackend final : public Backend {
 public:
  CatalogBackend(std::shared_ptr<const Model> model, Catalog& catalog, BuildOptions options,
                 Batching batching = {});

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
  Batching batching_;
};

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_REQUEST_RUNNER_H_
