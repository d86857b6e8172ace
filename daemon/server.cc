#include "daemon/server.h"

#include <cstdio>

#include "daemon/curve.h"
#include "daemon/daemon.h"
#include "daemon/log.h"
#include "daemon/plugin_preflight.h"
#include "daemon/worker.h"

namespace sift::daemon {
namespace {

int RunWorkerMode(const DaemonOptions& o) {
  if (o.bind.size() != 1) {
    LogError("bad_options", {{"message", "--worker needs exactly one --bind endpoint"}});
    return 2;
  }
  WorkerOptions w;
  if (!o.curve_secret_key.empty() || !o.curve_client_keys.empty()) {
    Status st = LoadCurveConfig(o.curve_secret_key, o.curve_client_keys, &w.curve);
    if (!st.ok()) {
      LogError("curve_config_failed", {{"error", st.message()}});
      return 1;
    }
  }
  if (!IsLoopbackEndpoint(o.bind[0]) && !w.curve.enabled) {
    LogError("insecure_bind",
             {{"endpoint", o.bind[0]},
              {"message",
               "refusing to bind the worker port to a non-loopback address without CURVE: "
               "give --curve-secret-key (the worker's key) and --curve-client-keys (the "
               "daemons' public keys), or bind 127.0.0.1 (docs/operations.md)"}});
    return 1;
  }
  w.bind = o.bind[0];
  w.plugins_dir = o.plugins_dir;
  w.preflight = SelfPreflight(o.model, o.dtype, o.device, o.preflight_timeout_ms);
  try {
    w.model = LoadDaemonModel(o);
  } catch (const std::exception& e) {
    LogError("model_load_failed", {{"path", o.model}, {"error", e.what()}});
    return 1;
  }
  return RunWorker(w);
}

int MakeCurveKeys(const std::string& prefix) {
  std::string summary;
  Status st = MakeCurveKeyFiles(prefix, &summary);
  if (!st.ok()) {
    LogError("curve_keygen_failed", {{"error", st.message()}});
    return 1;
  }
  std::printf("%s\n", summary.c_str());
  return 0;
}

}  // namespace

int RunDaemon(const DaemonOptions& o) {
  LogLevel level;
  if (!ParseLogLevel(o.log_level, &level)) {
    LogError("bad_options", {{"message", "--log-level: expected debug, info, warn or error"}});
    return 2;
  }
  SetLogLevel(level);
  LogFormat format;
  if (!ParseLogFormat(o.log_format, &format)) {
    LogError("bad_options", {{"message", "--log-format: expected text, json or auto"}});
    return 2;
  }
  SetLogFormat(format);
  if (!o.make_curve_keys.empty()) return MakeCurveKeys(o.make_curve_keys);
  if (!o.preflight.empty()) return RunPreflightChild(o.preflight, o.model, o.dtype, o.device);
  if (o.worker) return RunWorkerMode(o);
  Daemon daemon(o);
  if (!daemon.Start()) return daemon.exit_code();
  daemon.Serve();
  return daemon.Drain();
}

}  // namespace sift::daemon
