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
#include <string>
#include <vector>

#include "cost.h"
#include "scan.h"
#include "sift/device.h"
#include "sift/error.h"
#include "tasks.h"
#include "tools/common/command_line.h"

namespace {

namespace po = boost::program_options;
using sift::cli::UsageError;

template <typename T>
std::vector<T> ParseList(const std::string& text, const std::string& option) {
  std::vector<T> out;
  for (int64_t v : sift::cli::IntList(text, option)) out.push_back(static_cast<T>(v));
  return out;
}

nlohmann::json ParseJson(const std::string& text, const std::string& option) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw UsageError(option + " needs a JSON object");
  return j;
}

// Options of both commands (the model and where it runs, the samples).
struct Common {
  std::string model, dtype = "bf16", device = "cpu", haystack, task = "passkey", lengths, depths;
  int threads = 0;
  int64_t samples = 1;
  uint64_t seed = 0;
};

void AddCommon(sift::cli::CommandLine* cl, Common* c) {
  const char* env_model = std::getenv("SIFT_MODEL");
  c->model = env_model ? env_model : "";
  po::options_description group("model and samples");
  // clang-format off
  group.add_options()
      ("model", po::value(&c->model)->value_name("FILE"), "GGUF file (default $SIFT_MODEL)")
      ("dtype", po::value(&c->dtype)->default_value(c->dtype), "bf16 | fp32")
      ("device", po::value(&c->device)->default_value(c->device), "cpu | cuda | cuda:N")
      ("threads", po::value(&c->threads)->default_value(c->threads), "CPU threads (0 = all cores)")
      ("task", po::value(&c->task)->default_value(c->task), "sift-bench task of the samples")
      ("lengths", po::value(&c->lengths)->value_name("N,..."), "sample lengths in tokens")
      ("depths", po::value(&c->depths)->value_name("PCT,..."), "needle depths in %")
      ("samples", po::value(&c->samples)->default_value(c->samples), "samples per (length, depth)")
      ("seed", po::value(&c->seed)->default_value(c->seed), "sample seed")
      ("haystack", po::value(&c->haystack)->value_name("DIR"),
       "folder of .txt files (default: sift-bench's)");
  // clang-format on
  cl->AddGroup(group);
}

std::shared_ptr<const sift::Model> LoadModel(const Common& c) {
  if (c.model.empty()) throw UsageError("no model: --model FILE or $SIFT_MODEL");
  sift::ModelOptions mo;
  mo.dtype = sift::ParseDtype(c.dtype);
  mo.threads = c.threads;
  mo.device = sift::ParseDevice(c.device);
  sift::ConfigureThreads(mo.threads);
  return sift::Model::Load(c.model, mo);
}

int Scan(int argc, char** argv) {
  sift::cli::CommandLine cl(
      "sift-layer-scan scan", "sift-layer-scan scan --model FILE [options]",
      "Per layer and budget, whether GemFilter's top-k and ILRe's allocation keep the needle's\n"
      "answer tokens: evidence for GemFilter's filter layer r and ILRe's retrieval layer l_R.\n"
      "Rows go to OUT/scan.csv, the per-layer summary to OUT/scan.md and stdout\n"
      "(docs/results/filters.md).");
  Common c;
  sift::layer_scan::ScanOptions o;
  std::string budgets, only, out = ".";
  AddCommon(&cl, &c);
  // clang-format off
  cl.Add()
      ("budgets", po::value(&budgets)->value_name("N,..."),
       "token budgets of the recall columns (default 256,1024)")
      ("only", po::value(&only)->value_name("gemfilter|ilre"), "scan for one method only")
      ("out", po::value(&out)->default_value(out), "folder of scan.csv and scan.md");
  // clang-format on
  po::variables_map vm;
  if (const int status = cl.Parse(argc - 1, argv + 1, &vm); status != sift::cli::kContinue) {
    return status;
  }
  return sift::cli::Run(cl.tool(), 1, [&] {
    if (!only.empty() && only != "gemfilter" && only != "ilre") {
      throw UsageError("--only must be gemfilter or ilre");
    }
    o.task = c.task;
    if (!c.lengths.empty()) o.lengths = ParseList<int64_t>(c.lengths, "--lengths");
    if (!c.depths.empty()) o.depths = ParseList<int>(c.depths, "--depths");
    if (!budgets.empty()) o.budgets = ParseList<int64_t>(budgets, "--budgets");
    o.samples = c.samples;
    o.seed = c.seed;
    o.out_dir = out;
    o.gemfilter = only.empty() || only == "gemfilter";
    o.ilre = only.empty() || only == "ilre";
    const auto model = LoadModel(c);
    o.haystack_dir = c.haystack.empty() ? sift::bench::DefaultHaystackDir() : c.haystack;
    return sift::layer_scan::RunScan(*model, o);
  });
}

