#include "daemon/daemon.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <thread>

#include "daemon/catalog.h"
#include "daemon/front_end.h"
#include "daemon/log.h"
#include "daemon/plugin_preflight.h"
#include "daemon/request_runner.h"
#include "daemon/thread_priority.h"
#include "sift/device.h"
#include "sift/error.h"

namespace sift::daemon {
namespace {

namespace asio = boost::asio;
using json = nlohmann::json;

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

bool Enabled(const std::string& address) { return !address.empty() && address != "off"; }

FrontEndOptions MakeFrontEndOptions(const DaemonOptions& o, const CurveConfig& curve) {
  FrontEndOptions fo;
  fo.endpoints = o.bind;
  fo.curve = curve;
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
  fo.max_tokens_limit = o.max_tokens_limit;
  fo.allow_ignore_eos = o.allow_ignore_eos;
  return fo;
}

OpenAiServerOptions MakeOpenAiOptions(const DaemonOptions& o) {
  OpenAiServerOptions oo;
  oo.address = o.openai;
  oo.api_keys_file = o.openai_api_keys;
  oo.max_body_bytes = o.openai_max_body_bytes;
  oo.max_connections = o.openai_max_connections;
  oo.timeout_ms = o.openai_timeout_ms;
  oo.idle_timeout_ms = o.openai_idle_timeout_ms;
  oo.max_connections_per_peer = o.openai_max_connections_per_peer;
  return oo;
}

CatalogOptions MakeCatalogOptions(const DaemonOptions& o, const CurveClientKeys& hop_curve) {
  CatalogOptions co;
  co.hop_curve = hop_curve;
  co.plugins_dir = o.plugins_dir;
  co.pipelines_dir = o.pipelines_dir;
  co.staging_dir = o.staging_dir;
  co.preflight = SelfPreflight(o.model, o.dtype, o.device, o.preflight_timeout_ms);
  // The catalog polls the folders itself (it waits until a changed file has settled, so a
  // half-copied .so is never loaded); SIGHUP forces a rescan.
  co.poll_interval_ms = o.rescan_ms;  // its events go to the daemon's log (log.h)
  return co;
}

// Whether the model's block products take int8 activations (a dense or non-CPU model has none,
// whatever --activations said).
bool Int8Products(const Model& model) {
  return model.native_weights() && model.options().int8_activations;
}

}  // namespace

std::shared_ptr<const Model> LoadDaemonModel(const DaemonOptions& o) {
  ModelOptions mo;
  mo.dtype = ParseDtype(o.dtype);
  mo.weights = ParseWeightFormat(o.weights);
  mo.device = ParseDevice(o.device);
  mo.int8_activations = Int8ActivationsFor(o.activations, mo);  // needs device and weights
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
       // What --activations chose (auto: by the CPU; docs/engine.md#int8-activations).
       {"activations", std::string(Int8Products(*model) ? "int8" : "fp32") +
                           (o.activations == "auto" ? " (auto)" : "")},
       {"kernels", model->KernelSummary()},
       {"device", mo.device.str()},
       {"ms", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                  .count()}});
  return model;
}

Daemon::Daemon(DaemonOptions options)
    : options_(std::move(options)),
      work_(asio::make_work_guard(io_)),
      http_(io_, [this](const std::string&, const std::string& path) { return HandleHttp(path); }),
      signals_(io_, SIGTERM, SIGINT, SIGHUP) {}

Daemon::~Daemon() {
  StopOperations();
  StopServing();
}

// ---- Start ----

bool Daemon::Start() {
  // Security checks first: fail before the expensive part.
  if (!CheckSecurity() || !StartOperations() || !LoadModelAndCatalog()) return false;
  if (stop_early_) {  // stopped while loading: nothing to drain
    StopOperations();
    exit_code_ = 0;
    return false;
  }
  if (!StartFrontEnds()) return false;
  Publish();
  AnnounceReady();
  return true;
}

