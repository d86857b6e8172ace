// sift-selection-bench: in-process measurements of the KV selection plugins.
//
//   jaccard   --lengths 4096 --tasks passkey --samples 3 --ratios 0.1,0.2,0.3 [--depths 25,50]
//             One prefill per sample (window and column statistics on every layer), then h2o,
//             snapkv and chunkkv at each keep_ratio on deep copies of it: the adjacent-layer
//             Jaccard similarity of KV head 0's kept indices (ChunkKV paper, Figure 3 / B.2).
//             Accuracy sweeps are sift-bench's (`bash tools/bench/run.sh methods`).
//   overhead  --length 8192 --reps 5
//             chunkkv at keep_ratio 0.1 with N_reuse = 1, 2, 3, 5 on copies of one prefill:
//             select and reuse stage times (interleaved per repetition), plus the scoring cost
//             per selecting layer, timed on the real layer-0 cache: fused into the prefill
//             (last query block with minus without the window statistics) and recomputed from
//             the window queries as the papers' reference code does.
//   e2e       --length 4096 --out 128
//             whole run (prefill + select + reuse + decode of --out tokens, EOS ignored) for full
//             KV, chunkkv and chunkkv + reuse (N = 2) at keep_ratio 0.1.
// Prints markdown tables; --json FILE appends one JSON object per measurement. --device cpu|cuda
// (default cpu) places the model.
//
// Needs $SIFT_MODEL. Heavy: wrap in `flock /tmp/sift-measure.lock`.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "chunkkv_stage.h"
#include "daemon/request_builder.h"
#include "h2o_stage.h"
#include "layerwise_stage.h"
#include "prefill_full_stage.h"
#include "pyramidkv_stage.h"
#include "sift/attention.h"
#include "sift/device.h"
#include "sift/generate.h"
#include "sift/host.h"
#include "sift/model.h"
#include "sift/request_state.h"
#include "snapkv_stage.h"
#include "streamingllm_stage.h"
#include "tasks.h"
#include "tools/common/command_line.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace sift;
using namespace sift::plugins;

double Ms(Clock::time_point a) {
  return std::chrono::duration<double, std::milli>(Clock::now() - a).count();
}

class NullContext : public StageContext {
 public:
  bool Cancelled() const override { return false; }
  Status CancelStatus() const override { return Status::Ok(); }
  void Progress(const std::string&, int64_t, int64_t) override {}
  bool Emit(const std::string&, TokenId) override { return true; }
};

namespace po = boost::program_options;

// A mode's option, kept as text in `f` (the modes read their defaults from absent keys); T
// checks the value's type at parse time.
template <typename T>
void AddOption(sift::cli::CommandLine* cl, std::map<std::string, std::string>* f, const char* name,
               const char* value_name, const char* help) {
  const std::string key = name;
  cl->Add()(name, po::value<T>()->value_name(value_name)->notifier([f, key](const T& v) {
    std::ostringstream os;
    os << v;
    (*f)[key] = os.str();
  }),
            help);
}

// The mode's options from argv[2..] into `f`: kContinue, or the exit status.
int Flags(const std::string& mode, int argc, char** argv, std::map<std::string, std::string>* f) {
  sift::cli::CommandLine cl(
      "sift-selection-bench " + mode, "sift-selection-bench " + mode + " [options]",
      mode == "jaccard"
          ? "One prefill per sample, then h2o, snapkv and chunkkv at each keep_ratio on deep "
            "copies of it:\nthe adjacent-layer Jaccard similarity of KV head 0's kept indices "
            "(ChunkKV paper, Figure 3 / B.2)."
      : mode == "overhead"
          ? "chunkkv at keep_ratio 0.1 with N_reuse = 1, 2, 3, 5 on copies of one prefill: "
            "select and reuse\nstage times, plus the scoring cost per selecting layer."
          : "Whole run (prefill + select + reuse + decode of --out tokens, EOS ignored) "
            "for full KV,\nchunkkv and chunkkv + reuse (N = 2) at keep_ratio 0.1.");
  AddOption<std::string>(&cl, f, "device", "cpu|cuda", "where the model goes (default cpu)");
  AddOption<std::string>(&cl, f, "json", "FILE", "also append one JSON object per measurement");
  AddOption<std::string>(&cl, f, "haystack", "DIR",
                         "folder of .txt files for the prompts (default: sift-bench's, "
                         "tools/bench/corpus/world-english-bible)");
  if (mode == "jaccard") {
    AddOption<std::string>(&cl, f, "lengths", "N,...", "sample lengths (default 4096)");
    AddOption<std::string>(&cl, f, "tasks", "T,...", "sift-bench tasks (default passkey)");
    AddOption<std::string>(&cl, f, "ratios", "R,...", "keep ratios (default 0.1,0.2,0.3)");
    AddOption<std::string>(&cl, f, "depths", "PCT,...", "needle depths (default: the task's)");
    AddOption<int>(&cl, f, "samples", "N", "samples per (task, length, depth) (default 3)");
  } else {
    AddOption<int64_t>(
        &cl, f, "length", "N",
        mode == "overhead" ? "prompt length (default 8192)" : "prompt length (default 4096)");
    if (mode == "overhead") {
      AddOption<int>(&cl, f, "reps", "N", "repetitions (default 5)");
    } else {
      AddOption<int64_t>(&cl, f, "out", "N", "tokens to decode (default 128)");
    }
  }
  po::variables_map vm;
  return cl.Parse(argc - 1, argv + 1, &vm);
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) out.push_back(x);
  return out;
}

