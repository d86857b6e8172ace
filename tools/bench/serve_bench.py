#!/usr/bin/env python3
"""Concurrent streaming clients against an OpenAI-compatible server (siftd or llama-server).

N clients each send R requests to /v1/completions one after the other (stream on, temperature 0,
a raw prompt, max_tokens fixed and end-of-sequence ignored so every server generates the same
number of tokens), all clients at once. Per request: time to the first token (TTFT), the gaps
between tokens (inter-token latency, ITL), tokens received. Per run: aggregate output tokens per
second (all tokens over the wall time from the first request sent to the last answer),
requests per minute, TTFT p50/p90, ITL p50/p99 and the longest gap any stream saw.

--background-prompt-tokens K adds one more request with a K-token prompt, sent once every stream
has its first token: the longest gap the running streams see while it is prefilled is the number
the `prefill_gap_ms` field reports (the time from sending it to its first token is
`background_ttft_ms`). --short-during-background also sends one short request (--prompt-tokens,
16 generated tokens) --short-delay seconds after the long one: `short_ttft_ms` is its time to the
first token, `short_done_ms` to its last, `short_before_background` whether it ended before the
long prompt's first token (a server that prefills prompts in arrival order makes it wait).

Prompts are cut from a text file (--text, default this repository's docs) at different offsets,
so no two requests share a prefix; their length is counted in whitespace-separated words scaled by
tokens per word, measured on the server before the run (three 400-word prompts, max_tokens 1, the
server's usage.prompt_tokens) unless --tokens-per-word is given: the repository's docs run about
2.5 tokens per word (paths, code, tables), English prose about 1.35. The server's own
prompt_tokens is in the output.

Standard library only (asyncio streams): it runs on any Python 3.8+ without a virtual env.
Prints one JSON object; --out appends it to a JSON-lines file.

  serve_bench.py --url http://127.0.0.1:7702 --server siftd --model full --clients 1,2,4,8
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def load_words(path):
    words = []
    paths = [path] if os.path.isfile(path) else sorted(
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith((".md", ".txt")))
    for p in paths:
        with open(p, encoding="utf-8", errors="replace") as f:
            words.extend(f.read().split())
    if len(words) < 1000:
        sys.exit(f"serve_bench: too little text in {path} ({len(words)} words)")
    return words


def make_prompt(words, index, n_words):
    start = (index * 7919) % max(1, len(words) - n_words)
    chunk = words[start:start + n_words]
    while len(chunk) < n_words:  # short corpus: wrap around
        chunk += words[:n_words - len(chunk)]
    return " ".join(chunk)


def request_body(args, prompt, max_tokens):
    body = {"model": args.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    if args.server == "siftd":
        body["sift"] = {"ignore_eos": True}
        if args.sift_params:
            body["sift"]["params"] = json.loads(args.sift_params)
    else:  # llama-server's own field
        body["ignore_eos"] = True
        body["cache_prompt"] = False
    return body


async def stream_completion(args, prompt, max_tokens, on_token=None):
    """One streamed completion. Returns a dict with t_send, t_first, token times, usage."""
    url = urllib.parse.urlparse(args.url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port or 80)
    payload = json.dumps(request_body(args, prompt, max_tokens)).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {url.hostname}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
            "Connection: close\r\n")
    if args.api_key:
        head += f"Authorization: Bearer {args.api_key}\r\n"
    t_send = time.perf_counter()
    writer.write(head.encode() + b"\r\n" + payload)
    await writer.drain()
    status_line = await reader.readline()
    status = int(status_line.split()[1]) if len(status_line.split()) > 1 else 0
    chunked = False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
            chunked = True
    times, usage, text, error = [], None, [], None
    buffer = b""

    async def body_bytes():
        if not chunked:
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                yield data
        while True:
            size_line = await reader.readline()
            if not size_line:
                return
            size = int(size_line.strip().split(b";")[0] or b"0", 16)
            if size == 0:
                return
            data = await reader.readexactly(size)
            await reader.readline()
            yield data

    async for data in body_bytes():
        buffer += data
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                data_text = line[5:].strip()
                if data_text == b"[DONE]":
                    continue
                msg = json.loads(data_text)
                if "error" in msg:
                    error = msg["error"]
                for choice in msg.get("choices", []):
                    piece = choice.get("text") or ""
                    if piece:
                        now = time.perf_counter()
                        times.append(now)
                        text.append(piece)
                        if on_token:
                            on_token(now)
                if msg.get("usage"):
                    usage = msg["usage"]
    writer.close()
    if status != 200 and error is None:
        error = f"HTTP {status}: {buffer[:200]!r}"
    return {"t_send": t_send, "times": times, "usage": usage, "text": "".join(text),
            "error": error}


async def run_level(args, words, clients):
    n_words = max(1, int(args.prompt_tokens / args.tokens_per_word))
    results, gaps_during_background = [], []
    first_token = asyncio.Event()
    started = [0]
    last_token = {}
    background = {}

    def on_token(client):
        def record(now):
            prev = last_token.get(client)
            if prev is not None and background.get("active"):
                gaps_during_background.append(now - prev)
            last_token[client] = now
            if prev is None:
                started[0] += 1
                if started[0] >= clients:
                    first_token.set()
        return record

    async def client(c):
        for r in range(args.requests):
            prompt = make_prompt(words, c * args.requests + r + clients * 1000, n_words)
            res = await stream_completion(args, prompt, args.max_tokens, on_token(c))
            results.append(res)

    async def background_request():
        await first_token.wait()
        prompt = make_prompt(words, 999983, max(1, int(args.background_prompt_tokens /
                                                       args.tokens_per_word)))
        background["active"] = True
        res = await stream_completion(args, prompt, 1)
        background["active"] = False
        background["result"] = res

    async def short_request():
        while not background.get("active"):
            await asyncio.sleep(0.01)
        await asyncio.sleep(args.short_delay)
        prompt = make_prompt(words, 424243, n_words)
        background["short"] = await stream_completion(args, prompt, 16)

    t0 = time.perf_counter()
    tasks = [client(c) for c in range(clients)]
    if args.background_prompt_tokens:
        tasks.append(background_request())
        if args.short_during_background:
            tasks.append(short_request())
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0

    errors = [r["error"] for r in results if r["error"]]
    ttft = [(r["times"][0] - r["t_send"]) * 1000 for r in results if r["times"]]
    itl = [(b - a) * 1000 for r in results for a, b in zip(r["times"], r["times"][1:])]
    tokens = sum((r["usage"] or {}).get("completion_tokens", len(r["times"])) for r in results)
    prompt_tokens = [(r["usage"] or {}).get("prompt_tokens") for r in results if r["usage"]]
    out = {
        "server": args.server, "model": args.model, "clients": clients,
        "sift_params": json.loads(args.sift_params) if args.sift_params else None,
        "requests": len(results), "errors": len(errors), "first_error": errors[0] if errors else None,
        "max_tokens": args.max_tokens, "prompt_tokens_target": args.prompt_tokens,
        "tokens_per_word": round(args.tokens_per_word, 3),
        "prompt_tokens_mean": statistics.mean(prompt_tokens) if prompt_tokens else None,
        "prompt_tokens_max": max(prompt_tokens) if prompt_tokens else None,
        "wall_s": round(wall, 3), "output_tokens": tokens,
        "output_tok_per_s": round(tokens / wall, 2) if wall > 0 else None,
        "requests_per_min": round(len(results) / wall * 60, 2) if wall > 0 else None,
        "ttft_ms_p50": percentile(ttft, 0.5), "ttft_ms_p90": percentile(ttft, 0.9),
        "itl_ms_p50": percentile(itl, 0.5), "itl_ms_p99": percentile(itl, 0.99),
        "longest_gap_ms": max(itl) if itl else None,
    }
    if args.background_prompt_tokens:
        res = background.get("result") or {}
        out["background_prompt_tokens"] = args.background_prompt_tokens
        out["background_ttft_ms"] = ((res["times"][0] - res["t_send"]) * 1000
                                     if res.get("times") else None)
        out["background_error"] = res.get("error")
        out["prefill_gap_ms"] = (max(gaps_during_background) * 1000
                                 if gaps_during_background else None)
        short = background.get("short")
        if short is not None:
            times = short["times"]
            out["short_prompt_tokens"] = (short["usage"] or {}).get("prompt_tokens")
            out["short_ttft_ms"] = (times[0] - short["t_send"]) * 1000 if times else None
            out["short_done_ms"] = (times[-1] - short["t_send"]) * 1000 if times else None
            out["short_error"] = short["error"]
            long_times = res.get("times") or []
            out["short_before_background"] = bool(times and long_times and
                                                  times[-1] < long_times[0])
    for key, value in list(out.items()):
        if isinstance(value, float):
            out[key] = round(value, 2)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:7702")
    p.add_argument("--server", choices=["siftd", "llama"], required=True,
                   help="which server (how end-of-sequence is switched off)")
    p.add_argument("--model", default="full", help="model field (siftd: the pipeline)")
    p.add_argument("--sift-params", default="",
                   help='siftd only: per-request stage parameters, a JSON object such as '
                        '\'{"prefill": {"select_by_layer": true}}\' (the sift extension\'s params)')
    p.add_argument("--clients", default="1", help="comma-separated client counts, run in turn")
    p.add_argument("--requests", type=int, default=2, help="requests per client (sequential)")
    p.add_argument("--prompt-tokens", type=int, default=40, help="prompt length (approximate)")
    p.add_argument("--tokens-per-word", type=float, default=0,
                   help="tokens per whitespace word of the text (0: measure it on the server)")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens generated per request")
    p.add_argument("--background-prompt-tokens", type=int, default=0,
                   help="also send one request with a prompt this long once all streams run")
    p.add_argument("--short-during-background", action="store_true",
                   help="also send one short request while the long prompt is prefilled")
    p.add_argument("--short-delay", type=float, default=2.0,
                   help="seconds after the long prompt is sent that the short one goes")
    p.add_argument("--text", default=os.path.join(ROOT, "docs"),
                   help="file or folder of .md/.txt to cut prompts from")
    p.add_argument("--api-key", default="", help="Authorization: Bearer key, if the server needs one")
    p.add_argument("--warmup", type=int, default=1, help="requests sent first, not measured")
    p.add_argument("--out", help="append each level's JSON object to this JSON-lines file")
    args = p.parse_args()
    words = load_words(args.text)

    async def go():
        for _ in range(args.warmup):
            await stream_completion(args, make_prompt(words, 4242, 20), 4)
        if args.tokens_per_word <= 0:
            counts = []
            for i in range(3):
                res = await stream_completion(args, make_prompt(words, 777 + 31 * i, 400), 1)
                if res["error"] or not res["usage"]:
                    sys.exit(f"serve_bench: cannot measure tokens per word: {res['error'] or 'no usage'}")
                counts.append(res["usage"]["prompt_tokens"])
            args.tokens_per_word = sum(counts) / (3 * 400)
            print(f"serve_bench: {args.tokens_per_word:.3f} tokens per word of {args.text}",
                  file=sys.stderr)
        levels = []
        for clients in [int(c) for c in args.clients.split(",") if c]:
            level = await run_level(args, words, clients)
            print(json.dumps(level), flush=True)
            levels.append(level)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(level) + "\n")
        return levels

    levels = asyncio.run(go())
    sys.exit(1 if any(level["errors"] for level in levels) else 0)


if __name__ == "__main__":
    main()
