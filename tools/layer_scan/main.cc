// sift-layer-scan: choose GemFilter's r and ILRe's l_R from evidence, and measure the filter
// pipelines' cost in process (scan.h, cost.h; docs/results/filters.md).
//
//   sift-layer-scan scan --model M [--task passkey] [--lengths 2048,4096] [--depths 10,50,90]
//                        [--samples 1] [--budgets 256,1024] [--only gemfilter|ilre] [--out DIR]
//   sift-layer-scan cost --model M --pipeline full|gemfilter|ilre [--lengths ...] [--depths ...]
//                        [--samples 1] [--filter JSON] [--pass1 JSON] [--max-tokens N]
//                        [--pipelines DIR] (per-model defaults from DIR/models; default the
//                        repository's pipelines/)
// Common: [--threads N] [--dtype bf16|fp32] [--device cpu|cuda] [--seed S] [--haystack DIR]
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cost.h"
#include "scan.h"
#include "sift/device.h"
#include "sift/error.h"
#include "tasks.h"

namespace {

template <typename T>
std::vector<T> ParseList(const std::string& s) {
  std::vector<T> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(static_cast<T>(std::stoll(item)));
  return out;
}

int Usage() {
  std::cerr << "usage: sift-layer-scan scan|cost --model FILE [--device cpu|cuda] [options] (see "
               "tools/layer_scan/main.cc)\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  sift::ConfigureThreadEnvironment(argv);
  if (argc < 2) return Usage();
  const std::string mode = argv[1];
  std::map<std::string, std::string> flags;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string key = argv[i];
    if (key.rfind("--", 0) != 0) return Usage();
    flags[key.substr(2)] = argv[i + 1];
  }
  auto get = [&](const std::string& key, const std::string& fallback) {
    auto it = flags.find(key);
    return it == flags.end() ? fallback : it->second;
  };
  try {
    const char* env_model = std::getenv("SIFT_MODEL");
    const std::string path = get("model", env_model ? env_model : "");
    if (path.empty()) return Usage();
    sift::ModelOptions mo;
    mo.dtype = sift::ParseDtype(get("dtype", "bf16"));
    mo.threads = std::stoi(get("threads", "0"));
    mo.device = sift::ParseDevice(get("device", "cpu"));
    sift::ConfigureThreads(mo.threads);
    auto model = sift::Model::Load(path, mo);
    const std::string haystack = get("haystack", sift::bench::DefaultHaystackDir());
    if (mode == "scan") {
      sift::layer_scan::ScanOptions o;
      o.task = get("task", o.task);
      if (flags.count("lengths")) o.lengths = ParseList<int64_t>(flags["lengths"]);
      if (flags.count("depths")) o.depths = ParseList<int>(flags["depths"]);
      if (flags.count("budgets")) o.budgets = ParseList<int64_t>(flags["budgets"]);
      o.samples = std::stoll(get("samples", "1"));
      o.seed = std::stoull(get("seed", "0"));
      o.haystack_dir = haystack;
      o.out_dir = get("out", ".");
      const std::string only = get("only", "");
      o.gemfilter = only.empty() || only == "gemfilter";
      o.ilre = only.empty() || only == "ilre";
      return sift::layer_scan::RunScan(*model, o);
    }
    if (mode == "cost") {
      sift::layer_scan::CostOptions o;
      o.pipeline = get("pipeline", o.pipeline);
      o.task = get("task", o.task);
      if (flags.count("lengths")) o.lengths = ParseList<int64_t>(flags["lengths"]);
      if (flags.count("depths")) o.depths = ParseList<int>(flags["depths"]);
      o.samples = std::stoll(get("samples", "1"));
      o.seed = std::stoull(get("seed", "0"));
      o.haystack_dir = haystack;
      o.filter_params = nlohmann::json::parse(get("filter", "{}"));
      o.pass1_params = nlohmann::json::parse(get("pass1", "{}"));
      o.max_tokens = std::stoll(get("max-tokens", "0"));
      o.pipelines_dir = get("pipelines", SIFT_SOURCE_DIR "/pipelines");
      return sift::layer_scan::RunCost(*model, o);
    }
    return Usage();
  } catch (const std::exception& e) {
    std::cerr << "sift-layer-scan: " << e.what() << "\n";
    return 1;
  }
}