StageParams Params(const json& j, const std::string& plugin) {
  StageParams p("bench", "select", plugin);
  for (auto& [k, v] : j.items()) p.Set(k, v, "bench");
  return p;
}

std::unique_ptr<SelectStageBase> MakeSelect(const std::string& method, double ratio) {
  StageParams p = Params({{"keep_ratio", ratio}}, method);
  if (method == "snapkv") return std::make_unique<SnapKvStage>(p);
  if (method == "streamingllm") return std::make_unique<StreamingLlmStage>(p);
  if (method == "h2o") return std::make_unique<H2oStage>(p);
  if (method == "pyramidkv") return std::make_unique<PyramidKvStage>(p);
  return std::make_unique<ChunkKvStage>(p);  // chunkkv, chunkkv_reuse
}

RequestState Build(const Model& model, const bench::Sample& sample) {
  daemon::GenerateRequest req;
  req.input = daemon::InputKind::kContextQuestion;
  req.context = sample.context;
  req.question = sample.question;
  daemon::TokenizedPrompt prompt;
  json details;
  Status st = daemon::TokenizePrompt(model.tokenizer(), req, 32, &prompt, &details);
  if (!st.ok()) throw std::runtime_error(st.ToString());
  RequestState s;
  s.tokens = prompt.tokens;
  s.question_begin = prompt.question_begin;
  s.prompt_length = static_cast<int64_t>(s.tokens.size());
  s.generation.max_tokens = sample.max_tokens;
  return s;
}

void Check(const Status& st, const std::string& what) {
  if (!st.ok()) throw std::runtime_error(what + ": " + st.ToString());
}

double Prefill(const Model& model, RequestState& s) {
  PrefillFullStage prefill(Params({}, "prefill_full"), model);
  NullContext ctx;
  const auto t = Clock::now();
  Check(prefill.Run(model, s, ctx), "prefill");
  return Ms(t);
}

// Runs select (+ layerwise with n_reuse > 1) on `s`; returns {select ms, reuse ms}.
std::pair<double, double> Compress(const Model& model, RequestState& s, const std::string& method,
                                   double ratio, int64_t n_reuse) {
  auto select = MakeSelect(method, ratio);
  NullContext ctx;
  std::unique_ptr<LayerwiseStage> reuse;
  if (n_reuse > 1) {
    reuse = std::make_unique<LayerwiseStage>(Params({{"n_reuse", n_reuse}}, "layerwise"));
    reuse->PlanLayers(model.config().num_layers, s.plan);
  }
  auto t = Clock::now();
  Check(select->RunOn(&model, s, ctx), method);
  const double select_ms = Ms(t);
  double reuse_ms = 0;
  if (reuse) {
    t = Clock::now();
    Check(reuse->RunOn(&model, s, ctx), "layerwise");
    reuse_ms = Ms(t);
  }
  return {select_ms, reuse_ms};
}

