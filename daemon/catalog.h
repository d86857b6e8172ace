// Catalog: the plugins and pipelines siftd serves, hot-reloadable.
//
// The catalog scans a plugins folder (*.so) and a pipelines folder (*.toml). Each new or changed
// plugin file is copied to a unique path, checked in a child process first (pre-flight,
// plugin_preflight.h; when configured), then loaded, checked (ABI version, build info, its name
// equals its file's stem) and registered by name;
// each pipeline file is parsed and validated against the registered plugins. The result is an
// immutable CatalogSnapshot published atomically: a request takes a snapshot when it is accepted
// and finishes on it even if a rescan publishes a newer one meanwhile (the snapshot keeps the
// plugin libraries it uses loaded).
//
// Broken plugins and pipelines do not replace working ones: a file that fails keeps the previous
// good version serving (if any) and is listed with its error.
//
// Change detection: Rescan() (call it on SIGHUP) re-reads both folders at once; with
// poll_interval_ms > 0 a background thread also checks names, sizes and mtimes and rescans
// when a change has settled (unchanged for one interval, so half-copied files are not loaded).
// Plugin libraries are never unloaded (daemon/plugin_loader.h); each plugin file may be loaded
// at most kMaxGenerationsPerFile times per process, after which reloads of it are refused.
//
// THREADING: Snapshot() and List() are safe from any thread; Rescan() is serialised internally.
// ERRORS:    Create throws sift::Error when a folder does not exist; everything later is
//            reported in Rescan()'s summary, in List() and in the log.
#ifndef SIFT_DAEMON_CATALOG_H_
#define SIFT_DAEMON_CATALOG_H_

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/curve.h"
#include "daemon/pipeline_runner.h"
#include "daemon/plugin_preflight.h"
#include "sift/model.h"
#include "sift/request_state.h"
#include "sift/stage.h"
#include "sift/status.h"

namespace sift::daemon {

class Plugin;  // daemon/plugin_loader.h

struct StageInfo {
  std::string label;  // the stage's name in the pipeline (e.g. "select")
  StageKind kind = StageKind::kPrefill;
  std::string plugin;          // plugin name
  std::string plugin_version;  // version of the plugin generation this pipeline uses
  std::string endpoint;        // "" = in process; "tcp://host:port" = a siftd --worker
};

// A validated, runnable pipeline. Immutable.
class Pipeline {
 public:
  virtual ~Pipeline() = default;
  virtual const std::string& name() const = 0;
  virtual const std::string& file() const = 0;
  virtual const std::vector<StageInfo>& stages() const = 0;
  // Runs the stages in order. `overrides` maps a stage label (or plugin name) to an object of
  // parameter overrides for this request, e.g. {"select": {"keep_ratio": 0.2}}; an override
  // with a bad key or value fails with INVALID_ARGUMENT naming it. Records per-stage timings in
  // state.stats.stages. `local` says how in-process stages run (pipeline_runner.h).
  virtual Status Run(const Model& model, RequestState& state, const nlohmann::json& overrides,
                     StageContext& context, const LocalExecution& local = {}) const = 0;
};

class CatalogSnapshot {
 public:
  virtual ~CatalogSnapshot() = default;
  virtual uint64_t generation() const = 0;
  // nullptr when no valid pipeline has that name.
  virtual std::shared_ptr<const Pipeline> FindPipeline(const std::string& name) const = 0;
  // The serving generation of a plugin (by descriptor name); nullptr when none.
  virtual std::shared_ptr<const Plugin> FindPlugin(const std::string& name) const = 0;
  // {"generation",
  //  "pipelines": [{"name", "file", "description", "stages": [{"name", "kind", "plugin",
  //                 "version", "endpoint"}], "ok", "error"}],
  //  "plugins": [{"name", "version", "kind", "file", "hash", "generations", "ok", "error"}]}
  // "ok": false with "error" when the file's latest version failed; a pipeline or plugin that
  // still serves an older good version keeps its name, version and stages from that version.
  virtual nlohmann::json List() const = 0;
};

inline constexpr int kMaxGenerationsPerFile = 32;

struct CatalogOptions {
  std::string plugins_dir;      // *.so stage plugins
  std::string pipelines_dir;    // *.toml pipelines; "" = none (a worker needs plugins only)
  std::string staging_dir;      // where plugin copies go; "" = a fresh temp dir
  int poll_interval_ms = 2000;  // background change detection; 0 = only on Rescan()
  // One call per event (level "info", "warn" or "error"; fields include "event" and a
  // human "message"); null = the daemon's structured log (daemon/log.h).
  std::function<void(const std::string& level, const nlohmann::json& fields)> log;
  PreflightOptions preflight;  // out-of-process check before loading; empty command = none
  // Remote stages: this daemon's CURVE key pair and the default worker key (--hop-curve-*). A
  // pipeline whose remote stage has a worker key but the daemon no key pair, or whose stage
  // points at a non-loopback worker without a worker key, is rejected at load.
  CurveClientKeys hop_curve;
};

class Catalog {
 public:
  virtual ~Catalog() = default;
  static std::unique_ptr<Catalog> Create(const CatalogOptions& options,
                                         std::shared_ptr<const Model> model);
  virtual std::shared_ptr<const CatalogSnapshot> Snapshot() const = 0;
  // Re-reads both folders; publishes a new snapshot if anything changed. Returns a summary of
  // what changed and what failed (also logged).
  virtual std::string Rescan() = 0;
};

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_CATALOG_H_
