#!/usr/bin/env python3
"""Tables of docs/results/spts.md from the sift-spts-bench JSON lines in this folder."""
import collections
import json
import pathlib
import sys

here = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent)


def load(name):
    p = here / name
    return [json.loads(l) for l in p.read_text().splitlines() if l.strip()] if p.exists() else []


speed = load(sys.argv[2] if len(sys.argv) > 2 else "speed.jsonl")
by = collections.defaultdict(list)
for r in speed:
    by[(r["length"], r["config"])].append(r)
print("| length | prompt tokens | config | TTFT s | TTFT speed-up | e2e (16 tok) s | e2e speed-up | KV after prefill / full | n |")
print("|---|---|---|---|---|---|---|---|---|")
for length in sorted({k[0] for k in by}):
    full = by.get((length, "full"))
    ft = sum(r["ttft_ms"] for r in full) / len(full) if full else None
    fe = sum(r["e2e_ms"] for r in full) / len(full) if full else None
    for config in ["full", "pap", "pap_ltp", "spts"]:
        rows = by.get((length, config))
        if not rows:
            continue
        t = sum(r["ttft_ms"] for r in rows) / len(rows)
        e = sum(r["e2e_ms"] for r in rows) / len(rows)
        kv = sum(r["kv_bytes"] / r["kv_bytes_full"] for r in rows) / len(rows)
        print(f"| {length} | {rows[0]['prompt_tokens']} | {config} | {t/1000:.1f} | "
              f"{ft/t:.2f}x | {e/1000:.1f} | {fe/e:.2f}x | {100*kv:.1f}% | {len(rows)} |")

acc = load("accuracy.jsonl") + load("accuracy_passkey_2k_pilot.jsonl")
print()
print("| task | length | config | mean score | samples | KV after prefill / full | output = full's for (chars, mean) |")
print("|---|---|---|---|---|---|---|")
full_out = {(r["id"]): r["output"] for r in acc if r["config"] == "full"}


def common(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n

groups = collections.defaultdict(list)
for r in acc:
    groups[(r["task"], r["length"], r["config"])].append(r)
for key in sorted(groups):
    rows = groups[key]
    s = sum(r["score"] for r in rows) / len(rows)
    kv = sum(r["kv_bytes"] / r["kv_bytes_full"] for r in rows) / len(rows)
    agree = sum(common(r["output"], full_out.get(r["id"], "")) for r in rows) / len(rows)
    total = sum(len(full_out.get(r["id"], "")) for r in rows) / len(rows)
    print(f"| {key[0]} | {key[1]} | {key[2]} | {s:.2f} | {len(rows)} | {100*kv:.1f}% | "
          f"{agree:.0f} of {total:.0f} |")
