"""Three siftd replicas behind HAProxy (deploy/haproxy.cfg as shipped), issue 27.

Each replica runs in its own network namespace, joined to this one by a veth pair, with its
OpenAI port on the namespace's address; HAProxy (Debian's package) runs here with the
repository's configuration. Concurrent streaming clients go through HAProxy while
  1. replica 1 is drained (SIGTERM): its /health turns 503 while its listener still serves,
     HAProxy stops sending it new requests, and its in-flight streams finish;
  2. replica 2 is killed (SIGKILL): its in-flight streams fail with an error the client sees
     (the stream ends without its final event), no other request is lost, and new requests go
     to the survivor.
Needs root (ip netns) and haproxy; run by tests/deploy/run.sh (ctest deploy_haproxy).
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

BUILD = os.environ["SIFT_BUILD"]
SOURCE = os.environ["SIFT_SOURCE"]
MODEL = os.environ["SIFT_MODEL"]
HAPROXY = os.environ.get("SIFT_HAPROXY", "/usr/sbin/haproxy")
KEY = "sk-deploy-test-0123456789abcdef"
ID = str(os.getpid())


def sh(*args):
    subprocess.run(args, check=True, capture_output=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read(path):
    with open(path) as f:
        return f.read()


def get(address, path):
    """(HTTP status, the body's "status") of GET address/path."""
    host, port = address.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, json.loads(r.read()).get("status")
    finally:
        c.close()


class Replica:
    """siftd in namespace sift-r<i>-<pid>, its OpenAI port on 10.215.<i>.2:8080."""

    def __init__(self, i, tmp):
        self.i, self.ns = i, f"sift-r{i}-{ID}"
        self.host, self.gw = f"10.215.{i}.2", f"10.215.{i}.1"
        self.address = f"{self.host}:8080"
        outer, inner = f"dr{i}{ID}"[:15], f"di{i}{ID}"[:15]
        sh("ip", "netns", "add", self.ns)
        sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        sh("ip", "link", "set", inner, "netns", self.ns)
        sh("ip", "addr", "add", f"{self.gw}/24", "dev", outer)
        sh("ip", "link", "set", outer, "up")
        sh("ip", "-n", self.ns, "addr", "add", f"{self.host}/24", "dev", inner)
        sh("ip", "-n", self.ns, "link", "set", inner, "up")
        sh("ip", "-n", self.ns, "link", "set", "lo", "up")
        self.dir = os.path.join(tmp, f"r{i}")
        os.makedirs(self.dir)
        keys = os.path.join(tmp, "keys")
        self.log = open(os.path.join(self.dir, "siftd.log"), "w")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, os.path.join(BUILD, "bin/siftd"),
             "--model", MODEL, "--plugins", os.path.join(BUILD, "plugins"),
             "--pipelines", os.path.join(SOURCE, "pipelines"), "--staging-dir", self.dir,
             "--threads", "1", "--http", "off", "--bind", f"ipc://{self.dir}/siftd.sock",
             "--openai", self.address, "--openai-api-keys", keys,
             "--drain-timeout-ms", "60000", "--allow-ignore-eos", "true",
             "--ready-file", os.path.join(self.dir, "ready.json"), "--log-format", "json"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def ready(self):
        return os.path.exists(os.path.join(self.dir, "ready.json"))

    def health(self):
        try:
            return get(self.address, "/health")
        except OSError:
            return None, "unreachable"

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)


class Stream:
    """One streamed completion through HAProxy, read on its own thread."""

    def __init__(self, address, max_tokens):
        self.address, self.max_tokens = address, max_tokens
        self.replica, self.chunks, self.done, self.error = None, 0, False, None
        self.started = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        body = {"model": "full", "prompt": "Once upon a time", "max_tokens": self.max_tokens,
                "temperature": 0, "stream": True, "sift": {"ignore_eos": True}}
        host, port = self.address.rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port), timeout=120)
        try:
            c.request("POST", "/v1/completions", body=json.dumps(body),
                      headers={"Authorization": f"Bearer {KEY}",
                               "Content-Type": "application/json"})
            r = c.getresponse()
            self.replica = r.getheader("X-Sift-Replica")
            if r.status != 200:
                self.error = f"HTTP {r.status}: {r.read()!r}"
                return
            while True:
                line = r.readline()  # http.client undoes the chunked encoding
                if not line:
                    break
                line = line.decode().strip()
                if line == "data: [DONE]":
                    self.done = True
                elif line.startswith("data: "):
                    json.loads(line[6:])
                    self.chunks += 1
                    self.started.set()
            if not self.done:
                self.error = "the stream ended without its final event"
        except (OSError, http.client.HTTPException, ValueError) as e:
            self.error = f"{type(e).__name__}: {e}"
        finally:
            c.close()
            self.started.set()

    def join(self):
        self.thread.join(180)
        return self


class HaproxyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        with open(os.path.join(cls.tmp, "keys"), "w") as f:
            f.write(KEY + "\n")
        cls.replicas = []
        try:
            for i in (1, 2, 3):
                cls.replicas.append(Replica(i, cls.tmp))
        except subprocess.CalledProcessError as e:
            cls.tearDownClass()
            raise unittest.SkipTest(f"network namespaces: {e.args} failed: {e.stderr!r}")
        end = time.time() + 180
        while not all(r.ready() for r in cls.replicas) and time.time() < end:
            time.sleep(0.2)
        port = free_port()
        cls.base = f"127.0.0.1:{port}"
        env = dict(os.environ, SIFT_LISTEN=f"127.0.0.1:{port}",
                   **{f"SIFT_REPLICA_{r.i}": r.address for r in cls.replicas})
        cls.haproxy_log = open(os.path.join(cls.tmp, "haproxy.log"), "w")
        cls.haproxy = subprocess.Popen(
            [HAPROXY, "-db", "-f", os.path.join(SOURCE, "deploy/haproxy.cfg")], env=env,
            stdout=cls.haproxy_log, stderr=subprocess.STDOUT)

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "haproxy", None) is not None:
            cls.haproxy.kill()
            cls.haproxy.wait()
            cls.haproxy_log.close()
        for r in cls.replicas:
            r.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def up(self):
        """Whether HAProxy answers /health through a replica (each check goes to one)."""
        try:
            return get(self.base, "/health")[0] == 200
        except OSError:
            return False

    def wait_until(self, what, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            if what():
                return True
            time.sleep(0.1)
        return False

    def test_drain_and_kill_under_streaming_load(self):
        r1, r2, r3 = self.replicas
        for r in self.replicas:
            self.assertTrue(r.ready(), read(os.path.join(r.dir, "siftd.log")))
            self.assertEqual(r.health(), (200, "ready"))
        # HAProxy's checks see all three up; requests spread over them (least connections).
        self.assertTrue(self.wait_until(self.up), read(self.haproxy_log.name))
        streams = [Stream(self.base, 300) for _ in range(6)]
        for s in streams:
            self.assertTrue(s.started.wait(120), s.error)
        served = {s.replica for s in streams}
        self.assertEqual(served, {"replica1", "replica2", "replica3"}, [s.error for s in streams])
        on = {name: [s for s in streams if s.replica == name] for name in served}

        # 1. Drain replica 1: health turns 503 while its listener still answers.
        r1.proc.send_signal(signal.SIGTERM)
        self.assertTrue(self.wait_until(lambda: r1.health() == (503, "draining"), 10),
                        r1.health())
        time.sleep(1.5)  # > HAProxy's check interval (500 ms, fall 1)
        later = [Stream(self.base, 8).join() for _ in range(4)]
        for s in later:
            self.assertTrue(s.done, s.error)
            self.assertNotEqual(s.replica, "replica1")

        # 2. Kill replica 2 mid-stream.
        r2.proc.kill()
        r2.proc.wait()
        survivors = [Stream(self.base, 8).join() for _ in range(4)]
        for s in survivors:
            self.assertTrue(s.done, s.error)
            self.assertEqual(s.replica, "replica3")

        # Every stream on replica 1 and 3 finished; every stream on replica 2 ended without
        # its final event, which the client sees as an error or a truncated stream.
        for s in streams:
            s.join()
        for s in on["replica1"] + on["replica3"]:
            self.assertTrue(s.done, (s.replica, s.error, s.chunks))
            self.assertEqual(s.chunks, 300 + 1, (s.replica, s.chunks))  # + the final event
        for s in on["replica2"]:
            self.assertFalse(s.done, (s.replica, s.chunks))
            self.assertLess(s.chunks, 301)
        # The drained replica exited cleanly once its streams were done.
        self.assertEqual(r1.proc.wait(60), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
