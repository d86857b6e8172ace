#include "daemon/local_stage_host.h"

#include <cstring>
#include <thread>

#include "daemon/hop_server.h"

namespace sift::daemon {
namespace {

HopServer::Reply RunLocalJob(HopMessage& request, StageContext& context) {
  LocalHopJob* job = nullptr;
  if (request.payload.size() != 1 || request.payload[0].size() != sizeof(job)) {
    return HopServer::Reply(
        Status(StatusCode::kInternal, "bad_local_hop", "a local hop carries one handle"));
  }
  std::memcpy(&job, request.payload[0].data(), sizeof(job));
  at::ThreadLocalStateGuard guard(job->thread_state);
  return HopServer::Reply(job->stage->Run(*job->model, *job->state, context));
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
