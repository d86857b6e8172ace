// Plugin loader: turns a stage plugin file (*.so) into a checked, loaded Plugin.
//
// Loading never touches the file in the plugins folder beyond reading it: the bytes are copied
// to a unique staged path (<staging>/<stem>.<content hash>.<counter>.so) and the copy is
// dlopen'ed with RTLD_NOW | RTLD_LOCAL, so a rebuilt file is a new library (dlopen of an
// already-open path would return the old code) and overwriting or deleting the source never
// disturbs code that runs. A copy that is rejected is deleted. Then, in this order:
//   1. the entry symbol `sift_plugin_entry` must exist;
//   2. the descriptor's ABI version must equal SIFT_PLUGIN_ABI_VERSION (read before anything
//      else in the descriptor);
//   3. name, version, kind and factory must be present and valid; the build info (sift ABI,
//      LibTorch version, C++ ABI) must equal this siftd's exactly;
//   4. the descriptor's name must equal the file's stem (plugin N lives in N.so), so no file
//      can take over another file's plugin;
//   5. with a model: the factory must create (and destroy) one stage from default parameters,
//      which catches plugins that throw in their constructor. Every plugin must therefore have
//      a default for every parameter (docs/writing-a-plugin.md).
// A library that crashes, aborts or hangs while it loads would take the process with it: siftd
// runs these same steps first in a child process (plugin_preflight.h) and loads only a staged
// copy that passed there.
//
// UNLOAD POLICY: never. Every library ever opened is retained for the life of the process
// (LibTorch-linked libraries crash on dlclose: pytorch #61111, #46171), so no stage, vtable or
// exception object can outlive its code. Callers cap how many generations they load (the
// catalog refuses more than kMaxGenerationsPerFile per plugin file).
//
// OWNERSHIP: Plugin is immutable and shared; a StageHandle keeps its Plugin alive and destroys
//            the stage with the plugin's own destroy().
// THREADING: Load() may run concurrently with itself; Plugin and CreateStage are thread-safe.
// ERRORS:    Load reports failures in LoadOutcome::error ("<file>: <why>"); CreateStage throws
//            sift::Error with the plugin's message (which names the key at fault).
#ifndef SIFT_DAEMON_PLUGIN_LOADER_H_
#define SIFT_DAEMON_PLUGIN_LOADER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "sift/model.h"
#include "sift/stage.h"
#include "sift/stage_params.h"

struct sift_plugin_descriptor;

namespace sift::daemon {

class Plugin;

// Destroys a stage through its plugin and keeps that plugin alive until then.
struct StageDeleter {
  std::shared_ptr<const Plugin> plugin;
  void operator()(Stage* stage) const;
};
using StageHandle = std::unique_ptr<Stage, StageDeleter>;

class Plugin : public std::enable_shared_from_this<Plugin> {
 public:
  struct Info {
    std::string name, version;
    StageKind kind = StageKind::kPrefill;
    std::string source_path;   // the file in the plugins folder
    std::string staged_path;   // the copy that was loaded
    std::string content_hash;  // 16 hex digits (FNV-1a 64 of the file's bytes)
  };
  Plugin(Info info, std::shared_ptr<void> library, const sift_plugin_descriptor* descriptor);

  const Info& info() const { return info_; }
  const std::string& name() const { return info_.name; }
  const std::string& version() const { return info_.version; }
  StageKind kind() const { return info_.kind; }
  // "name@version", as stats and logs spell it.
  std::string id() const { return info_.name + "@" + info_.version; }

  const sift_plugin_descriptor* descriptor() const { return descriptor_; }

  // Creates a stage instance. Throws sift::Error with the factory's message on failure.
  StageHandle CreateStage(const StageParams& params, const Model& model) const;

 private:
  Info info_;
  std::shared_ptr<void> library_;  // the dlopen handle (never closed); see UNLOAD POLICY
  const sift_plugin_descriptor* descriptor_;
};

struct LoadOutcome {
  std::shared_ptr<const Plugin> plugin;  // null on failure
  std::string error;                     // "" on success
};

// A private copy of a plugin file, ready to be checked and loaded.
struct StagedFile {
  std::string source;  // the file in the plugins folder
  std::string staged;  // the copy ("" when staging failed)
  std::string hash;    // of the bytes copied
  std::string error;   // "" on success
};

// The plugin name a file must declare: its stem ("build/plugins/snapkv.so" -> "snapkv").
std::string PluginNameForFile(const std::string& path);
// "" when `declared` (a descriptor's name) fits the file `source_path`, else the problem.
std::string CheckPluginName(const std::string& source_path, const std::string& declared);

class PluginLoader {
 public:
  // `staging_dir` is created if missing.
  explicit PluginLoader(std::string staging_dir);

  // Copies, loads and checks `path` (see the file comment): Stage + LoadStaged. `model` may be
  // null: the factory check is then skipped.
  LoadOutcome Load(const std::string& path, const Model* model) const;
  // Copies `path` into the staging folder.
  StagedFile Stage(const std::string& path) const;
  // Loads and checks a staged copy; deletes the copy when it is rejected.
  LoadOutcome LoadStaged(const StagedFile& staged, const Model* model) const;
  // Deletes a staged copy (e.g. one the pre-flight rejected).
  void Discard(const StagedFile& staged) const;
  // Loads and checks `library_path` in place, judged as the file `source_path` (whose stem the
  // descriptor's name must equal when `check_name`); what the pre-flight child runs.
  static LoadOutcome Open(const std::string& library_path, const std::string& source_path,
                          const std::string& hash, const Model* model, bool check_name = true);

  const std::string& staging_dir() const { return staging_dir_; }

 private:
  std::string staging_dir_;
};

// FNV-1a 64 as 16 hex digits: of bytes, or of a file's bytes (throws sift::Error when the file
// is unreadable). A change detector, not a security measure.
std::string HashBytes(const std::string& bytes);
std::string HashFile(const std::string& path);

// This siftd's build info, as plugins must match it ("2.3.0", "gcc13;cxx11abi=1").
const char* HostTorchVersion();
const char* HostCxxAbi();

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_PLUGIN_LOADER_H_
