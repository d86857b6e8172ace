// sift-bench command line: options shared by the subcommands, and the subcommands' entry points
// (accuracy.cc, speed.cc, report.cc, ops.cc). docs/bench.md is the user's reference.
//
// Every option is `--name value` (or `--name=value`) or a flag, parsed by the shared command line
// (tools/common/command_line.h: --help, one-line usage errors with exit status 2); repeated
// options (--config, --siftd-arg) collect, for the others the last one counts.
// THREADING: main thread only. ERRORS: sift::Error with the offending option.
#ifndef SIFT_TOOLS_BENCH_CLI_H_
#define SIFT_TOOLS_BENCH_CLI_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "bench_config.h"
#include "tools/common/command_line.h"

namespace sift::bench {

namespace po = boost::program_options;

// The options of one command, as parsed (values are strings; flags are bool switches).
class Args {
 public:
  explicit Args(po::variables_map vm) : vm_(std::move(vm)) {}
  bool Flag(const std::string& name) const;
  bool Has(const std::string& name) const { return vm_.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> All(const std::string& name) const;
  int64_t Int(const std::string& name, int64_t fallback) const;

 private:
  po::variables_map vm_;
};

// A `--name VALUE` option (repeatable: Args::Get gives the last, Args::All every one) and a flag.
void AddValue(po::options_description* group, const char* name, const char* value_name,
              const char* help);
void AddFlag(po::options_description* group, const char* name, const char* help);
// Options every run command accepts (backend, configs, output, seed...), as groups of `cl`.
void AddCommonOptions(cli::CommandLine* cl);
// Parses a command's argv (argv[1] is the command): cli::kContinue, or the exit status.
int ParseCommand(const cli::CommandLine& cl, int argc, char** argv, po::variables_map* vm);

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
// count_ops: the in-process backend counts operators (InProcessOptions::count_ops).
std::unique_ptr<Backend> MakeBackend(const Args& args, const Common& common, bool need_daemon,
                                     bool count_ops = false);

int RunAccuracy(int argc, char** argv);
int RunSpeed(int argc, char** argv);
int RunReport(int argc, char** argv);
int RunOps(int argc, char** argv);

}  // namespace sift::bench

#endif  // SIFT_TOOLS_BENCH_CLI_H_
