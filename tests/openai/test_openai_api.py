"""The OpenAI-compatible HTTP port of siftd (docs/openai.md), tested with real clients.

Starts the real build/bin/siftd on the real model (SIFT_MODEL) with --openai on an ephemeral
loopback port and drives it with the official `openai` Python package, curl (the examples in
docs/openai.md and README.md, run as written apart from the address) and raw sockets
(malformed input, slow and vanished clients). Observes cancellation and the shared queue
through the daemon's /metrics and log.

Run by tests/openai/run.sh (ctest: openai_clients) with the venv's Python; environment:
SIFT_BUILD (build folder), SIFT_MODEL, SIFT_SOURCE (repository root).
"""

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

import openai

SOURCE = os.environ.get("SIFT_SOURCE", os.path.abspath(os.path.join(os.path.dirname(__file__), "../..")))
BUILD = os.environ.get("SIFT_BUILD", os.path.join(SOURCE, "build"))
MODEL = os.environ.get("SIFT_MODEL", os.path.join(SOURCE, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
DOC_ADDRESS = "127.0.0.1:7702"  # the address the docs' examples use (tools/setup.sh run)
TIMEOUT_MS = 2000  # --openai-timeout-ms of the main daemon (slow-client tests wait for it)
MAX_BODY = 256 * 1024
MAX_CONNECTIONS = 100
API_KEY = "sk-sift-test-0123456789abcdef"
LONG_PROMPT = "Count slowly from one to one thousand, one number per line:"


class Daemon:
    """A siftd process on ephemeral loopback ports; `openai` is its OpenAI address."""

    def __init__(self, *extra, openai_address="127.0.0.1:0"):
        self.dir = tempfile.mkdtemp(prefix="siftd-openai-")
        self.ready = os.path.join(self.dir, "ready.json")
        self.log_path = os.path.join(self.dir, "siftd.log")
        os.makedirs(os.path.join(self.dir, "staging"))
        self.args = [
            os.path.join(BUILD, "bin/siftd"), "--model", MODEL,
            "--pipelines", os.path.join(SOURCE, "pipelines"),
            "--plugins", os.path.join(BUILD, "plugins"),
            "--staging-dir", os.path.join(self.dir, "staging"),
            "--bind", "tcp://127.0.0.1:*", "--http", "127.0.0.1:0",
            "--openai", openai_address, "--ready-file", self.ready, "--threads", "2",
            "--rescan-ms", "0", "--allow-ignore-eos", "true", *extra,
        ]
        self.log_file = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.args, stdout=self.log_file, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("siftd exited during start-up:\n" + self.log())
            if os.path.exists(self.ready):
                try:
                    with open(self.ready) as f:
                        self.info = json.load(f)
                    break
                except ValueError:
                    pass
            time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError("siftd did not become ready:\n" + self.log())
        self.openai = self.info["openai"].replace("0.0.0.0", "127.0.0.1")
        self.http = self.info["http"]
        self.endpoint = self.info["endpoints"][0]

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def client(self, **kw):
        kw.setdefault("api_key", "unused")
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 300)
        return openai.OpenAI(base_url=f"http://{self.openai}/v1", **kw)

    def metrics(self):
        with urllib.request.urlopen(f"http://{self.http}/metrics", timeout=10) as r:
            return r.read().decode()

    def metric(self, name, **labels):
        """Sum of the series of `name` whose labels include `labels`."""
        total = 0.0
        for line in self.metrics().splitlines():
            m = re.match(r"^(\w+)(\{[^}]*\})?\s+(\S+)$", line)
            if not m or m.group(1) != name:
                continue
            have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                total += float(m.group(3))
        return total

    def wait_metric(self, name, predicate, timeout=60, **labels):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = self.metric(name, **labels)
            if predicate(value):
                return value
            time.sleep(0.05)
        raise AssertionError(f"{name}{labels} never satisfied the condition; last {value}")

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log_file.close()
        return self.proc.returncode


def raw_request(address, data, read_timeout=10.0, shutdown=False):
    """Sends raw bytes; returns everything the server sent until it closed or went quiet."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=read_timeout) as s:
        s.sendall(data)
        if shutdown:
            s.shutdown(socket.SHUT_WR)
        out = b""
        try:
            while True:
                got = s.recv(65536)
                if not got:
                    break
                out += got
                if b"\r\n\r\n" in out and not shutdown:
                    head, _, body = out.partition(b"\r\n\r\n")
                    m = re.search(rb"content-length: *(\d+)", head, re.I)
                    if m and len(body) >= int(m.group(1)):
                        break
        except socket.timeout:
            pass
        return out


def status_of(response):
    m = re.match(rb"HTTP/1\.[01] (\d{3})", response)
    return int(m.group(1)) if m else None


def body_of(response):
    return json.loads(response.partition(b"\r\n\r\n")[2])


def post(path, body, extra_headers=b""):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + extra_headers + b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)


def chat(content, **kw):
    body = {"model": "full", "messages": [{"role": "user", "content": content}],
            "temperature": 0, "max_tokens": 24}
    body.update(kw)
    return body


D = None  # the main daemon


def setUpModule():
    global D
    # A bare port: loopback.
    D = Daemon("--workers", "1", "--queue-size", "1", "--n-ctx", "1024",
               "--openai-timeout-ms", str(TIMEOUT_MS), "--openai-max-body-bytes", str(MAX_BODY),
               "--openai-max-connections", str(MAX_CONNECTIONS),
               # One peer (this test) opens them all; the idle limit is the slow-client limit.
               "--openai-max-connections-per-peer", str(MAX_CONNECTIONS + 50),
               "--openai-idle-timeout-ms", str(TIMEOUT_MS), openai_address="0")
    assert D.openai.startswith("127.0.0.1:"), D.openai


def tearDownModule():
    if D:
        rc = D.stop()
        log = D.log()
        assert rc == 0, f"siftd exited with {rc}:\n{log[-3000:]}"
        errors = [l for l in log.splitlines() if '"level":"error"' in l]
        assert not errors, "siftd logged errors:\n" + "\n".join(errors[:5])


class Basics(unittest.TestCase):
    def test_models(self):
        client = D.client()
        ids = [m.id for m in client.models.list().data]
        for name in ("full", "recent", "snapkv"):
            self.assertIn(name, ids)
        model = client.models.retrieve("recent")
        self.assertEqual(model.id, "recent")
        self.assertEqual(model.owned_by, "sift")
        self.assertTrue(model.sift["model"])  # the model the pipeline serves
        self.assertEqual([s["plugin"] for s in model.sift["stages"]],
                         ["prefill_full", "keep_recent", "decode_local"])
        self.assertEqual(client.models.retrieve("sift/recent").id, "recent")
        with self.assertRaises(openai.NotFoundError):
            client.models.retrieve("no-such-pipeline")

    def test_chat(self):
        r = D.client().chat.completions.create(
            model="full", messages=[{"role": "system", "content": "Answer in one word."},
                                    {"role": "user", "content": "What colour is the sky?"}],
            temperature=0, max_tokens=16)
        self.assertTrue(r.id.startswith("chatcmpl-"))
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.model, "full")
        self.assertEqual(len(r.choices), 1)
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertTrue(r.choices[0].message.content.strip())
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        u = r.usage
        self.assertGreater(u.prompt_tokens, 10)
        self.assertGreater(u.completion_tokens, 0)
        self.assertLessEqual(u.completion_tokens, 16)
        self.assertEqual(u.total_tokens, u.prompt_tokens + u.completion_tokens)
        report = u.sift  # sift's cost report
        self.assertEqual(report["pipeline"], "full")
        self.assertGreater(report["ttft_ms"], 0)
        self.assertEqual(report["tokens_kept"], u.prompt_tokens)  # full KV keeps everything
        self.assertGreater(report["kv_bytes"], 0)
        self.assertEqual([s["stage"] for s in report["stages"]], ["prefill", "decode"])
        self.assertTrue(all(s["ms"] > 0 for s in report["stages"]))

    def test_max_completion_tokens(self):
        """max_completion_tokens bounds the answer and wins over max_tokens."""
        r = D.client().chat.completions.create(
            model="full", messages=[{"role": "user", "content": "Count to fifty."}],
            temperature=0, max_completion_tokens=3, max_tokens=20,
            extra_body={"sift": {"ignore_eos": True}})
        self.assertEqual(r.usage.completion_tokens, 3)
        self.assertEqual(r.choices[0].finish_reason, "length")

    def test_completion(self):
        r = D.client().completions.create(model="sift/full", prompt="The capital of France is",
                                          temperature=0, max_tokens=8)
        self.assertTrue(r.id.startswith("cmpl-"))
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(r.model, "sift/full")
        self.assertTrue(r.choices[0].text)
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertLessEqual(r.usage.completion_tokens, 8)
        self.assertEqual(r.choices[0].finish_reason == "length", r.usage.completion_tokens == 8)

    def test_completion_matches_zeromq(self):
        """Same request building as SIFT/1: the CLI over ZeroMQ gets the same greedy text."""
        prompt = "A list of three fruits:"
        http_text = D.client().completions.create(model="full", prompt=prompt, temperature=0,
                                                  max_tokens=12).choices[0].text
        out = subprocess.run([os.path.join(BUILD, "bin/sift"), "--endpoint", D.endpoint,
                              "generate", "--prompt", prompt, "-n", "12", "--json", "--no-stream"],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout)["text"], http_text)

    def test_stream_equals_whole_chat(self):
        client = D.client()
        kw = dict(model="full", temperature=0, max_tokens=24,
                  messages=[{"role": "user", "content": "Write one sentence about the sea."}])
        whole = client.chat.completions.create(**kw)
        chunks = list(client.chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **kw))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertTrue(all(c.object == "chat.completion.chunk" for c in chunks))
        self.assertEqual(len({c.id for c in chunks}), 1)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text, whole.choices[0].message.content)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
        self.assertEqual(finishes[-1], whole.choices[0].finish_reason)
        self.assertTrue(all(f is None for f in finishes[:-1]))
        # include_usage: every chunk says usage null, the last one has no choices and the usage.
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, whole.usage.completion_tokens)
        self.assertEqual(chunks[-1].usage.prompt_tokens, whole.usage.prompt_tokens)
        self.assertIn("ttft_ms", chunks[-1].usage.sift)
        self.assertTrue(all(c.usage is None for c in chunks[:-1]))

    def test_stream_equals_whole_completion(self):
        client = D.client()
        kw = dict(model="full", prompt="Here is a short poem about rain:\n", temperature=0,
                  max_tokens=24)
        whole = client.completions.create(**kw)
        chunks = list(client.completions.create(stream=True, **kw))
        self.assertEqual("".join(c.choices[0].text for c in chunks), whole.choices[0].text)
        self.assertEqual(chunks[-1].choices[0].finish_reason, whole.choices[0].finish_reason)
        self.assertTrue(all(c.usage is None for c in chunks))  # not asked for

    def test_sse_wire_format(self):
        """The bytes on the wire: chunked transfer, `data: ` events, `data: [DONE]` last."""
        out = subprocess.run(
            ["curl", "-sN", f"http://{D.openai}/v1/chat/completions", "-H",
             "Content-Type: application/json", "-d",
             json.dumps(chat("Say hi.", stream=True, max_tokens=6))],
            capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        # `: keep-alive` comments (SSE comments, ignored by clients) may come while it is quiet.
        events = [e for e in out.stdout.split("\n\n") if e.strip() and not e.startswith(":")]
        self.assertEqual(events[-1], "data: [DONE]")
        for e in events[:-1]:
            self.assertTrue(e.startswith("data: {"), e)
            json.loads(e[len("data: "):])

    def test_sampling_with_seed_is_reproducible(self):
        client = D.client()
        kw = dict(model="full", prompt="My favourite animal is", temperature=1.0, top_p=0.9,
                  max_tokens=12)
        a = client.completions.create(seed=123, **kw).choices[0].text
        b = client.completions.create(seed=123, **kw).choices[0].text
        self.assertEqual(a, b)

    def test_stop_strings(self):
        client = D.client()
        kw = dict(model="full", prompt="1, 2, 3, 4,", temperature=0, max_tokens=16)
        text = client.completions.create(**kw).choices[0].text
        middle = len(text) // 2
        stop = text[middle:middle + 2]
        self.assertTrue(stop.strip(), text)
        r = client.completions.create(stop=[stop, "never-seen-stop"], **kw)
        self.assertEqual(r.choices[0].text, text[:text.find(stop)])
        self.assertEqual(r.choices[0].finish_reason, "stop")


class Extension(unittest.TestCase):
    PROMPT = " ".join(f"Fact {i}: the box number {i} is {'red' if i % 3 else 'blue'}."
                      for i in range(40)) + " Which boxes are blue?"

    def kept(self, **extra):
        r = D.client().completions.create(model="snapkv", prompt=self.PROMPT, temperature=0,
                                          max_tokens=2, **extra)
        return r.usage.prompt_tokens, r.usage.sift["tokens_kept"]

    def test_stage_params_override(self):
        n, default = self.kept()
        _, kept_04 = self.kept(extra_body={"sift": {"params": {"select": {"keep_ratio": 0.4}}}})
        _, kept_05 = self.kept(extra_body={"sift": {"params": {"select": {"keep_ratio": 0.5}}}})
        self.assertGreater(n, 330)
        # snapkv's default keep_ratio 0.1 of this prompt is below the compression floor (128
        # tokens, docs/pipelines.md), which is kept instead.
        self.assertEqual(default, 128)
        self.assertLess(default, kept_04)
        self.assertLess(kept_04, kept_05)
        self.assertLess(kept_05, n)
        self.assertAlmostEqual(kept_05 / n, 0.5, delta=0.05)

    def test_bad_stage_param(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.kept(extra_body={"sift": {"params": {"select": {"no_such_key": 1}}}})
        self.assertIn("no_such_key", e.exception.message)

    def test_return_kept(self):
        """sift.return_kept: what the pipeline kept, in the response's `sift.kept` (streamed: on
        the chunk with finish_reason), and the same as SIFT/1's `kept` for the same request."""
        client = D.client()
        kw = dict(model="streamingllm", prompt=self.PROMPT, temperature=0, max_tokens=3)
        # The first request files the prompt in the prefix cache; the two compared are both
        # served from it, so they compute alike (a fresh prefill's rounding differs from a
        # cached one's and may flip a near tie, docs/context-cache.md).
        client.completions.create(**kw)
        r = client.completions.create(extra_body={"sift": {"return_kept": True}}, **kw)
        plain = client.completions.create(**kw)
        self.assertIsNone(getattr(plain, "sift", None))  # not asked for
        self.assertEqual(r.choices[0].text, plain.choices[0].text)
        kept = r.sift["kept"]
        n = r.usage.prompt_tokens
        self.assertEqual(kept["prompt_tokens"], n)
        self.assertEqual(kept["tokens"], n)
        self.assertNotIn("filtered_prompt", kept)
        # StreamingLLM keeps the same positions in every layer and head: its 4 sinks and the
        # most recent ones, as many in all as tokens_kept.
        self.assertEqual(len(kept["layers"]), 1)
        group = kept["layers"][0]
        self.assertEqual(group["first"], 0)
        recent = r.usage.sift["tokens_kept"] - 4
        for head in group["heads"]:
            self.assertEqual(head, [[0, 4], [n - recent, n]])
        streamed = list(client.completions.create(
            stream=True, extra_body={"sift": {"return_kept": True}}, **kw))
        with_kept = [c for c in streamed if getattr(c, "sift", None)]
        self.assertEqual(len(with_kept), 1)
        self.assertEqual(with_kept[0].choices[0].finish_reason, r.choices[0].finish_reason)
        self.assertEqual(with_kept[0].sift["kept"], kept)
        out = subprocess.run([os.path.join(BUILD, "bin/sift"), "--endpoint", D.endpoint,
                              "generate", "-p", "streamingllm", "--prompt", self.PROMPT, "-n", "3",
                              "--json", "--kept"], capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout)["kept"], kept)
        with self.assertRaises(openai.BadRequestError) as e:
            client.completions.create(extra_body={"sift": {"return_kept": 1}}, **kw)
        self.assertEqual(e.exception.body["param"], "sift.return_kept")

    def test_unknown_extension_field(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.kept(extra_body={"sift": {"keep_ratio": 0.2}})
        self.assertEqual(e.exception.body["param"], "sift.keep_ratio")

    def test_deadline_header_and_field(self):
        client = D.client()
        for extra in ({"extra_headers": {"X-Sift-Deadline-Ms": "300"},
                       "extra_body": {"sift": {"ignore_eos": True}}},
                      {"extra_body": {"sift": {"deadline_ms": 300, "ignore_eos": True}}}):
            with self.assertRaises(openai.APIStatusError) as e:
                client.completions.create(model="full", prompt=LONG_PROMPT, temperature=0,
                                          max_tokens=500, **extra)
            self.assertEqual(e.exception.status_code, 504, e.exception.body)
            self.assertEqual(e.exception.body["code"], "deadline")
        with self.assertRaises(openai.BadRequestError) as e:
            client.completions.create(model="full", prompt="x", max_tokens=1,
                                      extra_headers={"X-Sift-Deadline-Ms": "soon"})
        self.assertEqual(e.exception.body["param"], "X-Sift-Deadline-Ms")


class Errors(unittest.TestCase):
    def test_openai_error_shape(self):
        client = D.client()
        cases = [
            (dict(model="nope"), openai.NotFoundError, "model_not_found", "model"),
            (dict(n=2), openai.BadRequestError, "unsupported", "n"),
            (dict(temperature=-1), openai.BadRequestError, "bad_field", "temperature"),
            (dict(top_p=0), openai.BadRequestError, "bad_field", "top_p"),
            (dict(logprobs=True), openai.BadRequestError, "unsupported", "logprobs"),
            (dict(max_tokens=0), openai.BadRequestError, "bad_field", "max_tokens"),
            (dict(messages=[]), openai.BadRequestError, "bad_field", "messages"),
            (dict(messages=[{"role": "user", "content": "x " * 2000}]), openai.BadRequestError,
             "prompt_too_long", None),
        ]
        for patch, error, code, param in cases:
            with self.subTest(patch=str(patch)[:60]):
                body = chat("Hi", max_tokens=4)
                body.update(patch)
                with self.assertRaises(error) as e:
                    client.chat.completions.create(**body)
                err = e.exception.body
                self.assertEqual(err["code"], code)
                self.assertEqual(err["param"], param)
                self.assertTrue(err["message"])
                self.assertIn(err["type"], ("invalid_request_error",))
        with self.assertRaises(openai.BadRequestError) as e:
            client.completions.create(model="full", prompt=["one", "two"], max_tokens=2)
        self.assertEqual(e.exception.body["param"], "prompt")

    def test_too_large_body(self):
        with self.assertRaises(openai.APIStatusError) as e:
            D.client().chat.completions.create(**chat("y" * (MAX_BODY + 10)))
        self.assertEqual(e.exception.status_code, 413)
        self.assertEqual(e.exception.body["code"], "request_too_large")

    def test_http_level_errors(self):
        cases = [
            (b"GET /v1/nothing HTTP/1.1\r\nHost: x\r\n\r\n", 404, "not_found"),
            (b"GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", 405, "method_not_allowed"),
            (post("/v1/chat/completions", b"{not json"), 400, "bad_json"),
            (post("/v1/chat/completions", b"[" * 5000 + b"]" * 5000), 400, "too_deep"),
            (post("/v1/completions", b'{"model": "full", "prompt": "\xff\xfe"}'), 400, "bad_json"),
            (b"\x00\xffgarbage\r\n\r\n", 400, "bad_http"),
            (b"GET /v1/models HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n", 431,
             "header_too_large"),
            (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n"
             b"Expect: 100-continue\r\n\r\n", 413, "request_too_large"),
            (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
             + (b"10000\r\n" + b"z" * 0x10000 + b"\r\n") * 5, 413, "request_too_large"),
        ]
        for data, status, code in cases:
            with self.subTest(data=data[:40]):
                out = raw_request(D.openai, data)
                self.assertEqual(status_of(out), status, out[:300])
                self.assertEqual(body_of(out)["error"]["code"], code)

    def test_queue_full_is_429_and_the_queue_is_shared(self):
        """--workers 1 --queue-size 1: an HTTP request runs, a ZeroMQ one waits in the same
        queue, the next HTTP one is refused with 429 and Retry-After."""
        host, port = D.openai.rsplit(":", 1)
        running = socket.create_connection((host, int(port)))
        try:
            running.sendall(post("/v1/completions", {
                "model": "full", "prompt": LONG_PROMPT, "max_tokens": 400,
                "sift": {"ignore_eos": True}}))
            D.wait_metric("sift_requests_running", lambda v: v >= 1)
            zmq_client = subprocess.Popen(
                [os.path.join(BUILD, "bin/sift"), "--endpoint", D.endpoint, "generate",
                 "--prompt", "Hi", "-n", "2", "--json", "--no-stream"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            D.wait_metric("sift_queue_depth", lambda v: v >= 1)
            with self.assertRaises(openai.RateLimitError) as e:
                D.client().completions.create(model="full", prompt="Hi", max_tokens=2)
            headers = e.exception.response.headers
            self.assertGreaterEqual(int(headers["retry-after"]), 1)
            self.assertGreaterEqual(int(headers["retry-after-ms"]), 1)
            self.assertEqual(e.exception.body["code"], "queue_full")
        finally:
            running.close()  # cancels the running request; the ZeroMQ one runs next
        out, err = zmq_client.communicate(timeout=120)
        self.assertEqual(zmq_client.returncode, 0, err)
        self.assertEqual(json.loads(out)["usage"]["completion_tokens"], 2)


class Disconnects(unittest.TestCase):
    def gone(self):
        return D.metric("sift_requests_total", pipeline="full", outcome="client_gone")

    def test_stream_disconnect_cancels(self):
        before = self.gone()
        client = D.client()
        stream = client.completions.create(model="full", prompt=LONG_PROMPT, temperature=0,
                                           max_tokens=400, stream=True,
                                           extra_body={"sift": {"ignore_eos": True}})
        first = next(iter(stream))
        self.assertTrue(first.choices[0].text is not None)
        stream.close()
        client.close()
        # outcome client_gone (not ok) proves the request stopped before its 400 tokens.
        D.wait_metric("sift_requests_total", lambda v: v >= before + 1, pipeline="full",
                      outcome="client_gone")
        D.wait_metric("sift_requests_live", lambda v: v == 0)
        self.assertIn('"event":"openai_client_gone"', D.log())

    def test_whole_response_disconnect_cancels(self):
        before = self.gone()
        host, port = D.openai.rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
        s.sendall(post("/v1/completions", {"model": "full", "prompt": LONG_PROMPT,
                                           "max_tokens": 400, "temperature": 0,
                                           "sift": {"ignore_eos": True}}))
        D.wait_metric("sift_requests_running", lambda v: v >= 1)
        s.close()
        D.wait_metric("sift_requests_total", lambda v: v >= before + 1, pipeline="full",
                      outcome="client_gone")
        D.wait_metric("sift_requests_live", lambda v: v == 0)
        self.assertGreaterEqual(D.metric("sift_clients_gone_total", cause="disconnected"), 1)


class SlowAndMany(unittest.TestCase):
    @staticmethod
    def closed_within(s, seconds):
        """Seconds until the server closed `s`, or None if it was still open after `seconds`."""
        s.settimeout(seconds)
        start = time.time()
        try:
            while s.recv(4096):
                pass
        except socket.timeout:
            return None
        except ConnectionResetError:
            pass
        return time.time() - start

    def connect(self):
        host, port = D.openai.rsplit(":", 1)
        return socket.create_connection((host, int(port)))

    def test_slow_clients_are_dropped(self):
        idle = self.connect()  # sends nothing
        header = self.connect()  # a header that never ends
        header.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        body = self.connect()  # a body that never completes
        body.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        drip = self.connect()  # one header byte every 0.3 s: still bounded by the timeout
        stop = threading.Event()

        def dribble():
            for byte in b"GET /v1/models HTTP/1.1\r\nX-Slow: " + b"a" * 1000:
                if stop.is_set():
                    return
                try:
                    drip.sendall(bytes([byte]))
                except OSError:
                    return
                time.sleep(0.3)

        t = threading.Thread(target=dribble)
        t.start()
        limit = TIMEOUT_MS / 1000 * 2 + 3
        try:
            for s in (idle, header, body, drip):
                took = self.closed_within(s, limit)
                self.assertIsNotNone(took, "the server kept a slow connection open")
        finally:
            stop.set()
            t.join()
            for s in (idle, header, body, drip):
                s.close()

    def test_many_connections(self):
        socks = [self.connect() for _ in range(MAX_CONNECTIONS + 20)]
        try:
            D.wait_metric("sift_openai_connections", lambda v: v >= MAX_CONNECTIONS, timeout=5)
            # Beyond --openai-max-connections a connection gets 503 and is closed.
            refused = 0
            for s in socks[MAX_CONNECTIONS - 5:]:
                s.settimeout(5)
                try:
                    if status_of(s.recv(4096)) == 503:
                        refused += 1
                except socket.timeout:
                    pass
            self.assertGreaterEqual(refused, 20)
        finally:
            for s in socks:
                s.close()
        D.wait_metric("sift_openai_connections", lambda v: v <= 2, timeout=30)
        # Served again once they are gone.
        r = D.client().completions.create(model="full", prompt="Hi", max_tokens=2)
        self.assertEqual(r.usage.completion_tokens, 2)

    def test_concurrent_streams(self):
        """Several streams at once on one worker: all complete, each equal to its own greedy
        text (the shared queue serialises them)."""
        # queue-size 1 + 1 worker: two at a time fit; the openai client retries 429s itself.
        client = D.client(max_retries=20)
        prompts = ["Name a colour.", "Name an animal."]
        expected = [client.completions.create(model="full", prompt=p, temperature=0,
                                              max_tokens=10).choices[0].text for p in prompts]
        results = [None] * len(prompts)

        def run(i):
            chunks = client.completions.create(model="full", prompt=prompts[i], temperature=0,
                                               max_tokens=10, stream=True)
            results[i] = "".join(c.choices[0].text for c in chunks)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(results, expected)

    def test_fuzzed_requests_never_crash(self):
        rng = random.Random(1234)
        base = json.dumps({"model": "full", "prompt": "Hi", "max_tokens": 1, "temperature": 0,
                           "sift": {"params": {}, "deadline_ms": 3000}}).encode()
        statuses = {}
        for _ in range(150):
            body = bytearray(base)
            for _ in range(rng.randint(1, 4)):
                op = rng.random()
                i = rng.randrange(len(body))
                if op < 0.4:
                    body[i] = rng.randrange(256)
                elif op < 0.7:
                    del body[i:i + rng.randint(1, 5)]
                else:
                    body[i:i] = bytes(rng.choice(b'{}[]":,0123456789-.ex\\') for _ in range(3))
            out = raw_request(D.openai, post("/v1/completions", bytes(body)), read_timeout=60)
            status = status_of(out)
            statuses[status] = statuses.get(status, 0) + 1
            self.assertIsNotNone(status, out[:200])
            if status != 200:
                self.assertIn("error", body_of(out))
        self.assertIn(400, statuses)
        self.assertEqual(D.client().completions.create(model="full", prompt="Hi",
                                                       max_tokens=1).usage.completion_tokens, 1)


def doc_blocks(path, language):
    with open(os.path.join(SOURCE, path)) as f:
        text = f.read()
    return re.findall(r"```" + language + r"\n(.*?)```", text, re.S)


class DocExamples(unittest.TestCase):
    """The examples of docs/openai.md and the README's quick start, run as written against
    this daemon (only the address changes)."""

    def run_curl_blocks(self, path):
        blocks = [b for b in doc_blocks(path, "bash") if "curl" in b and DOC_ADDRESS in b]
        self.assertTrue(blocks, f"no curl example for {DOC_ADDRESS} in {path}")
        for block in blocks:
            script = block.replace(DOC_ADDRESS, D.openai)
            out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True,
                                 text=True, timeout=300)
            self.assertEqual(out.returncode, 0, f"{script}\n{out.stderr}")
            self.assertTrue(re.search(r'"(choices|data|content)"|data: \[DONE\]', out.stdout),
                            f"{script}\n-> {out.stdout[:500]}")

    def test_docs_curl(self):
        self.run_curl_blocks("docs/openai.md")

    def test_readme_curl(self):
        self.run_curl_blocks("README.md")

    def test_docs_python(self):
        blocks = [b for b in doc_blocks("docs/openai.md", "python") if DOC_ADDRESS in b]
        self.assertTrue(blocks)
        for block in blocks:
            out = subprocess.run([sys.executable, "-c", block.replace(DOC_ADDRESS, D.openai)],
                                 capture_output=True, text=True, timeout=300)
            self.assertEqual(out.returncode, 0, f"{block}\n{out.stderr}")
            self.assertTrue(out.stdout.strip(), block)


class SecurityAndDrain(unittest.TestCase):
    def test_non_loopback_needs_keys(self):
        out = subprocess.run([os.path.join(BUILD, "bin/siftd"), "--model", MODEL,
                              "--openai", "0.0.0.0:0", "--http", "off",
                              "--bind", "tcp://127.0.0.1:*"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 1)
        self.assertIn("insecure_bind", out.stderr)

    def test_keys_and_drain(self):
        keys = os.path.join(tempfile.mkdtemp(), "keys")
        with open(keys, "w") as f:
            f.write("# test keys\n" + API_KEY + "\n")
        d = Daemon("--openai-api-keys", keys, "--drain-timeout-ms", "60000",
                   openai_address="0.0.0.0:0")
        try:
            for bad in ("wrong-key-wrong-key-00", ""):
                with self.assertRaises(openai.AuthenticationError):
                    d.client(api_key=bad or "x").models.list()
            raw = raw_request(d.openai, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertEqual(status_of(raw), 401)
            # /health answers load balancers without a key (and says nothing else).
            health = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            raw = raw_request(d.openai, health)
            self.assertEqual((status_of(raw), body_of(raw)), (200, {"status": "ready"}))
            # /metrics for gateways that reach only this port: behind the keys.
            metrics = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            self.assertEqual(status_of(raw_request(d.openai, metrics + b"\r\n")), 401)
            raw = raw_request(d.openai, metrics + b"Authorization: Bearer " +
                              API_KEY.encode() + b"\r\n\r\n")
            self.assertEqual(status_of(raw), 200)
            for name in (b"sift_requests_waiting ", b"sift_requests_running ",
                         b"sift_kv_usage_ratio "):
                self.assertIn(name, raw)
            good = d.client(api_key=API_KEY)
            self.assertIn("full", [m.id for m in good.models.list().data])

            # Drain: a running stream finishes, a new request gets 503, the daemon exits 0.
            stream = good.completions.create(model="full", prompt=LONG_PROMPT, temperature=0,
                                             max_tokens=40, stream=True,
                                             extra_body={"sift": {"ignore_eos": True}})
            it = iter(stream)
            pieces = [next(it).choices[0].text]
            d.proc.send_signal(signal.SIGTERM)
            d.wait_metric("sift_draining", lambda v: v == 1)
            # Unavailable to the load balancer while the listener still serves the stream.
            raw = raw_request(d.openai, health)
            self.assertEqual((status_of(raw), body_of(raw)), (503, {"status": "draining"}))
            with self.assertRaises(openai.APIStatusError) as e:
                good.completions.create(model="full", prompt="Hi", max_tokens=2)
            self.assertEqual(e.exception.status_code, 503)
            self.assertEqual(e.exception.body["code"], "shutting_down")
            last = None
            for chunk in it:
                pieces.append(chunk.choices[0].text)
                last = chunk
            self.assertEqual(last.choices[0].finish_reason, "length")
            self.assertEqual(d.proc.wait(60), 0)
        finally:
            d.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
