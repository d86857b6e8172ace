#include "daemon/worker.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "daemon/catalog.h"
#include "daemon/hop_server.h"
#include "daemon/log.h"
#include "daemon/pipeline_runner.h"
#include "daemon/plugin_loader.h"
#include "daemon/state_codec.h"

namespace sift::daemon {
namespace {

using nlohmann::json;

std::atomic<bool> g_stop{false};
std::atomic<bool> g_rescan{false};

extern "C" void OnStopSignal(int) { g_stop = true; }
extern "C" void OnHangup(int) { g_rescan = true; }

// Installs handlers for the worker's lifetime and restores the previous ones after.
class SignalScope {
 public:
  SignalScope() {
    Install(SIGTERM, &OnStopSignal, &term_);
    Install(SIGINT, &OnStopSignal, &int_);
    Install(SIGHUP, &OnHangup, &hup_);
  }
  ~SignalScope() {
    sigaction(SIGTERM, &term_, nullptr);
    sigaction(SIGINT, &int_, nullptr);
    sigaction(SIGHUP, &hup_, nullptr);
  }

 private:
  static void Install(int sig, void (*handler)(int), struct sigaction* old) {
    struct sigaction sa = {};
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, old);
  }
  struct sigaction term_ = {}, int_ = {}, hup_ = {};
};

Status Precondition(const std::string& reason, const std::string& message) {
  return Status(StatusCode::kFailedPrecondition, reason, message);
}

// One remote stage: decode the state, run the plugin's stage on it, send the state back.
HopServer::Reply RunRemoteStage(HopMessage& request, StageContext& context, const Catalog& catalog,
                                const Model& model) {
  HopServer::Reply reply;
  const json& h = request.header;
  const std::string name = h.value("plugin", ""), version = h.value("version", "");
  const std::string label = h.value("label", name);
  std::shared_ptr<const Plugin> plugin = catalog.Snapshot()->FindPlugin(name);
  if (plugin == nullptr) {
    reply.status =
        Status(StatusCode::kNotFound, "unknown_plugin", "this worker has no plugin '" + name + "'");
    return reply;
  }
  if (plugin->version() != version) {
    reply.status =
        Precondition("plugin_version_mismatch", "this worker serves " + plugin->id() +
                                                    ", the pipeline uses " + name + "@" + version);
    return reply;
  }
  const json mine = ModelSignature(model);
  if (h.value("model", json()) != mine) {
    reply.status =
        Precondition("model_mismatch", "the caller's model " + h.value("model", json()).dump() +
                                           " differs from this worker's " + mine.dump());
    return reply;
  }
  RequestState state;
  std::vector<FrameView> frames;
  for (const zmq::message_t& m : request.payload) frames.push_back({m.data(), m.size()});
  DecodeState(h.at("state"), frames, model.options().device, &state);  // throws -> INTERNAL
  request.payload.clear();

  StageParams params("worker", label, name);
  const json given = h.value("params", json::object());
  for (const auto& [key, value] : given.items()) {
    params.Set(key, value, "caller");
  }
  StageHandle stage;
  try {
    stage = plugin->CreateStage(params, model);
  } catch (const std::exception& e) {
    reply.status = Status(StatusCode::kInvalidArgument, "bad_parameter", e.what());
    return reply;
  }
  reply.status = stage->Run(model, state, context);
  EncodedState encoded = EncodeState(state);
  reply.extra["state"] = std::move(encoded.header);
  for (const at::Tensor& t : encoded.tensors) reply.payload.push_back(TensorFrame(t));
  return reply;
}

}  // namespace

void RequestWorkerStop() { g_stop = true; }

int RunWorker(const WorkerOptions& options) {
  if (options.model == nullptr) {
    LogError("worker_failed", {{"component", "worker"}, {"message", "RunWorker: no model"}});
    return 2;
  }
  g_stop = false;
  SignalScope signals;
  std::unique_ptr<Catalog> catalog;
  std::unique_ptr<HopServer> server;
  try {
    CatalogOptions catalog_options;
    catalog_options.plugins_dir = options.plugins_dir;
    catalog_options.preflight = options.preflight;
    catalog = Catalog::Create(catalog_options, options.model);
    const Model& model = *options.model;
    const Catalog& plugins = *catalog;
    server = std::make_unique<HopServer>(
        options.bind,
        [&plugins, &model](HopMessage& request, StageContext& context) {
          return RunRemoteStage(request, context, plugins, model);
        },
        &options.curve);
  } catch (const std::exception& e) {
    LogError("worker_failed", {{"component", "worker"}, {"message", e.what()}});
    return 2;
  }
  json ready = {{"component", "worker"},
                {"endpoint", server->endpoint()},
                {"plugins", catalog->Snapshot()->List()["plugins"].size()},
                {"curve", options.curve.enabled}};
  if (options.curve.enabled) ready["curve_public_key"] = options.curve.server_public;
  LogInfo("worker_ready", ready);

  std::atomic<bool> served{false};
  std::thread hangups([&] {
    while (!served.load()) {
      if (g_rescan.exchange(false)) catalog->Rescan();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  server->Serve(g_stop);
  served = true;
  hangups.join();
  LogInfo("worker_stopped", {{"component", "worker"}, {"endpoint", server->endpoint()}});
  return 0;
}

}  // namespace sift::daemon
