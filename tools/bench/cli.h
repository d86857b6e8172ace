// sift-bench command line: options shared by the subcommands, and the subcommands' entry points
// (accuracy.cc, speed.cc, report.cc). docs/bench.md is the user's reference.
//
// Every option is `--name value` or a flag; repeated options (--config, --siftd-arg) collect.
// THREADING: main thread only. ERRORS: sift::Error with the offending option.
#ifndef SIFT_TOOLS_BENCH_CLI_H_
#define SIFT_TOOLS_BENCH_CLI_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend.h"
#include "bench_config.h"

namespace sift::bench {

class Args {
 public:
  // `flags` take no value; `values` take one. Throws on anything else.
  Args(int argc, char** argv, int first, const std::set<std::string>& flags,
       const std::set<std::string>& values);
  bool Flag(const std::string& name) const { return flags_.count(name) > 0; }
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> All(const std::string& name) const;
  int64_t Int(const std::string& name, int64_t fallback) const;

 private:
  std::set<std::string> flags_;
  std::map<std::string, std::vector<std::string>> values_;
};

// Options every run subcommand accepts (backend, configs, output, seed...).
extern const std::set<std::string> kCommonFlags;
extern const std::set<std::string> kCommonValues;

struct Common {
  std::vector<BenchConfig> configs;
  std::string out;
  bool quick = false;
  uint64_t seed = 42;
  std::string model;
  std::string haystack_dir;
};

// Reads the common options (with --quick defaults: pipelines "full"). `need_daemon` refuses
// --in-process (the speed suite measures the daemon).
Common ReadCommon(const Args& args, bool need_daemon);
std::unique_ptr<Backend> MakeBackend(const Args& args, const Common& common, bool need_daemon);

int RunAccuracy(int argc, char** argv);
int RunSpeed(int argc, char** argv);
int RunReport(int argc, char** argv);

}  // namespace sift::bench

#endif  // SIFT_TOOLS_BENCH_CLI_H_
