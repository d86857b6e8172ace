#include "cli.h"

#include <cstdlib>
#include <filesystem>

#include "in_process_backend.h"
#include "sift/error.h"
#include "tasks.h"

namespace sift::bench {

const std::set<std::string> kCommonFlags = {"spawn", "in-process", "quick", "no-share-prefill"};
const std::set<std::string> kCommonValues = {
    "config", "pipelines", "endpoint", "out",   "seed",   "model",   "plugins",   "pipelines-dir",
    "siftd",  "siftd-arg", "haystack", "dtype", "device", "threads", "timeout-ms"};

Args::Args(int argc, char** argv, int first, const std::set<std::string>& flags,
           const std::set<std::string>& values) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) throw Error("unexpected argument '" + a + "'");
    a = a.substr(2);
    std::string value;
    bool has_value = false;
    const size_t eq = a.find('=');
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_value = true;
    }
    if (flags.count(a)) {
      if (has_value) throw Error("--" + a + " takes no value");
      flags_.insert(a);
    } else if (values.count(a)) {
      if (!has_value) {
        if (i + 1 >= argc) throw Error("--" + a + " needs a value");
        value = argv[++i];
      }
      values_[a].push_back(value);
    } else {
      throw Error("unknown option --" + a + " (see docs/bench.md)");
    }
  }
}

std::string Args::Get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second.back();
}

std::vector<std::string> Args::All(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

int64_t Args::Int(const std::string& name, int64_t fallback) const {
  if (!Has(name)) return fallback;
  const auto v = ParseIntList(Get(name), "--" + name);
  if (v.size() != 1) throw Error("--" + name + " needs one integer");
  return v[0];
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
  const int modes = (args.Has("endpoint") ? 1 : 0) + (args.Flag("spawn") ? 1 : 0) +
                    (args.Flag("in-process") ? 1 : 0);
  if (modes != 1) throw Error("give exactly one of --endpoint URL, --spawn, --in-process");
  if (need_daemon && args.Flag("in-process")) {
    throw Error("the speed suite measures the daemon: use --spawn or --endpoint");
  }
  return c;
}

std::unique_ptr<Backend> MakeBackend(const Args& args, const Common& common, bool need_daemon) {
  const std::string bin = SIFT_BINARY_DIR;
  if (args.Flag("in-process")) {
    InProcessOptions o;
    o.model = common.model;
    o.plugins_dir = args.Get("plugins", bin + "/plugins");
    o.pipelines_dir = args.Get("pipelines-dir", std::string(SIFT_SOURCE_DIR) + "/pipelines");
    o.dtype = args.Get("dtype", "bf16");
    o.device = args.Get("device", "cpu");
    o.threads = static_cast<int>(args.Int("threads", 0));
    o.share_prefill = !args.Flag("no-share-prefill");
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
