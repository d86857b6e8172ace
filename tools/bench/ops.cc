// `sift-bench ops`: LibTorch operators and host reads per prefill layer and per decode token,
// per config x length, in this process (--in-process). What a GPU pays per operator (a kernel
// launch, a few microseconds) and per host read (a synchronisation) does not show in CPU
// timings; the counts do, on any machine, and they do not vary between runs: one run each.
// "Prefill" is every stage before the pipeline's decode stage (prefill, filter, select, reuse),
// so a method's scoring and eviction count with it. The prompt at each length is the needle
// task's, as in `sift-bench speed`.
#include <cstdio>

#include "cli.h"
#include "progress.h"
#include "results.h"
#include "sift/error.h"
#include "tasks.h"

namespace sift::bench {

namespace {

double PerUnit(const nlohmann::json& stats, const char* key, double unit) {
  return unit > 0 ? stats.value(key, 0.0) / unit : 0.0;
}

}  // namespace

int RunOps(int argc, char** argv) {
  cli::CommandLine cl("sift-bench ops",
                      "sift-bench ops --in-process [configs] [--lengths N,...] [--max-tokens N] "
                      "[--out DIR]",
                      "LibTorch operators and host reads per prefill layer and per decode token, "
                      "per config x length\n(one run each: the counts do not vary); writes "
                      "OUT/ops.{csv,json} (docs/bench.md).");
  AddCommonOptions(&cl);
  po::options_description own("ops options");
  AddValue(&own, "lengths", "N,...", "prompt lengths: the needle task (default 2048)");
  AddValue(&own, "max-tokens", "N", "tokens generated per request, EOS ignored (default 8)");
  cl.AddGroup(own);
  po::variables_map vm;
  if (const int status = ParseCommand(cl, argc, argv, &vm); status != cli::kContinue) return status;
  const Args args(std::move(vm));
  if (!args.Flag("in-process")) throw Error("sift-bench ops counts in this process: --in-process");
  const Common common = ReadCommon(args, false);
  const std::vector<int64_t> lengths = cli::IntList(args.Get("lengths", "2048"), "--lengths");
  const int64_t max_tokens = args.Int("max-tokens", 8);
  if (max_tokens < 2 || max_tokens > 64) throw Error("--max-tokens must be in [2, 64]");

  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::ForModel(common.model);
  if (!tokenizer) throw Error(common.model + ": no tokenizer");
  std::unique_ptr<Backend> backend = MakeBackend(args, common, false, /*count_ops=*/true);
  nlohmann::json meta = MakeMeta(argc, argv, common.model);
  meta["backend"] = backend->Describe();
  meta["settings"] = {{"lengths", lengths},
                      {"max_tokens", max_tokens},
                      {"prompt", "needle task at 50 % depth"},
                      {"seed", common.seed},
                      {"dtype", args.Get("dtype", "bf16")},
                      {"device", args.Get("device", "cpu")},
                      {"kernels", args.Get("kernels", "auto")}};
  RunOptions ro;
  ro.max_tokens = max_tokens;
  ro.ignore_eos = true;

  nlohmann::json rows = nlohmann::json::array();
  int failures = 0;
  Progress progress("ops", static_cast<int64_t>(lengths.size() * common.configs.size()));
  std::printf(
      "| config | length | ops / prefill layer | host reads / prefill layer | "
      "ops / decode token | host reads / decode token |\n|---|---|---|---|---|---|\n");
  for (int64_t length : lengths) {
    const Sample sample = MakeSample(
        TaskOptions{"needle", length, 50, common.seed, common.haystack_dir, 0}, *tokenizer, 0);
    for (const BenchConfig& c : common.configs) {
      progress.Begin(c.label + " @" + std::to_string(length));
      const RunResult r = backend->Run({c}, sample, ro)[0];
      const double layers = r.stats.value("layers", 0.0);
      // The decode stage's first token comes from the prefill's logits: max_tokens - 1 steps.
      const double steps = static_cast<double>(std::max<int64_t>(1, r.completion_tokens - 1));
      nlohmann::json row = {{"config", c.label},
                            {"pipeline", c.pipeline},
                            {"length", length},
                            {"prompt_tokens", r.prompt_tokens},
                            {"completion_tokens", r.completion_tokens},
                            {"ok", r.ok},
                            {"error", r.error},
                            {"layers", layers}};
      for (const char* k : {"prefill_ops", "prefill_host_reads", "decode_ops", "decode_host_reads",
                            "tokens_kept"}) {
        row[k] = r.stats.value(k, nlohmann::json());
      }
      row["prefill_ops_per_layer"] = PerUnit(r.stats, "prefill_ops", layers);
      row["prefill_host_reads_per_layer"] = PerUnit(r.stats, "prefill_host_reads", layers);
      row["decode_ops_per_token"] = PerUnit(r.stats, "decode_ops", steps);
      row["decode_host_reads_per_token"] = PerUnit(r.stats, "decode_host_reads", steps);
      rows.push_back(row);
      if (!r.ok) ++failures;
      progress.End(r.ok ? "done" : "ERROR " + r.error);
      std::printf("| %s | %lld | %.1f | %.2f | %.1f | %.2f |\n", c.label.c_str(),
                  static_cast<long long>(r.prompt_tokens),
                  row["prefill_ops_per_layer"].get<double>(),
                  row["prefill_host_reads_per_layer"].get<double>(),
                  row["decode_ops_per_token"].get<double>(),
                  row["decode_host_reads_per_token"].get<double>());
      std::fflush(stdout);
    }
  }
  WriteResults(common.out, "ops", meta, rows,
               {"config", "pipeline", "length", "prompt_tokens", "completion_tokens", "layers",
                "prefill_ops", "prefill_host_reads", "decode_ops", "decode_host_reads",
                "prefill_ops_per_layer", "prefill_host_reads_per_layer", "decode_ops_per_token",
                "decode_host_reads_per_token", "tokens_kept", "ok", "error"});
  std::printf("wrote %s/ops.csv and ops.json (%zu rows, %d failed runs)\n", common.out.c_str(),
              rows.size(), failures);
  return failures > 0 ? 1 : 0;
}

}  // namespace sift::bench
