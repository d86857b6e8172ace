#include "daemon/server.h"

#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <thread>

#include "daemon/catalog.h"
#include "daemon/curve.h"
#include "daemon/front_end.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/openai_server.h"
#include "daemon/ops_http.h"
#include "daemon/plugin_preflight.h"
#include "daemon/request_runner.h"
#include "daemon/worker.h"
#include "sift/device.h"
#include "sift/error.h"
#include "sift/model.h"

namespace sift::daemon {
namespace {

namespace asio = boost::asio;
using json = nlohmann::json;

enum class Phase { kLoading, kReady, kDraining };

bool WriteReadyFile(const std::string& path, const json& content) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return false;
  const std::string text = content.dump() + "\n";
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && ok && std::rename(tmp.c_str(), path.c_str()) == 0;
}

// Counts ok / failed entries of a catalog listing section.
std::pair<int, int> CountOk(const json& list, const char* section) {
  int ok = 0, failed = 0;
  if (list.contains(section) && list[section].is_array()) {
    for (const json& e : list[section]) (e.value("ok", false) ? ok : failed)++;
  }
  return {ok, failed};
}

std::shared_ptr<const Model> LoadModel(const DaemonOptions& o) {
  ModelOptions mo;
  mo.dtype = ParseDtype(o.dtype);
  mo.weights = ParseWeightFormat(o.weights);
  mo.device = ParseDevice(o.device);
  mo.threads = o.threads;
  mo.context_length = o.n_ctx;  // 0 = the model's; past it RoPE extrapolates (a warning says so)
  ConfigureThreads(o.threads);
  const auto start = std::chrono::steady_clock::now();
  auto model = Model::Load(o.model, mo);
  // Every request is tokenized here and decoding detokenizes: refuse at start, not per request.
  SIFT_CHECK(model->has_tokenizer(), o.model,
             ": no tokenizer; a Hugging Face directory needs tokenizer.json (with "
             "tokenizer_config.json for the chat template)");
  LogInfo(
      "model_loaded",
      {{"path", o.model},
       {"name", model->config().name},
       {"layers", model->config().num_layers},
       {"context_length", model->config().context_length},
       {"dtype", DtypeName(mo.dtype)},
       {"weights", model->native_weights() ? "native" : "dense"},
       {"kernels", model->KernelSummary()},
       {"device", mo.device.str()},
       {"ms", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                  .count()}});
  return model;
}

int RunWorkerMode(const DaemonOptions& o) {
  if (o.bind.size() != 1) {
    LogError("bad_options", {{"message", "--worker needs exactly one --bind endpoint"}});
    return 2;
  }
  if (!IsLoopbackEndpoint(o.bind[0])) {
    LogError("insecure_bind",
             {{"endpoint", o.bind[0]},
              {"message",
               "refusing to bind the worker port to a non-loopback address: stage hops are "
               "not authenticated; bind 127.0.0.1 (or ::1) and reach it through a tunnel "
               "(docs/operations.md)"}});
    return 1;
  }
  WorkerOptions w;
  w.bind = o.bind[0];
  w.plugins_dir = o.plugins_dir;
  w.preflight = SelfPreflight(o.model, o.dtype, o.device, o.preflight_timeout_ms);
  try {
    w.model = LoadModel(o);
  } catch (const std::exception& e) {
    LogError("model_load_failed", {{"path", o.model}, {"error", e.what()}});
    return 1;
  }
  return RunWorker(w);
}

}  // namespace

