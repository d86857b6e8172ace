#!/usr/bin/env python3
"""sift-bench report: Markdown tables + PNG plots from sift-bench result folders.

usage: report.py --in DIR[,DIR...] --out FILE.md [--title TITLE]

Reads DIR/accuracy.json and DIR/speed.json (whichever exist) and writes FILE.md; PNGs go to the
folder FILE (without .md) next to it. Without matplotlib the tables are still written and the
document says the plots are missing. Standard library only apart from matplotlib.
"""
import argparse
import json
import os
import re
import statistics
import sys
from collections import OrderedDict, defaultdict


def load(dirs):
    suites = {"accuracy": [], "speed": []}
    metas = {"accuracy": [], "speed": []}
    for d in dirs:
        for suite in suites:
            path = os.path.join(d, suite + ".json")
            if os.path.exists(path):
                with open(path) as f:
                    doc = json.load(f)
                for r in doc["rows"]:
                    r["_dir"] = d
                suites[suite] += doc["rows"]
                metas[suite].append((d, doc["meta"]))
    return suites, metas


def ordered(values):
    return list(OrderedDict.fromkeys(values))


def config_order(rows):
    labels = ordered(r["config"] for r in rows)
    if "full" in labels:
        labels.remove("full")
        labels.insert(0, "full")
    return labels


def pct(x):
    return "%.0f" % (100 * x)


def rel(path, start):
    return os.path.relpath(path, start)


# The repository this script belongs to: meta written by an older sift-bench may still name
# absolute paths; the document spells them as tools/bench/results.h's RepoRelativePath does
# (inside the repository: relative to it; beside it: "../...").
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def repo_rel_text(text, root=ROOT):
    """`text` with absolute paths inside or beside `root` made repository-relative."""
    if not isinstance(text, str):
        return text
    start = r"(?<![\w./-])"  # a path starts the word: "/x/a/b/" does not contain "/a/b/"
    text = re.sub(start + re.escape(root + "/"), "", text)
    parent = os.path.dirname(root)
    if parent not in ("", "/"):
        text = re.sub(start + re.escape(parent + "/"), "../", text)
    return text


def try_matplotlib():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except Exception:  # noqa: BLE001 - any import problem means "no plots"
        return None


def meta_section(out, metas, doc_dir):
    out.append("## Setup\n")
    seen = set()
    for suite, items in metas.items():
        for d, m in items:
            key = (suite, d)
            if key in seen:
                continue
            seen.add(key)
            s = m.get("settings", {})
            out.append("**%s** (`%s`, %s)\n" % (suite, rel(d, doc_dir), m.get("date", "")))
            out.append("- machine: %s, %s cores (load average at start: %s)" %
                       (m.get("cpu"), m.get("cores"), m.get("loadavg")))
            out.append("- model: `%s` sha256 `%s`" % (m.get("model_file", repo_rel_text(m.get("model"))),
                                                        m.get("model_sha256", "?")))
            out.append("- commit: `%s`%s" % (m.get("commit"),
                                             " (with uncommitted changes)" if m.get("dirty") else ""))
            out.append("- backend: %s" % m.get("backend"))
            out.append("- settings: " + ", ".join("%s=%s" % (k, json.dumps(repo_rel_text(v)))
                                                  for k, v in s.items()))
            cfgs = m.get("configs", [])
            out.append("- configs: " + ", ".join(
                "`%s` = pipeline `%s`%s" % (c["label"], c["pipeline"],
                                            (" " + json.dumps(c["overrides"])) if c["overrides"] else "")
                for c in cfgs))
            out.append("- command: `%s`" % repo_rel_text(m.get("command")))
            out.append("")


COMPACT_GRID_CONFIGS = 6  # more configs than this: one grid table and heatmap per task


