#include "daemon/catalog.h"

#include <stdlib.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "daemon/log.h"
#include "daemon/pipeline_availability.h"
#include "daemon/pipeline_config.h"
#include "daemon/pipeline_runner.h"
#include "daemon/plugin_loader.h"
#include "daemon/plugin_preflight.h"
#include "sift/error.h"

namespace sift::daemon {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class PipelineImpl : public Pipeline {
 public:
  PipelineImpl(PipelineConfig config, std::vector<ResolvedStage> stages,
               const CurveClientKeys& hop_curve)
      : config_(std::move(config)), stages_(std::move(stages)) {
    remote_.curve = hop_curve;
    for (const ResolvedStage& s : stages_) {
      infos_.push_back(StageInfo{s.config.label, s.plugin->kind(), s.plugin->name(),
                                 s.plugin->version(), s.config.endpoint});
    }
  }
  const std::string& name() const override { return config_.name; }
  const std::string& file() const override { return config_.file; }
  const std::string& description() const { return config_.description; }
  const std::vector<StageInfo>& stages() const override { return infos_; }
  const std::vector<ResolvedStage>& resolved() const { return stages_; }
  Status Run(const Model& model, RequestState& state, const json& overrides, StageContext& context,
             const LocalExecution& local) const override {
    return RunPipeline(config_.name, stages_, model, state, overrides, context, remote_, local);
  }

 private:
  PipelineConfig config_;
  RemoteHops remote_;
  std::vector<ResolvedStage> stages_;
  std::vector<StageInfo> infos_;
};

class SnapshotImpl : public CatalogSnapshot {
 public:
  SnapshotImpl(uint64_t generation, std::map<std::string, std::shared_ptr<const Pipeline>> p,
               PluginMap plugins, json list)
      : generation_(generation),
        pipelines_(std::move(p)),
        plugins_(std::move(plugins)),
        list_(std::move(list)) {}
  uint64_t generation() const override { return generation_; }
  std::shared_ptr<const Pipeline> FindPipeline(const std::string& name) const override {
    auto it = pipelines_.find(name);
    return it == pipelines_.end() ? nullptr : it->second;
  }
  std::shared_ptr<const Plugin> FindPlugin(const std::string& name) const override {
    auto it = plugins_.find(name);
    return it == plugins_.end() ? nullptr : it->second;
  }
  json List() const override { return list_; }

 private:
  uint64_t generation_;
  std::map<std::string, std::shared_ptr<const Pipeline>> pipelines_;
  PluginMap plugins_;
  json list_;
};

// "prefill_full@1.0.0 -> decode_local@1.0.0 (tcp://...)"
std::string Chain(const Pipeline& pipeline) {
  std::string chain;
  for (const StageInfo& s : pipeline.stages()) {
    chain += (chain.empty() ? "" : " -> ") + s.plugin + "@" + s.plugin_version;
    if (!s.endpoint.empty()) chain += " (" + s.endpoint + ")";
  }
  return chain;
}

struct FileStamp {
  uintmax_t size = 0;
  fs::file_time_type mtime{};
  bool operator==(const FileStamp& o) const { return size == o.size && mtime == o.mtime; }
};

struct PluginEntry {
  FileStamp stamp;
  std::string hash;                       // bytes of the latest attempt
  std::shared_ptr<const Plugin> serving;  // the last good generation
  std::string error;                      // of the latest attempt; "" when it serves
  std::string conflict;                   // its name is taken by an earlier file
  int generations = 0;                    // load attempts (each may leave a library mapped)
};

struct PipelineEntry {
  std::string hash;
  std::shared_ptr<const PipelineImpl> serving;
  std::string error;
  std::string conflict;
};

// Regular files in `dir` ending in `ext`, sorted.
std::vector<std::string> ListFiles(const std::string& dir, const std::string& ext) {
  std::vector<std::string> out;
  if (dir.empty()) return out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::error_code fec;
    if (e.is_regular_file(fec) && e.path().extension() == ext) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool Stamp(const std::string& path, FileStamp* stamp) {
  std::error_code ec1, ec2;
  stamp->size = fs::file_size(path, ec1);
  stamp->mtime = fs::last_write_time(path, ec2);
  return !ec1 && !ec2;
}

std::string MakeTempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/siftd-plugins-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  SIFT_CHECK(mkdtemp(buf.data()) != nullptr, "cannot create a staging folder like ", templ);
  return buf.data();
}

// The default sink: the daemon's structured log (daemon/log.h).
void LogToDaemonLog(const std::string& level, const json& fields) {
  json rest = fields;
  const std::string event = rest.value("event", "catalog");
  rest.erase("event");
  rest["component"] = "catalog";
  LogLevel parsed = LogLevel::kInfo;
  ParseLogLevel(level, &parsed);
  Log(parsed, event, rest);
}

class CatalogImpl : public Catalog {
 public:
  CatalogImpl(const CatalogOptions& options, std::shared_ptr<const Model> model)
      : options_(options),
        model_(std::move(model)),
        owns_staging_(options.staging_dir.empty()),
        loader_(owns_staging_ ? MakeTempDir() : options.staging_dir) {
    if (!options_.log) options_.log = &LogToDaemonLog;
    for (const std::string* dir : {&options_.plugins_dir, &options_.pipelines_dir}) {
      if (dir == &options_.pipelines_dir && dir->empty()) continue;
      SIFT_CHECK(fs::is_directory(*dir), "catalog: folder ", *dir, " does not exist");
    }
    snapshot_ = std::make_shared<SnapshotImpl>(
        0, std::map<std::string, std::shared_ptr<const Pipeline>>(), PluginMap(), json::object());
    Rescan();
    if (options_.poll_interval_ms > 0) watcher_ = std::thread([this] { Watch(); });
  }

