#!/usr/bin/env python3
"""usage: tools/bench/gpu_summary.py --side-by-side DIR --ttft CSV [--out FILE]

Writes docs/results/gpu/summary.json from the raw files of tools/bench/gpu_side_by_side.sh:
  DIR/engine.json             sift-engine-bench --device cuda (prefill and decode, cuDNN SDPA off)
  DIR/engine-eager.json       its decode with --decode-pool off (optional: the graphs' A/B)
  DIR/engine-cudnn.json       the same with SIFT_SDPA_CUDNN=1 (optional)
  DIR/llama-bench.json        llama-bench -p 2048,8192,32768 -n 0 (same run, same GPU)
  DIR/llama-bench-depth.json  llama-bench -p 0 -n 64 -d 2048,8192
  DIR/streams.jsonl           serve_bench.py levels against siftd and llama-server (optional)
  CSV                         sift-bench speed rows (every pipeline's TTFT at 8K and 32K)
Per length: sift_prefill_ms, llama_prefill_ms, sift_decode_ms_per_token,
llama_decode_ms_per_token (decode with that many tokens already in the cache), and per pipeline
ttft_ms (the best of the repetitions) with prompt_tokens. "batch": the engine's batched decode
step per row count (tok/s of all rows, ms and operators per step; "eager_*": the same with
--decode-pool off), and "decode_path": what the decode steps ran as (the decode pool's CUDA
graphs, or Model::DecodeStep). "streams": per number of
concurrent streaming clients, siftd's and llama-server's aggregate output tok/s, TTFT and
inter-token latency. Prints the ratios.
"""
import argparse
import csv
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def engine_figures(engine):
    """{length: prefill ms}, {context: decode ms/token} of the first config."""
    if not engine:
        return {}, {}
    c = engine["configs"][0]
    prefill = {p["tokens"]: round(p["best_s"] * 1000, 2) for p in c["prefill"]}
    decode = {d["context"]: round(d["ms_per_token"], 2) for d in c["decode"]}
    return prefill, decode


