#include "cost.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "daemon/model_defaults.h"
#include "gemfilter_stage.h"
#include "ilre_stage.h"
#include "prefill_full_stage.h"
#include "prefill_partial_stage.h"
#include "prefill_streaming_stage.h"
#include "prompt.h"
#include "sift/error.h"
#include "sift/generate.h"
#include "sift/host.h"
#include "tasks.h"

namespace sift::layer_scan {
namespace {

class QuietContext : public StageContext {
 public:
  bool Cancelled() const override { return false; }
  Status CancelStatus() const override { return Status::Ok(); }
  void Progress(const std::string&, int64_t, int64_t) override {}
  bool Emit(const std::string&, TokenId) override { return true; }
};

// "VmRSS" / "VmHWM" of this process in MiB.
double StatusMiB(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      std::istringstream s(line.substr(key.size() + 1));
      double kb = 0;
      s >> kb;
      return kb / 1024.0;
    }
  }
  return -1;
}

void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// The command line's values over the model's defaults (pipelines/models, model_defaults.h).
StageParams Params(const std::string& plugin, const nlohmann::json& values, const Model& model,
                   const std::string& pipelines_dir) {
  StageParams p("sift-layer-scan", plugin, plugin);
  for (auto& [key, value] : values.items()) p.Set(key, value, "command line");
  daemon::ApplyModelDefaultsFromDir(pipelines_dir, model.config(), &p);
  return p;
}

double Ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The pipeline's stages: [pass-1 prefill, filter,] prefill_full.
std::vector<std::unique_ptr<Stage>> MakeStages(const Model& model, const CostOptions& options) {
  std::vector<std::unique_ptr<Stage>> stages;
  if (options.pipeline == "gemfilter") {
    stages.push_back(std::make_unique<plugins::PrefillPartialStage>(
        Params("prefill_partial", options.pass1_params, model, options.pipelines_dir), model));
    stages.push_back(std::make_unique<plugins::GemFilterStage>(
        Params("gemfilter", options.filter_params, model, options.pipelines_dir), model));
  } else if (options.pipeline == "ilre") {
    stages.push_back(std::make_unique<plugins::PrefillStreamingStage>(
        Params("prefill_streaming", options.pass1_params, model, options.pipelines_dir), model));
    stages.push_back(std::make_unique<plugins::IlreStage>(
        Params("ilre", options.filter_params, model, options.pipelines_dir), model));
  }
  stages.push_back(std::make_unique<plugins::PrefillFullStage>(
      Params("prefill_full", {}, model, options.pipelines_dir), model));
  return stages;
}

// Wall time and peak RSS of each stage, and whether the re-prefill's prompt holds the answer.
struct StageCosts {
  std::vector<double> stage_ms, stage_peak;
  double peak = 0;
  bool answer_kept = false;
};

StageCosts RunStages(const Model& model, const std::vector<std::unique_ptr<Stage>>& stages,
                     const ScanPrompt& p, RequestState& state) {
  QuietContext context;
  StageCosts costs;
  ResetPeakRss();
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < stages.size(); ++i) {
    const Status st = stages[i]->Run(model, state, context);
    SIFT_CHECK(st.ok(), "cost: stage failed: ", st.message());
    const auto t1 = std::chrono::steady_clock::now();
    costs.stage_ms.push_back(Ms(t0, t1));
    if (i + 2 == stages.size() || stages.size() == 1) {
      // The prompt the re-prefill sees (after the filter): does it still hold the answer?
      const std::string text = model.tokenizer().Decode(state.tokens);
      for (const std::string& a : p.sample.answers) {
        costs.answer_kept = costs.answer_kept || text.find(a) != std::string::npos;
      }
    }
    costs.stage_peak.push_back(StatusMiB("VmHWM"));
    costs.peak = std::max(costs.peak, costs.stage_peak.back());
    ResetPeakRss();
    t0 = std::chrono::steady_clock::now();
  }
  return costs;
}

// One sample through the pipeline: its JSON line.
nlohmann::json MeasureSample(const Model& model, const CostOptions& options, const ScanPrompt& p,
                             int64_t length, int depth) {
  const std::vector<std::unique_ptr<Stage>> stages = MakeStages(model, options);
  RequestState state;
  state.tokens = p.tokens;
  state.question_begin = p.question_begin;
  state.generation.max_tokens = options.max_tokens > 0 ? options.max_tokens : p.sample.max_tokens;
  for (auto& s : stages) SIFT_CHECK(s->Plan(model, state.plan).ok(), "cost: plan failed");
  const double rss_before = StatusMiB("VmRSS");
  const StageCosts costs = RunStages(model, stages, p, state);
  const auto t_first = std::chrono::steady_clock::now();
  (void)HostInt(state.last_logits.argmax());  // the first token
  double ttft = Ms(t_first, std::chrono::steady_clock::now());
  for (double ms : costs.stage_ms) ttft += ms;
  const int64_t kept = static_cast<int64_t>(state.tokens.size());
  GenerationResult result =
      Generate(model, *state.cache, state.last_logits, state.next_position, state.generation);
  return {{"pipeline", options.pipeline},
          {"id", p.sample.id},
          {"length", length},
          {"depth", depth},
          {"prompt_tokens", static_cast<int64_t>(p.tokens.size())},
          {"kept_tokens", kept},
          {"stage_ms", costs.stage_ms},
          {"ttft_ms", ttft},
          {"rss_before_mib", rss_before},
          {"peak_rss_mib", costs.peak},
          {"stage_peak_rss_mib", costs.stage_peak},
          {"answer_kept", costs.answer_kept},
          {"score", bench::Score(p.sample, result.text)},
          {"text", result.text}};
}

}  // namespace

int RunCost(const Model& model, const CostOptions& options) {
  SIFT_CHECK(
      options.pipeline == "full" || options.pipeline == "gemfilter" || options.pipeline == "ilre",
      "cost: --pipeline must be full, gemfilter or ilre");
  for (int64_t length : options.lengths) {
    for (int depth : options.depths) {
      for (int64_t index = 0; index < options.samples; ++index) {
        bench::TaskOptions t;
        t.task = options.task;
        t.length = length;
        t.depth_percent = depth;
        t.seed = options.seed;
        t.haystack_dir = options.haystack_dir;
        const ScanPrompt p = BuildPrompt(model.tokenizer(), t, index);
        std::cout << MeasureSample(model, options, p, length, depth).dump() << std::endl;
      }
    }
  }
  return 0;
}

}  // namespace sift::layer_scan