  ~CatalogImpl() override {
    {
      std::lock_guard<std::mutex> lock(watch_mu_);
      stop_ = true;
    }
    watch_cv_.notify_all();
    if (watcher_.joinable()) watcher_.join();
    // Staged copies may be deleted while mapped; the libraries themselves stay loaded.
    if (owns_staging_) {
      std::error_code ec;
      fs::remove_all(loader_.staging_dir(), ec);
    }
  }

  std::shared_ptr<const CatalogSnapshot> Snapshot() const override {
    std::lock_guard<std::mutex> lock(snapshot_mu_);
    return snapshot_;
  }

  std::string Rescan() override {
    std::lock_guard<std::mutex> lock(rescan_mu_);
    // Taken before reading: a change made during the scan shows as a difference later.
    scanned_fingerprint_ = Fingerprint();
    std::vector<std::string> summary;
    bool changed = ScanPlugins(summary);
    const PluginMap plugins = ServingPlugins();
    const bool plugins_changed = plugins != last_plugins_;
    last_plugins_ = plugins;
    changed = ScanPipelines(plugins, plugins_changed, summary) || changed || plugins_changed;
    if (changed) Publish(plugins);
    std::string text;
    for (const std::string& line : summary) text += line + "\n";
    return text.empty() ? "no changes\n" : text;
  }

 private:
  void Log(const std::string& level, json fields, std::vector<std::string>& summary,
           const std::string& line) {
    summary.push_back(line);
    fields["message"] = line;
    options_.log(level, fields);
  }

  bool ScanPlugins(std::vector<std::string>& summary) {
    const std::vector<std::string> files = ListFiles(options_.plugins_dir, ".so");
    bool changed = ForgetRemoved(files, summary);
    // 1. Stage a private copy of every new or changed file.
    const std::vector<StagedFile> staged = StageChanged(files, summary, &changed);
    // 2. Pre-flight them out of process (plugin_preflight.h): a file that crashes, aborts or
    // hangs while loading is refused without ever being mapped into this process.
    std::vector<std::string> paths;
    for (const StagedFile& copy : staged) paths.push_back(copy.staged);
    const std::vector<PreflightResult> verdicts = RunPreflight(paths, options_.preflight);
    // 3. Load the files that passed.
    for (size_t i = 0; i < staged.size(); ++i) LoadPassed(staged[i], verdicts[i], summary);
    return changed;
  }

  // Drops the entries of plugin files that are gone; true if there were any.
  bool ForgetRemoved(const std::vector<std::string>& files, std::vector<std::string>& summary) {
    bool changed = false;
    for (auto it = plugins_.begin(); it != plugins_.end();) {
      if (std::find(files.begin(), files.end(), it->first) == files.end()) {
        Log("info", {{"event", "plugin_removed"}, {"file", it->first}}, summary,
            it->first + ": removed");
        it = plugins_.erase(it);
        changed = true;
      } else {
        ++it;
      }
    }
    return changed;
  }

