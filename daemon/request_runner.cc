#include "daemon/request_runner.h"

#include <new>
#include <optional>
#include <string>

#include "daemon/kept_report.h"
#include "daemon/log.h"
#include "daemon/public_listing.h"
#include "daemon/request_context.h"
#include "sift/cost_report.h"
#include "sift/error.h"

namespace sift::daemon {
namespace {

using json = nlohmann::json;

// What a request holds on to: the snapshot keeps the pipeline's plugin libraries loaded.
struct Resolved {
  std::shared_ptr<const CatalogSnapshot> snapshot;
  std::shared_ptr<const Pipeline> pipeline;
};

// The request's `final`: the text and usage as decode left them (or as they were streamed), the
// cost as sift::MakeCostReport computes it, and the daemon's own clock readings.
FinalReport MakeReport(const LiveRequest& request, const RequestState& state,
                       const RequestContext& context, const Model& model, Clock::time_point started,
                       bool clamped) {
  const auto now = Clock::now();
  const CostReport cost = MakeCostReport(state, model);
  FinalReport r;
  r.text = state.result.text.empty() ? context.text() : state.result.text;
  r.finish_reason = FinishReasonName(state.result.finish);
  if (clamped && state.result.finish == FinishReason::kLength) r.finish_reason = "context_full";
  r.prompt_tokens = state.prompt_length;
  r.cached_tokens = state.cached_tokens;
  r.completion_tokens = state.result.tokens.empty()
                            ? context.tokens_emitted()
                            : static_cast<int64_t>(state.result.tokens.size());
  r.tokens_before = cost.tokens_before;
  r.tokens_kept = cost.tokens_kept;
  r.kv_bytes_full = cost.kv_bytes_full;
  r.kv_bytes = cost.kv_bytes;
  for (const StageCost& s : cost.stages) {
    r.stages.push_back(StageReport{s.stage, s.plugin, StageKindName(s.kind), s.ms});
  }
  r.queue_ms = MsBetween(request.received, started);
  r.e2e_ms = MsBetween(request.received, now);
  r.ttft_ms = context.first_token_time() ? MsBetween(request.received, *context.first_token_time())
                                         : r.e2e_ms;
  r.prefill_ms = cost.prefill_ms;
  r.decode_ms = cost.decode_ms;
  r.catalog_generation = request.catalog_generation;
  return r;
}

// The batch as one request's decode stage sees it: before handing the request to the engine,
// its KV reservation shrinks from the peak to what it will hold from now on.
class ReservingDecoder final : public BatchDecoder {
 public:
  ReservingDecoder(BatchEngine& engine, KvReservation& reservation)
      : engine_(engine), reservation_(reservation) {}
  GenerationResult Decode(const Model& model, KvCache& cache, const at::Tensor& first_logits,
                          int64_t next_position, const GenerationOptions& options,
                          const StreamCallback& on_piece) override {
    const int64_t growth =
        options.max_tokens * cache.num_layers() * KvCache::EntryBytes(model.CacheShape());
    const int64_t holds = cache.Bytes() + growth;
    if (holds < reservation_.bytes()) reservation_.Resize(holds);
    return engine_.Decode(model, cache, first_logits, next_position, options, on_piece);
  }