int Cost(int argc, char** argv) {
  sift::cli::CommandLine cl(
      "sift-layer-scan cost",
      "sift-layer-scan cost --model FILE --pipeline full|gemfilter|ilre [options]",
      "In-process cost and quality of a filter pipeline against full prefill on sift-bench's\n"
      "samples: stage times, TTFT, peak RSS, kept tokens and the scored answer, one JSON line\n"
      "per run on stdout (docs/results/filters.md).");
  Common c;
  sift::layer_scan::CostOptions o;
  std::string filter = "{}", pass1 = "{}";
  o.pipelines_dir = SIFT_SOURCE_DIR "/pipelines";
  AddCommon(&cl, &c);
  // clang-format off
  cl.Add()
      ("pipeline", po::value(&o.pipeline)->default_value(o.pipeline), "full | gemfilter | ilre")
      ("filter", po::value(&filter)->default_value(filter), "the filter stage's parameters (JSON)")
      ("pass1", po::value(&pass1)->default_value(pass1), "the first prefill's parameters (JSON)")
      ("max-tokens", po::value(&o.max_tokens)->default_value(o.max_tokens),
       "answer tokens (0 = the sample's budget)")
      ("pipelines", po::value(&o.pipelines_dir)->default_value(o.pipelines_dir),
       "pipeline folder: per-model defaults from its models/ (as siftd)");
  // clang-format on
  po::variables_map vm;
  if (const int status = cl.Parse(argc - 1, argv + 1, &vm); status != sift::cli::kContinue) {
    return status;
  }
  return sift::cli::Run(cl.tool(), 1, [&] {
    o.task = c.task;
    if (!c.lengths.empty()) o.lengths = ParseList<int64_t>(c.lengths, "--lengths");
    if (!c.depths.empty()) o.depths = ParseList<int>(c.depths, "--depths");
    o.samples = c.samples;
    o.seed = c.seed;
    o.filter_params = ParseJson(filter, "--filter");
    o.pass1_params = ParseJson(pass1, "--pass1");
    const auto model = LoadModel(c);
    o.haystack_dir = c.haystack.empty() ? sift::bench::DefaultHaystackDir() : c.haystack;
    return sift::layer_scan::RunCost(*model, o);
  });
}

}  // namespace

int main(int argc, char** argv) {
  sift::ConfigureThreadEnvironment(argv);
  sift::cli::CommandLine cl("sift-layer-scan", "sift-layer-scan COMMAND --model FILE [options]",
                            "GemFilter's r and ILRe's l_R from evidence, and the filter "
                            "pipelines' cost in process\n(docs/results/filters.md).");
  cl.Command("scan", "per-layer needle retrieval: where to filter");
  cl.Command("cost", "a filter pipeline's TTFT, memory and answers against full prefill");
  po::variables_map vm;
  std::string command;
  std::vector<std::string> rest;
  if (const int status = cl.ParseCommand(argc, argv, &vm, &command, &rest);
      status != sift::cli::kContinue) {
    return status;
  }
  if (command.empty()) return cl.Error("no command (scan or cost)");
  return command == "scan" ? Scan(argc, argv) : Cost(argc, argv);
}