  // Private copies of the new or changed files (by size, mtime, then content hash); a file
  // loaded kMaxGenerationsPerFile times already is refused here.
  std::vector<StagedFile> StageChanged(const std::vector<std::string>& files,
                                       std::vector<std::string>& summary, bool* changed) {
    std::vector<StagedFile> staged;
    for (const std::string& file : files) {
      PluginEntry& entry = plugins_[file];
      FileStamp stamp;
      if (!Stamp(file, &stamp) || (!entry.hash.empty() && stamp == entry.stamp)) continue;
      StagedFile copy = loader_.Stage(file);
      if (!copy.error.empty() || copy.hash == entry.hash) {
        // Vanished or unreadable mid-scan (the next scan sees it again), or touched with the
        // same bytes.
        loader_.Discard(copy);
        if (copy.error.empty()) entry.stamp = stamp;
        continue;
      }
      entry.stamp = stamp;
      entry.hash = copy.hash;
      *changed = true;
      if (entry.generations >= kMaxGenerationsPerFile) {
        loader_.Discard(copy);
        entry.error = file + ": not loaded: " + std::to_string(kMaxGenerationsPerFile) +
                      " versions of this file were loaded already and libraries are never "
                      "unloaded; restart siftd to load more";
        Log("error", {{"event", "plugin_rejected"}, {"file", file}}, summary, entry.error);
        continue;
      }
      staged.push_back(std::move(copy));
    }
    return staged;
  }

  // Loads one staged copy in process if its pre-flight passed, and logs the outcome; a file that
  // fails keeps its previous version serving.
  void LoadPassed(const StagedFile& copy, const PreflightResult& verdict,
                  std::vector<std::string>& summary) {
    const std::string& file = copy.source;
    const std::string& hash = copy.hash;
    PluginEntry& entry = plugins_[file];
    LoadOutcome outcome;
    if (!verdict.ok) {
      loader_.Discard(copy);
      // The pre-flight names the staged copy; the operator knows the file.
      std::string error = verdict.error;
      for (size_t at; (at = error.find(copy.staged)) != std::string::npos;) {
        error.replace(at, copy.staged.size(), file);
      }
      if (verdict.not_judged) {
        entry.hash.clear();  // no verdict: try this file again on the next scan
        entry.stamp = FileStamp();
      }
      outcome.error = error;
    } else if (!CheckPluginName(file, verdict.name).empty() && !verdict.name.empty()) {
      loader_.Discard(copy);  // never mapped here: the pre-flight read the name
      outcome.error = file + ": " + CheckPluginName(file, verdict.name);
    } else {
      ++entry.generations;
      outcome = loader_.LoadStaged(copy, model_.get());
    }
    if (outcome.plugin != nullptr) {
      entry.serving = outcome.plugin;
      entry.error.clear();
      Log("info",
          {{"event", "plugin_loaded"},
           {"file", file},
           {"plugin", outcome.plugin->id()},
           {"hash", hash},
           {"staged", outcome.plugin->info().staged_path}},
          summary,
          file + ": loaded " + outcome.plugin->id() + " (" + StageKindName(outcome.plugin->kind()) +
              ", " + hash + ")");
    } else {
      entry.error = outcome.error;
      Log("warn", {{"event", "plugin_rejected"}, {"file", file}, {"hash", hash}}, summary,
          outcome.error + (entry.serving ? " (keeps serving " + entry.serving->id() + ")" : ""));
    }
  }

  // Name -> serving plugin; a name claimed by two files goes to the first in path order.
  PluginMap ServingPlugins() {
    PluginMap map;
    std::map<std::string, std::string> owner;
    for (auto& [file, entry] : plugins_) {
      entry.conflict.clear();
      if (entry.serving == nullptr) continue;
      const std::string& name = entry.serving->name();
      if (owner.count(name)) {
        entry.conflict = file + ": plugin name '" + name + "' is already provided by " +
                         owner[name] + "; not served";
        continue;
      }
      owner[name] = file;
      map[name] = entry.serving;
    }
    return map;
  }

  // <pipelines>/models (model_defaults.h); "" without a pipelines folder.
  std::string ModelDefaultsFolder() const {
    return options_.pipelines_dir.empty() ? "" : options_.pipelines_dir + "/models";
  }

