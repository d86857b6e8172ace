// sift-selection-bench: in-process measurements of the KV selection plugins.
//
//   accuracy  --lengths 2048,4096 --tasks passkey,needle --samples 3 --ratios 0.1,0.2,0.3
//             [--depths 25,50,75] [--max-tokens CAP] [--methods snapkv,...]
//             One prefill per sample (collecting window and column statistics on every layer),
//             then every method x keep_ratio runs on a deep copy of that state: select (+ reuse)
//             and greedy decode; scored by sift_bench_tasks. Also records the adjacent-layer
//             Jaccard similarity of the first KV head's kept indices (h2o, snapkv, chunkkv).
//   overhead  --length 2048 --reps 2
//             chunkkv at keep_ratio 0.1 with N_reuse = 1, 2, 3, 5: prefill time with the
//             statistics the plan asks minus prefill time without any, plus select and reuse
//             stage times (interleaved per repetition).
//   e2e       --length 4096 --out 128
//             whole run (prefill + select + reuse + decode of --out tokens, EOS ignored) for full
//             KV, chunkkv and chunkkv + reuse (N = 2) at keep_ratio 0.1.
// Prints markdown tables; --json FILE appends one JSON object per measurement.
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
#include "sift/generate.h"
#include "sift/model.h"
#include "snapkv_stage.h"
#include "streamingllm_stage.h"
#include "tasks.h"

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