bool Daemon::CheckSecurity() {
  if (!options_.curve_secret_key.empty() || !options_.curve_client_keys.empty()) {
    Status st = LoadCurveConfig(options_.curve_secret_key, options_.curve_client_keys, &curve_);
    if (!st.ok()) {
      LogError("curve_config_failed", {{"error", st.message()}});
      return Fail();
    }
  }
  if (!options_.hop_curve_secret_key.empty()) {
    Status st = LoadCurveClientKeys(options_.hop_curve_secret_key, options_.hop_curve_worker_key,
                                    &hop_curve_);
    if (!st.ok()) {
      LogError("curve_config_failed", {{"error", st.message()}});
      return Fail();
    }
  } else if (!options_.hop_curve_worker_key.empty()) {
    LogError("curve_config_failed",
             {{"error",
               "--hop-curve-worker-key needs --hop-curve-secret-key (this daemon's own "
               "key pair for stage hops)"}});
    return Fail();
  }
  for (const std::string& endpoint : options_.bind) {
    if (!IsLoopbackEndpoint(endpoint) && !curve_.enabled) {
      LogError("insecure_bind", {{"endpoint", endpoint},
                                 {"message",
                                  "non-loopback endpoints need --curve-secret-key and "
                                  "--curve-client-keys (docs/operations.md)"}});
      return Fail();
    }
  }
  openai_on_ = Enabled(options_.openai);
  if (openai_on_) {
    openai_options_ = MakeOpenAiOptions(options_);
    Status st = OpenAiServer::CheckOptions(openai_options_);
    if (!st.ok()) {
      LogError("openai_config_failed", {{"reason", st.reason()}, {"error", st.message()}});
      return Fail();
    }
  }
  return true;
}

// Signals, HTTP and timers on one Asio thread, answering /health ("loading") from here on.
bool Daemon::StartOperations() {
  DeclareMetrics();
  http_on_ = Enabled(options_.http);
  if (http_on_) {
    Status st = http_.Listen(options_.http);
    if (!st.ok()) {
      LogError("http_listen_failed", {{"error", st.message()}});
      return Fail();
    }
  }
  WaitForSignal();
  asio_thread_ = std::thread([this] { io_.run(); });
  return true;
}

// Runs `fn` on a thread that ends with it and rethrows what it throws. OpenMP keeps a pool of
// workers for every thread that ever ran a parallel region, for that thread's whole life, and
// libgomp cuts its workers' spinning from GOMP_SPINCOUNT to 100 iterations while it manages more
// threads than there are cores. The main thread's pool, made by loading the model, used to stay:
// every parallel region of every decode step then paid a futex wake-up, and siftd decoded at a
// third of sift-model's speed (docs/engine.md#threads). Run this way, the batch loop is the only
// thread left with a pool.
static void RunOnShortLivedThread(const std::function<void()>& fn) {
  std::exception_ptr error;
  std::thread([&] {
    try {
      fn();
    } catch (...) {
      error = std::current_exception();
    }
  }).join();
  if (error) std::rethrow_exception(error);
}

bool Daemon::LoadModelAndCatalog() {
  try {
    // Loading and the catalog's first validation compute (weight conversion, stage set-up).
    RunOnShortLivedThread([this] {
      model_ = LoadDaemonModel(options_);
      catalog_ = Catalog::Create(MakeCatalogOptions(options_, hop_curve_), model_);
    });
    metrics_.DeclareGauge("sift_engine_info",
                          "1, labelled with the engine's configuration (CPU kernels, weights).");
    metrics_.Set("sift_engine_info",
                 {{"kernels", model_->KernelSummary()},
                  {"weights", model_->native_weights() ? "native" : "dense"},
                  {"activations", Int8Products(*model_) ? "int8" : "fp32"},
                  {"dtype", DtypeName(model_->options().dtype)},
                  {"device", model_->options().device.str()}},
                 1);
  } catch (const std::exception& e) {
    LogError("start_failed", {{"error", e.what()}});
    return Fail();
  }
  return true;
}

