// `sift-bench speed`: TTFT, prefill, decode tokens/s, end-to-end, KV bytes (from the daemon's
// `final` stats) and the daemon's peak RSS, per config x length, repeated. Configs are
// interleaved inside each repetition so that drift on a shared machine hits all of them. The
// prompt at each length is the needle task's (essay haystack, needle at 50 %); generation runs
// exactly --max-tokens tokens (ignore_eos). One warm-up request (512 tokens, discarded) runs
// first.
// Peak RSS: VmHWM of the spawned daemon, reset before every request by writing "5" to
// /proc/PID/clear_refs (only with --spawn; -1 otherwise).
#include <algorithm>
#include <cstdio>
#include <map>

#include "cli.h"
#include "progress.h"
#include "results.h"
#include "sift/error.h"
#include "tasks.h"

namespace sift::bench {

namespace {

void AddSpeedOptions(cli::CommandLine* cl) {
  po::options_description own("speed options");
  AddValue(&own, "lengths", "N,...",
           "prompt lengths: the needle task at 50 % depth (default 1024,2048,4096,8192; --quick: "
           "512)");
  AddValue(&own, "repeats", "N", "repetitions, configs interleaved (default 3; --quick: 1)");
  AddValue(&own, "max-tokens", "N",
           "tokens generated per request, EOS ignored, in [2, 64] (default 32; --quick: 8)");
  cl->AddGroup(own);
}

nlohmann::json MakeSpeedMeta(int argc, char** argv, const Args& args, const Common& common,
                             const std::vector<int64_t>& lengths, int64_t repeats,
                             int64_t max_tokens, const Backend& backend, pid_t pid,
                             bool rss_reset) {
  nlohmann::json meta = MakeMeta(argc, argv, common.model);
  meta["backend"] = backend.Describe();
  meta["settings"] = {{"lengths", lengths},
                      {"repeats", repeats},
                      {"max_tokens", max_tokens},
                      {"prompt", "needle task at 50 % depth, essay haystack"},
                      {"seed", common.seed},
                      {"peak_rss", pid > 0 ? (rss_reset ? "VmHWM, reset per request"
                                                        : "VmHWM, cumulative (reset refused)")
                                           : "unavailable (not spawned)"},
                      {"dtype", args.Get("dtype", "bf16")},
                      {"device", args.Get("device", "cpu")}};
  nlohmann::json configs = nlohmann::json::array();
  for (const BenchConfig& c : common.configs) {
    configs.push_back({{"label", c.label}, {"pipeline", c.pipeline}, {"overrides", c.overrides}});
  }
  meta["configs"] = configs;
  return meta;
}

// One request on the first config, discarded: a short prompt, as the warm-up only needs the code
// paths and allocations touched once.
void WarmUp(Backend& backend, const Common& common, const Tokenizer& tokenizer,
            int64_t first_length, const RunOptions& ro) {
  std::fprintf(stderr, "sift-bench speed: warm-up on %s\n", backend.Describe().c_str());
  const Sample warm_prompt = MakeSample(TaskOptions{"needle", std::min<int64_t>(512, first_length),
                                                    50, common.seed, common.haystack_dir, 0},
                                        tokenizer, 0);
  const auto warm = backend.Run({common.configs[0]}, warm_prompt, ro);
  if (!warm[0].ok) throw Error("warm-up failed: " + warm[0].error);
}

nlohmann::json SpeedRow(const BenchConfig& c, int64_t length, int64_t rep, const RunResult& r,
                        int64_t peak) {
  nlohmann::json row = {{"config", c.label},
                        {"pipeline", c.pipeline},
                        {"length", length},
                        {"repeat", rep},
                        {"prompt_tokens", r.prompt_tokens},
                        {"completion_tokens", r.completion_tokens},
                        {"ok", r.ok},
                        {"error", r.error},
                        {"client_ms", r.client_ms},
                        {"peak_rss_kb", peak}};
  for (const char* k : {"ttft_ms", "prefill_ms", "decode_ms", "decode_tok_s", "e2e_ms", "queue_ms",
                        "tokens_kept", "kv_bytes", "kv_bytes_full"}) {
    row[k] = r.stats.value(k, nlohmann::json());
  }
  return row;
}

// Every length x repetition x config (configs interleaved inside each repetition); one row each.
nlohmann::json Measure(Backend& backend, const Common& common, const std::vector<Sample>& prompts,
                       const std::vector<int64_t>& lengths, int64_t repeats, const RunOptions& ro,
                       pid_t pid, int* failures) {
  nlohmann::json rows = nlohmann::json::array();
  Progress progress("speed",
                    static_cast<int64_t>(lengths.size() * repeats * common.configs.size()));
  for (size_t l = 0; l < lengths.size(); ++l) {
    for (int64_t rep = 0; rep < repeats; ++rep) {
      for (const BenchConfig& c : common.configs) {
        progress.Begin(c.label + " @" + std::to_string(lengths[l]) + " rep " +
                       std::to_string(rep + 1));
        if (pid > 0) ResetPeakRss(pid);
        const RunResult r = backend.Run({c}, prompts[l], ro)[0];
        const int64_t peak = PeakRssKb(pid);
        if (!r.ok) ++*failures;
        rows.push_back(SpeedRow(c, lengths[l], rep, r, peak));
        char buf[160];
        std::snprintf(buf, sizeof(buf), "ttft %.0f ms, decode %.1f tok/s, peak RSS %lld MiB",
                      r.stats.value("ttft_ms", 0.0), r.stats.value("decode_tok_s", 0.0),
                      static_cast<long long>(peak / 1024));
        progress.End(r.ok ? buf : "ERROR " + r.error);
      }
    }
  }
  return rows;
}

}  // namespace

int RunSpeed(int argc, char** argv) {
  cli::CommandLine cl("sift-bench speed",
                      "sift-bench speed (--spawn | --endpoint URL) [configs] [speed options] "
                      "[--out DIR]",
                      "TTFT, prefill, decode tokens/s, end-to-end and KV bytes from the daemon's "
                      "stats, and the\ndaemon's peak RSS (--spawn), per config x length; writes "
                      "OUT/speed.{csv,json} (docs/bench.md).\nThe speed suite measures the daemon: "
                      "--in-process is refused.");
  AddCommonOptions(&cl);
  AddSpeedOptions(&cl);
  po::variables_map vm;
  if (const int status = ParseCommand(cl, argc, argv, &vm); status != cli::kContinue) return status;
  const Args args(std::move(vm));
  const Common common = ReadCommon(args, true);
  const std::vector<int64_t> lengths =
      cli::IntList(args.Get("lengths", common.quick ? "512" : "1024,2048,4096,8192"), "--lengths");
  const int64_t repeats = args.Int("repeats", common.quick ? 1 : 3);
  const int64_t max_tokens = args.Int("max-tokens", common.quick ? 8 : 32);
  if (max_tokens < 2 || max_tokens > 64) throw Error("--max-tokens must be in [2, 64]");

  // The model's own tokenizer: GGUF metadata, or tokenizer.json of a Hugging Face directory.
  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::ForModel(common.model);
  if (!tokenizer)
    throw Error(common.model + ": no tokenizer (the directory has no tokenizer.json)");
  std::unique_ptr<Backend> backend = MakeBackend(args, common, true);
  const pid_t pid = backend->DaemonPid();
  const bool rss_reset = pid > 0 && ResetPeakRss(pid);
  const nlohmann::json meta = MakeSpeedMeta(argc, argv, args, common, lengths, repeats, max_tokens,
                                            *backend, pid, rss_reset);

  std::vector<Sample> prompts;
  for (int64_t length : lengths) {
    prompts.push_back(MakeSample(
        TaskOptions{"needle", length, 50, common.seed, common.haystack_dir, 0}, *tokenizer, 0));
    if (prompts.back().prompt_tokens < length * 9 / 10) {
      std::fprintf(stderr,
                   "sift-bench speed: warning: the prompt for length %lld has only %lld tokens "
                   "(the haystack is too short; --haystack DIR with more text)\n",
                   static_cast<long long>(length),
                   static_cast<long long>(prompts.back().prompt_tokens));
    }
  }
  RunOptions ro;
  ro.max_tokens = max_tokens;
  ro.ignore_eos = true;
  WarmUp(*backend, common, *tokenizer, lengths.front(), ro);
  int failures = 0;
  const nlohmann::json rows =
      Measure(*backend, common, prompts, lengths, repeats, ro, pid, &failures);
  WriteResults(
      common.out, "speed", meta, rows,
      {"config", "pipeline", "length", "repeat", "prompt_tokens", "completion_tokens", "ttft_ms",
       "prefill_ms", "decode_ms", "decode_tok_s", "e2e_ms", "queue_ms", "client_ms", "tokens_kept",
       "kv_bytes", "kv_bytes_full", "peak_rss_kb", "ok", "error"});
  std::printf("wrote %s/speed.csv and speed.json (%zu rows, %d failed runs)\n", common.out.c_str(),
              rows.size(), failures);
  return failures > 0 ? 1 : 0;
}

}  // namespace sift::bench