double Jaccard(const at::Tensor& a, const at::Tensor& b) {
  const std::vector<int64_t> va = HostInts(a), vb = HostInts(b);
  const std::set<int64_t> x(va.begin(), va.end()), y(vb.begin(), vb.end());
  int64_t inter = 0;
  for (int64_t v : x) inter += y.count(v);
  const int64_t uni = static_cast<int64_t>(x.size() + y.size()) - inter;
  return uni == 0 ? 1.0 : static_cast<double>(inter) / static_cast<double>(uni);
}

// Mean over adjacent layer pairs of the Jaccard similarity of KV head 0's kept indices.
double AdjacentJaccard(const RequestState& s) {
  double sum = 0;
  int pairs = 0;
  for (int64_t l = 0; l + 1 < s.cache->num_layers(); ++l) {
    sum += Jaccard(s.kept_indices.at(l)[0], s.kept_indices.at(l + 1)[0]);
    ++pairs;
  }
  return pairs ? sum / pairs : 0;
}

std::ofstream json_out;
void Record(const json& j) {
  if (json_out.is_open()) json_out << j.dump() << "\n" << std::flush;
}

int JaccardMode(const Model& model, std::map<std::string, std::string> f) {
  const std::vector<std::string> lengths = Split(f.count("lengths") ? f["lengths"] : "4096");
  const std::vector<std::string> tasks = Split(f.count("tasks") ? f["tasks"] : "passkey");
  const std::vector<std::string> ratios = Split(f.count("ratios") ? f["ratios"] : "0.1,0.2,0.3");
  const std::vector<std::string> depths = Split(f.count("depths") ? f["depths"] : "-1");
  const int samples = std::stoi(f.count("samples") ? f["samples"] : "3");
  std::map<std::string, std::vector<double>> jac;  // method|length|ratio -> per-sample means
  for (const std::string& task : tasks) {
    for (const std::string& len : lengths) {
      for (const std::string& depth : depths) {
        for (int i = 0; i < samples; ++i) {
          bench::TaskOptions o;
          o.task = task;
          o.length = std::stoll(len);
          o.depth_percent = bench::TaskHasDepth(task) ? std::stoi(depth) : -1;
          o.haystack_dir = f.count("haystack") ? f["haystack"] : bench::DefaultHaystackDir();
          const bench::Sample sample = bench::MakeSample(o, model.tokenizer(), i);
          RequestState base = Build(model, sample);
          for (int64_t l = 0; l < model.config().num_layers; ++l) {
            base.plan.stats[l].window = 32;
            base.plan.stats[l].column_sum = true;
          }
          Prefill(model, base);
          for (const std::string& ratio : ratios) {
            for (const std::string m : {"h2o", "snapkv", "chunkkv"}) {
              RequestState s = base.Clone();
              Compress(model, s, m, std::stod(ratio), 1);
              const double j = AdjacentJaccard(s);
              jac[m + "|" + len + "|" + ratio].push_back(j);
              std::cerr << sample.id << " " << m << "@" << ratio << " jaccard " << j << "\n";
            }
          }
        }
      }
    }
  }
  std::cout << "| method | length | keep_ratio | adjacent-layer Jaccard (KV head 0) | n |\n"
               "|---|---|---|---|---|\n";
  for (auto& [key, v] : jac) {
    double sum = 0;
    for (double x : v) sum += x;
    std::cout << "| " << key << " | " << sum / v.size() << " | " << v.size() << " |\n";
    Record({{"mode", "jaccard"}, {"key", key}, {"mean", sum / v.size()}, {"n", v.size()}});
  }
  return 0;
}