int RunDaemon(const DaemonOptions& o) {
  LogLevel level;
  if (!ParseLogLevel(o.log_level, &level)) {
    LogError("bad_options", {{"message", "--log-level: expected debug, info, warn or error"}});
    return 2;
  }
  SetLogLevel(level);
  if (!o.make_curve_keys.empty()) {
    std::string summary;
    Status st = MakeCurveKeyFiles(o.make_curve_keys, &summary);
    if (!st.ok()) {
      LogError("curve_keygen_failed", {{"error", st.message()}});
      return 1;
    }
    std::printf("%s\n", summary.c_str());
    return 0;
  }
  if (!o.preflight.empty()) return RunPreflightChild(o.preflight, o.model, o.dtype, o.device);
  if (o.worker) return RunWorkerMode(o);

  // ---- security checks first: fail before the expensive part ----
  FrontEndOptions fo;
  fo.endpoints = o.bind;
  if (!o.curve_secret_key.empty() || !o.curve_client_keys.empty()) {
    Status st = LoadCurveConfig(o.curve_secret_key, o.curve_client_keys, &fo.curve);
    if (!st.ok()) {
      LogError("curve_config_failed", {{"error", st.message()}});
      return 1;
    }
  }
  for (const std::string& endpoint : o.bind) {
    if (!IsLoopbackEndpoint(endpoint) && !fo.curve.enabled) {
      LogError("insecure_bind", {{"endpoint", endpoint},
                                 {"message",
                                  "non-loopback endpoints need --curve-secret-key and "
                                  "--curve-client-keys (docs/operations.md)"}});
      return 1;
    }
  }

  OpenAiServerOptions oo;
  const bool openai_on = !o.openai.empty() && o.openai != "off";
  if (openai_on) {
    oo.address = o.openai;
    oo.api_keys_file = o.openai_api_keys;
    oo.max_body_bytes = o.openai_max_body_bytes;
    oo.max_connections = o.openai_max_connections;
    oo.timeout_ms = o.openai_timeout_ms;
    Status st = OpenAiServer::CheckOptions(oo);
    if (!st.ok()) {
      LogError("openai_config_failed", {{"reason", st.reason()}, {"error", st.message()}});
      return 1;
    }
  }

  // ---- operations side: signals, HTTP, timers on one Asio thread ----
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  Metrics metrics;
  std::atomic<Phase> phase{Phase::kLoading};
  std::atomic<bool> stop_early{false};
  const auto started = std::chrono::steady_clock::now();
  FrontEnd* front_end = nullptr;  // set once serving (accessed on the Asio thread)
  Catalog* catalog = nullptr;
  CatalogBackend* backend = nullptr;

  metrics.DeclareGauge("sift_up", "1 while siftd runs.", [] { return 1.0; });
  metrics.DeclareGauge("sift_ready", "1 when siftd serves requests (model and catalog loaded).",
                       [&phase] { return phase.load() == Phase::kReady ? 1.0 : 0.0; });
  metrics.DeclareGauge("sift_uptime_seconds", "Seconds since start.", [started] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  });
  metrics.DeclareCounter("sift_catalog_rescans_total", "Forced catalog rescans, by trigger.");

  auto health = [&](bool ready_check) -> HttpResponse {
    const Phase p = phase.load();
    json body = {{"status", p == Phase::kReady     ? "ready"
                            : p == Phase::kLoading ? "loading"
                                                   : "draining"}};
    if (!ready_check) {
      return {200, "application/json", json({{"status", "alive"}}).dump() + "\n"};
    }
    if (p == Phase::kReady && backend && catalog) {
      json list = backend->List();
      auto [ok, failed] = CountOk(list, "pipelines");
      body["pipelines_ok"] = ok;
      body["pipelines_failed"] = failed;
      body["catalog_generation"] = list.value("catalog_generation", 0);
      body["model"] = list["model"].value("name", "");
      if (front_end) {
        body["queue_depth"] = front_end->scheduler().queued();
        body["running"] = front_end->scheduler().running();
      }
      if (ok == 0) body["status"] = "no_pipelines";
      return {ok > 0 ? 200 : 503, "application/json", body.dump() + "\n"};
    }
    return {503, "application/json", body.dump() + "\n"};
  };
  OpsHttpServer http(io, [&](const std::string&, const std::string& path) -> HttpResponse {
    if (path == "/metrics") {
      return {200, "text/plain; version=0.0.4; charset=utf-8", metrics.Render()};
    }
    if (path == "/health/live") return health(false);
    if (path == "/health" || path == "/health/ready") return health(true);
    return {404, "text/plain; charset=utf-8", "not found; try /health or /metrics\n"};
  });
  const bool http_on = !o.http.empty() && o.http != "off";
  if (http_on) {
    Status st = http.Listen(o.http);
    if (!st.ok()) {
      LogError("http_listen_failed", {{"error", st.message()}});
      return 1;
    }
  }

  asio::signal_set signals(io, SIGTERM, SIGINT, SIGHUP);
  int stop_signals = 0;
  std::function<void()> rescan;  // set once the catalog exists
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int sig) {
        if (ec) return;
        if (sig == SIGHUP) {
          if (rescan) {
            LogInfo("reload_requested", {{"signal", "SIGHUP"}});
            metrics.Add("sift_catalog_rescans_total", {{"trigger", "sighup"}});
            rescan();
          }
        } else {
          ++stop_signals;
          LogInfo("stop_requested",
                  {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}, {"count", stop_signals}});
          if (!front_end) {
            stop_early = true;
          } else if (stop_signals == 1) {
            phase = Phase::kDraining;
            front_end->BeginDrain();
          } else {
            front_end->DrainNow();
          }
        }
        signals.async_wait(on_signal);
      };
  signals.async_wait(on_signal);
  std::thread asio_thread([&io] { io.run(); });
  auto shutdown_asio = [&] {
    asio::post(io, [&] {
      signals.cancel();
      http.Stop();
    });
    work.reset();
    io.stop();
    asio_thread.join();
  };

  // ---- model and catalog ----
  std::shared_ptr<const Model> model;
  std::unique_ptr<Catalog> catalog_owner;
  try {
    model = LoadModel(o);
    metrics.DeclareGauge("sift_engine_info",
                         "1, labelled with the engine's configuration (CPU kernels, weights).");
    metrics.Set("sift_engine_info",
                {{"kernels", model->KernelSummary()},
                 {"weights", model->native_weights() ? "native" : "dense"},
                 {"dtype", DtypeName(model->options().dtype)},
                 {"device", model->options().device.str()}},
                1);
    CatalogOptions co;
    co.plugins_dir = o.plugins_dir;
    co.pipelines_dir = o.pipelines_dir;
    co.staging_dir = o.staging_dir;
    co.preflight = SelfPreflight(o.model, o.dtype, o.device, o.preflight_timeout_ms);
    // The catalog polls the folders itself (it waits until a changed file has settled, so a
    // half-copied .so is never loaded); SIGHUP forces a rescan.
    co.poll_interval_ms = o.rescan_ms;  // its events go to the daemon's log (log.h)
    catalog_owner = Catalog::Create(co, model);
  } catch (const std::exception& e) {
    LogError("start_failed", {{"error", e.what()}});
    shutdown_asio();
    return 1;
  }
  if (stop_early) {
    shutdown_asio();
    return 0;
  }
  BuildOptions bo;
  bo.n_ctx = o.n_ctx;
  bo.question_tokens = o.question_tokens;
  CatalogBackend backend_impl(model, *catalog_owner, bo);

  fo.workers = o.workers;
  fo.queue_size = o.queue_size;
  fo.hwm = o.hwm;
  fo.linger_ms = o.linger_ms;
  fo.max_message_bytes = o.max_message_bytes;
  fo.header_limits.max_bytes = static_cast<size_t>(o.max_header_bytes);
  fo.max_client_inflight = o.max_client_inflight;
  fo.heartbeat_ms = o.heartbeat_ms;
  fo.drain_timeout_ms = o.drain_timeout_ms;
  fo.default_deadline_ms = o.default_deadline_ms;
  FrontEnd fe(fo, backend_impl, metrics);
  Status st = fe.Start();
  if (!st.ok()) {
    LogError("start_failed", {{"reason", st.reason()}, {"error", st.message()}});
    shutdown_asio();
    return 1;
  }

  // The OpenAI-compatible port feeds the same front end (queue, metrics, drain).
  std::unique_ptr<OpenAiServer> openai;
  if (openai_on) {
    openai = std::make_unique<OpenAiServer>(oo, fe, backend_impl, metrics);
    st = openai->Start();
    if (!st.ok()) {
      LogError("start_failed", {{"reason", st.reason()}, {"error", st.message()}});
      shutdown_asio();
      return 1;
    }
  }

  Catalog* const catalog_ptr = catalog_owner.get();
  metrics.DeclareGauge("sift_catalog_generation", "Generation of the published catalog.",
                       [catalog_ptr] {
                         auto snapshot = catalog_ptr->Snapshot();
                         return snapshot ? static_cast<double>(snapshot->generation()) : 0.0;
                       });
  // Publish to the Asio side (handlers run there; post orders the writes).
  asio::post(io, [&] {
    catalog = catalog_ptr;
    backend = &backend_impl;
    front_end = &fe;
    rescan = [&] {
      try {
        const std::string summary = catalog->Rescan();
        LogInfo("rescan_done", {{"summary", summary}});
      } catch (const std::exception& e) {
        LogError("rescan_failed", {{"error", e.what()}});
      }
    };
    if (stop_early) {
      phase = Phase::kDraining;
      fe.BeginDrain();
    } else {
      phase = Phase::kReady;
    }
  });

  const json list = backend_impl.List();
  const auto [pipelines_ok, pipelines_failed] = CountOk(list, "pipelines");
  const auto [plugins_ok, plugins_failed] = CountOk(list, "plugins");
  json ready = {{"pid", static_cast<int64_t>(::getpid())},
                {"endpoints", fe.endpoints()},
                {"http", http_on ? http.address() : ""},
                {"openai", openai ? openai->address() : ""},
                {"model", model->config().name},
                {"pipelines_ok", pipelines_ok},
                {"pipelines_failed", pipelines_failed},
                {"plugins_ok", plugins_ok},
                {"plugins_failed", plugins_failed},
                {"workers", o.workers},
                {"queue_size", o.queue_size}};
  if (fo.curve.enabled) ready["curve_public_key"] = fo.curve.server_public;
  if (pipelines_ok == 0) {
    LogWarn("no_pipelines", {{"pipelines_dir", o.pipelines_dir},
                             {"plugins_dir", o.plugins_dir},
                             {"message",
                              "no valid pipeline yet; generate requests will get "
                              "NOT_FOUND until one appears (rescans continue)"}});
  }
  LogInfo("ready", ready);
  if (!o.ready_file.empty() && !WriteReadyFile(o.ready_file, ready)) {
    LogWarn("ready_file_failed", {{"path", o.ready_file}});
  }

  fe.Wait();  // returns once a drain has completed
  asio::post(io, [&] { front_end = nullptr; });
  if (openai) openai->Stop(/*grace_ms=*/2000);  // delivers the front end's last replies
  shutdown_asio();
  if (!o.ready_file.empty()) std::remove(o.ready_file.c_str());
  LogInfo("stopped",
          {{"uptime_s",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()}});
  return 0;
}

}  // namespace sift::daemon
