#!/usr/bin/env python3
"""The adjacent-layer Jaccard table from sift-selection-bench's JSON lines
(docs/results/selection/raw.jsonl; `jaccard` rows). Accuracy tables are sift-bench's report."""
import collections
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
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
