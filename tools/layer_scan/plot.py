#!/usr/bin/env python3
"""Plots for docs/results/filters.md from sift-layer-scan outputs (needs matplotlib).

  plot.py scan OUT.png scan.csv [scan.csv ...]   per-layer answer coverage (both methods)
  plot.py cost OUT.png cost.jsonl [...]          TTFT vs prompt length per pipeline, with the
                                                 least-squares line of ILRe's pass 1 and its R^2
"""
import csv
import json
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def scan(out, files):
    cov = defaultdict(list)  # (method, budget, layer) -> [covered]
    for f in files:
        for r in csv.DictReader(open(f)):
            cov[(r["method"], int(r["budget"]), int(r["layer0"]))].append(float(r["answer_covered"]))
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    for ax, method in zip(axes, ["gemfilter", "ilre"]):
        budgets = sorted({b for (m, b, _) in cov if m == method})
        for b in budgets:
            layers = sorted(l for (m, bb, l) in cov if m == method and bb == b)
            x = [l if method == "gemfilter" else l + 1 for l in layers]
            y = [sum(cov[(method, b, l)]) / len(cov[(method, b, l)]) for l in layers]
            ax.plot(x, y, marker="o", ms=3, label=f"budget {b}")
        ax.set_title(f"{method}: answer tokens kept (passkey)")
        ax.set_xlabel("r (0-based)" if method == "gemfilter" else "l_R (1-based)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("fraction of samples")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def cost(out, files):
    rows = [json.loads(line) for f in files for line in open(f) if line.strip()]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for p in ["full", "gemfilter", "ilre"]:
        pts = sorted((r["prompt_tokens"], r["ttft_ms"] / 1000) for r in rows if r["pipeline"] == p)
        if pts:
            ax.plot([a for a, _ in pts], [b for _, b in pts], marker="o", label=f"{p} TTFT")
    pts = sorted((r["prompt_tokens"], r["stage_ms"][0] / 1000) for r in rows if r["pipeline"] == "ilre")
    if len(pts) >= 2:
        xs, ys = [a for a, _ in pts], [b for _, b in pts]
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        icpt = my - slope * mx
        ss_res = sum((y - (icpt + slope * x)) ** 2 for x, y in zip(xs, ys))
        ss_tot = sum((y - my) ** 2 for y in ys)
        r2 = 1 - ss_res / ss_tot if ss_tot > 0 else 1.0
        ax.plot(xs, ys, "x", color="k", label="ilre pass 1")
        ax.plot(xs, [icpt + slope * x for x in xs], "--", color="k",
                label=f"fit {slope*1000:.2f} s/1K tok, R²={r2:.3f}")
        print(f"ilre pass-1 fit: {slope*1000:.3f} s per 1K tokens + {icpt:.2f} s, R^2 = {r2:.4f}")
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("seconds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    {"scan": scan, "cost": cost}[sys.argv[1]](sys.argv[2], sys.argv[3:])