// The ZeroMQ front end (queue, workers) and the OpenAI-compatible port, which feeds the same
// front end (queue, metrics, drain).
bool Daemon::StartFrontEnds() {
  BuildOptions bo;
  bo.n_ctx = options_.n_ctx;
  bo.question_tokens = options_.question_tokens;
  backend_ = std::make_unique<CatalogBackend>(model_, *catalog_, bo, StartBatching());
  front_end_ =
      std::make_unique<FrontEnd>(MakeFrontEndOptions(options_, curve_), *backend_, metrics_);
  // Serve also returns when the front end stops by itself.
  front_end_->set_on_stopped([this] { NotifyStop(); });
  // What an inference gateway routes by: waiting = queued + waiting for KV budget, running = in
  // the pipeline (docs/operations.md#batching).
  {
    FrontEnd* fe = front_end_.get();
    KvBudget* budget = kv_budget_.get();
    metrics_.DeclareGauge(
        "sift_requests_waiting",
        "Admitted requests not yet running: in the queue or waiting for KV-cache budget.",
        [fe, budget] { return static_cast<double>(fe->scheduler().queued() + budget->waiting()); });
    metrics_.DeclareGauge("sift_requests_in_pipeline",
                          "Requests whose pipeline runs (KV budget reserved).", [fe, budget] {
                            return static_cast<double>(std::max<int64_t>(
                                0, fe->scheduler().running() - budget->waiting()));
                          });
  }
  Status st = front_end_->Start();
  if (!st.ok()) {
    LogError("start_failed", {{"reason", st.reason()}, {"error", st.message()}});
    return Fail();
  }
  if (openai_on_) {
    // /health on the OpenAI port for load balancers: the ops port's status, from state that is
    // safe to read on the OpenAI I/O thread (the phase, and the backend's listing).
    CatalogBackend* backend = backend_.get();
    openai_options_.health = [this, backend]() -> std::pair<int, std::string> {
      const Phase p = phase_.load();
      if (p == Phase::kLoading) return {503, "loading"};
      if (p != Phase::kReady) return {503, "draining"};
      if (CountOk(backend->List(), "pipelines").first == 0) return {503, "no_pipelines"};
      return {200, "ready"};
    };
    openai_options_.metrics = [this] { return metrics_.Render(); };
    openai_ = std::make_unique<OpenAiServer>(openai_options_, *front_end_, *backend_, metrics_);
    st = openai_->Start();
    if (!st.ok()) {
      LogError("start_failed", {{"reason", st.reason()}, {"error", st.message()}});
      return Fail();
    }
  }
  // Every thread exists now (later ones inherit their creator's priority): all but the batch
  // loop's yield the cores to it.
  if (engine_ != nullptr && options_.io_nice > 0) {
    const int lowered = LowerOtherThreads(options_.io_nice, "sift-batch");
    LogInfo("thread_priority", {{"io_nice", options_.io_nice}, {"threads_lowered", lowered}});
  }
  return true;
}

