// Daemon: siftd serving requests, in three phases run in order by one thread (RunDaemon,
// server.h):
//
//   Start  checks the security options (CURVE keys, the OpenAI port's options), opens the
//          operations side (signals, the HTTP port: /health says "loading" meanwhile), loads
//          the model and the catalog, binds the ZeroMQ client port and the optional OpenAI port
//          (--openai, openai_server.h) on one front end, then logs "ready" and writes the
//          ready file. On failure it logs the reason and stops whatever it had started.
//   Serve  blocks until a stop signal (SIGTERM / SIGINT); requests are served meanwhile.
//   Drain  lets admitted requests finish (the rest are cancelled after --drain-timeout-ms, or at
//          a second stop signal), closes every port, removes the ready file, logs "stopped".
//
// Signals: the first SIGTERM or SIGINT starts the drain at once (Serve then returns); SIGHUP
// rescans the plugin and pipeline folders (also done every --rescan-ms by the catalog).
//
// OWNERSHIP: owns the model, catalog, backend, front end, OpenAI server, metrics and every thread
//            they start. THREADING: Start, Serve and Drain on one thread, in that order; signals,
//            rescans and the operations HTTP port run on the Daemon's own Asio thread.
// ERRORS:    Start returns false when siftd must exit without serving, exit_code() then says
//            with what: 1 after a failure (logged as an "error" line), 0 when a stop signal
//            arrived during start-up. Drain returns the exit code of a clean drain, 0.
#ifndef SIFT_DAEMON_DAEMON_H_
#define SIFT_DAEMON_DAEMON_H_

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "daemon/curve.h"
#include "daemon/kv_budget.h"
#include "daemon/metrics.h"
#include "daemon/openai_server.h"
#include "daemon/ops_http.h"
#include "daemon/options.h"
#include "daemon/request_runner.h"
#include "sift/batch_engine.h"
#include "sift/model.h"
#include "sift/prefix_cache.h"

namespace sift::daemon {

class Catalog;
class FrontEnd;

// Loads --model with --dtype, --weights, --device and --threads, refuses a model without a
// tokenizer, logs "model_loaded". Throws sift::Error (or std::exception) on failure. Shared by
// the Daemon and siftd --worker.
std::shared_ptr<const Model> LoadDaemonModel(const DaemonOptions& options);

class Daemon {
 public:
  explicit Daemon(DaemonOptions options);
  ~Daemon();  // stops anything still running (without waiting for requests)
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  bool Start();
  void Serve();
  int Drain();
  int exit_code() const { return exit_code_; }

 private:
  enum class Phase { kLoading, kReady, kDraining };
  // What the Asio thread's handlers may use once serving (set there by Publish; Asio thread only).
  struct Serving {
    FrontEnd* front_end = nullptr;
    CatalogBackend* backend = nullptr;
    Catalog* catalog = nullptr;
  };

  // Start's steps, in order; each returns false after logging why.
  bool CheckSecurity();
  bool StartOperations();
  bool LoadModelAndCatalog();
  bool StartFrontEnds();
  // The batch loop (unless --max-batch 0) and the KV budget, with their /metrics gauges.
  Batching StartBatching();
  void StartPrefixCache(Batching* batching);
  void Publish();
  void AnnounceReady();
  bool Fail();  // stops what Start started, sets exit code 1

  void DeclareMetrics();
  HttpResponse HandleHttp(const std::string& path);
  HttpResponse Health(bool ready_check);
  void WaitForSignal();
  void OnSignal(const boost::system::error_code& ec, int signal);
  void RescanCatalog();
  void NotifyStop();
  void StopOperations();
  void StopServing();
  double UptimeSeconds() const;

  const DaemonOptions options_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::atomic<Phase> phase_{Phase::kLoading};
  std::atomic<bool> stop_early_{false};  // a stop signal before serving
  int exit_code_ = 0;
  CurveConfig curve_;
  CurveClientKeys hop_curve_;  // stage hops to remote workers (--hop-curve-*)
  OpenAiServerOptions openai_options_;
  bool openai_on_ = false;
  bool http_on_ = false;

  // Serve waits for a stop signal (or the front end stopping by itself).
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_requested_ = false;

  // Declared before everything that records into it, so it outlives them.
  Metrics metrics_;
  // The operations side.
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  OpsHttpServer http_;
  boost::asio::signal_set signals_;
  int stop_signals_ = 0;  // Asio thread only
  Serving serving_;       // Asio thread only
  std::thread asio_thread_;
  // Serving, in the order they start (and the reverse of the order they stop).
  std::shared_ptr<const Model> model_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<KvBudget> kv_budget_;
  std::unique_ptr<PrefixCache>
      prefix_cache_;                     // charged to kv_budget_; null with --prefix-cache off
  std::unique_ptr<BatchEngine> engine_;  // null with --max-batch 0
  std::unique_ptr<CatalogBackend> backend_;
  std::unique_ptr<FrontEnd> front_end_;
  std::unique_ptr<OpenAiServer> openai_;
};

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_DAEMON_H_
