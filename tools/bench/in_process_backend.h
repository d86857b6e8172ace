// InProcessBackend: the model, the plugins (real .so files, through the daemon's catalog and
// plugin loader) and the pipelines folder loaded in this process, for accuracy sweeps that
// would be unaffordable through the daemon.
//
// SHARED PREFILL: for one sample, configs whose first stage is the same prefill plugin with the
// same effective parameters are grouped; each config's stages Plan() into its own RequestPlan;
// plans are merged per layer when compatible (windows equal or 0, max_from_query equal or -1,
// booleans OR'ed; reuse_leader maps are not the prefill's business and may differ), else the
// config gets a group of its own. The prefill runs once per group (RunPipeline over the first
// stage, with the merged plan) and every config continues on a deep copy of the state
// (RequestState::Clone) with its own plan, through RunPipeline over its remaining stages. Extra
// statistics collected for another config are never read by a stage that did not ask for them, and
// the cache is the same, so outputs equal running the config alone (tested). Without sharing (or
// for a lone config) the whole pipeline runs through RunPipeline, as the daemon does. Timings of
// shared runs report the shared prefill's time. The stats of a run are sift::MakeCostReport's
// (sift/cost_report.h), as in the daemon's `final`.
//
// THREADING: one thread. ERRORS: the constructor throws sift::Error (model, folders); runs
// report failures in RunResult.
#ifndef SIFT_TOOLS_BENCH_IN_PROCESS_BACKEND_H_
#define SIFT_TOOLS_BENCH_IN_PROCESS_BACKEND_H_

#include <memory>
#include <string>

#include "backend.h"

namespace sift::bench {

struct InProcessOptions {
  std::string model;
  std::string plugins_dir;
  std::string pipelines_dir;
  std::string dtype = "bf16";
  std::string device = "cpu";  // cpu | cuda | cuda:N (sift::ParseDevice)
  int threads = 0;
  bool cpu_kernels = true;  // false: LibTorch operators only (ModelOptions::cpu_kernels)
  bool share_prefill = true;
  // Count LibTorch operators and host reads (sift/op_counter.h) of the stages before the decode
  // stage ("prefill") and of the decode stage, into RunResult::stats (prefill_ops,
  // prefill_host_reads, decode_ops, decode_host_reads, layers). Implies no shared prefill.
  bool count_ops = false;
};

std::unique_ptr<Backend> MakeInProcessBackend(const InProcessOptions& options);

}  // namespace sift::bench

#endif  // SIFT_TOOLS_BENCH_IN_PROCESS_BACKEND_H_