  bool ScanPipelines(const PluginMap& plugins, bool revalidate, std::vector<std::string>& summary) {
    bool changed = false;
    const std::vector<std::string> files = ListFiles(options_.pipelines_dir, ".toml");
    // Model defaults files (model_defaults.h) are part of every pipeline's meaning.
    std::string defaults;
    for (const std::string& f : ListFiles(ModelDefaultsFolder(), ".toml")) {
      std::ifstream in(f, std::ios::binary);
      defaults += f + '\0' + std::string(std::istreambuf_iterator<char>(in), {}) + '\0';
    }
    for (auto it = pipelines_.begin(); it != pipelines_.end();) {
      if (std::find(files.begin(), files.end(), it->first) == files.end()) {
        Log("info", {{"event", "pipeline_removed"}, {"file", it->first}}, summary,
            it->first + ": removed");
        it = pipelines_.erase(it);
        changed = true;
      } else {
        ++it;
      }
    }
    for (const std::string& file : files) {
      std::ifstream in(file, std::ios::binary);
      if (!in) continue;
      std::ostringstream text;
      text << in.rdbuf();
      const std::string hash = HashBytes(text.str() + defaults);
      PipelineEntry& entry = pipelines_[file];
      if (hash == entry.hash && !revalidate) continue;
      const bool content_changed = hash != entry.hash;
      entry.hash = hash;
      changed = true;
      try {
        PipelineConfig config = ParsePipelineText(text.str(), file);
        std::vector<ResolvedStage> stages = ValidatePipeline(config, plugins, model_.get());
        CheckRemoteStages(config);
        auto pipeline = std::make_shared<PipelineImpl>(std::move(config), std::move(stages),
                                                       options_.hop_curve);
        const std::string chain = Chain(*pipeline);
        const bool same = entry.serving != nullptr && entry.error.empty() && !content_changed &&
                          Chain(*entry.serving) == chain;
        entry.serving = pipeline;
        entry.error.clear();
        if (!same) {
          Log("info",
              {{"event", "pipeline_loaded"}, {"file", file}, {"pipeline", pipeline->name()}},
              summary, file + ": pipeline '" + pipeline->name() + "': " + chain);
        }
      } catch (const std::exception& e) {
        entry.error = e.what();
        Log("warn", {{"event", "pipeline_rejected"}, {"file", file}}, summary,
            entry.error + (entry.serving ? " (keeps serving the previous version)" : ""));
      }
    }
    return changed;
  }

  // Throws when a remote stage cannot be reached as configured (see CatalogOptions::hop_curve).
  void CheckRemoteStages(const PipelineConfig& config) const {
    for (const StageConfig& s : config.stages) {
      if (s.endpoint.empty()) continue;
      const bool keyed = !s.worker_key.empty() || options_.hop_curve.enabled();
      if (keyed && options_.hop_curve.secret_key.empty()) {
        throw Error(s.where + ": stage '" + s.label +
                    "': a worker key is set, but siftd has no key pair for stage hops "
                    "(--hop-curve-secret-key)");
      }
      if (!keyed && !IsLoopbackEndpoint(s.endpoint)) {
        throw Error(s.where + ": stage '" + s.label + "': " + s.endpoint +
                    " is not a loopback address, and a worker there serves only over CURVE: "
                    "set the stage's worker_key (or --hop-curve-worker-key) and "
                    "--hop-curve-secret-key (docs/operations.md)");
      }
    }
  }

