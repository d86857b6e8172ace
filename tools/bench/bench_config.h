// sift-bench configs: what to compare. A config is `label=pipeline[:json-overrides]`, e.g.
//   snapkv@0.1=snapkv:{"select":{"keep_ratio":0.1}}
// where the overrides are siftd's per-request `params` (keyed by stage label or plugin name).
// `label` may be omitted (`pipeline[:json]` -> label = pipeline). `--pipelines a,b` is shorthand
// for configs without overrides. The label `full` is the baseline of every ratio.
//
// THREADING: pure functions. ERRORS: ParseConfig throws sift::Error naming the bad text.
#ifndef SIFT_TOOLS_BENCH_BENCH_CONFIG_H_
#define SIFT_TOOLS_BENCH_BENCH_CONFIG_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sift::bench {

struct BenchConfig {
  std::string label;     // unique in a run; "full" is the baseline
  std::string pipeline;  // a pipeline name siftd serves
  nlohmann::json overrides = nlohmann::json::object();
};

BenchConfig ParseConfig(const std::string& text);
// Configs from repeated --config values plus a comma-separated --pipelines list; throws on
// duplicate labels or when there is none.
std::vector<BenchConfig> ParseConfigs(const std::vector<std::string>& configs,
                                      const std::string& pipelines);
// Comma-separated option lists: sift::cli::SplitList / IntList (tools/common/command_line.h).

}  // namespace sift::bench

#endif  // SIFT_TOOLS_BENCH_BENCH_CONFIG_H_
