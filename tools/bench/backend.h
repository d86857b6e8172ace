// Backends of sift-bench: where a sample runs.
//   DaemonBackend     a running siftd over SIFT/1 (--endpoint), or one it starts itself
//                     (--spawn: build/bin/siftd with this build's plugins, pipelines/ and the
//                     model); the only backend the speed suite uses (it measures what users get).
//   InProcessBackend  (in_process_backend.h) the model, plugins and pipelines loaded in this
//                     process; shares one prefill between configs when that is exact.
//
// Every run is greedy (temperature 0). A failed run is a result with ok = false and `error`,
// never an exception (so a sweep goes on); setup problems throw sift::Error.
//
// THREADING: one backend is used by one thread.
#ifndef SIFT_TOOLS_BENCH_BACKEND_H_
#define SIFT_TOOLS_BENCH_BACKEND_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_config.h"
#include "tasks.h"

namespace sift::bench {

struct RunResult {
  bool ok = false;
  std::string error;  // "CODE/reason: message" when !ok
  std::string text;   // generated text
  std::string finish_reason;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  nlohmann::json stats = nlohmann::json::object();  // the `final` message's stats
  double client_ms = 0;                             // send -> final, measured by the client
  bool shared_prefill = false;  // in-process: the prefill ran once for several configs
};

struct RunOptions {
  int64_t max_tokens = 0;  // 0 = the sample's budget
  bool ignore_eos = false;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Runs one sample under every config (in order); one result per config.
  virtual std::vector<RunResult> Run(const std::vector<BenchConfig>& configs, const Sample& sample,
                                     const RunOptions& options) = 0;
  // "daemon tcp://...", "spawned siftd (pid N)", "in-process".
  virtual std::string Describe() const = 0;
  // The daemon's pid when known (spawned), else -1.
  virtual pid_t DaemonPid() const { return -1; }
};

struct DaemonOptions {
  std::string endpoint;  // connect here; "" with spawn
  bool spawn = false;
  std::string siftd;        // binary (spawn)
  std::string model;        // (spawn)
  std::string plugins_dir;  // (spawn)
  std::string pipelines_dir;
  std::vector<std::string> extra_args;  // more siftd flags (spawn)
  int timeout_ms = 900000;              // per request
};

std::unique_ptr<Backend> MakeDaemonBackend(const DaemonOptions& options);

// Peak resident set of a process (VmHWM, kB) or -1; ResetPeakRss writes "5" to clear_refs
// (returns false when the kernel refused).
int64_t PeakRssKb(pid_t pid);
int64_t CurrentRssKb(pid_t pid);
bool ResetPeakRss(pid_t pid);

}  // namespace sift::bench

#endif  // SIFT_TOOLS_BENCH_BACKEND_H_
