// Plugin pre-flight: every new or changed plugin file is loaded and exercised in a short-lived
// child process before siftd loads it into itself.
//
// A shared library runs code the moment it is mapped (static constructors) and a truncated or
// corrupt file faults (SIGBUS, SIGSEGV) inside the dynamic loader; in process either would
// take every request down. So the catalog stages private copies of the changed files and runs
//   <command...> STAGED_COPY...          (siftd runs itself: siftd --preflight ...)
// The child loads the model, then for each file performs exactly the loader's checks
// (PluginLoader::Open: dlopen, entry symbol, descriptor, build info, the factory with default
// parameters) and writes one JSON line per file to file descriptor 3:
//   {"event":"ready"}                                   once the model is loaded
//   {"file":F,"ok":true,"name":N,"version":V}           or {"file":F,"ok":false,"error":E}
// The parent reads the lines with deadlines. A child that dies (signal or exit) or stays
// silent past file_timeout_ms while checking a file rejects that file with a message naming
// the file and what happened (e.g. "killed by SIGBUS"); the files after it are checked by a
// fresh child. Only files that passed are dlopen'ed by siftd, and a rejected file never
// displaces the version already serving.
//
// THREADING: RunPreflight blocks the calling thread (the catalog's rescan) and may run
//            concurrently with itself.
// ERRORS:    reported per file in PreflightResult; nothing throws.
#ifndef SIFT_DAEMON_PLUGIN_PREFLIGHT_H_
#define SIFT_DAEMON_PLUGIN_PREFLIGHT_H_

#include <string>
#include <vector>

namespace sift::daemon {

struct PreflightOptions {
  // The checker's argv up to (not including) the files; empty = no pre-flight (files are
  // loaded in process directly, as library users and unit tests of the loader do).
  std::vector<std::string> command;
  int startup_timeout_ms = 120000;  // until the child reports "ready" (it loads the model)
  int file_timeout_ms = 10000;      // per file
};

struct PreflightResult {
  bool ok = false;
  // The checker itself could not run (e.g. it failed to start or to load the model): the file
  // was not judged; callers retry it later instead of recording a verdict.
  bool not_judged = false;
  std::string error;  // "" when ok
  std::string name;   // the descriptor's plugin name, when the child read it
};

// Checks `files` (staged copies) in order; one result per file.
std::vector<PreflightResult> RunPreflight(const std::vector<std::string>& files,
                                          const PreflightOptions& options);

// The pre-flight command that runs this very executable (/proc/self/exe) as the checker with
// the given model settings.
PreflightOptions SelfPreflight(const std::string& model, const std::string& dtype,
                               const std::string& device, int file_timeout_ms);

// The child side: `siftd --preflight FILE...`. Loads the model (if `model` is not empty),
// checks each file and writes the result lines to file descriptor 3 (stdout when 3 is not
// open). Returns the exit code; leaves without running static destructors.
int RunPreflightChild(const std::vector<std::string>& files, const std::string& model,
                      const std::string& dtype, const std::string& device);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_PLUGIN_PREFLIGHT_H_
