// sift-spts-bench: the SPTS measurements of docs/results/spts.md, in process (no daemon):
// the prefill stages (prefill_full, prefill_skip) run on one loaded model, then sift::Generate
// continues from their caches exactly as decode_local does.
//
//   sift-spts-bench --mode speed    --task passkey --lengths 2048,4096,8192 --samples 2
//                   --configs full,spts,pap,pap_ltp [--gen 16] [--out results.jsonl]
//   sift-spts-bench --mode accuracy --task passkey --lengths 2048 --samples 10
//                   --configs full,spts [--out results.jsonl]
// Common: [--model FILE] [--device cpu|cuda] [--dtype bf16|fp32] [--threads N] [--seed S]
//
// Prompts are sift-bench's task samples (tools/bench/tasks.h, haystack --haystack, by default
// tools/bench/corpus/world-english-bible) tokenised as siftd does (daemon/request_builder.h).
// speed: TTFT = prefill stage time (the first token is the argmax of the prefill's logits), e2e =
// TTFT + `--gen` tokens (ignore_eos); KV bytes after prefill. accuracy: greedy answer of the
// sample's max_tokens, scored by the task's scorer. One JSON line per (config, length, sample) on
// stdout / --out.
// --mode trace: for each sample, how many of the needle's tokens are candidates, attention-active
// and FFN-active in every layer of the default SPTS prefill (one JSON line per layer).
// Configs: full = prefill_full; spts = prefill_skip defaults; pap = {ltp:false, msdp:false};
// pap_ltp = {msdp:false}. The SPTS schedule is the loaded model's (--pipelines DIR/models,
// default the repository's pipelines/models; model_defaults.h), as in siftd.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/model_defaults.h"
#include "daemon/request_builder.h"
#include "prefill_full_stage.h"
#include "prefill_skip_stage.h"
#include "sift/cost_report.h"
#include "sift/device.h"
#include "sift/error.h"
#include "sift/generate.h"
#include "sift/host.h"
#include "sift/model.h"
#include "spts_prefill.h"
#include "spts_proxy.h"
#include "tasks.h"
#include "tools/common/command_line.h"

namespace {

using nlohmann::json;

class QuietContext : public sift::StageContext {
 public:
  bool Cancelled() const override { return false; }
  sift::Status CancelStatus() const override { return sift::Status::Ok(); }
  void Progress(const std::string&, int64_t, int64_t) override {}
  bool Emit(const std::string&, sift::TokenId) override { return true; }
};

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// The prefill stage of `config`; its parameters start from the model's defaults in
// <pipelines>/models (model_defaults.h), as siftd's do.
std::unique_ptr<sift::Stage> MakeStage(const std::string& config, const sift::Model& model,
                                       const std::string& pipelines) {
  sift::StageParams p("(bench)", "prefill", config == "full" ? "prefill_full" : "prefill_skip");
  if (config == "full") return std::make_unique<sift::plugins::PrefillFullStage>(p, model);
  if (config == "pap") {
    p.Set("ltp", false, "bench");
    p.Set("msdp", false, "bench");
  } else if (config == "pap_ltp") {
    p.Set("msdp", false, "bench");
  } else if (config != "spts") {
    throw sift::Error("unknown config " + config + " (full, spts, pap, pap_ltp)");
  }
  sift::daemon::ApplyModelDefaultsFromDir(pipelines, model.config(), &p);
  return std::make_unique<sift::plugins::PrefillSkipStage>(p, model);
}

// Positions of the needle's tokens in `tokens` (the needle tokenised alone, its first and last
// token dropped since they may merge with neighbours, then located as a run).
std::vector<int64_t> NeedlePositions(const sift::Model& model, const sift::bench::Sample& sample,
                                     const std::vector<sift::TokenId>& tokens) {
  std::vector<int64_t> out;
  if (sample.needles.empty()) return out;
  std::vector<sift::TokenId> needle = model.tokenizer().Encode(sample.needles[0], false);
  if (needle.size() < 3) return out;
  needle = std::vector<sift::TokenId>(needle.begin() + 1, needle.end() - 1);
  for (size_t i = 0; i + needle.size() <= tokens.size(); ++i) {
    if (std::equal(needle.begin(), needle.end(), tokens.begin() + i)) {
      for (size_t j = 0; j < needle.size(); ++j) out.push_back(static_cast<int64_t>(i + j));
      break;
    }
  }
  return out;
}

void TraceNeedle(const sift::Model& model, const sift::bench::Sample& sample,
                 const std::vector<sift::TokenId>& tokens, int64_t length, std::ofstream& out) {
  const std::vector<int64_t> needle = NeedlePositions(model, sample, tokens);
  auto count = [&](const at::Tensor& positions) {
    int64_t c = 0;
    for (int64_t p : sift::HostInts(positions)) {
      c += std::count(needle.begin(), needle.end(), p) > 0;
    }
    return c;
  };
  auto proxy = sift::plugins::SptsProxy::LoadShared(
      sift::plugins::PrefillSkipStage::ResolveProxyPath("", model), model.options().device);
  std::vector<sift::plugins::SptsLayerTrace> trace;
  sift::plugins::SptsPrefillOptions o;
  o.proxy = proxy.get();
  o.trace = &trace;
  sift::KvCache cache = model.NewCache();
  at::Tensor logits;
  sift::plugins::SptsPrefill(model, tokens, o, cache, &logits);
  for (size_t l = 0; l < trace.size(); ++l) {
    json line = {{"mode", "trace"},
                 {"id", sample.id},
                 {"length", length},
                 {"layer", l},
                 {"needle_tokens", needle.size()},
                 {"needle_start", needle.empty() ? -1 : needle.front()},
                 {"candidates", trace[l].candidates.size(0)},
                 {"needle_candidates", count(trace[l].candidates)},
                 {"needle_attn_active", count(trace[l].attn_active)},
                 {"needle_ffn_active", count(trace[l].ffn_active)}};
    std::cout << line.dump() << std::endl;
    if (out.is_open()) out << line.dump() << std::endl;
  }
}

// The command line's values (text options by name in `text`).
struct BenchArgs {
  std::map<std::string, std::string> text = {{"mode", "speed"},
                                             {"task", "passkey"},
                                             {"lengths", "2048"},
                                             {"configs", "full,spts"},
                                             {"out", ""},
                                             {"device", "cpu"},
                                             {"dtype", "bf16"},
                                             {"pipelines", SIFT_SOURCE_DIR "/pipelines"},
                                             {"haystack", sift::bench::DefaultHaystackDir()}};
  int samples = 1, threads = 0, warmup = 1;
  int64_t gen = 16;
  uint64_t seed = 0;

