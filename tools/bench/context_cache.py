#!/usr/bin/env python3
"""Prefill a context once, ask it many times: what a server's prompt cache buys, measured.

  context_cache.py questions --url URL --server siftd --model PIPELINE --doc-tokens 8192 ...
      One document (cut from --text) and --questions questions about it, asked one after the
      other through /v1/chat/completions (streamed, temperature 0, --max-tokens tokens). Per
      question: the time to the first token (TTFT, measured here), the server's prompt_tokens and
      how many of them came from its cache, and the answer's text.
  context_cache.py chat --url URL --server siftd|llama --model M --turns 10 ...
      A conversation about the document: every turn re-sends the whole history (the document as
      the system message, each earlier question and the server's own answer) plus a new
      question. Per turn: TTFT, prompt_tokens, cached tokens.
  context_cache.py report --raw FILE.jsonl --out docs/results/context-cache.md [--note TEXT]
      The results document and summary.json beside it from the JSON lines the runs appended,
      ending with notes.md from the raw file's folder when there is one (the reading of the
      numbers, written by whoever ran them).

Cached tokens: siftd reports usage.prompt_tokens_details.cached_tokens; llama-server reports
timings.cache_n (its cache_prompt reuse). The document is cut at the same offset of the same
text for every run, so runs against different servers and pipelines see the same words.

Standard library only. Each run appends one JSON object to --out.
"""

import argparse
import http.client
import json
import os
import statistics
import sys
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUESTIONS = [
    "In one sentence, what is this text about?",
    "Who or what is named first in the text?",
    "What is the main argument of the text?",
    "Name one example the author gives.",
    "What does the author recommend?",
    "What is said about time or age?",
    "Which sentence of the text surprised you most, and why?",
    "Summarise the last paragraph in one sentence.",
    "What would the author say to a beginner?",
    "Give the text a short title.",
]


def load_words(path):
    paths = [path] if os.path.isfile(path) else sorted(
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith((".md", ".txt")))
    words = []
    for p in paths:
        with open(p, encoding="utf-8", errors="replace") as f:
            words.extend(f.read().split())
    return words


def document(args):
    words = load_words(args.text)
    n = int(args.doc_tokens / args.tokens_per_word)
    if len(words) < n:
        sys.exit(f"context_cache.py: {args.text} has {len(words)} words, {n} needed")
    return " ".join(words[:n])


def split_spec(spec):
    """A pipeline spec "NAME[+STAGE.KEY=VALUE...]" -> (NAME, stage parameter overrides); values
    are read as JSON where they parse (false, 0.2), else as strings."""
    name, *overrides = spec.split("+")
    params = {}
    for o in overrides:
        key, _, value = o.partition("=")
        stage, _, param = key.partition(".")
        if not stage or not param or not value:
            sys.exit(f"context_cache.py: bad override '{o}' in '{spec}' (STAGE.KEY=VALUE)")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        params.setdefault(stage, {})[param] = parsed
    return name, params


def chat(args, messages):
    """One streamed chat completion: (ttft_ms, text, usage, timings)."""
    url = urllib.parse.urlparse(args.url)
    pipeline, params = split_spec(args.model)
    body = {"model": pipeline, "messages": messages, "stream": True, "temperature": 0,
            "max_tokens": args.max_tokens, "stream_options": {"include_usage": True}}
    if params:
        body["sift"] = {"params": params}  # siftd's extension (docs/openai.md)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    ttft, text, usage, timings = None, "", None, None
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        obj = json.loads(data)
        for choice in obj.get("choices") or []:
            piece = (choice.get("delta") or {}).get("content") or ""
            if piece and ttft is None:
                ttft = (time.perf_counter() - t0) * 1000
            text += piece
        if obj.get("usage"):
            usage = obj["usage"]
        if obj.get("timings"):
            timings = obj["timings"]
    conn.close()
    if ttft is None:
        ttft = (time.perf_counter() - t0) * 1000
    return ttft, text, usage or {}, timings or {}