// The batch loop and the KV budget (ParseOptions has turned --kv-budget into bytes), with their
// gauges.
Batching Daemon::StartBatching() {
  const int64_t budget_bytes = options_.kv_budget_bytes;
  kv_budget_ = std::make_unique<KvBudget>(budget_bytes);
  Batching batching;
  batching.budget = kv_budget_.get();
  if (options_.max_batch > 0) {
    BatchEngineOptions eo;
    eo.max_batch = options_.max_batch;
    eo.decode_interval = std::chrono::milliseconds(options_.decode_interval_ms);
    ParseDecodePoolMode(options_.decode_pool, &eo.decode_pool);  // checked in options.cc
    engine_ = std::make_unique<BatchEngine>(model_, eo);
    batching.engine = engine_.get();
    batching.slice_tokens = options_.prefill_chunk;
  }
  if (options_.prefix_cache) StartPrefixCache(&batching);
  KvBudget* budget = kv_budget_.get();
  BatchEngine* engine = engine_.get();
  metrics_.DeclareGauge("sift_kv_budget_bytes",
                        "KV-cache bytes requests may reserve (--kv-budget).",
                        [budget] { return static_cast<double>(budget->capacity()); });
  metrics_.DeclareGauge("sift_kv_reserved_bytes",
                        "KV-cache bytes reserved by the requests running now.",
                        [budget] { return static_cast<double>(budget->used()); });
  metrics_.DeclareGauge("sift_kv_reserved_peak_bytes",
                        "The most KV-cache bytes reserved at once since start (cached prompts "
                        "included).",
                        [budget] { return static_cast<double>(budget->peak_used()); });
  metrics_.DeclareGauge(
      "sift_kv_usage_ratio", "Reserved KV-cache bytes over the budget (0..1; for load balancers).",
      [budget] {
        return static_cast<double>(budget->used()) / static_cast<double>(budget->capacity());
      });
  metrics_.DeclareGauge("sift_requests_waiting_kv",
                        "Admitted requests waiting for KV-cache budget.",
                        [budget] { return static_cast<double>(budget->waiting()); });
  metrics_.DeclareGauge("sift_batch_decoding", "Requests in the decode batch now.", [engine] {
    return engine != nullptr ? static_cast<double>(engine->stats().decoding) : 0.0;
  });
  metrics_.DeclareGauge("sift_batch_steps", "Decode steps the batch loop has run.", [engine] {
    return engine != nullptr ? static_cast<double>(engine->stats().steps) : 0.0;
  });
  metrics_.DeclareGauge("sift_batch_max_rows", "The most rows one decode step has had.", [engine] {
    return engine != nullptr ? static_cast<double>(engine->stats().max_rows) : 0.0;
  });
  metrics_.DeclareGauge(
      "sift_batch_tasks_nested",
      "Stages of a short prompt started inside a longer prompt's prefill (shorter first).",
      [engine] {
        return engine != nullptr ? static_cast<double>(engine->stats().tasks_nested) : 0.0;
      });
  metrics_.DeclareGauge(
      "sift_batch_tasks_interleaved",
      "Prefills that selected layer by layer started side by side with others of their size.",
      [engine] {
        return engine != nullptr ? static_cast<double>(engine->stats().tasks_interleaved) : 0.0;
      });
  LogInfo("batching", {{"max_batch", options_.max_batch},
                       {"prefill_chunk", options_.prefill_chunk},
                       {"decode_interval_ms", options_.decode_interval_ms},
                       {"decode_pool", options_.decode_pool},
                       {"kv_budget_bytes", budget_bytes},
                       {"kv_bytes_per_token", PeakKvBytes(*model_, 1, 0)},
                       {"workers", options_.workers}});
  return batching;
}

// The prefix cache inside the KV budget: its entries are charged there, and a request that waits
// for budget evicts them first. Its counters and gauges for /metrics.
void Daemon::StartPrefixCache(Batching* batching) {
  KvBudget* budget = kv_budget_.get();
  PrefixCache::Options po;
  po.min_tokens = options_.prefix_cache_min_tokens;
  PrefixCache::Budget pb;
  pb.try_charge = [budget](int64_t bytes) { return budget->TryReserveCached(bytes); };
  pb.release = [budget](int64_t bytes) { budget->ReleaseCached(bytes); };
  prefix_cache_ = std::make_unique<PrefixCache>(po, std::move(pb));
  PrefixCache* cache = prefix_cache_.get();
  budget->set_reclaimer([cache](int64_t bytes) { return cache->Reclaim(bytes); });
  batching->prefix_cache = cache;
  auto stat = [cache](int64_t PrefixCache::Stats::*field) {
    return [cache, field] { return static_cast<double>(cache->stats().*field); };
  };
  metrics_.DeclareCounter("sift_prefix_cache_hits_total",
                          "Prefills that started from a cached prompt prefix.",
                          stat(&PrefixCache::Stats::hits));
  metrics_.DeclareCounter("sift_prefix_cache_misses_total",
                          "Prefills that found no cached prefix of at least "
                          "--prefix-cache-min-tokens tokens.",
                          stat(&PrefixCache::Stats::misses));
  metrics_.DeclareCounter("sift_prefix_cache_reused_tokens_total",
                          "Prompt tokens whose KV came from the prefix cache.",
                          stat(&PrefixCache::Stats::reused_tokens));
  metrics_.DeclareCounter("sift_prefix_cache_evictions_total",
                          "Cached prompts evicted (least recently used, or for a request).",
                          stat(&PrefixCache::Stats::evictions));
  metrics_.DeclareGauge("sift_prefix_cache_entries", "Prompts in the prefix cache.",
                        stat(&PrefixCache::Stats::entries));
  metrics_.DeclareGauge("sift_prefix_cache_bytes",
                        "KV bytes the prefix cache holds (part of sift_kv_reserved_bytes).",
                        stat(&PrefixCache::Stats::bytes));
}