 private:
  BatchEngine& engine_;
  KvReservation& reservation_;
};

json PartialDetails(const RequestContext& context, const char* stage) {
  json d = {{"stage", stage}, {"completion_tokens", context.tokens_emitted()}};
  if (!context.text().empty()) d["partial_text"] = context.text();
  return d;
}

}  // namespace

int64_t PeakKvBytes(const Model& model, int64_t prompt_tokens, int64_t max_tokens) {
  return (prompt_tokens + max_tokens) * model.config().num_layers *
         KvCache::EntryBytes(model.CacheShape());
}

int64_t AdmissionKvBytes(const Model& model, const RequestState& planned) {
  const int64_t max_tokens = planned.generation.max_tokens;
  if (planned.plan.kv_peak_entries <= 0) {
    return PeakKvBytes(model, static_cast<int64_t>(planned.tokens.size()), max_tokens);
  }
  // Every layer's decode headroom, plus one more layer's while a layer's selection copies the
  // entries it keeps (KvCache::Select allocates them with headroom before the prompt's go).
  const int64_t headroom = (model.config().num_layers + 1) * max_tokens;
  return (planned.plan.kv_peak_entries + headroom) * KvCache::EntryBytes(model.CacheShape());
}

CatalogBackend::CatalogBackend(std::shared_ptr<const Model> model, Catalog& catalog,
                               BuildOptions options, Batching batching)
    : model_(std::move(model)), catalog_(catalog), options_(options), batching_(batching) {}

std::shared_ptr<const void> CatalogBackend::FindPipeline(const std::string& name,
                                                         uint64_t* generation) {
  auto resolved = std::make_shared<Resolved>();
  resolved->snapshot = catalog_.Snapshot();
  if (!resolved->snapshot) return nullptr;
  resolved->pipeline = resolved->snapshot->FindPipeline(name);
  if (!resolved->pipeline) return nullptr;
  *generation = resolved->snapshot->generation();
  return resolved;
}

json CatalogBackend::ModelInfo() const {
  const ModelConfig& c = model_->config();
  return {{"name", c.name},
          {"path", model_->path()},
          {"architecture", c.architecture},
          {"layers", c.num_layers},
          {"heads", c.num_heads},
          {"kv_heads", c.num_kv_heads},
          {"context_length", c.context_length},
          {"n_ctx", options_.n_ctx > 0 ? options_.n_ctx : c.context_length},
          {"vocab_size", c.vocab_size},
          {"dtype", DtypeName(model_->options().dtype)},
          {"device", model_->options().device.str()}};
}

json CatalogBackend::List() {
  auto snapshot = catalog_.Snapshot();
  json out = snapshot ? snapshot->List() : json::object();
  if (!out.is_object()) out = json::object();
  out["model"] = ModelInfo();
  out["catalog_generation"] = snapshot ? snapshot->generation() : 0;
  return PublicListing(std::move(out));  // clients see names, not the operator's paths
}

json CatalogBackend::Describe() {
  auto snapshot = catalog_.Snapshot();
  return {{"model", model_->config().name},
          {"catalog_generation", snapshot ? snapshot->generation() : 0}};
}

void CatalogBackend::Execute(const std::shared_ptr<LiveRequest>& request, ReplySink& sink) {
  auto started = Clock::now();
  const GenerateRequest& g = request->request;
  RequestContext context(request, sink);
  if (request->Cancelled()) {
    sink.SendTerminal(request,
                      Terminal::Error(g.id, request->CancelStatus(), {{"stage", "queued"}}));
    return;
  }
  const auto* resolved = static_cast<const Resolved*>(request->pipeline.get());
  const Pipeline& pipeline = *resolved->pipeline;

  RequestState state;
  json details;
  bool clamped = false;
  Status status = BuildRequestState(*model_, g, options_, &state, &clamped, &details);
  if (!status.ok()) {
    sink.SendTerminal(request, Terminal::Error(g.id, status, details));
    return;
  }
  // Admission by KV memory, once the stages have planned what the request will hold.
  KvReservation reservation;
  json refusal;                   // kv_budget details when the request can never fit
  bool cancelled_queued = false;  // cancelled while waiting for the budget
  LocalExecution local;
  if (batching_.budget != nullptr) {
    local.after_plan = [&](const RequestState& planned) {
      const int64_t peak = AdmissionKvBytes(*model_, planned);
      switch (batching_.budget->Reserve(peak, [&] { return request->Cancelled(); })) {
        case KvBudget::Outcome::kReserved:
          reservation = KvReservation(batching_.budget, peak);
          started = Clock::now();  // the queue time includes the wait for KV budget
          return Status::Ok();
        case KvBudget::Outcome::kNeverFits:
          refusal = {{"kv_bytes", peak}, {"kv_budget", batching_.budget->capacity()}};
          return Status(
              StatusCode::kResourceExhausted, "kv_budget",
              "the request needs " + std::to_string(peak >> 20) + " MiB of KV cache (" +
                  std::to_string(planned.prompt_length) + " prompt tokens + max_tokens " +
                  std::to_string(planned.generation.max_tokens) +
                  (planned.plan.kv_peak_entries > 0 ? ", compressed layer by layer" : "") +
                  "), more than the whole KV budget of " +
                  std::to_string(batching_.budget->capacity() >> 20) + " MiB (--kv-budget)");
        case KvBudget::Outcome::kCancelled:
          break;
      }
      cancelled_queued = true;
      return request->CancelStatus();
    };
  } else {
    started = Clock::now();
  }
  std::optional<ReservingDecoder> decoder;
  local.direct = true;
  local.prefix_cache = batching_.prefix_cache;
  if (batching_.engine != nullptr) {
    local.engine = batching_.engine;
    local.slice_tokens = batching_.slice_tokens;
    if (batching_.budget != nullptr) {
      decoder.emplace(*batching_.engine, reservation);
      local.decoder = &*decoder;
    }
  }
  json kept;
  if (g.return_kept) {
    local.before_decode = [&](const RequestState& s) { kept = KeptReport(s, *model_); };
  }
  try {
    status = pipeline.Run(*model_, state, g.params, context, local);
  } catch (const std::bad_alloc&) {
    status = Status(StatusCode::kResourceExhausted, "out_of_memory",
                    "out of memory while running the pipeline");
  } catch (const std::exception& e) {
    status = Status(StatusCode::kInternal, "internal", e.what());
  }
  // The request's cache and KV reservation go back before its answer does, so that a client
  // that reads /metrics once it has its answer sees them released.
  const auto release = [&] {
    state.cache.reset();
    reservation.Reset();
  };
  if (cancelled_queued) {
    sink.SendTerminal(request,
                      Terminal::Error(g.id, request->CancelStatus(), {{"stage", "queued"}}));
    return;
  }
  if (!refusal.is_null()) {
    sink.SendTerminal(request, Terminal::Error(g.id, status, refusal));
    return;
  }
  const bool cancelled =
      request->Cancelled() && (!status.ok() || state.result.finish == FinishReason::kCancelled);
  if (cancelled || status.code() == StatusCode::kCancelled ||
      status.code() == StatusCode::kDeadlineExceeded) {
    const Status why = request->Cancelled() ? request->CancelStatus() : status;
    release();
    sink.SendTerminal(request, Terminal::Error(g.id, why, PartialDetails(context, "running")));
    return;
  }
  if (!status.ok()) {
    if (status.code() == StatusCode::kInternal) {
      LogError("pipeline_failed",
               {{"req", g.id}, {"pipeline", g.pipeline}, {"error", status.ToString()}});
    }
    release();
    sink.SendTerminal(request, Terminal::Error(g.id, status));
    return;
  }
  FinalReport report = MakeReport(*request, state, context, *model_, started, clamped);
  report.kept = std::move(kept);
  release();
  sink.SendTerminal(request, Terminal::Final(g.id, g.pipeline, std::move(report)));
}

}  // namespace sift::daemon
