"""A fault-injecting HTTP proxy on loopback, in front of a moto server: what S3 and DynamoDB do
on a bad day, on demand.

Every request the AWS clients send (S3 and DynamoDB share the moto server's port) goes through
the proxy. A seeded random choice answers a share of them (`rate`) with a fault instead of the
server's answer:

- `500`: S3's `InternalError`, DynamoDB's `InternalServerError`, not forwarded;
- `503`: S3's `SlowDown`, DynamoDB's `ProvisionedThroughputExceededException` (a 400 there),
  not forwarded: throttling;
- `cut`: an object GET is forwarded, and its body cut off part-way (the headers promise the
  whole length, the connection closes early).

The choice for a request depends on the seed, the request's method, its path less the bucket
(tests make buckets of random names), its DynamoDB operation, and how many times that same
request came before (so a retry gets a choice of its own), never on which thread sent it first
or on the bucket's name: the same run meets the same faults.

`GET /__faults` answers the tallies as JSON (for a proxy run as its own process, which the
benchmark does: `python -m tests.faultproxy --upstream URL --rate 0.05 --port N`).
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from tests.serving import server_thread

FAULTS = ("500", "503", "cut")
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}
)
_S3_ERRORS = {
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "503": (503, "SlowDown", "Please reduce your request rate."),
}
_DDB_ERRORS = {
    "500": (500, "InternalServerError", "Internal server error"),
    "503": (
        400,
        "ProvisionedThroughputExceededException",
        "The level of configured provisioned throughput for the table was exceeded.",
    ),
}


class FaultProxy:
    """Forwards to `upstream` (a moto server's URL), answering a `rate` share of requests with
    one of `faults`. `counts` tallies what it did: `forwarded` and each fault."""

    def __init__(
        self,
        upstream: str,
        *,
        rate: float,
        seed: int = 0,
        faults: tuple[str, ...] = FAULTS,
        port: int = 0,
        only: Callable[[str, str, str], bool] | None = None,
    ) -> None:
        """`only(method, path, operation)`, when given, picks the requests that may fail (the
        others are always forwarded): a fault aimed at one step of an operation."""
        parts = urlsplit(upstream)
        assert parts.hostname and parts.port
        self.upstream = (parts.hostname, parts.port)
        self.rate = rate
        self.seed = seed
        self.faults = faults
        self.only = only
        self.counts: Counter[str] = Counter()
        self.ranges: list[str] = []  # the Range header of each object GET, in arrival order
        self._seen: Counter[tuple[str, str, str]] = Counter()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = server_thread(self._server)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def choose(self, method: str, path: str, target: str, cuttable: bool) -> tuple[str, float]:
        """(the fault for this request, or "" to forward it; where a cut falls, 0..1)."""
        if self.only is not None and not self.only(method, path, target):
            return "", 0.0
        with self._lock:
            key = (method, "/" + path.lstrip("/").partition("/")[2], target)
            self._seen[key] += 1
            nth = self._seen[key]
        draw = random.Random(f"{self.seed}|{key}|{nth}")
        if draw.random() >= self.rate:
            return "", 0.0
        kinds = [k for k in self.faults if k != "cut" or cuttable]
        if not kinds:
            return "", 0.0
        return draw.choice(kinds), draw.uniform(0.05, 0.95)

    def note_range(self, header: str) -> None:
        with self._lock:
            self.ranges.append(header)

    def note(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    @property
    def injected(self) -> int:
        return sum(n for k, n in self.counts.items() if k != "forwarded")


@contextmanager
def fault_proxy(
    upstream: str,
    *,
    rate: float,
    seed: int = 0,
    faults: tuple[str, ...] = FAULTS,
    only: Callable[[str, str, str], bool] | None = None,
) -> Iterator[FaultProxy]:
    proxy = FaultProxy(upstream, rate=rate, seed=seed, faults=faults, only=only).start()
    try:
        yield proxy
    finally:
        proxy.stop()


def _handler_for(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        pass

    Handler.proxy = proxy
    return Handler


class _Handler(BaseHTTPRequestHandler):
    proxy: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        body = self._body()
        if self.path == "/__faults":
            tallies = json.dumps(dict(self.proxy.counts)).encode()
            self._send(200, "OK", [("Content-Type", "application/json")], tallies)
            return
        target = self.headers.get("X-Amz-Target") or ""
        path = self.path
        cuttable = self.command == "GET" and not target and "?" not in path and path.count("/") > 1
        if cuttable:
            self.proxy.note_range(self.headers.get("Range") or "")
        fault, where = self.proxy.choose(self.command, path, target, cuttable)
        if fault in ("500", "503"):
            self.proxy.note(fault)
            self._error(fault, dynamodb=bool(target))
            return
        status, reason, headers, answer = self._forward(body)
        if fault == "cut" and status in (200, 206) and len(answer) > 1:
            self.proxy.note("cut")
            self._send(status, reason, headers, answer, cut=max(1, int(len(answer) * where)))
            return
        self.proxy.note("forwarded")
        self._send(status, reason, headers, answer)

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.proxy.upstream, timeout=60)
        try:
            headers = {
                k: v
                for k, v in self.headers.items()
                if k.lower() not in _HOP_BY_HOP and k.lower() not in ("content-length", "expect")
            }
            headers["Content-Length"] = str(len(body))
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            answer = resp.read()
            kept = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP_BY_HOP]
            return resp.status, resp.reason, kept, answer
        finally:
            conn.close()

    def _send(
        self,
        status: int,
        reason: str,
        headers: list[tuple[str, str]],
        answer: bytes,
        *,
        cut: int | None = None,
    ) -> None:
        self.send_response(status, reason)
        has_length = False
        for k, v in headers:
            if k.lower() == "content-length":
                has_length = True
                if self.command != "HEAD":
                    v = str(len(answer))
            self.send_header(k, v)
        if not has_length:
            self.send_header("Content-Length", str(len(answer)))
        if cut is not None:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer if cut is None else answer[:cut])
        self.wfile.flush()

    def _error(self, fault: str, *, dynamodb: bool) -> None:
        if dynamodb:
            status, code, message = _DDB_ERRORS[fault]
            ctype = "application/x-amz-json-1.0"
            body = (
                f'{{"__type":"com.amazonaws.dynamodb.v20120810#{code}","message":"{message}"}}'
            ).encode()
        else:
            status, code, message = _S3_ERRORS[fault]
            ctype = "application/xml"
            body = (
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
            ).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle


def main() -> None:
    parser = argparse.ArgumentParser(description="A fault-injecting proxy for a moto server.")
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    proxy = FaultProxy(args.upstream, rate=args.rate, seed=args.seed, port=args.port)
    proxy._server.serve_forever()


if __name__ == "__main__":
    main()
