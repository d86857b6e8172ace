#include "cli.h"

#include <cstdlib>
#include <filesystem>

#include "in_process_backend.h"
#include "sift/error.h"
#include "tasks.h"

namespace sift::bench {

bool Args::Flag(const std::string& name) const {
  auto it = vm_.find(name);
  return it != vm_.end() && it->second.as<bool>();
}

std::string Args::Get(const std::string& name, const std::string& fallback) const {
  auto it = vm_.find(name);
  return it == vm_.end() ? fallback : it->second.as<std::vector<std::string>>().back();
}

std::vector<std::string> Args::All(const std::string& name) const {
  auto it = vm_.find(name);
  return it == vm_.end() ? std::vector<std::string>{} : it->second.as<std::vector<std::string>>();
}

int64_t Args::Int(const std::string& name, int64_t fallback) const {
  if (!Has(name)) return fallback;
  const auto v = cli::IntList(Get(name), "--" + name);
  if (v.size() != 1) throw Error("--" + name + " needs one integer");
  return v[0];
}

void AddValue(po::options_description* group, const char* name, const char* value_name,
              const char* help) {
  group->add_options()(name, po::value<std::vector<std::string>>()->value_name(value_name), help);
}

void AddFlag(po::options_description* group, const char* name, const char* help) {
  group->add_options()(name, po::bool_switch(), help);
}

void AddCommonOptions(cli::CommandLine* cl) {
  po::options_description where(
      "where it runs (exactly one of --endpoint, --spawn, --in-process) and the model");
  AddValue(&where, "endpoint", "URL", "a running siftd, e.g. tcp://127.0.0.1:7700");
  AddFlag(&where, "spawn",
          "start a siftd of this build (plugins/, the repository's pipelines/, the model) on an "
          "ephemeral loopback port");
  AddFlag(&where, "in-process",
          "accuracy and ops: the model, plugins and pipelines in this process (accuracy: one "
          "shared prefill per sample)");
  AddFlag(&where, "no-share-prefill", "--in-process: run each config on its own prefill");
  AddValue(&where, "model", "PATH",
           "GGUF file or Hugging Face directory (default $SIFT_MODEL, else the SmolLM2 GGUF "
           "in models/)");
  AddValue(&where, "dtype", "bf16|fp32", "the model's dtype (siftd's --dtype)");
  AddValue(&where, "device", "cpu|cuda", "the model's device (siftd's --device)");
  AddValue(&where, "threads", "N", "intra-op threads (siftd's --threads)");
  AddValue(&where, "kernels", "auto|torch",
           "--in-process: auto (sift's CPU kernels where they apply) or torch (LibTorch "
           "operators only: the sequence a GPU runs, for ops counts on the CPU)");
  AddValue(&where, "siftd", "PATH", "--spawn: the siftd binary (default this build's)");
  AddValue(&where, "siftd-arg", "ARG", "--spawn: one more siftd argument (repeatable)");
  AddValue(&where, "plugins", "DIR", "plugin folder (default this build's plugins/)");
  AddValue(&where, "pipelines-dir", "DIR", "pipeline folder (default the repository's pipelines/)");
  AddValue(&where, "timeout-ms", "N", "per request (default 900000)");
  cl->AddGroup(where);
  po::options_description what("what is compared, and where the results go");
  AddValue(&what, "config", "LABEL=PIPELINE[:JSON]",
           "a config: a pipeline with per-request stage overrides (repeatable)");
  AddValue(&what, "pipelines", "P1,P2", "configs without overrides, label = pipeline");
  AddValue(&what, "out", "DIR", "results folder (default bench-out)");
  AddValue(&what, "seed", "S", "sample seed (default 42)");
  AddValue(
      &what, "haystack", "DIR",
      "folder of .txt files read in name order (default: tools/bench/corpus/world-english-bible, "
      "nine books of the World English Bible, public domain; \"\" = RULER's noise sentences)");
  AddFlag(&what, "quick", "CI defaults: small tasks and lengths, config full (docs/bench.md)");
  cl->AddGroup(what);
}

int ParseCommand(const cli::CommandLine& cl, int argc, char** argv, po::variables_map* vm) {
  return cl.Parse(argc - 1, argv + 1, vm);
}

Common ReadCommon(const Args& args, bool need_daemon) {
  Common c;
  c.quick = args.Flag("quick");
  std::string pipelines = args.Get("pipelines");
  if (pipelines.empty() && args.All("config").empty()) pipelines = "full";
  c.configs = ParseConfigs(args.All("config"), pipelines);
  c.out = args.Get("out", "bench-out");
  c.seed = static_cast<uint64_t>(args.Int("seed", 42));
  const char* env = std::getenv("SIFT_MODEL");
  c.model = args.Get(
      "model",
      env && *env ? env : std::string(SIFT_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf");
  c.haystack_dir = args.Get("haystack", DefaultHaystackDir());
  std::error_code ec;
  if (!c.haystack_dir.empty() && !std::filesystem::is_directory(c.haystack_dir, ec)) {
    throw Error("--haystack " + c.haystack_dir + ": not a folder (of .txt files)");
  }
  const int modes = (args.Has("endpoint") ? 1 : 0) + (args.Flag("spawn") ? 1 : 0) +
                    (args.Flag("in-process") ? 1 : 0);
  if (modes != 1) throw Error("give exactly one of --endpoint URL, --spawn, --in-process");
  if (need_daemon && args.Flag("in-process")) {
    throw Error("the speed suite measures the daemon: use --spawn or --endpoint");
  }
  return c;
}

std::unique_ptr<Backend> MakeBackend(const Args& args, const Common& common, bool need_daemon,
                                     bool count_ops) {
  const std::string bin = SIFT_BINARY_DIR;
  if (args.Flag("in-process")) {
    InProcessOptions o;
    o.model = common.model;
    o.plugins_dir = args.Get("plugins", bin + "/plugins");
    o.pipelines_dir = args.Get("pipelines-dir", std::string(SIFT_SOURCE_DIR) + "/pipelines");
    o.dtype = args.Get("dtype", "bf16");
    o.device = args.Get("device", "cpu");
    o.threads = static_cast<int>(args.Int("threads", 0));
    const std::string kernels = args.Get("kernels", "auto");
    if (kernels != "auto" && kernels != "torch") throw Error("--kernels must be auto or torch");
    o.cpu_kernels = kernels == "auto";
    o.share_prefill = !args.Flag("no-share-prefill");
    o.count_ops = count_ops;
    return MakeInProcessBackend(o);
  }
  DaemonOptions o;
  o.spawn = args.Flag("spawn");
  o.endpoint = args.Get("endpoint");
  o.siftd = args.Get("siftd", bin + "/bin/siftd");
  o.model = common.model;
  o.plugins_dir = args.Get("plugins", bin + "/plugins");
  o.pipelines_dir = args.Get("pipelines-dir", std::string(SIFT_SOURCE_DIR) + "/pipelines");
  o.extra_args = args.All("siftd-arg");
  if (args.Has("dtype")) o.extra_args.insert(o.extra_args.end(), {"--dtype", args.Get("dtype")});
  if (args.Has("device")) {
    o.extra_args.insert(o.extra_args.end(), {"--device", args.Get("device")});
  }
  if (args.Has("threads")) {
    o.extra_args.insert(o.extra_args.end(), {"--threads", args.Get("threads")});
  }
  o.timeout_ms = static_cast<int>(args.Int("timeout-ms", 900000));
  return MakeDaemonBackend(o);
}

}  // namespace sift::bench
