"""A small Python client for siftd (protocol SIFT/1 over ZeroMQ; see docs/protocol.md).

Needs pyzmq (Debian: python3-zmq). One SiftClient owns one DEALER socket; several requests may
be in flight on it. Not thread-safe: use one client per thread.

    from sift_client import SiftClient
    with SiftClient("tcp://127.0.0.1:7700") as c:
        print(c.ping())
        for event in c.generate("full", context=text, question="Who?", max_tokens=32):
            if event["type"] == "chunk":
                print(event["text"], end="", flush=True)
        final = c.last_final          # the final message (stats, usage)

Errors come back as SiftError (code, reason, message, details, retryable).
"""

import itertools
import json
import os
import time

import zmq
from zmq.utils.monitor import recv_monitor_message

MAGIC = b"SIFT/1"


class SiftError(Exception):
    """An `error` reply: code (e.g. "INVALID_ARGUMENT"), reason slug, message, details."""

    def __init__(self, header):
        self.header = header
        self.code = header.get("code", "UNKNOWN")
        self.reason = header.get("reason", "")
        self.details = header.get("details", {})
        self.retryable = bool(header.get("retryable", False))
        self.retry_after_ms = header.get("retry_after_ms")
        super().__init__("%s/%s: %s" % (self.code, self.reason, header.get("message", "")))


class SiftTimeout(Exception):
    """No message from the daemon within the timeout, or none could be sent (send_timeout_s)."""


