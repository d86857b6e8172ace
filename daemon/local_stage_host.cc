#include "daemon/local_stage_host.h"

#include <cstring>
#include <thread>

#include "daemon/hop_server.h"

namespace sift::daemon {
namespace {

// The context a local stage sees: the request's own (or the hop relay), plus the batch engine's
// services when there is one.
class LocalContext final : public StageContext {
 public:
  LocalContext(StageContext& inner, const LocalHopJob& job) : inner_(inner), job_(job) {}
  bool Cancelled() const override { return inner_.Cancelled(); }
  Status CancelStatus() const override { return inner_.CancelStatus(); }
  void Progress(const std::string& what, int64_t done, int64_t total) override {
    inner_.Progress(what, done, total);
  }
  bool Emit(const std::string& text, TokenId token) override { return inner_.Emit(text, token); }
  BatchDecoder* batch_decoder() override {
    return job_.kind == StageKind::kDecode ? job_.decoder : nullptr;
  }
  void Yield() override {
    if (job_.engine != nullptr) {
      job_.engine->Yield();
    } else {
      inner_.Yield();  // the caller's context decides (a request's own: returns at once)
    }
  }
  Status RunSteps(const std::function<Status(bool* more)>& step, int64_t total_steps) override {
    if (job_.engine == nullptr) return inner_.RunSteps(step, total_steps);
    Status status;
    const std::function<bool()> engine_step = [&] {
      bool more = false;
      status = step(&more);
      return status.ok() && more;
    };
    job_.engine->RunSteps(engine_step, total_steps);
    return status;
  }
  int64_t slice_tokens() const override { return job_.engine != nullptr ? job_.slice_tokens : 0; }
  PrefixCacheAccess prefix_cache() override { return {job_.prefix_cache, job_.prefix_scope}; }

 private:
  StageContext& inner_;
  const LocalHopJob& job_;
};

HopServer::Reply RunLocalJob(HopMessage& request, StageContext& relay) {
  LocalHopJob* job = nullptr;
  if (request.payload.size() != 1 || request.payload[0].size() != sizeof(job)) {
    return HopServer::Reply(
        Status(StatusCode::kInternal, "bad_local_hop", "a local hop carries one handle"));
  }
  std::memcpy(&job, request.payload[0].data(), sizeof(job));
  LocalContext context(job->direct != nullptr ? *job->direct : relay, *job);
  auto run = [&] {
    at::ThreadLocalStateGuard guard(job->thread_state);
    return job->stage->Run(*job->model, *job->state, context);
  };
  if (job->engine == nullptr || job->kind == StageKind::kDecode) return HopServer::Reply(run());
  // Everything but decode runs on the engine's loop, between its decode steps, ordered by the
  // request's prompt length (shorter prompts first: BatchEngine). A prefill that hands each layer
  // to the select stage (RequestPlan::select_layer: prefill_full's select_by_layer) works in
  // steps, side by side with others of its size.
  const bool in_steps = job->kind == StageKind::kPrefill && job->state->plan.select_layer;
  Status status;
  job->engine->RunExclusive([&] { status = run(); },
                            static_cast<int64_t>(job->state->tokens.size()), in_steps);
  return HopServer::Reply(status);
}

}  // namespace

const std::string& LocalStageEndpoint() {
  // Leaked on purpose: the serving thread runs for the life of the process.
  static const std::string* endpoint = [] {
    auto* server = new HopServer("inproc://sift-local-stages", &RunLocalJob);
    static std::atomic<bool> never{false};
    std::thread([server] { server->Serve(never); }).detach();
    return &server->endpoint();
  }();
  return *endpoint;
}

}  // namespace sift::daemon
