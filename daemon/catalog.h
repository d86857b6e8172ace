// Catalog: the plugins and pipelines siftd serves, hot-reloadable.
//
// The catalog scans a plugins folder (*.so) and a pipelines folder (*.toml). Each plugin file is
// copied to a unique path, loaded, checked (ABI version, build info) and registered by name;
// each pipeline file is parsed and validated against the registered plugins. The result is an
// immutable CatalogSnapshot published atomically: a request takes a snapshot when it is accepted
// and finishes on it even if a rescan publishes a newer one meanwhile (the snapshot keeps the
// plugin libraries it uses loaded).
//
// Broken plugins and pipelines do not replace working ones: a file that fails keeps the previous
// good version serving (if any) and is listed with its error.
//
// THREADING: Snapshot() and List() are safe from any thread; Rescan() is serialised internally.
#ifndef SIFT_DAEMON_CATALOG_H_
#define SIFT_DAEMON_CATALOG_H_

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sift/model.h"
#include "sift/request_state.h"
#include "sift/stage.h"
#include "sift/status.h"

namespace sift::daemon {

struct StageInfo {
  std::string label;           // the stage's name in the pipeline (e.g. "select")
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
  // state.stats.stages.
  virtual Status Run(const Model& model, RequestState& state, const nlohmann::json& overrides,
                     StageContext& context) const = 0;
};

class CatalogSnapshot {
 public:
  virtual ~CatalogSnapshot() = default;
  virtual uint64_t generation() const = 0;
  // nullptr when no valid pipeline has that name.
  virtual std::shared_ptr<const Pipeline> FindPipeline(const std::string& name) const = 0;
  // {"pipelines": [{"name", "file", "stages": [...], "ok", "error"}],
  //  "plugins": [{"name", "version", "kind", "file", "ok", "error"}]}
  virtual nlohmann::json List() const = 0;
};

struct CatalogOptions {
  std::string plugins_dir;
  std::string pipelines_dir;
  std::string staging_dir;  // where plugin copies go; "" = a fresh temp dir
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