def score_table(out, rows, configs):
    """Mean score (samples) per config x length over `rows`."""
    lengths = sorted(set(r["length"] for r in rows))
    out.append("| config | " + " | ".join(str(l) for l in lengths) + " |")
    out.append("|---|" + "---|" * len(lengths))
    for c in configs:
        cells = []
        for l in lengths:
            s = [r["score"] for r in rows if r["config"] == c and r["length"] == l]
            errors = sum(1 for r in rows if r["config"] == c and r["length"] == l and not r["ok"])
            cells.append("%s (%d)%s" % (pct(statistics.mean(s)), len(s),
                                        " %d errors" % errors if errors else "") if s else "-")
        out.append("| %s | %s |" % (c, " | ".join(cells)))
    out.append("")


def compact_grid(out, task, trows, configs, doc_dir, img_dir, plt):
    """One table (configs x length/depth cells) and one heatmap for many configs."""
    cells = sorted(set((r["length"], r["depth"]) for r in trows if r["depth"] >= 0))
    out.append("Grid (rows: config; columns: length/depth %), mean score in %:\n")
    out.append("| config | " + " | ".join("%d/%d" % c for c in cells) + " |")
    out.append("|---|" + "---|" * len(cells))
    data = []
    for c in configs:
        vals = []
        for (l, d) in cells:
            s = [r["score"] for r in trows if r["config"] == c and r["length"] == l and r["depth"] == d]
            vals.append(statistics.mean(s) if s else float("nan"))
        data.append(vals)
        out.append("| %s | %s |" % (c, " | ".join(pct(v) if v == v else "-" for v in vals)))
    out.append("")
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(2.0 + 0.45 * len(cells), 1.0 + 0.28 * len(configs)))
    im = ax.imshow(data, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto", origin="upper")
    ax.set_xticks(range(len(cells)))
    ax.set_xticklabels(["%d/%d" % c for c in cells], rotation=60, fontsize=7)
    ax.set_yticks(range(len(configs)))
    ax.set_yticklabels(configs, fontsize=7)
    ax.set_xlabel("context length / needle depth %")
    ax.set_title(task)
    fig.colorbar(im, ax=ax, fraction=0.03)
    fig.tight_layout()
    name = "grid_%s.png" % task
    fig.savefig(os.path.join(img_dir, name), dpi=110)
    plt.close(fig)
    out.append("![%s grid](%s)\n" % (task, rel(os.path.join(img_dir, name), doc_dir)))


def per_config_grids(out, task, trows_grid, configs, lengths, depths, doc_dir, img_dir, plt):
    """A length x depth table and heatmap per config."""
    out.append("Grid (length x depth %), mean score in %:\n")
    for c in configs:
        crows = [r for r in trows_grid if r["config"] == c]
        if not crows:
            continue
        grid = {}
        out.append("`%s`:\n" % c)
        out.append("| length \\ depth | " + " | ".join(str(d) for d in depths) + " |")
        out.append("|---|" + "---|" * len(depths))
        for l in lengths:
            cells = []
            for d in depths:
                s = [r["score"] for r in crows if r["length"] == l and r["depth"] == d]
                grid[(l, d)] = statistics.mean(s) if s else float("nan")
                cells.append(pct(grid[(l, d)]) if s else "-")
            out.append("| %d | %s |" % (l, " | ".join(cells)))
        out.append("")
        if plt is not None:
            fig, ax = plt.subplots(figsize=(1.0 + 0.7 * len(lengths), 3.6))
            data = [[grid[(l, d)] for l in lengths] for d in depths]
            im = ax.imshow(data, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto",
                           origin="upper")
            ax.set_xticks(range(len(lengths)))
            ax.set_xticklabels([str(l) for l in lengths])
            ax.set_yticks(range(len(depths)))
            ax.set_yticklabels([str(d) for d in depths])
            ax.set_xlabel("context length (tokens)")
            ax.set_ylabel("needle depth (%)")
            ax.set_title("%s: %s" % (task, c))
            for i, d in enumerate(depths):
                for j, l in enumerate(lengths):
                    v = grid[(l, d)]
                    if v == v:
                        ax.text(j, i, pct(v), ha="center", va="center", fontsize=8)
            fig.colorbar(im, ax=ax, fraction=0.05)
            fig.tight_layout()
            name = "heatmap_%s_%s.png" % (task, c.replace("/", "_").replace("@", "_"))
            fig.savefig(os.path.join(img_dir, name), dpi=110)
            plt.close(fig)
            out.append("![%s %s](%s)\n" % (task, c, rel(os.path.join(img_dir, name), doc_dir)))


def accuracy_section(out, rows, metas, doc_dir, img_dir, plt):
    if not rows:
        return
    grid_dirs = set(d for d, m in metas if m.get("settings", {}).get("depths"))
    out.append("## Accuracy\n")
    out.append("Mean score in % (number of samples) per task, config and length. Scores follow "
               "each task's own rule (passkey: the passkey as a whole number; needle: 1 for "
               "'sandwich' and 'dolores park', 0.5 for one; RULER-style tasks: string_match_all). "
               "Greedy decoding.\n")
    configs = config_order(rows)
    tasks = ordered(r["task"] for r in rows)
    if len(tasks) > 1:
        out.append("### All tasks\n")
        out.append("Mean over all samples of all tasks (%s); each sample counts once.\n"
                   % ", ".join(tasks))
        score_table(out, rows, configs)
    for task in tasks:
        trows = [r for r in rows if r["task"] == task]
        lengths = sorted(set(r["length"] for r in trows))
        out.append("### %s\n" % task)
        score_table(out, trows, configs)
        # Grids only from runs that asked for depths (--depths), not the tasks' random ones.
        trows_grid = [r for r in trows if r["_dir"] in grid_dirs]
        depths = sorted(set(r["depth"] for r in trows_grid if r["depth"] >= 0))
        if len(depths) < 2:
            continue
        if len(configs) > COMPACT_GRID_CONFIGS:
            compact_grid(out, task, trows_grid, configs, doc_dir, img_dir, plt)
        else:
            per_config_grids(out, task, trows_grid, configs, lengths, depths, doc_dir, img_dir, plt)
    nrows = len(rows)
    errs = sum(1 for r in rows if not r["ok"])
    out.append("%d runs in all, %d failed.\n" % (nrows, errs))


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None, None, None
    return statistics.median(values), min(values), max(values)


def fmt(med, lo, hi, digits=0):
    if med is None:
        return "-"
    f = "%%.%df" % digits
    return (f + " [" + f + "-" + f + "]") % (med, lo, hi)


def speed_section(out, rows, doc_dir, img_dir, plt):
    rows = [r for r in rows if r["ok"]]
    if not rows:
        return
    out.append("## Speed\n")
    out.append("Median [min-max] over the repetitions; times in ms from the daemon's `final` "
               "stats (TTFT includes queueing and the first token), decode tokens/s over the "
               "tokens after the first, peak RSS of the daemon process (VmHWM, reset before each "
               "request), KV = cache bytes kept after compression. Ratios are to the `full` "
               "config at the same length (median / median).\n")
    configs = config_order(rows)
    lengths = sorted(set(r["length"] for r in rows))
    med = {}
    out.append("| config | length | prompt tok | TTFT ms | prefill ms | decode tok/s | e2e ms | "
               "peak RSS MiB | KV MiB | TTFT / full | KV / full | n |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for c in configs:
        for l in lengths:
            rs = [r for r in rows if r["config"] == c and r["length"] == l]
            if not rs:
                continue
            m = {}
            for k in ("ttft_ms", "prefill_ms", "decode_tok_s", "e2e_ms", "peak_rss_kb", "kv_bytes"):
                m[k] = spread([r.get(k) for r in rs if r.get(k) is not None and r.get(k) != -1])
            med[(c, l)] = m
    for c in configs:
        for l in lengths:
            if (c, l) not in med:
                continue
            m = med[(c, l)]
            rs = [r for r in rows if r["config"] == c and r["length"] == l]
            base = med.get(("full", l))
            def ratio(k):
                if base is None or base[k][0] in (None, 0) or m[k][0] is None:
                    return "-"
                return "%.2f" % (m[k][0] / base[k][0])
            rss = m["peak_rss_kb"]
            kv = m["kv_bytes"]
            out.append("| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %d |" % (
                c, l, rs[0]["prompt_tokens"], fmt(*m["ttft_ms"]), fmt(*m["prefill_ms"]),
                fmt(*m["decode_tok_s"], digits=1), fmt(*m["e2e_ms"]),
                "%.0f" % (rss[0] / 1024) if rss[0] is not None else "-",
                "%.1f" % (kv[0] / 2**20) if kv[0] is not None else "-",
                ratio("ttft_ms"), ratio("kv_bytes"), len(rs)))
    out.append("")
    if plt is None:
        out.append("(matplotlib not available: no plots)\n")
        return
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for c in configs:
        ls = [l for l in lengths if (c, l) in med]
        for ax, k, label in ((axes[0], "ttft_ms", "TTFT (ms)"), (axes[1], "e2e_ms", "end-to-end (ms)"),
                             (axes[2], "decode_tok_s", "decode tokens/s")):
            ys = [med[(c, l)][k] for l in ls]
            pts = [(l, y) for l, y in zip(ls, ys) if y[0] is not None]
            if not pts:
                continue
            ax.errorbar([p[0] for p in pts], [p[1][0] for p in pts],
                        yerr=[[p[1][0] - p[1][1] for p in pts], [p[1][2] - p[1][0] for p in pts]],
                        marker="o", capsize=3, label=c)
            ax.set_xlabel("context length (tokens)")
            ax.set_ylabel(label)
            ax.set_xscale("log", base=2)
            ax.set_xticks(lengths)
            ax.set_xticklabels([str(l) for l in lengths])
            ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    name = "latency_vs_length.png"
    fig.savefig(os.path.join(img_dir, name), dpi=110)
    plt.close(fig)
    out.append("![latency vs length](%s)\n" % rel(os.path.join(img_dir, name), doc_dir))
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for c in configs:
        ls = [l for l in lengths if (c, l) in med]
        for ax, k, label, scale in ((axes[0], "peak_rss_kb", "daemon peak RSS (MiB)", 1024),
                                    (axes[1], "kv_bytes", "KV cache kept (MiB)", 2**20)):
            pts = [(l, med[(c, l)][k][0]) for l in ls if med[(c, l)][k][0] is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] / scale for p in pts], marker="o", label=c)
            ax.set_xlabel("context length (tokens)")
            ax.set_ylabel(label)
            ax.set_xscale("log", base=2)
            ax.set_xticks(lengths)
            ax.set_xticklabels([str(l) for l in lengths])
            ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    name = "memory_vs_length.png"
    fig.savefig(os.path.join(img_dir, name), dpi=110)
    plt.close(fig)
    out.append("![memory vs length](%s)\n" % rel(os.path.join(img_dir, name), doc_dir))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in", dest="dirs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="sift-bench results")
    ap.add_argument("--preamble", default="", help="Markdown inserted after the title")
    a = ap.parse_args()
    dirs = [d for d in a.dirs.split(",") if d]
    suites, metas = load(dirs)
    if not suites["accuracy"] and not suites["speed"]:
        sys.exit("report.py: no accuracy.json or speed.json in " + ", ".join(dirs))
    doc_dir = os.path.dirname(os.path.abspath(a.out))
    img_dir = os.path.splitext(os.path.abspath(a.out))[0]
    os.makedirs(img_dir, exist_ok=True)
    plt = try_matplotlib()
    out = ["# %s\n" % a.title]
    if a.preamble:
        out.append(a.preamble + "\n")
    out.append("Raw data: " + ", ".join(
        "`%s`" % rel(os.path.join(os.path.abspath(d), s + ext), doc_dir)
        for d in dirs for s in ("accuracy", "speed") for ext in (".csv", ".json")
        if os.path.exists(os.path.join(d, s + ext))) + "\n")
    meta_section(out, metas, doc_dir)
    accuracy_section(out, suites["accuracy"], metas["accuracy"], doc_dir, img_dir, plt)
    speed_section(out, suites["speed"], doc_dir, img_dir, plt)
    with open(a.out, "w") as f:
        f.write("\n".join(out).rstrip() + "\n")
    print("wrote %s (plots in %s)" % (a.out, img_dir if plt else "none: no matplotlib"))


if __name__ == "__main__":
    main()
