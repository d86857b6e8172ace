#!/usr/bin/env python3
"""Graded passkey scores from sift-bench accuracy.json files (used by docs/results/methods.md).

Exact match hides how close a compressed cache comes: "825122" for the passkey "825842" keeps
the first three digits. For every config and length this prints, over the passkey samples that
full KV answers exactly (the only ones where compression can be judged; --all: every sample):
  exact   passkeys reproduced exactly,
  digits  mean number of leading digits right (first 6-digit run in the answer; 0 if none),
  number  answers that contain a 6-digit number at all (the rest answer with prose).

usage: passkey_digits.py [--all] DIR [DIR ...]   (folders holding accuracy.json)
  --all   grade every sample, also those full KV gets wrong (compression can still keep
          digits that the full cache's answer lost)
"""
import collections
import json
import os
import re
import sys


def leading_digits(answer, output):
    m = re.search(r"\d{6}", output)
    if not m:
        return 0, False
    n = 0
    for a, b in zip(answer, m.group(0)):
        if a != b:
            break
        n += 1
    return n, True


def main(args):
    every = "--all" in args
    dirs = [a for a in args if a != "--all"]
    rows = []
    for d in dirs:
        path = os.path.join(d, "accuracy.json")
        if os.path.exists(path):
            rows += [r for r in json.load(open(path))["rows"] if r["task"] == "passkey"]
    solved = {r["id"] for r in rows if r["config"] == "full" and r["score"] == 1.0}
    configs, lengths = [], set()
    cells = collections.defaultdict(list)
    for r in rows:
        if r["config"] not in configs:
            configs.append(r["config"])
        lengths.add(r["length"])
        if every or r["id"] in solved:
            n, has = leading_digits(r["answers"][0], r["output"])
            cells[(r["config"], r["length"])].append((r["score"], n, has))
    lengths = sorted(lengths)
    print("| config | " + " | ".join("%d: exact / digits / number" % l for l in lengths) + " |")
    print("|---|" + "---|" * len(lengths))
    for c in configs:
        out = []
        for l in lengths:
            v = cells.get((c, l))
            if not v:
                out.append("-")
                continue
            out.append("%d/%d / %.1f / %d" % (sum(s for s, _, _ in v), len(v),
                                               sum(n for _, n, _ in v) / len(v),
                                               sum(1 for _, _, h in v if h)))
        print("| %s | %s |" % (c, " | ".join(out)))
    print("\n%s; samples full KV solves: %s" % ("all samples" if every else "only samples full KV solves",
                                               ", ".join(sorted(solved))))


if __name__ == "__main__":
    main(sys.argv[1:])
