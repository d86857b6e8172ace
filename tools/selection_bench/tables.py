#!/usr/bin/env python3
"""Markdown tables from sift-selection-bench's JSON lines (docs/results/selection/raw.jsonl):
accuracy per task x config x length (mean %, samples), and adjacent-layer Jaccard."""
import collections
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
acc = collections.defaultdict(list)
lengths = collections.defaultdict(set)
for r in rows:
    if r["mode"] == "accuracy":
        acc[(r["task"], r["config"], r["length"])].append(r["score"])
        lengths[r["task"]].add(r["length"])
order = ["full"] + [f"{m}@{r}" for r in ("0.1", "0.2", "0.3")
                    for m in ("streamingllm", "h2o", "snapkv", "pyramidkv", "chunkkv",
                              "chunkkv_reuse")]
for task in sorted(lengths):
    ls = sorted(lengths[task])
    print(f"\n### {task}\n\n| config | " + " | ".join(str(x) for x in ls) + " |")
    print("|---|" + "---|" * len(ls))
    for c in order:
        cells = []
        for x in ls:
            v = acc.get((task, c, x))
            cells.append(f"{100 * sum(v) / len(v):.0f} ({len(v)})" if v else "")
        if any(cells):
            print(f"| {c} | " + " | ".join(cells) + " |")
# Jaccard: pooled over every accuracy run (tasks) at the same method, length and ratio.
jac = collections.defaultdict(lambda: [0.0, 0])
for r in rows:
    if r["mode"] == "jaccard":
        jac[r["key"]][0] += r["mean"] * r["n"]
        jac[r["key"]][1] += r["n"]
print("\n| method | length | keep_ratio | mean adjacent-layer Jaccard | samples |\n|---|---|---|---|---|")
for key in sorted(jac, key=lambda k: (k.split("|")[1], k.split("|")[2], k.split("|")[0])):
    m, length, ratio = key.split("|")
    total, n = jac[key]
    print(f"| {m} | {length} | {ratio} | {100 * total / n:.1f}% | {n} |")
