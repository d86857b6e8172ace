#!/usr/bin/env python3
"""Example: talk to siftd from Python (run it with Debian's python3, which has pyzmq).

    /usr/bin/python3 tools/python/example.py [--endpoint tcp://127.0.0.1:7700] [--pipeline full]

Pings the daemon, lists what it serves, streams one answer about a short context, shows the
per-request stats, then shows three errors the daemon reports clearly (unknown pipeline,
malformed JSON, a cancelled request) and that closing a stream early cancels its request. Exits
non-zero if anything is not as documented.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sift_client import MAGIC, SiftClient, SiftError  # noqa: E402

CONTEXT = ("Maria keeps her bicycle in the blue shed behind the library. "
           "The shed's code is 4417. On Sundays the library is closed.")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", default="tcp://127.0.0.1:7700")
    ap.add_argument("--pipeline", default="full")
    ap.add_argument("--max-tokens", type=int, default=12)
    args = ap.parse_args()

    with SiftClient(args.endpoint, timeout_s=60) as c:
        pong = c.ping()
        print("pong: model=%s ready=%s queue=%d/%d" % (pong.get("model"), pong["ready"],
                                                       pong["queue_depth"], pong["queue_capacity"]))
        listing = c.list()
        print("pipelines:", ", ".join("%s%s" % (p["name"], "" if p.get("ok") else " (broken)")
                                      for p in listing["pipelines"]))
        print("plugins:", ", ".join("%s@%s" % (p["name"], p.get("version", "?"))
                                    for p in listing["plugins"]))

        # 1. Stream an answer.
        print("answer: ", end="", flush=True)
        chunks = 0
        for event in c.generate(args.pipeline, context=CONTEXT,
                                question="What is the shed's code?",
                                max_tokens=args.max_tokens, sampling={"temperature": 0}):
            if event["type"] == "chunk":
                chunks += 1
                print(event["text"], end="", flush=True)
        final = c.last_final
        stats = final["stats"]
        print()
        print("final: finish=%s prompt_tokens=%d kept=%d ttft=%.1f ms e2e=%.1f ms stages=%s" % (
            final["finish_reason"], final["usage"]["prompt_tokens"], stats["tokens_kept"],
            stats["ttft_ms"], stats["e2e_ms"],
            ", ".join("%s %.1f ms" % (s["plugin"], s["ms"]) for s in stats["stages"])))
        assert final["usage"]["completion_tokens"] >= 1
        assert chunks >= 1

        # 2. Clear errors; the daemon keeps serving.
        try:
            c.complete("no-such-pipeline", prompt="hi")
            raise AssertionError("expected NOT_FOUND")
        except SiftError as e:
            print("unknown pipeline ->", e)
            assert e.code == "NOT_FOUND" and e.reason == "unknown_pipeline"
        c._sock.send_multipart([MAGIC, b'{"type": "generate", "id": "x", '])
        bad = c.recv()
        print("malformed JSON ->", bad["code"], bad["reason"])
        assert bad["type"] == "error" and bad["reason"] == "bad_json"

        rid = c.start_generate(args.pipeline, prompt="Count from one to a thousand:",
                               max_tokens=200)
        c.cancel(rid)
        try:
            for _ in c.events(rid):
                pass
            print("cancel -> finished before the cancel arrived")
        except SiftError as e:
            print("cancel ->", e)
            assert e.code == "CANCELLED"

        # 3. Stop reading a stream: closing it cancels the request on the daemon.
        rid = c.start_generate(args.pipeline, messages=[{
            "role": "user",
            "content": "Write a very long story about a dragon and a knight, with many chapters."}],
            max_tokens=200)
        stream = c.events(rid)
        for event in stream:
            if event["type"] == "chunk":
                break
        stream.close()
        while True:
            end = c.recv()
            if end.get("id") == rid and end.get("type") in ("error", "final"):
                break
        print("stream closed ->", end.get("code", end["type"]), end.get("reason", ""))
        assert end.get("reason") == "client_cancel", end

        print("still serving:", c.ping()["ready"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