std::map<std::string, std::string> Flags(int argc, char** argv) {
  std::map<std::string, std::string> f;
  for (int i = 2; i + 1 < argc; i += 2) f[std::string(argv[i]).substr(2)] = argv[i + 1];
  return f;
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

RequestState Clone(const RequestState& s) {
  RequestState c;
  c.tokens = s.tokens;
  c.question_begin = s.question_begin;
  c.prompt_length = s.prompt_length;
  c.generation = s.generation;
  c.next_position = s.next_position;
  c.last_logits = s.last_logits;
  c.layer_stats = s.layer_stats;
  c.plan = s.plan;
  c.stats = s.stats;
  c.cache = std::make_unique<KvCache>(s.cache->shape());
  for (int64_t l = 0; l < s.cache->num_layers(); ++l) {
    c.cache->Set(l, s.cache->Keys(l).clone(), s.cache->Values(l).clone(),
                 s.cache->Positions(l).clone());
  }
  return c;
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
  std::set<int64_t> x, y;
  for (int64_t i = 0; i < a.numel(); ++i) x.insert(a[i].item<int64_t>());
  for (int64_t i = 0; i < b.numel(); ++i) y.insert(b[i].item<int64_t>());
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

int Accuracy(const Model& model, std::map<std::string, std::string> f) {
  const std::vector<std::string> lengths = Split(f.count("lengths") ? f["lengths"] : "2048");
  const std::vector<std::string> tasks = Split(f.count("tasks") ? f["tasks"] : "passkey");
  const std::vector<std::string> ratios = Split(f.count("ratios") ? f["ratios"] : "0.1,0.2,0.3");
  const std::vector<std::string> methods =
      Split(f.count("methods") ? f["methods"]
                               : "snapkv,streamingllm,h2o,pyramidkv,chunkkv,chunkkv_reuse");
  const std::vector<std::string> depths = Split(f.count("depths") ? f["depths"] : "-1");
  const int samples = std::stoi(f.count("samples") ? f["samples"] : "3");
  // (task, length, config) -> scores; jaccard per method at each length.
  std::map<std::string, std::vector<double>> scores;
  std::map<std::string, std::vector<double>> jac;
  for (const std::string& task : tasks) {
    for (const std::string& len : lengths) {
      for (const std::string& depth : depths) {
        for (int i = 0; i < samples; ++i) {
          bench::TaskOptions o;
          o.task = task;
          o.length = std::stoll(len);
          o.depth_percent = bench::TaskHasDepth(task) ? std::stoi(depth) : -1;
          o.haystack_dir = bench::DefaultHaystackDir();
          bench::Sample sample = bench::MakeSample(o, model.tokenizer(), i);
          if (f.count("max-tokens")) {
            sample.max_tokens = std::min<int64_t>(sample.max_tokens, std::stoll(f["max-tokens"]));
          }
          RequestState base = Build(model, sample);
          for (int64_t l = 0; l < model.config().num_layers; ++l) {
            base.plan.stats[l].window = 32;
            base.plan.stats[l].column_sum = true;
          }
          const double prefill_ms = Prefill(model, base);
          auto run = [&](const std::string& config, RequestState& s) {
            GenerationResult r =
                Generate(model, *s.cache, s.last_logits, s.next_position, s.generation);
            const double score = bench::Score(sample, r.text);
            const std::string key = task + "|" + len + "|" + config;
            scores[key].push_back(score);
            Record({{"mode", "accuracy"},
                    {"task", task},
                    {"length", std::stoll(len)},
                    {"prompt_tokens", s.prompt_length},
                    {"sample", sample.id},
                    {"config", config},
                    {"score", score},
                    {"output", r.text},
                    {"kept", s.cache->TotalEntries() / s.cache->num_layers()},
                    {"prefill_ms", prefill_ms}});
            std::cerr << sample.id << " " << config << " " << score << " | " << r.text.substr(0, 60)
                      << "\n";
          };
          {
            RequestState s = Clone(base);
            run("full", s);
          }
          for (const std::string& ratio : ratios) {
            for (const std::string& m : methods) {
              RequestState s = Clone(base);
              Compress(model, s, m, std::stod(ratio), m == "chunkkv_reuse" ? 2 : 1);
              if ((m == "h2o" || m == "snapkv" || m == "chunkkv")) {
                jac[m + "|" + len + "|" + ratio].push_back(AdjacentJaccard(s));
              }
              run(m + "@" + ratio, s);
            }
          }
        }
      }
    }
  }
  std::cout << "| task | length | config | mean score | n |\n|---|---|---|---|---|\n";
  for (auto& [key, v] : scores) {
    double sum = 0;
    for (double x : v) sum += x;
    std::cout << "| " << key.substr(0, key.find('|')) << " | "
              << key.substr(key.find('|') + 1, key.rfind('|') - key.find('|') - 1) << " | "
              << key.substr(key.rfind('|') + 1) << " | " << sum / v.size() << " | " << v.size()
              << " |\n";
  }
  std::cout << "\n| method | length | keep_ratio | adjacent-layer Jaccard (KV head 0) | n |\n"
               "|---|---|---|---|---|\n";
  for (auto& [key, v] : jac) {
    double sum = 0;
    for (double x : v) sum += x;
    std::cout << "| " << key << " | " << sum / v.size() << " | " << v.size() << " |\n";
    Record({{"mode", "jaccard"}, {"key", key}, {"mean", sum / v.size()}, {"n", v.size()}});
  }
  return 0;
}

int Overhead(const Model& model, std::map<std::string, std::string> f) {
  const int64_t length = std::stoll(f.count("length") ? f["length"] : "2048");
  const int reps = std::stoi(f.count("reps") ? f["reps"] : "2");
  bench::TaskOptions o;
  o.task = "passkey";
  o.length = length;
  o.haystack_dir = bench::DefaultHaystackDir();
  bench::Sample sample = bench::MakeSample(o, model.tokenizer(), 0);
  const std::vector<int64_t> reuse = {1, 2, 3, 5};
  std::map<int64_t, std::vector<double>> stats_ms, select_ms, reuse_ms;
  std::vector<double> base_ms;
  for (int r = 0; r < reps; ++r) {
    RequestState plain = Build(model, sample);
    const double t0 = Prefill(model, plain);
    base_ms.push_back(t0);
    for (int64_t nr : reuse) {
      RequestState s = Build(model, sample);
      auto select = MakeSelect("chunkkv", 0.1);
      select->PlanStats(model.config().num_layers, s.plan);
      if (nr > 1) {
        LayerwiseStage(Params({{"n_reuse", nr}}, "layerwise"))
            .PlanLayers(model.config().num_layers, s.plan);
      }
      const double t = Prefill(model, s);
      auto [sel, reu] = Compress(model, s, "chunkkv", 0.1, nr);
      stats_ms[nr].push_back(t - t0);
      select_ms[nr].push_back(sel);
      reuse_ms[nr].push_back(reu);
      Record({{"mode", "overhead"},
              {"length", s.prompt_length},
              {"rep", r},
              {"n_reuse", nr},
              {"prefill_plain_ms", t0},
              {"prefill_stats_ms", t},
              {"select_ms", sel},
              {"reuse_ms", reu}});
      std::cerr << "rep " << r << " N=" << nr << " prefill " << t << " (plain " << t0 << ") select "
                << sel << " reuse " << reu << "\n";
    }
  }
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / v.size();
  };
  std::cout << "| N_reuse | prefill plain ms | Δprefill (stats) ms | select ms | reuse ms | "
               "scoring+selection ms | vs N=1 |\n|---|---|---|---|---|---|---|\n";
  const double one = mean(stats_ms[1]) + mean(select_ms[1]) + mean(reuse_ms[1]);
  for (int64_t nr : reuse) {
    const double tot = mean(stats_ms[nr]) + mean(select_ms[nr]) + mean(reuse_ms[nr]);
    std::cout << "| " << nr << " | " << mean(base_ms) << " | " << mean(stats_ms[nr]) << " | "
              << mean(select_ms[nr]) << " | " << mean(reuse_ms[nr]) << " | " << tot << " | "
              << tot / one << " |\n";
  }
  return 0;
}

int EndToEnd(const Model& model, std::map<std::string, std::string> f) {
  const int64_t length = std::stoll(f.count("length") ? f["length"] : "4096");
  const int64_t out = std::stoll(f.count("out") ? f["out"] : "128");
  bench::TaskOptions o;
  o.task = "passkey";
  o.length = length;
  o.haystack_dir = bench::DefaultHaystackDir();
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
  if (argc < 2) {
    std::cerr << "usage: sift-selection-bench accuracy|overhead|e2e [--flag value ...]\n";
    return 2;
  }
  auto f = Flags(argc, argv);
  if (f.count("json")) json_out.open(f["json"], std::ios::app);
  const char* path = std::getenv("SIFT_MODEL");
  if (!path) {
    std::cerr << "set SIFT_MODEL\n";
    return 2;
  }
  sift::ConfigureThreads(0);
  auto model = Model::Load(path, ModelOptions());
  const std::string mode = argv[1];
  try {
    if (mode == "accuracy") return Accuracy(*model, f);
    if (mode == "overhead") return Overhead(*model, f);
    if (mode == "e2e") return EndToEnd(*model, f);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "unknown mode " << mode << "\n";
  return 2;
}