def main():
    ap = argparse.ArgumentParser(usage=__doc__.splitlines()[0][len("usage: "):])
    ap.add_argument("--side-by-side", required=True, help="folder of engine + llama-bench JSON")
    ap.add_argument("--ttft", required=True, help="sift-bench speed CSV")
    ap.add_argument("--device", default="", help="the GPU and host, in words")
    ap.add_argument("--out", default="-", help="summary.json (default stdout)")
    a = ap.parse_args()

    d = a.side_by_side
    engine = load(os.path.join(d, "engine.json"))
    if engine is None:
        sys.exit(f"gpu_summary.py: error: {d}/engine.json missing")
    sift_prefill, sift_decode = engine_figures(engine)
    cudnn_prefill, cudnn_decode = engine_figures(load(os.path.join(d, "engine-cudnn.json")))
    eager = load(os.path.join(d, "engine-eager.json"))
    _, eager_decode = engine_figures(eager)
    llama_prefill, llama_decode, llama_build = {}, {}, None
    for name in ("llama-bench.json", "llama-bench-depth.json"):
        for r in load(os.path.join(d, name)) or []:
            llama_build = f"{r.get('build_commit')} (build {r.get('build_number')})"
            ms = r["avg_ns"] / 1e6
            if r.get("n_prompt"):
                llama_prefill[r["n_prompt"]] = round(ms, 2)
            elif r.get("n_gen"):
                llama_decode[r.get("n_depth", 0)] = round(ms / r["n_gen"], 3)

    ttft = {}
    with open(a.ttft) as f:
        for r in csv.DictReader(f):
            if r["ok"] != "true":
                continue
            length, p = int(r["length"]), r["config"]
            best = ttft.setdefault(length, {}).get(p)
            if best is None or float(r["ttft_ms"]) < best["ttft_ms"]:
                ttft[length][p] = {"ttft_ms": round(float(r["ttft_ms"]), 1),
                                   "prefill_ms": round(float(r["prefill_ms"]), 1),
                                   "prompt_tokens": int(r["prompt_tokens"]),
                                   "tokens_kept": int(r["tokens_kept"]),
                                   "decode_tok_s": round(float(r["decode_tok_s"]), 1)}

    lengths = sorted(set(sift_prefill) | set(sift_decode) | set(llama_prefill) |
                     set(k for k in llama_decode if k) | set(ttft))
    per_length = {}
    for n in lengths:
        per_length[str(n)] = {
            "sift_prefill_ms": sift_prefill.get(n),
            "llama_prefill_ms": llama_prefill.get(n),
            "sift_decode_ms_per_token": sift_decode.get(n),
            "sift_eager_decode_ms_per_token": eager_decode.get(n),
            "llama_decode_ms_per_token": llama_decode.get(n),
            "sift_cudnn_sdpa_prefill_ms": cudnn_prefill.get(n),
            "sift_cudnn_sdpa_decode_ms_per_token": cudnn_decode.get(n),
            "ttft_ms": {p: v["ttft_ms"] for p, v in ttft.get(n, {}).items()},
            "pipelines": ttft.get(n, {}),
        }
    batch = {}
    for b in (engine["configs"][0].get("batch_decode") or []):
        batch[str(b["rows"])] = {"context": b["context"], "tok_s": round(b["tokens_per_s"], 1),
                                 "ms_per_step": round(b["ms_per_step"], 2),
                                 "ops_per_step": int(b["ops_per_step"]),
                                 "host_reads_per_step": b["host_reads_per_step"]}
    for b in ((eager or {}).get("configs") or [{}])[0].get("batch_decode") or []:
        row = batch.setdefault(str(b["rows"]), {"context": b["context"]})
        row.update({"eager_tok_s": round(b["tokens_per_s"], 1),
                    "eager_ms_per_step": round(b["ms_per_step"], 2),
                    "eager_ops_per_step": int(b["ops_per_step"])})
    decode_rows = engine["configs"][0].get("decode") or []
    decode_path = decode_rows[0].get("path") if decode_rows else None
    streams = {}
    try:
        with open(os.path.join(d, "streams.jsonl")) as f:
            for line in f:
                r = json.loads(line)
                streams.setdefault(str(r["clients"]), {})[r["server"]] = {
                    k: r.get(k) for k in ("output_tok_per_s", "ttft_ms_p50", "ttft_ms_p90",
                                          "itl_ms_p50", "itl_ms_p99", "requests", "errors",
                                          "prompt_tokens_mean", "max_tokens")}
    except FileNotFoundError:
        pass
    out = {"device": a.device, "torch": engine.get("torch"), "llama_cpp_build": llama_build,
           "model": engine.get("model"), "lengths": lengths, "per_length": per_length,
           "decode_path": decode_path, "batch": batch, "streams": streams}
    text = json.dumps(out, indent=1) + "\n"
    if a.out == "-":
        sys.stdout.write(text)
    else:
        with open(a.out, "w") as f:
            f.write(text)
    for n in lengths:
        row = per_length[str(n)]
        s, l = row["sift_prefill_ms"], row["llama_prefill_ms"]
        sd, ld = row["sift_decode_ms_per_token"], row["llama_decode_ms_per_token"]
        parts = [f"{n:>6}:"]
        if s and l:
            parts.append(f"prefill sift {s} ms / llama {l} ms = {s / l:.2f}x llama's time")
        if sd and ld:
            parts.append(f"decode sift {sd} / llama {ld} ms/token = {ld / sd:.3f}x llama's tok/s")
        full = row["ttft_ms"].get("full")
        if full:
            parts.append("TTFT speed-up vs full: " + ", ".join(
                f"{p} {full / t:.2f}x" for p, t in sorted(row["ttft_ms"].items()) if p != "full"))
        print(" ".join(parts), file=sys.stderr)
    for n, row in sorted(streams.items(), key=lambda kv: int(kv[0])):
        sd, ll = row.get("siftd", {}), row.get("llama", {})
        if sd.get("output_tok_per_s") and ll.get("output_tok_per_s"):
            print(f"{n:>3} streams: siftd {sd['output_tok_per_s']} / llama-server "
                  f"{ll['output_tok_per_s']} tok/s = {sd['output_tok_per_s'] / ll['output_tok_per_s']:.2f}x",
                  file=sys.stderr)


if __name__ == "__main__":
    main()