class SiftClient:
    def __init__(self, endpoint="tcp://127.0.0.1:7700", timeout_s=30.0,
                 server_public_key=None, secret_key=None, context=None, send_timeout_s=5.0):
        """endpoint: the daemon's client port. timeout_s: longest silence accepted while
        waiting (the daemon heartbeats every second while a request is busy).
        CURVE: pass the server's public key and this client's secret key (Z85 str/bytes).
        send_timeout_s: how long a message may wait for a connection. While the daemon is
        unreachable messages queue and send() returns at once; a refused CURVE handshake leaves
        the socket no connection at all, and send() then raises SiftTimeout after this long
        instead of blocking forever."""
        self._ctx = context or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.SNDTIMEO, int(send_timeout_s * 1000))
        self._endpoint = endpoint
        self._send_timeout_s = send_timeout_s
        # Handshake failures, watched from before the connection: connection_problem().
        self._monitor = self._sock.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
        self._problem = ""
        self._failed = False
        self._poller = zmq.Poller()  # a reply or a handshake event, whichever comes first
        self._poller.register(self._sock, zmq.POLLIN)
        self._poller.register(self._monitor, zmq.POLLIN)
        self._sock.setsockopt(zmq.SNDHWM, 10000)
        self._sock.setsockopt(zmq.RCVHWM, 10000)
        if server_public_key or secret_key:
            secret = _key_bytes(secret_key)
            self._sock.curve_serverkey = _key_bytes(server_public_key)
            self._sock.curve_secretkey = secret
            self._sock.curve_publickey = zmq.curve_public(secret)
        self._sock.connect(endpoint)
        self.timeout_s = timeout_s
        self._ids = itertools.count(1)
        self._pending = []  # replies read while waiting for something else
        self.last_final = None

    # -- plumbing -----------------------------------------------------------------------------

    def close(self):
        self._sock.disable_monitor()
        self._monitor.close(0)
        self._sock.close(0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, header, blobs=()):
        """Sends one message: [SIFT/1][JSON header][binary frames...]."""
        frames = [MAGIC, json.dumps(header).encode("utf-8")] + [bytes(b) for b in blobs]
        try:
            self._sock.send_multipart(frames)
        except zmq.Again:
            why = self.connection_problem() or (
                "no connection took the message in %.1f s (did the server refuse this client's "
                "CURVE keys?)" % self._send_timeout_s)
            raise SiftTimeout("cannot send to %s: %s" % (self._endpoint, why)) from None

    def recv(self, timeout_s=None):
        """The next reply header (any request's), or SiftTimeout."""
        if self._pending:
            return self._pending.pop(0)
        timeout = self.timeout_s if timeout_s is None else timeout_s
        end = time.monotonic() + timeout
        while True:
            ready = dict(self._poller.poll(max(0, int((end - time.monotonic()) * 1000))))
            if self._sock in ready:
                break
            if self._monitor in ready:
                self.connection_problem()
            if self._failed:
                raise SiftTimeout("no message can come from siftd at %s: %s"
                                  % (self._endpoint, self._problem))
            if time.monotonic() >= end:
                why = self.connection_problem()
                raise SiftTimeout("no message from siftd at %s in %.1f s%s"
                                  % (self._endpoint, timeout, ": " + why if why else ""))
        frames = self._sock.recv_multipart()
        if len(frames) < 2 or frames[0] != MAGIC:
            raise ValueError("reply is not SIFT/1: %r" % frames[:1])
        return json.loads(frames[1].decode("utf-8"))

    def connection_problem(self):
        """Why the handshake with siftd failed, in words ("" while it has not): a refused key,
        security on one side only, a connection closed during the handshake (a wrong server
        key?). A refused key or a mismatch ends the connection for good: recv() then raises at
        once."""
        while self._monitor.poll(0):
            event = recv_monitor_message(self._monitor)
            kind, value = event["event"], event["value"]
            if kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                why = ("the server refused this client's key (CURVE authentication failed, "
                       "status %d)" % value)
            elif kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
                why = {zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
                       "the server and this client use different security (CURVE on one side "
                       "only?)",
                       zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
                       "the CURVE handshake failed (a wrong server public key?)"}.get(
                           value, "the handshake failed (ZeroMQ protocol error 0x%x)" % value)
            else:
                why = ("the server closed the connection during the handshake (a wrong server "
                       "public key, or security settings that differ?)")
            final = kind != zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
            if not self._problem or (final and not self._failed):
                self._problem = why
            self._failed = self._failed or final
        return self._problem

    def _wait_for(self, predicate, timeout_s=None):
        """Reads until predicate(header); other replies are kept for later recv() calls."""
        kept = []
        try:
            while True:
                h = self.recv(timeout_s)
                if predicate(h):
                    return h
                kept.append(h)
        finally:
            self._pending = kept + self._pending

    def new_id(self, prefix="py"):
        return "%s-%d-%d" % (prefix, os.getpid(), next(self._ids))

    # -- messages -----------------------------------------------------------------------------

    def ping(self, nonce=None):
        nonce = next(self._ids) if nonce is None else nonce
        self.send({"type": "ping", "nonce": nonce})
        return self._wait_for(lambda h: h.get("type") == "pong" and h.get("nonce") == nonce)

    def list(self):
        rid = self.new_id("list")
        self.send({"type": "list", "id": rid})
        h = self._wait_for(lambda h: h.get("id") == rid)
        if h.get("type") == "error":
            raise SiftError(h)
        return h

    def cancel(self, request_id):
        self.send({"type": "cancel", "id": request_id})

    def start_generate(self, pipeline, request_id=None, **fields):
        """Sends a generate and returns its id without waiting (see generate())."""
        rid = request_id or self.new_id()
        header = {"type": "generate", "id": rid, "pipeline": pipeline}
        blobs = fields.pop("blobs", ())
        header.update({k: v for k, v in fields.items() if v is not None})
        self.send(header, blobs)
        return rid

    def events(self, request_id):
        """Yields the replies of one request up to and including its terminal message; an
        `error` raises SiftError (after being yielded nowhere). Left before the end (a break
        followed by close(), an exception such as KeyboardInterrupt or SiftTimeout), it cancels
        the request, so that the daemon stops working for nobody; the CANCELLED answer then
        arrives as an ordinary reply (recv())."""
        ended = False
        try:
            while True:
                h = self._wait_for(lambda h: h.get("id") == request_id)
                kind = h.get("type")
                if kind == "error":
                    if h.get("duplicate"):
                        continue  # answers a message that reused this id; not this request's end
                    ended = True
                    raise SiftError(h)
                if kind == "final":
                    ended = True
                    self.last_final = h
                yield h
                if ended:
                    return
        finally:
            if not ended:
                try:
                    self.cancel(request_id)
                except (zmq.ZMQError, SiftTimeout):
                    pass  # no connection left to cancel on

    def generate(self, pipeline, **fields):
        """Sends a generate and yields accepted / chunk / heartbeat / final messages.
        Fields are the protocol's: context+question, messages, prompt or tokens; sampling,
        max_tokens, stop, params, stream, deadline_ms, question_tokens..."""
        rid = self.start_generate(pipeline, **fields)
        return self.events(rid)  # stopped early and closed: the request is cancelled (events())

    def complete(self, pipeline, **fields):
        """Runs a generate to the end and returns its final message (raises SiftError)."""
        fields.setdefault("stream", False)
        final = None
        for h in self.generate(pipeline, **fields):
            if h["type"] == "final":
                final = h
        return final


def _key_bytes(key):
    """A Z85 key given as str/bytes, or the path of a file whose first line holds it."""
    if key is None:
        raise ValueError("CURVE needs both server_public_key and secret_key")
    if isinstance(key, bytes):
        key = key.decode("ascii")
    if len(key) != 40 and os.path.exists(key):
        with open(key) as f:
            key = next(l.strip() for l in f if l.strip() and not l.startswith("#"))
    return key.encode("ascii")