// Hands the serving objects to the Asio side (its handlers run there; post orders the writes).
void Daemon::Publish() {
  Catalog* const catalog = catalog_.get();
  metrics_.DeclareGauge("sift_catalog_generation", "Generation of the published catalog.",
                        [catalog] {
                          auto snapshot = catalog->Snapshot();
                          return snapshot ? static_cast<double>(snapshot->generation()) : 0.0;
                        });
  asio::post(io_, [this, catalog] {
    serving_ = {front_end_.get(), backend_.get(), catalog};
    if (stop_early_) {  // a stop signal between loading and now
      phase_ = Phase::kDraining;
      front_end_->BeginDrain();
      NotifyStop();
    } else {
      phase_ = Phase::kReady;
    }
  });
}

// The "ready" log line (and the ready file): what serves where.
void Daemon::AnnounceReady() {
  const json list = backend_->List();
  const auto [pipelines_ok, pipelines_failed] = CountOk(list, "pipelines");
  const auto [plugins_ok, plugins_failed] = CountOk(list, "plugins");
  json ready = {
      {"pid", static_cast<int64_t>(::getpid())}, {"endpoints", front_end_->endpoints()},
      {"http", http_on_ ? http_.address() : ""}, {"openai", openai_ ? openai_->address() : ""},
      {"model", model_->config().name},          {"pipelines_ok", pipelines_ok},
      {"pipelines_failed", pipelines_failed},    {"plugins_ok", plugins_ok},
      {"plugins_failed", plugins_failed},        {"workers", options_.workers},
      {"queue_size", options_.queue_size}};
  if (curve_.enabled) ready["curve_public_key"] = curve_.server_public;
  if (!hop_curve_.secret_key.empty()) ready["hop_curve_public_key"] = hop_curve_.public_key;
  if (pipelines_ok == 0) {
    LogWarn("no_pipelines", {{"pipelines_dir", options_.pipelines_dir},
                             {"plugins_dir", options_.plugins_dir},
                             {"message",
                              "no valid pipeline yet; generate requests will get "
                              "NOT_FOUND until one appears (rescans continue)"}});
  }
  LogInfo("ready", ready);
  if (!options_.ready_file.empty() && !WriteReadyFile(options_.ready_file, ready)) {
    LogWarn("ready_file_failed", {{"path", options_.ready_file}});
  }
}

bool Daemon::Fail() {
  StopOperations();
  StopServing();
  exit_code_ = 1;
  return false;
}

// ---- Serve and Drain ----

void Daemon::Serve() {
  std::unique_lock<std::mutex> lock(stop_mu_);
  stop_cv_.wait(lock, [this] { return stop_requested_; });
}

int Daemon::Drain() {
  phase_ = Phase::kDraining;
  front_end_->BeginDrain();  // already begun by the stop signal
  front_end_->Wait();        // returns once the drain has completed
  asio::post(io_, [this] { serving_.front_end = nullptr; });
  if (openai_) openai_->Stop(/*grace_ms=*/2000);  // delivers the front end's last replies
  StopOperations();
  if (!options_.ready_file.empty()) std::remove(options_.ready_file.c_str());
  LogInfo("stopped", {{"uptime_s", UptimeSeconds()}});
  return 0;
}

// ---- the operations side (Asio thread) ----

void Daemon::DeclareMetrics() {
  metrics_.DeclareGauge("sift_up", "1 while siftd runs.", [] { return 1.0; });
  metrics_.DeclareGauge("sift_ready", "1 when siftd serves requests (model and catalog loaded).",
                        [this] { return phase_.load() == Phase::kReady ? 1.0 : 0.0; });
  metrics_.DeclareGauge("sift_uptime_seconds", "Seconds since start.",
                        [this] { return UptimeSeconds(); });
  metrics_.DeclareCounter("sift_catalog_rescans_total", "Forced catalog rescans, by trigger.");
}

