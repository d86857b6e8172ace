// In-process cost and quality of a filter pipeline against full prefill, one run per prompt:
// the pipeline's own stage classes (prefill_partial -> gemfilter -> prefill_full, or
// prefill_streaming -> ilre -> prefill_full, or prefill_full alone) run on a bench sample, then
// greedy decoding of a few tokens scored by the task's rule. Reported per run (one JSON line on
// stdout): prompt tokens, kept tokens, pass-1 / filter / re-prefill ms, ttft_ms (all stages
// before decode plus the first token's sampling, i.e. without queueing or transport), peak RSS
// per stage (VmHWM, reset through /proc/self/clear_refs before each stage; the reset and read
// are outside the timed spans), the run's peak and the RSS before it, whether the filtered
// prompt still contains an answer string (answer_kept), the score and the text.
//
// Prompts longer than the model's context are allowed for the filter pipelines (the streaming
// and partial prefills do not check it; the re-prefill is budget-sized); full prefill refuses.
//
// THREADING: single-threaded driver. ERRORS: sift::Error.
#ifndef SIFT_TOOLS_LAYER_SCAN_COST_H_
#define SIFT_TOOLS_LAYER_SCAN_COST_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sift/model.h"

namespace sift::layer_scan {

struct CostOptions {
  std::string pipeline = "ilre";  // full | gemfilter | ilre
  std::string task = "passkey";
  std::vector<int64_t> lengths = {2048};
  std::vector<int> depths = {50};
  int64_t samples = 1;
  uint64_t seed = 0;
  std::string haystack_dir;
  nlohmann::json filter_params = nlohmann::json::object();  // the filter stage's parameters
  nlohmann::json pass1_params = nlohmann::json::object();   // the first prefill's parameters
  int64_t max_tokens = 0;                                   // 0 = the sample's
  // The loaded model's defaults (<pipelines_dir>/models, model_defaults.h) fill the stage
  // parameters the command line does not give, as siftd does.
  std::string pipelines_dir;
};

int RunCost(const Model& model, const CostOptions& options);

}  // namespace sift::layer_scan

#endif  // SIFT_TOOLS_LAYER_SCAN_COST_H_