  const std::string& operator[](const char* name) const { return text.at(name); }
};

void AddBenchOptions(sift::cli::CommandLine& cl, BenchArgs* a) {
  namespace po = boost::program_options;
  auto text = [&](const char* name) {
    return po::value(&a->text[name])->default_value(a->text[name]);
  };
  // clang-format off
  cl.Add()
      ("mode", text("mode"), "speed | accuracy | trace")
      ("task", text("task"), "sift-bench task of the samples")
      ("haystack", text("haystack"),
       "folder of .txt files (default: the World English Bible corpus in the tree; docs/results/spts.md "
       "used ../shared/data/pg_essays)")
      ("lengths", text("lengths"), "sample lengths in tokens, comma-separated")
      ("samples", po::value(&a->samples)->default_value(a->samples), "samples per length")
      ("configs", text("configs"),
       "full = prefill_full; spts = prefill_skip defaults; pap = {ltp:false, msdp:false}; "
       "pap_ltp = {msdp:false}")
      ("gen", po::value(&a->gen)->default_value(a->gen), "speed: tokens generated after the prefill")
      ("out", po::value(&a->text["out"])->value_name("FILE"), "also append the JSON lines here")
      ("model", po::value(&a->text["model"])->value_name("FILE"), "GGUF file (default $SIFT_MODEL)")
      ("device", text("device"), "cpu | cuda | cuda:N")
      ("dtype", text("dtype"), "bf16 | fp32")
      ("threads", po::value(&a->threads)->default_value(a->threads), "CPU threads (0 = all cores)")
      ("seed", po::value(&a->seed)->default_value(a->seed), "sample seed")
      ("warmup", po::value(&a->warmup)->default_value(a->warmup),
       "one short run per config first (0: none)")
      ("pipelines", text("pipelines"),
       "pipeline folder: the SPTS schedule from its models/ (model_defaults.h), as siftd");
  // clang-format on
}

// One short run per config: first-call allocations.
void WarmUp(const sift::Model& model, const BenchArgs& a) {
  for (const std::string& config : Split(a["configs"])) {
    sift::RequestState state;
    state.tokens = std::vector<sift::TokenId>(300, 1000);
    QuietContext ctx;
    MakeStage(config, model, a["pipelines"])->Run(model, state, ctx);
  }
}

// The request state siftd would build for the sample (context + question).
sift::RequestState BuildState(const sift::Model& model, const sift::bench::Sample& sample,
                              bool speed, int64_t gen) {
  sift::daemon::GenerateRequest req;
  req.input = sift::daemon::InputKind::kContextQuestion;
  req.context = sample.context;
  req.question = sample.question;
  req.max_tokens = speed ? gen : sample.max_tokens;
  req.ignore_eos = speed;
  sift::RequestState state;
  bool clamped = false;
  json details;
  sift::Status st = sift::daemon::BuildRequestState(model, req, {}, &state, &clamped, &details);
  if (!st.ok()) throw sift::Error("request: " + st.ToString());
  return state;
}

// One config on one sample: the prefill stage, then sift::Generate; the JSON line.
json RunConfig(const sift::Model& model, const sift::bench::Sample& sample,
               const std::string& config, const BenchArgs& a, sift::RequestState& state) {
  const bool speed = a["mode"] == "speed";
  QuietContext ctx;
  auto stage = MakeStage(config, model, a["pipelines"]);
  const auto t0 = std::chrono::steady_clock::now();
  sift::Status st = stage->Run(model, state, ctx);
  if (!st.ok()) throw sift::Error(config + ": " + st.ToString());
  const auto t1 = std::chrono::steady_clock::now();
  sift::RecordStageCost(state, config, config, sift::StageKind::kPrefill,
                        std::chrono::duration<double, std::milli>(t1 - t0).count());
  const sift::CostReport cost = sift::MakeCostReport(state, model);
  sift::GenerationResult r =
      sift::Generate(model, *state.cache, state.last_logits, state.next_position, state.generation);
  const auto t2 = std::chrono::steady_clock::now();
  const double ttft = std::chrono::duration<double, std::milli>(t1 - t0).count();
  const double e2e = std::chrono::duration<double, std::milli>(t2 - t0).count();
  json line = {{"mode", a["mode"]},
               {"config", config},
               {"task", sample.task},
               {"id", sample.id},
               {"length", sample.length},
               {"prompt_tokens", state.tokens.size()},
               {"ttft_ms", ttft},
               {"e2e_ms", e2e},
               {"generated", r.tokens.size()},
               {"kv_bytes", cost.kv_bytes},
               {"kv_bytes_full", cost.kv_bytes_full},
               {"tokens_kept", cost.tokens_kept}};
  if (!speed) {
    line["score"] = sift::bench::Score(sample, r.text);
    line["output"] = r.text;
  }
  return line;
}

int RunBench(const BenchArgs& a) {
  sift::ConfigureThreads(a.threads);
  sift::ModelOptions mo;
  mo.dtype = sift::ParseDtype(a["dtype"]);
  mo.device = sift::ParseDevice(a["device"]);
  auto model = sift::Model::Load(a["model"], mo);
  std::ofstream out;
  if (!a["out"].empty()) out.open(a["out"], std::ios::app);
  const bool speed = a["mode"] == "speed";
  if (a.warmup > 0) WarmUp(*model, a);
  for (const int64_t length : sift::cli::IntList(a["lengths"], "--lengths")) {
    for (int i = 0; i < a.samples; ++i) {
      sift::bench::TaskOptions to;
      to.task = a["task"];
      to.length = length;
      to.seed = a.seed;
      to.haystack_dir = a["haystack"];
      const sift::bench::Sample sample = sift::bench::MakeSample(to, model->tokenizer(), i);
      for (const std::string& config : Split(a["configs"])) {
        sift::RequestState state = BuildState(*model, sample, speed, a.gen);
        if (a["mode"] == "trace") {
          TraceNeedle(*model, sample, state.tokens, to.length, out);
          break;
        }
        const json line = RunConfig(*model, sample, config, a, state);
        std::cout << line.dump() << std::endl;
        if (out.is_open()) out << line.dump() << std::endl;
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  sift::ConfigureThreadEnvironment(argv);
  BenchArgs a;
  const char* env_model = std::getenv("SIFT_MODEL");
  a.text["model"] = env_model ? env_model : "";
  sift::cli::CommandLine cl(
      "sift-spts-bench", "sift-spts-bench --mode speed|accuracy|trace [options]",
      "The SPTS measurements of docs/results/spts.md, in process: prefill_full / prefill_skip\n"
      "on sift-bench's task samples, then sift::Generate. One JSON line per (config, length,\n"
      "sample) on stdout and --out. trace: per layer, how many of the needle's tokens are\n"
      "candidates, attention-active and FFN-active in the default SPTS prefill.");
  AddBenchOptions(cl, &a);
  po::variables_map vm;
  if (const int status = cl.Parse(argc, argv, &vm); status != sift::cli::kContinue) return status;
  if (a["mode"] != "speed" && a["mode"] != "accuracy" && a["mode"] != "trace") {
    return cl.Error("--mode must be speed, accuracy or trace");
  }
  return sift::cli::Run("sift-spts-bench", 1, [&] { return RunBench(a); });
}