def metric(url, name):
    """A gauge's value from a Prometheus text page (siftd's /metrics), or None."""
    with urllib.request.urlopen(url, timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def cached_tokens(usage, timings):
    details = usage.get("prompt_tokens_details") or {}
    if "cached_tokens" in details:
        return details["cached_tokens"]
    if "cache_n" in timings:
        return timings["cache_n"]
    return None


def run_questions(args):
    doc = document(args)
    rows = []
    for i in range(args.questions):
        question = QUESTIONS[i % len(QUESTIONS)]
        if args.document_in == "system":  # the question span is the question alone
            messages = [{"role": "system", "content": doc},
                        {"role": "user", "content": question}]
        else:
            messages = [{"role": "user", "content": doc + "\n\nQuestion: " + question}]
        ttft, text, usage, timings = chat(args, messages)
        rows.append({"question": i + 1, "ttft_ms": round(ttft, 1),
                     "prompt_tokens": usage.get("prompt_tokens"),
                     "cached_tokens": cached_tokens(usage, timings), "text": text})
        if args.metrics:
            rows[-1]["cache_bytes"] = metric(args.metrics, "sift_prefix_cache_bytes")
        print(f"[questions] {args.server} {args.model} {args.doc_tokens}: q{i + 1} "
              f"ttft {ttft:.0f} ms, cached {rows[-1]['cached_tokens']} of "
              f"{rows[-1]['prompt_tokens']}", file=sys.stderr)
    return {"part": "questions", "server": args.server, "model": args.model, "label": args.label,
            "gguf": args.gguf, "dtype": args.dtype, "doc_tokens": args.doc_tokens,
            "document_in": args.document_in, "machine": cpu_name(), "rows": rows}


def cpu_name():
    """The CPU's model name: appended runs may come from another machine than the header's."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def run_chat(args):
    doc = document(args)
    messages = [{"role": "system",
                 "content": "Answer questions about this text briefly.\n\n" + doc}]
    rows = []
    for turn in range(args.turns):
        messages.append({"role": "user", "content": QUESTIONS[turn % len(QUESTIONS)]})
        ttft, text, usage, timings = chat(args, messages)
        messages.append({"role": "assistant", "content": text})
        rows.append({"turn": turn + 1, "ttft_ms": round(ttft, 1),
                     "prompt_tokens": usage.get("prompt_tokens"),
                     "cached_tokens": cached_tokens(usage, timings)})
        if args.metrics:
            rows[-1]["cache_bytes"] = metric(args.metrics, "sift_prefix_cache_bytes")
        print(f"[chat] {args.server} {args.model}: turn {turn + 1} ttft {ttft:.0f} ms, cached "
              f"{rows[-1]['cached_tokens']} of {rows[-1]['prompt_tokens']}"
              + (f", cache {rows[-1]['cache_bytes'] / 2**20:.1f} MiB" if args.metrics else ""),
              file=sys.stderr)
    return {"part": "chat", "server": args.server, "model": args.model, "label": args.label,
            "gguf": args.gguf, "dtype": args.dtype, "doc_tokens": args.doc_tokens,
            "machine": cpu_name(), "rows": rows}


def report(args):
    runs = [json.loads(line) for line in open(args.raw) if line.strip()]
    meta = next((r for r in runs if r.get("part") == "meta"), {})
    out = ["# Prefill a context once, ask it many times: the prefix cache, measured", ""]
    out += [meta.get("header", ""), ""] if meta.get("header") else []
    out += [r["text"] + "\n" for r in runs if r.get("part") == "note"]
    if args.note:
        out += [args.note, ""]
    summary = {"machine": meta.get("machine"), "cpu_flags": meta.get("cpu_flags"),
               "model": meta.get("model"), "questions": {}, "chat": {}}
    qs = [r for r in runs if r.get("part") == "questions"]
    if qs:
        out += ["## Questions about one document", "",
                "Eight questions about one document, one after the other, on a siftd started for "
                "the pipeline (question 1 finds nothing cached). TTFT of question 1 and the "
                "median of questions 2-8; *cached* is the median share of the prompt served from "
                "the cache for questions 2-8; *same answers* compares the answers of questions "
                "2-N with the same requests on a daemon started with `--prefix-cache false` "
                "(greedy, 16 tokens), which also gives the next column; *cache held* is "
                "`sift_prefix_cache_bytes` after the last question (runs from before it was "
                "recorded: -).", "",
                "| model | document | pipeline | q1 TTFT | q2-8 TTFT (median) | ratio | cached | "
                "same answers | TTFT without cache (median) | cache held |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for r in qs:
            if r["label"] != "cache":
                continue
            ref = next((x for x in qs if x["label"] == "no-cache" and x["model"] == r["model"]
                        and x["doc_tokens"] == r["doc_tokens"] and x.get("gguf") == r.get("gguf")
                        and x.get("dtype") == r.get("dtype")
                        and x.get("document_in", "user") == r.get("document_in", "user")),
                       None)
            rows = r["rows"]
            first, rest = rows[0]["ttft_ms"], [x["ttft_ms"] for x in rows[1:]]
            share = [x["cached_tokens"] / x["prompt_tokens"] for x in rows[1:]
                     if x.get("prompt_tokens") and x.get("cached_tokens") is not None]
            pairs = list(zip(rows[1:], ref["rows"][1:])) if ref else []
            same = (sum(a["text"] == b["text"] for a, b in pairs), len(pairs)) if pairs else None
            base = statistics.median(x["ttft_ms"] for x in ref["rows"]) if ref else None
            med = statistics.median(rest)
            held_bytes = rows[-1].get("cache_bytes")
            held = f"{held_bytes / 2**20:,.1f} MiB" if held_bytes is not None else "-"
            gguf = (os.path.basename(r.get("gguf") or "").split("-Instruct")[0] or "-") + " " + \
                r.get("dtype", "bf16")
            where = r.get("document_in", "user")
            name = r["model"] + (" (document as system message)" if where == "system" else "")
            header_cpu = (meta.get("machine") or "").rsplit(",", 1)[0]
            if r.get("machine") and r["machine"] != header_cpu:
                name += f", on {r['machine']}"
            out.append(f"| {gguf} | {r['doc_tokens']} | {name} | {first:,.0f} ms | {med:,.0f} ms | "
                       f"{med / first:.3f} | {statistics.median(share) * 100 if share else 0:.1f} % | "
                       f"{f'{same[0]} of {same[1]}' if same else '-'} | "
                       f"{f'{base:,.0f} ms' if base else '-'} | {held} |")
            key = f"{gguf.replace(' ', '/')}/{r['model']}@{r['doc_tokens']}"
            summary["questions"][key + ("/system" if where == "system" else "")] = {
                "q1_ttft_ms": first, "q2_8_ttft_ms_median": med, "ratio": round(med / first, 4),
                "cached_share_median": round(statistics.median(share), 4) if share else 0,
                "same_answers": same[0] if same else None, "compared": same[1] if same else 0,
                "no_cache_ttft_ms_median": base, "cache_bytes_held": held_bytes}
        out.append("")
    all_chats = [r for r in runs if r.get("part") == "chat"]
    if all_chats:
        out += ["## A 10-turn chat through the OpenAI API", "",
                "Every turn re-sends the conversation (the document as the system message, the "
                "earlier questions and the server's own answers) plus a new question. TTFT per "
                "turn, measured by the client; in brackets, prompt tokens served from the "
                "server's cache (siftd: `usage.prompt_tokens_details.cached_tokens`; "
                "llama-server: `timings.cache_n`) and, where recorded, the bytes siftd's prefix "
                "cache held after the turn (`sift_prefix_cache_bytes`).", ""]
    # One table per document, model and machine (runs appended from another machine apart).
    groups = {}
    for c in all_chats:
        groups.setdefault((c.get("doc_tokens"), c.get("gguf"), c.get("machine")), []).append(c)
    for (doc_tokens, gguf_path, machine), chats in groups.items():
        if len(groups) > 1:
            where = f", {machine}" if machine else ""
            out += [f"Document of {doc_tokens} tokens, "
                    f"`{gguf_path or '-'}` ({chats[0].get('dtype', 'bf16')}){where}:", ""]
        servers = [c["server"] if c["model"] in ("full", "smollm2") or c["server"] == "llama"
                   else f"{c['server']} {c['model']}" for c in chats]
        out += ["| turn | " + " | ".join(f"{s}: TTFT (cached / prompt)" for s in servers) + " |",
                "|---" * (len(servers) + 1) + "|"]
        for t in range(max(len(c["rows"]) for c in chats)):
            cells = []
            for c in chats:
                x = c["rows"][t] if t < len(c["rows"]) else None
                cache = (f", cache {x['cache_bytes'] / 2**20:,.1f} MiB"
                         if x and x.get("cache_bytes") is not None else "")
                cells.append(f"{x['ttft_ms']:,.0f} ms ({x['cached_tokens']} / {x['prompt_tokens']}"
                             f"{cache})" if x else "-")
            out.append(f"| {t + 1} | " + " | ".join(cells) + " |")
        for c, label in zip(chats, servers):
            key = label if len(groups) == 1 else f"{label}@{doc_tokens}/{machine or '-'}"
            summary["chat"][key] = [x["ttft_ms"] for x in c["rows"]]
        out.append("")
    notes = os.path.join(os.path.dirname(args.raw), "notes.md")
    if os.path.exists(notes):  # what the numbers say, written by whoever ran them
        with open(notes) as f:
            out += [f.read().rstrip(), ""]
    with open(args.out, "w") as f:
        f.write("\n".join(out))
    folder = os.path.join(os.path.dirname(args.out), "context-cache")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out} and {folder}/summary.json", file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("questions", "chat"):
        s = sub.add_parser(name)
        s.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:7702")
        s.add_argument("--server", required=True, choices=["siftd", "llama"])
        s.add_argument("--model", default="full",
                       help="model field (siftd: the pipeline, optionally with stage parameter "
                            "overrides: NAME+STAGE.KEY=VALUE..., e.g. "
                            "chunkkv+select.query_aware=false)")
        s.add_argument("--label", default="cache", help="tag stored with the run (e.g. no-cache)")
        s.add_argument("--gguf", default="", help="the model file, stored with the run")
        s.add_argument("--dtype", default="bf16", help="the server's dtype, stored with the run")
        s.add_argument("--text", default=os.path.join(ROOT, "tools/bench/corpus"),
                       help="file or folder of .md/.txt the document is cut from")
        s.add_argument("--doc-tokens", type=int, default=4096, help="document length (approx.)")
        s.add_argument("--tokens-per-word", type=float, default=1.35,
                       help="tokens per whitespace word of the text (English prose: 1.35)")
        s.add_argument("--max-tokens", type=int, default=16)
        s.add_argument("--out", help="append the run's JSON object to this JSON-lines file")
        s.add_argument("--metrics", help="siftd's /metrics URL: record the prefix cache's bytes "
                                         "after every question or turn")
        if name == "questions":
            s.add_argument("--questions", type=int, default=8)
            s.add_argument("--document-in", choices=["user", "system"], default="user",
                           help="the document in the question's user message (the whole message "
                                "is then the question span a filter keeps) or as a system message")
        else:
            s.add_argument("--turns", type=int, default=10)
    r = sub.add_parser("report")
    r.add_argument("--raw", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--note", default="")
    a = p.parse_args()
    if a.command == "report":
        report(a)
        return
    result = run_questions(a) if a.command == "questions" else run_chat(a)
    line = json.dumps(result)
    if a.out:
        with open(a.out, "a") as f:
            f.write(line + "\n")
    else:
        print(line)


if __name__ == "__main__":
    main()