// Milliseconds of one Attention() call on the last `rows` queries of layer 0's cached keys,
// with or without the observation-window statistics (window = 32, as chunkkv asks).
double TimeAttention(const Model& model, const KvCache& cache, int64_t rows, bool stats) {
  const ModelConfig& c = model.config();
  const int64_t n = cache.size(0);
  at::Tensor q = at::randn({rows, c.num_heads, c.head_dim}, cache.Keys(0).options());
  at::Tensor q_pos = at::arange(n - rows, n, cache.Positions(0).options());
  AttentionOptions o;
  o.upcast_fp32 = true;  // what prefill_full does for long inputs on this CPU
  AttentionStatsRequest r;
  if (stats) r.window = std::min<int64_t>(32, rows);
  AttentionStats out;
  const auto t = Clock::now();
  at::Tensor y = Attention(q, cache.Keys(0), cache.Values(0), q_pos, cache.Positions(0), o, r,
                           stats ? &out : nullptr);
  return Ms(t);
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

int Overhead(const Model& model, std::map<std::string, std::string> f) {
  const int64_t length = std::stoll(f.count("length") ? f["length"] : "8192");
  const int reps = std::stoi(f.count("reps") ? f["reps"] : "5");
  bench::TaskOptions o;
  o.task = "passkey";
  o.length = length;
  o.haystack_dir = f.count("haystack") ? f["haystack"] : bench::DefaultHaystackDir();
  bench::Sample sample = bench::MakeSample(o, model.tokenizer(), 0);
  // One prefill that collects chunkkv's statistics on every layer; every N_reuse then compresses
  // a copy of it (followers simply leave their statistics unread).
  RequestState base = Build(model, sample);
  MakeSelect("chunkkv", 0.1)->PlanStats(model.config().num_layers, base.plan);
  const double prefill_ms = Prefill(model, base);
  std::cerr << "prefill " << base.prompt_length << " tokens: " << prefill_ms << " ms\n";

  // 1. The select and reuse stages, N_reuse interleaved inside each repetition.
  const std::vector<int64_t> reuse = {1, 2, 3, 5};
  std::map<int64_t, std::vector<double>> select_ms, reuse_ms;
  for (int r = 0; r < reps; ++r) {
    for (int64_t nr : reuse) {
      RequestState s = base.Clone();
      auto [sel, reu] = Compress(model, s, "chunkkv", 0.1, nr);
      select_ms[nr].push_back(sel);
      reuse_ms[nr].push_back(reu);
      Record({{"mode", "overhead"},
              {"length", base.prompt_length},
              {"rep", r},
              {"n_reuse", nr},
              {"select_ms", sel},
              {"reuse_ms", reu}});
      std::cerr << "rep " << r << " N=" << nr << " select " << sel << " reuse " << reu << "\n";
    }
  }
  // 2. What scoring costs per selecting layer. Fused (this design): the prefill's last query
  // block (256 rows) with the window statistics minus the same block without them. Recomputed
  // (SnapKV's and ChunkKV's reference code): softmax of the 32 window queries over all keys.
  std::vector<double> plain, fused, recompute;
  for (int r = 0; r < 4 * reps; ++r) {
    plain.push_back(TimeAttention(model, *base.cache, 256, false));
    fused.push_back(TimeAttention(model, *base.cache, 256, true));
    recompute.push_back(TimeAttention(model, *base.cache, 32, true));
  }
  const double fused_layer = std::max(0.0, Median(fused) - Median(plain));
  const double recompute_layer = Median(recompute);
  Record({{"mode", "scoring"},
          {"length", base.prompt_length},
          {"reps", 4 * reps},
          {"block_plain_ms", Median(plain)},
          {"block_stats_ms", Median(fused)},
          {"recompute_ms", recompute_layer},
          {"prefill_ms", prefill_ms}});

  const int64_t layers = model.config().num_layers;
  std::cout << "Prompt " << base.prompt_length << " tokens, chunkkv keep_ratio 0.1, " << layers
            << " layers, medians of " << reps << " repetitions (scoring: " << 4 * reps
            << ").\n\nScoring per selecting layer: fused into the prefill " << fused_layer
            << " ms (last block " << Median(fused) << " vs " << Median(plain)
            << " ms); recomputed from the window queries " << recompute_layer << " ms.\n\n";
  std::cout << "| N_reuse | selecting layers | select ms | reuse ms | per-follower gather ms | "
               "scoring (fused) + select + reuse ms | vs N=1 | scoring (recomputed) + select + "
               "reuse ms | vs N=1 |\n|---|---|---|---|---|---|---|---|---|\n";
  double one_fused = 0, one_recompute = 0;
  for (int64_t nr : reuse) {
    const int64_t leaders = (layers + nr - 1) / nr;
    const double sel = Median(select_ms[nr]), reu = Median(reuse_ms[nr]);
    const double fused_total = leaders * fused_layer + sel + reu;
    const double recompute_total = leaders * recompute_layer + sel + reu;
    if (nr == 1) one_fused = fused_total, one_recompute = recompute_total;
    std::cout << "| " << nr << " | " << leaders << " | " << sel << " | " << reu << " | "
              << (layers > leaders ? reu / static_cast<double>(layers - leaders) : 0.0) << " | "
              << fused_total << " | " << fused_total / one_fused << " | " << recompute_total
              << " | " << recompute_total / one_recompute << " |\n";
  }
  return 0;
}

int EndToEnd(const Model& model, std::map<std::string, std::string> f) {
  const int64_t length = std::stoll(f.count("length") ? f["length"] : "4096");
  const int64_t out = std::stoll(f.count("out") ? f["out"] : "128");
  bench::TaskOptions o;
  o.task = "passkey";
  o.length = length;
  o.haystack_dir = f.count("haystack") ? f["haystack"] : bench::DefaultHaystackDir();
  bench::Sample sample = bench::MakeSample(o, model.tokenizer(), 0);
  std::cout << "| config | prompt | prefill ms | select+reuse ms | decode ms | e2e ms | "
               "decode tok/s | e2e vs full |\n|---|---|---|---|---|---|---|---|\n";
  double full_e2e = 0;
  for (const std::string config : {"full", "chunkkv", "chunkkv_reuse"}) {
    RequestState s = Build(model, sample);
    s.generation.max_tokens = out;
    s.generation.ignore_eog = true;
    const int64_t nr = config == "chunkkv_reuse" ? 2 : 1;
    const auto t = Clock::now();
    if (config != "full") {
      MakeSelect("chunkkv", 0.1)->PlanStats(model.config().num_layers, s.plan);
      if (nr > 1) {
        LayerwiseStage(Params({{"n_reuse", nr}}, "layerwise"))
            .PlanLayers(model.config().num_layers, s.plan);
      }
    }
    const double prefill = Prefill(model, s);
    double compress = 0;
    if (config != "full") {
      auto [a, b] = Compress(model, s, "chunkkv", 0.1, nr);
      compress = a + b;
    }
    const auto td = Clock::now();
    GenerationResult r = Generate(model, *s.cache, s.last_logits, s.next_position, s.generation);
    const double decode = Ms(td);
    const double e2e = Ms(t);
    if (config == "full") full_e2e = e2e;
    const double tps = 1000.0 * static_cast<double>(r.tokens.size()) / decode;
    std::cout << "| " << config << " | " << s.prompt_length << " | " << prefill << " | " << compress
              << " | " << decode << " | " << e2e << " | " << tps << " | " << e2e / full_e2e
              << " |\n";
    Record({{"mode", "e2e"},
            {"config", config},
            {"prompt_tokens", s.prompt_length},
            {"out_tokens", r.tokens.size()},
            {"prefill_ms", prefill},
            {"compress_ms", compress},
            {"decode_ms", decode},
            {"e2e_ms", e2e}});
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  sift::ConfigureThreadEnvironment(argv);
  sift::cli::CommandLine cl("sift-selection-bench", "sift-selection-bench MODE [options]",
                            "In-process measurements of the KV selection plugins on $SIFT_MODEL; "
                            "prints Markdown tables\n(docs/results/selection.md). Heavy: wrap in "
                            "`flock /tmp/sift-measure.lock`.");
  cl.Command("jaccard", "adjacent-layer Jaccard similarity of the kept indices");
  cl.Command("overhead", "scoring, selection and reuse cost against N_reuse");
  cl.Command("e2e", "whole-run latency: full KV, chunkkv, chunkkv + reuse");
  po::variables_map vm;
  std::string mode;
  std::vector<std::string> rest;
  if (const int status = cl.ParseCommand(argc, argv, &vm, &mode, &rest);
      status != sift::cli::kContinue) {
    return status;
  }
  if (mode.empty()) return cl.Error("no mode (jaccard, overhead or e2e)");
  std::map<std::string, std::string> f;
  if (const int status = Flags(mode, argc, argv, &f); status != sift::cli::kContinue) {
    return status;
  }
  const char* path = std::getenv("SIFT_MODEL");
  if (!path) return cl.Error("set SIFT_MODEL to the model file");
  return sift::cli::Run("sift-selection-bench " + mode, 1, [&] {
    if (f.count("json")) json_out.open(f["json"], std::ios::app);
    sift::ConfigureThreads(0);
    ModelOptions mo;
    mo.device = ParseDevice(f.count("device") ? f["device"] : "cpu");
    auto model = Model::Load(path, mo);
    if (mode == "jaccard") return JaccardMode(*model, f);
    if (mode == "overhead") return Overhead(*model, f);
    return EndToEnd(*model, f);
  });
}