HttpResponse Daemon::HandleHttp(const std::string& path) {
  if (path == "/metrics") {
    return {200, "text/plain; version=0.0.4; charset=utf-8", metrics_.Render()};
  }
  if (path == "/health/live") return Health(false);
  if (path == "/health" || path == "/health/ready") return Health(true);
  return {404, "text/plain; charset=utf-8", "not found; try /health or /metrics\n"};
}

HttpResponse Daemon::Health(bool ready_check) {
  const Phase p = phase_.load();
  json body = {{"status", p == Phase::kReady     ? "ready"
                          : p == Phase::kLoading ? "loading"
                                                 : "draining"}};
  if (!ready_check) {
    return {200, "application/json", json({{"status", "alive"}}).dump() + "\n"};
  }
  if (p == Phase::kReady && serving_.backend && serving_.catalog) {
    json list = serving_.backend->List();
    auto [ok, failed] = CountOk(list, "pipelines");
    body["pipelines_ok"] = ok;
    body["pipelines_failed"] = failed;
    body["catalog_generation"] = list.value("catalog_generation", 0);
    body["model"] = list["model"].value("name", "");
    if (serving_.front_end) {
      body["queue_depth"] = serving_.front_end->scheduler().queued();
      body["running"] = serving_.front_end->scheduler().running();
    }
    if (ok == 0) body["status"] = "no_pipelines";
    return {ok > 0 ? 200 : 503, "application/json", body.dump() + "\n"};
  }
  return {503, "application/json", body.dump() + "\n"};
}

void Daemon::WaitForSignal() {
  signals_.async_wait(
      [this](const boost::system::error_code& ec, int signal) { OnSignal(ec, signal); });
}

void Daemon::OnSignal(const boost::system::error_code& ec, int sig) {
  if (ec) return;
  if (sig == SIGHUP) {
    if (serving_.catalog) {
      LogInfo("reload_requested", {{"signal", "SIGHUP"}});
      metrics_.Add("sift_catalog_rescans_total", {{"trigger", "sighup"}});
      RescanCatalog();
    }
  } else {
    ++stop_signals_;
    LogInfo("stop_requested",
            {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}, {"count", stop_signals_}});
    if (!serving_.front_end) {
      stop_early_ = true;
    } else if (stop_signals_ == 1) {
      phase_ = Phase::kDraining;
      serving_.front_end->BeginDrain();
      NotifyStop();
    } else {
      serving_.front_end->DrainNow();
    }
  }
  WaitForSignal();
}

void Daemon::RescanCatalog() {
  try {
    const std::string summary = serving_.catalog->Rescan();
    LogInfo("rescan_done", {{"summary", summary}});
  } catch (const std::exception& e) {
    LogError("rescan_failed", {{"error", e.what()}});
  }
}

void Daemon::NotifyStop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_requested_ = true;
  }
  stop_cv_.notify_all();
}

// Stops signal handling and the HTTP port and joins the Asio thread (idempotent).
void Daemon::StopOperations() {
  if (!asio_thread_.joinable()) return;
  asio::post(io_, [this] {
    signals_.cancel();
    http_.Stop();
  });
  work_.reset();
  io_.stop();
  asio_thread_.join();
}

// Stops the serving objects in the reverse order of their start; the front end's destructor
// cancels what it still holds.
void Daemon::StopServing() {
  for (const char* name :
       {"sift_requests_waiting", "sift_requests_in_pipeline", "sift_kv_budget_bytes",
        "sift_kv_reserved_bytes", "sift_kv_reserved_peak_bytes", "sift_kv_usage_ratio",
        "sift_requests_waiting_kv", "sift_batch_decoding", "sift_batch_steps",
        "sift_batch_max_rows", "sift_prefix_cache_hits_total", "sift_prefix_cache_misses_total",
        "sift_prefix_cache_reused_tokens_total", "sift_prefix_cache_evictions_total",
        "sift_prefix_cache_entries", "sift_prefix_cache_bytes"}) {
    metrics_.DeclareGauge(name, "Detached (serving stopped).");
  }
  openai_.reset();
  front_end_.reset();
  backend_.reset();
  engine_.reset();
  prefix_cache_.reset();
  kv_budget_.reset();
  catalog_.reset();
  model_.reset();
}

double Daemon::UptimeSeconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
}

}  // namespace sift::daemon
