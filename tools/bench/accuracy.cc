// `sift-bench accuracy`: every (task, length, depth, sample) under every config; one row per
// config x sample with the output and its score. Writes OUT/accuracy.{csv,json} and prints a
// summary (mean score per config x task x length).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>

#include "cli.h"
#include "progress.h"
#include "results.h"
#include "sift/error.h"
#include "tasks.h"

namespace sift::bench {

namespace {

// The task options of `accuracy`, read and checked.
struct AccuracySettings {
  std::vector<std::string> tasks;
  std::vector<int64_t> lengths, depths;
  int64_t samples = 0;
  // Sample indices first..first+samples-1: extends an earlier run with new prompts (a sample
  // depends only on the options and its index, so index 0 is always the same prompt).
  int64_t first_sample = 0;
  // A cap on every task's answer budget (0 = the task's own): saves decode time on sweeps whose
  // answers are known to be short; an answer cut by the cap scores as generated.
  int64_t max_tokens = 0;
};

struct Job {
  TaskOptions options;
  int64_t index;
};

void AddAccuracyOptions(cli::CommandLine* cl) {
  po::options_description own("task options");
  AddValue(&own, "tasks", "T1,T2",
           "tasks (default passkey,needle,niah_single_1; --quick: passkey): passkey, needle, "
           "niah_*, vt, cwe, fwe");
  AddValue(&own, "lengths", "N,...",
           "target lengths in tokens, prompt plus answer budget (default 1024,2048,4096; "
           "--quick: 512)");
  AddValue(&own, "depths", "PCT,...",
           "needle depths in % for the single-needle tasks (default: the task's own; --quick: "
           "25,50,75)");
  AddValue(&own, "samples", "N", "samples per (task, length, depth) (default 5; --quick: 1)");
  AddValue(&own, "first-sample", "K",
           "sample indices start at K (default 0): a later run adds new prompts to an earlier one");
  AddValue(&own, "max-tokens", "N",
           "cap on every task's answer budget (default 0: the task's own)");
  cl->AddGroup(own);
}

AccuracySettings ReadSettings(const Args& args, const Common& common) {
  AccuracySettings s;
  s.tasks =
      cli::SplitList(args.Get("tasks", common.quick ? "passkey" : "passkey,needle,niah_single_1"));
  s.lengths =
      cli::IntList(args.Get("lengths", common.quick ? "512" : "1024,2048,4096"), "--lengths");
  s.depths = cli::IntList(args.Get("depths", common.quick ? "25,50,75" : ""), "--depths");
  s.samples = args.Int("samples", common.quick ? 1 : 5);
  s.first_sample = args.Int("first-sample", 0);
  if (s.samples < 1 || s.first_sample < 0) {
    throw Error("--samples must be >= 1, --first-sample >= 0");
  }
  s.max_tokens = args.Int("max-tokens", 0);
  if (s.max_tokens < 0) throw Error("--max-tokens must be >= 0");
  for (const std::string& t : s.tasks) TaskHasDepth(t);  // validates the names early
  return s;
}

// Every (task, length, depth, sample), in that order.
std::vector<Job> MakeJobs(const AccuracySettings& s, const Common& common) {
  std::vector<Job> jobs;
  for (const std::string& task : s.tasks) {
    for (int64_t length : s.lengths) {
      std::vector<int64_t> ds = s.depths;
      if (ds.empty() || !TaskHasDepth(task)) ds = {-1};
      for (int64_t d : ds) {
        for (int64_t i = s.first_sample; i < s.first_sample + s.samples; ++i) {
          jobs.push_back(
              {TaskOptions{task, length, static_cast<int>(d), common.seed, common.haystack_dir, 0},
               i});
        }
      }
    }
  }
  return jobs;
}

nlohmann::json MakeAccuracyMeta(int argc, char** argv, const Args& args, const Common& common,
                                const AccuracySettings& s, const Backend& backend) {
  nlohmann::json meta = MakeMeta(argc, argv, common.model);
  meta["backend"] = backend.Describe();
  meta["settings"] = {{"tasks", s.tasks},
                      {"lengths", s.lengths},
                      {"depths", s.depths},
                      {"samples", s.samples},
                      {"first_sample", s.first_sample},
                      {"seed", common.seed},
                      {"haystack", RepoRelativePath(common.haystack_dir)},
                      {"quick", common.quick},
                      {"sampling", "greedy"},
                      {"dtype", args.Get("dtype", "bf16")},
                      {"device", args.Get("device", "cpu")},
                      {"max_tokens_cap", s.max_tokens}};
  nlohmann::json configs = nlohmann::json::array();
  for (const BenchConfig& c : common.configs) {
    configs.push_back({{"label", c.label}, {"pipeline", c.pipeline}, {"overrides", c.overrides}});
  }
  meta["configs"] = configs;
  return meta;
}

nlohmann::json ResultRow(const BenchConfig& config, const Sample& sample, int64_t index,
                         const RunResult& r, double score) {
  nlohmann::json row = {{"config", config.label},
                        {"pipeline", config.pipeline},
                        {"task", sample.task},
                        {"id", sample.id},
                        {"length", sample.length},
                        {"depth", sample.depth_percent},
                        {"index", index},
                        {"prompt_tokens", sample.prompt_tokens},
                        {"score", score},
                        {"ok", r.ok},
                        {"error", r.error},
                        {"output", r.text},
                        {"answers", sample.answers},
                        {"finish_reason", r.finish_reason},
                        {"completion_tokens", r.completion_tokens},
                        {"shared_prefill", r.shared_prefill},
                        {"client_ms", r.client_ms}};
  for (const char* k :
       {"prefill_ms", "ttft_ms", "e2e_ms", "tokens_kept", "kv_bytes", "kv_bytes_full"}) {
    row[k] = r.stats.value(k, nlohmann::json());
  }
  return row;
}

// Runs every job under every config: one row each, the score sums per config x task x length.
struct AccuracyRun {
  nlohmann::json rows = nlohmann::json::array();
  std::map<std::string, std::pair<double, int>> summary;
  int failures = 0;
};

// `after_sample` sees the run after each sample (the caller rewrites the results files with it,
// so a run stopped by a time limit or a signal keeps every finished sample).
AccuracyRun RunJobs(const std::vector<Job>& jobs, const Common& common, const Tokenizer& tokenizer,
                    Backend& backend, int64_t max_tokens,
                    const std::function<void(const AccuracyRun&)>& after_sample) {
  AccuracyRun run;
  Progress progress("accuracy", static_cast<int64_t>(jobs.size()));
  for (const Job& job : jobs) {
    const Sample sample = MakeSample(job.options, tokenizer, job.index);
    progress.Begin(sample.id + " (" + std::to_string(sample.prompt_tokens) + " tokens)");
    RunOptions run_options;
    if (max_tokens > 0) run_options.max_tokens = std::min(max_tokens, sample.max_tokens);
    const std::vector<RunResult> results = backend.Run(common.configs, sample, run_options);
    std::string line;
    for (size_t c = 0; c < results.size(); ++c) {
      const RunResult& r = results[c];
      const BenchConfig& config = common.configs[c];
      const double score = r.ok ? Score(sample, r.text) : 0.0;
      if (!r.ok) ++run.failures;
      run.rows.push_back(ResultRow(config, sample, job.index, r, score));
      auto& s = run.summary[config.label + " " + sample.task + " " + std::to_string(sample.length)];
      s.first += score;
      s.second += 1;
      char buf[96];
      std::snprintf(buf, sizeof(buf), "%s%s=%.2f", line.empty() ? "" : " ", config.label.c_str(),
                    score);
      line += r.ok ? buf : " " + config.label + "=ERROR(" + r.error + ")";
    }
    progress.End(line);
    after_sample(run);
  }
  return run;
}

}  // namespace

int RunAccuracy(int argc, char** argv) {
  cli::CommandLine cl("sift-bench accuracy",
                      "sift-bench accuracy (--spawn | --endpoint URL | --in-process) [configs] "
                      "[task options] [--out DIR]",
                      "Runs every (task, length, depth, sample) under every config and scores the "
                      "answers;\nwrites OUT/accuracy.{csv,json} and prints the mean score per "
                      "config x task x length\n(docs/bench.md). Exit status 1 when a run failed.");
  AddCommonOptions(&cl);
  AddAccuracyOptions(&cl);
  po::variables_map vm;
  if (const int status = ParseCommand(cl, argc, argv, &vm); status != cli::kContinue) return status;
  const Args args(std::move(vm));
  const Common common = ReadCommon(args, false);
  const AccuracySettings settings = ReadSettings(args, common);

  // The model's own tokenizer: GGUF metadata, or tokenizer.json of a Hugging Face directory.
  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::ForModel(common.model);
  if (!tokenizer)
    throw Error(common.model + ": no tokenizer (the directory has no tokenizer.json)");

  const std::vector<Job> jobs = MakeJobs(settings, common);
  std::unique_ptr<Backend> backend = MakeBackend(args, common, false);
  const nlohmann::json meta = MakeAccuracyMeta(argc, argv, args, common, settings, *backend);
  std::fprintf(stderr, "sift-bench accuracy: %zu samples x %zu configs on %s\n", jobs.size(),
               common.configs.size(), backend->Describe().c_str());

  const std::vector<std::string> columns = {"config",        "pipeline",
                                            "task",          "id",
                                            "length",        "depth",
                                            "index",         "prompt_tokens",
                                            "score",         "ok",
                                            "error",         "output",
                                            "finish_reason", "completion_tokens",
                                            "tokens_kept",   "kv_bytes",
                                            "kv_bytes_full", "prefill_ms",
                                            "ttft_ms",       "e2e_ms",
                                            "client_ms",     "shared_prefill"};
  const AccuracyRun run = RunJobs(
      jobs, common, *tokenizer, *backend, settings.max_tokens,
      [&](const AccuracyRun& r) { WriteResults(common.out, "accuracy", meta, r.rows, columns); });
  WriteResults(common.out, "accuracy", meta, run.rows, columns);
  std::printf("%-40s %8s %4s\n", "config task length", "score", "n");
  for (const auto& [key, s] : run.summary) {
    std::printf("%-40s %8.3f %4d\n", key.c_str(), s.first / s.second, s.second);
  }
  std::printf("wrote %s/accuracy.csv and accuracy.json (%zu rows, %d failed runs)\n",
              common.out.c_str(), run.rows.size(), run.failures);
  return run.failures > 0 ? 1 : 0;
}

}  // namespace sift::bench