  void Publish(const PluginMap& plugins) {
    std::map<std::string, std::shared_ptr<const Pipeline>> served;
    std::map<std::string, std::string> owner;
    json pipelines = json::array();
    for (auto& [file, entry] : pipelines_) {
      entry.conflict.clear();
      json item = {{"file", file}, {"ok", entry.error.empty()}, {"error", entry.error}};
      if (entry.serving != nullptr) {
        const std::string& name = entry.serving->name();
        if (owner.count(name)) {
          entry.conflict = file + ": pipeline name '" + name + "' is already defined by " +
                           owner[name] + "; not served";
          item["ok"] = false;
          item["error"] = entry.conflict;
        } else {
          owner[name] = file;
          served[name] = entry.serving;
        }
        item["name"] = name;
        item["description"] = entry.serving->description();
        // With a model: "available", and "unavailable" (why not, and the command that fixes it)
        // when it cannot run on this model (pipeline_availability.h; docs/protocol.md listing).
        if (model_ != nullptr) {
          const std::string why = PipelineUnavailable(entry.serving->resolved(), model_->path());
          item["available"] = why.empty();
          if (!why.empty()) item["unavailable"] = why;
        }
        json stages = json::array();
        for (const StageInfo& s : entry.serving->stages()) {
          stages.push_back({{"name", s.label},
                            {"kind", StageKindName(s.kind)},
                            {"plugin", s.plugin},
                            {"version", s.plugin_version},
                            {"endpoint", s.endpoint}});
        }
        item["stages"] = std::move(stages);
      } else {
        item["name"] = fs::path(file).stem().string();
        item["stages"] = json::array();
      }
      pipelines.push_back(std::move(item));
    }
    json plugin_list = json::array();
    for (const auto& [file, entry] : plugins_) {
      const std::string error = !entry.error.empty() ? entry.error : entry.conflict;
      json item = {{"file", file},
                   {"hash", entry.hash},
                   {"ok", error.empty()},
                   {"error", error},
                   {"generations", entry.generations}};
      if (entry.serving != nullptr) {
        item["name"] = entry.serving->name();
        item["version"] = entry.serving->version();
        item["kind"] = StageKindName(entry.serving->kind());
      } else {
        item["name"] = fs::path(file).stem().string();
        item["version"] = "";
        item["kind"] = "";
      }
      plugin_list.push_back(std::move(item));
    }
    const uint64_t generation = ++generation_;
    json list = {{"generation", generation},
                 {"pipelines", std::move(pipelines)},
                 {"plugins", std::move(plugin_list)}};
    auto snapshot =
        std::make_shared<SnapshotImpl>(generation, std::move(served), plugins, std::move(list));
    std::lock_guard<std::mutex> lock(snapshot_mu_);
    snapshot_ = std::move(snapshot);
  }

  // Names, sizes and mtimes of both folders: cheap change detection for the watcher.
  std::string Fingerprint() const {
    std::ostringstream os;
    for (const auto& [dir, ext] : {std::pair<std::string, std::string>{options_.plugins_dir, ".so"},
                                   {options_.pipelines_dir, ".toml"},
                                   {ModelDefaultsFolder(), ".toml"}}) {
      for (const std::string& f : ListFiles(dir, ext)) {
        FileStamp s;
        Stamp(f, &s);
        os << f << '\0' << s.size << '\0' << s.mtime.time_since_epoch().count() << '\n';
      }
    }
    return os.str();
  }

  // Rescans once a change has settled: a fingerprint that differs from the one the last scan
  // started from, seen unchanged on two consecutive polls.
  void Watch() {
    std::string pending;
    std::unique_lock<std::mutex> lock(watch_mu_);
    while (!watch_cv_.wait_for(lock, std::chrono::milliseconds(options_.poll_interval_ms),
                               [this] { return stop_; })) {
      lock.unlock();
      const std::string now = Fingerprint();
      std::string scanned;
      {
        std::lock_guard<std::mutex> rescan_lock(rescan_mu_);
        scanned = scanned_fingerprint_;
      }
      if (now == scanned) {
        pending.clear();
      } else if (now == pending) {
        Rescan();
        pending.clear();
      } else {
        pending = now;
      }
      lock.lock();
    }
  }

  CatalogOptions options_;
  std::shared_ptr<const Model> model_;
  bool owns_staging_;
  PluginLoader loader_;

  std::mutex rescan_mu_;  // serialises Rescan; guards everything below up to snapshot_mu_
  std::map<std::string, PluginEntry> plugins_;      // by file
  std::map<std::string, PipelineEntry> pipelines_;  // by file
  PluginMap last_plugins_;
  std::string scanned_fingerprint_;  // the folders as the last scan began
  uint64_t generation_ = 0;

  mutable std::mutex snapshot_mu_;
  std::shared_ptr<const CatalogSnapshot> snapshot_;

  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool stop_ = false;
  std::thread watcher_;
};

}  // namespace

std::unique_ptr<Catalog> Catalog::Create(const CatalogOptions& options,
                                         std::shared_ptr<const Model> model) {
  return std::make_unique<CatalogImpl>(options, std::move(model));
}

}  // namespace sift::daemon
