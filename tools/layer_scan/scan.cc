#include "scan.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "context_allocation.h"
#include "gem_selection.h"
#include "partial_prefill.h"
#include "prompt.h"
#include "scores/score_ops.h"
#include "sift/host.h"
#include "streaming_prefill.h"

namespace sift::layer_scan {
namespace {

struct Tally {
  double covered = 0, needle = 0, rank = 0;
  int64_t n = 0;
};

// Best rank (0 = highest) of an answer token among the context's pooled scores.
int64_t BestRank(const at::Tensor& pooled_context, int64_t begin, int64_t end) {
  if (begin < 0 || end > pooled_context.size(0)) return -1;
  const at::Tensor best = pooled_context.narrow(0, begin, end - begin).max();
  return HostInt((pooled_context > best).sum());
}

double Secs(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// (method, budget, layer) -> tally
using Tallies = std::map<std::tuple<std::string, int64_t, int64_t>, Tally>;

// Scans every sample: one CSV row per (method, layer, budget), tallied for the summary.
class Scanner {
 public:
  Scanner(const Model& model, const ScanOptions& options)
      : model_(model), options_(options), layers_(model.config().num_layers) {
    for (int64_t l = 0; l < layers_; ++l) all_layers_.insert(l);
    std::filesystem::create_directories(options.out_dir);
    csv_.open(options.out_dir + "/scan.csv");
    csv_ << "method,length,depth,index,prompt_tokens,layer0,budget,answer_covered,"
            "needle_fraction,answer_rank\n";
  }

  // False when the sample was skipped (its answer is not in the prompt's tokens).
  bool ScanSample(int64_t length, int depth, int64_t index) {
    bench::TaskOptions t;
    t.task = options_.task;
    t.length = length;
    t.depth_percent = depth;
    t.seed = options_.seed;
    t.haystack_dir = options_.haystack_dir;
    const ScanPrompt p = BuildPrompt(model_.tokenizer(), t, index);
    if (p.answer_begin < 0) {
      std::cerr << "skip " << p.sample.id << ": answer not found in the prompt tokens\n";
      return false;
    }
    sample_ = {length, depth, index, static_cast<int64_t>(p.tokens.size())};
    if (options_.gemfilter) ScanGemFilter(p);
    if (options_.ilre) ScanIlre(p);
    csv_.flush();
    return true;
  }

  const Tallies& tallies() const { return tallies_; }

 private:
  struct Current {
    int64_t length = 0;
    int depth = 0;
    int64_t index = 0, n = 0;  // n: prompt tokens
  };

  void Record(const ScanPrompt& p, const std::string& method, int64_t layer, int64_t budget,
              const std::vector<int64_t>& kept, int64_t rank) {
    const double answer = Coverage(kept, p.answer_begin, p.answer_end) >= 1.0 ? 1.0 : 0.0;
    const double needle = Coverage(kept, p.needle_begin, p.needle_end);
    csv_ << method << ',' << sample_.length << ',' << sample_.depth << ',' << sample_.index << ','
         << sample_.n << ',' << layer << ',' << budget << ',' << answer << ',' << needle << ','
         << rank << '\n';
    Tally& tally = tallies_[{method, budget, layer}];
    tally.covered += answer;
    tally.needle += needle;
    tally.rank += static_cast<double>(rank);
    ++tally.n;
  }

  // GemFilter at every layer r: the last query's scores after a partial prefill to r.
  void ScanGemFilter(const ScanPrompt& p) {
    const auto start = std::chrono::steady_clock::now();
    std::map<int64_t, AttentionStatsRequest> requests;
    AttentionStatsRequest r;
    r.last_query_logit_sum = true;
    for (int64_t l = 0; l < layers_; ++l) requests[l] = r;
    std::map<int64_t, AttentionStats> stats;
    plugins::PartialPrefill(model_, p.tokens, requests, {}, &stats);
    for (auto& [layer, s] : stats) {
      const at::Tensor pooled = plugins::Pool1d(s.last_query_logit_sum, plugins::PoolKind::kAvg, 5);
      const int64_t rank =
          BestRank(pooled.narrow(0, 0, p.question_begin), p.answer_begin, p.answer_end);
      for (int64_t budget : options_.budgets) {
        Record(p, "gemfilter", layer, budget,
               plugins::GemFilterSelect(s.last_query_logit_sum, p.question_begin, budget, 5), rank);
      }
    }
    std::cerr << p.sample.id << " (" << sample_.n << " tokens) gemfilter scan " << Secs(start)
              << " s\n";
  }

  // ILRe at every layer: the streaming prefill's context scores, sinks and the question kept.
  void ScanIlre(const ScanPrompt& p) {
    const auto start = std::chrono::steady_clock::now();
    plugins::StreamingScores scores;
    plugins::StreamingPrefill(model_, p.tokens, p.question_begin, all_layers_, {}, &scores);
    const int64_t ctx = scores.context_length, sink = std::min<int64_t>(4, ctx);
    for (auto& [layer, a] : scores.scores) {
      const int64_t rank = BestRank(a, p.answer_begin, p.answer_end);
      for (int64_t budget : options_.budgets) {
        plugins::AllocationOptions ao;
        ao.budget = budget;
        std::vector<int64_t> kept;
        for (int64_t i = 0; i < sink; ++i) kept.push_back(i);
        for (int64_t i : plugins::AllocateContext(a.narrow(0, sink, ctx - sink), ao)) {
          kept.push_back(i + sink);
        }
        for (int64_t i = ctx; i < sample_.n; ++i) kept.push_back(i);
        Record(p, "ilre", layer, budget, kept, rank);
      }
    }
    std::cerr << p.sample.id << " (" << sample_.n << " tokens) ilre scan " << Secs(start) << " s\n";
  }

  const Model& model_;
  const ScanOptions& options_;
  const int64_t layers_;
  std::set<int64_t> all_layers_;
  std::ofstream csv_;
  Tallies tallies_;
  Current sample_;
};

// The Markdown summary: per method, a row per layer with the coverage at each budget.
std::string Summary(const ScanOptions& options, int64_t layers, int64_t runs, Tallies& tallies) {
  std::ostringstream md;
  md << "Samples: " << runs << " (task " << options.task << "). Layer columns: GemFilter r is "
     << "0-based (layers 0..r run); ILRe l_R is 1-based (= r + 1).\n\n";
  for (const char* method : {"gemfilter", "ilre"}) {
    if ((std::string(method) == "gemfilter" && !options.gemfilter) ||
        (std::string(method) == "ilre" && !options.ilre)) {
      continue;
    }
    md << "### " << method << "\n\n| r (0-based) | l_R (1-based) |";
    for (int64_t b : options.budgets) md << " covered@" << b << " | needle@" << b << " |";
    md << " mean best answer rank |\n|---|---|";
    for (size_t i = 0; i < options.budgets.size(); ++i) md << "---|---|";
    md << "---|\n";
    for (int64_t l = 0; l < layers; ++l) {
      md << "| " << l << " | " << l + 1 << " |";
      double rank = 0;
      for (int64_t b : options.budgets) {
        const Tally& t = tallies[{method, b, l}];
        const double d = std::max<int64_t>(1, t.n);
        char buf[64];
        std::snprintf(buf, sizeof(buf), " %.2f | %.2f |", t.covered / d, t.needle / d);
        md << buf;
        rank = t.rank / d;
      }
      char buf[32];
      std::snprintf(buf, sizeof(buf), " %.1f |\n", rank);
      md << buf;
    }
    md << "\n";
  }
  return md.str();
}

}  // namespace

int RunScan(const Model& model, const ScanOptions& options) {
  Scanner scanner(model, options);
  int64_t runs = 0;
  for (int64_t length : options.lengths) {
    for (int depth : options.depths) {
      for (int64_t index = 0; index < options.samples; ++index) {
        if (scanner.ScanSample(length, depth, index)) ++runs;
      }
    }
  }
  Tallies tallies = scanner.tallies();
  const std::string md = Summary(options, model.config().num_layers, runs, tallies);
  std::ofstream(options.out_dir + "/scan.md") << md;
  std::cout << md;
  return 0;
}

}  // namespace sift::layer_scan
