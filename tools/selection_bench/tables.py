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
print("\n| method | length | keep_ratio | mean adjacent-layer Jaccard | samples |\n|---|---|---|---|---|")
for r in rows:
    if r["mode"] == "jaccard":
        m, length, ratio = r["key"].split("|")
        print(f"| {m} | {length} | {ratio} | {100 * r['mean']:.1f}% | {r['n']} |")
