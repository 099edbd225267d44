"""The local server serves requests at once, and answers every error as problem+json.

The slow import is made deterministic: its rows wait on an event the test sets only after the
`GET`s it races have been answered, so the test proves the order without timing anything.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from caseshelf import bootstrap
from caseshelf.devserver import DevServer
from tests.helpers import dev_server, http_call

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]

ROWS = "".join(
    json.dumps({"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"}) + "\n"
    for i in range(10)
)
GATE_SECONDS = 30  # the slow source gives up after this: a broken server fails, never hangs


@pytest.fixture
def server(tmp_path: Path) -> Iterator[DevServer]:
    with dev_server(tmp_path / "home") as srv:
        yield srv


def raw_request(srv: DevServer, data: bytes) -> tuple[int, dict[str, str], Any]:
    """Send `data` as it is on a fresh connection; the status, headers and JSON answer."""
    host, port = srv.server_address[:2]
    with socket.create_connection((str(host), int(port)), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return status, headers, json.loads(body) if body else None


def test_a_content_length_that_is_not_a_number_is_400_problem_json(server: DevServer) -> None:
    status, headers, body = raw_request(
        server,
        b"POST /datasets HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Content-Length: abc\r\n\r\n{}",
    )
    assert status == 400
    assert headers["content-type"] == "application/problem+json"
    assert "Content-Length" in body["detail"]


def test_trace_and_unknown_methods_are_405_problem_json(server: DevServer) -> None:
    for method in (b"TRACE", b"CONNECT", b"BREW"):
        status, headers, body = raw_request(
            server, method + b" /datasets HTTP/1.1\r\nHost: localhost\r\nCookie: secret\r\n\r\n"
        )
        assert status == 405, method
        assert headers["content-type"] == "application/problem+json"
        assert headers["allow"] == "GET, POST"
        assert b"secret" not in json.dumps(body).encode()


def test_requests_the_http_layer_refuses_are_problem_json_not_html(server: DevServer) -> None:
    too_long = b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n"
    many = b"GET /datasets HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(120))
    for data, expected in ((too_long, 414), (many + b"\r\n", 431)):
        status, headers, body = raw_request(server, data)
        assert status == expected
        assert headers["content-type"] == "application/problem+json"
        assert body["status"] == expected


class GatedReader:
    """A row reader that announces it started and then waits for the gate before any row."""

    def __init__(self, inner: Any, started: threading.Event, gate: threading.Event) -> None:
        self.inner, self.started, self.gate = inner, started, gate

    def rows(self, source: Any) -> Iterator[tuple[int, dict[str, Any]]]:
        self.started.set()
        if not self.gate.wait(GATE_SECONDS):
            raise RuntimeError("the gate never opened")
        yield from self.inner.rows(source)

    def offload(self, source: Any, *, limit: int | None = None, num_proc: int = 1) -> None:
        return None


def test_a_slow_import_does_not_delay_other_requests(server: DevServer) -> None:
    # Given an import whose source does not answer until the test lets it
    started, gate = threading.Event(), threading.Event()
    imports = bootstrap.services().imports
    real = imports.reader_for
    imports.reader_for = lambda identity: GatedReader(real(identity), started, gate)
    body = {"recipe": "gsm8k", "dataset": "slow", "source": {"kind": "jsonl", "text": ROWS}}
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(http_call, server.url + "/benchmarks/import", "POST", body)
        try:
            assert started.wait(GATE_SECONDS), "the import never reached its source"
            # When other requests arrive while it waits
            listing = http_call(server.url + "/datasets", timeout=10)
            job = http_call(server.url + "/jobs/" + "0" * 32, timeout=10)
            # Then they are answered while the import is still under way
            assert listing.status == 200 and listing.json["items"] == []
            assert job.status == 404
            assert not pending.done()
        finally:
            gate.set()
        done = pending.result(timeout=GATE_SECONDS)
    assert done.status == 201, done.json
    assert done.json["case_count"] == 10


def test_a_running_job_does_not_block_get_jobs(server: DevServer) -> None:
    # Given an upload whose import job waits at its source
    started, gate = threading.Event(), threading.Event()
    jobs = bootstrap.services().jobs
    jobs.object_reader = GatedReader(jobs.object_reader, started, gate)
    up = http_call(
        server.url + "/uploads",
        "POST",
        {"filename": "rows.jsonl", "recipe": "gsm8k", "dataset": "up"},
    )
    assert up.status == 201, up.json
    put = http_call(up.json["upload_url"], "PUT", raw=ROWS.encode())
    assert put.status == 200
    try:
        assert started.wait(GATE_SECONDS), "the job never started"
        # When its state is asked for while it runs
        state = http_call(server.url + "/jobs/" + up.json["job_id"], timeout=10)
        # Then the answer comes at once: running
        assert state.status == 200 and state.json["state"] == "running"
    finally:
        gate.set()
    server.wait_for_workers(GATE_SECONDS)
    final = http_call(server.url + "/jobs/" + up.json["job_id"])
    assert final.json["state"] == "succeeded", final.json


def test_concurrent_requests_of_different_tenants_keep_their_own_identity(
    server: DevServer,
) -> None:
    # Given many tenants registering and reading at the same moment
    tenants = [f"team-{i:02d}" for i in range(16)]
    barrier = threading.Barrier(len(tenants))

    def one(tenant: str) -> tuple[int, int, list[str]]:
        headers = {"X-Caseshelf-Tenant": tenant}
        doc = {
            "id": f"ds-{tenant}",
            "version": "1.0.0",
            "cases": [{"id": "c0", "inputs": {"user": tenant}}],
        }
        barrier.wait()
        reg = http_call(server.url + "/datasets", "POST", doc, headers=headers, timeout=30)
        listing = http_call(server.url + "/datasets", headers=headers, timeout=30)
        return reg.status, listing.status, [d["id"] for d in listing.json["items"]]

    with ThreadPoolExecutor(len(tenants)) as pool:
        results = list(pool.map(one, tenants))
    # Then every request acted for its own tenant, and only saw its own dataset
    assert len(results) == len(tenants) == 16
    for tenant, (reg, listing, ids) in zip(tenants, results, strict=True):
        assert (reg, listing) == (201, 200)
        assert ids == [f"ds-{tenant}"]


class Killed(BaseException):
    """The server's process dies here (nothing in the worker handles it)."""


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_job_whose_worker_died_with_the_last_server_is_resumed_by_the_next(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    # Given a server whose import worker dies mid-job (a short lease, so it expires at once)
    with dev_server(home) as first:
        jobs = bootstrap.services().jobs
        jobs.lease_seconds = 0.2

        def die(*args: Any, **kwargs: Any) -> Any:
            raise Killed()

        jobs.imports.run = die  # type: ignore[method-assign]
        up = http_call(
            first.url + "/uploads",
            "POST",
            {"filename": "rows.jsonl", "recipe": "gsm8k", "dataset": "resumed"},
        ).json
        assert http_call(up["upload_url"], "PUT", raw=ROWS.encode()).status == 200
        first.wait_for_workers(GATE_SECONDS)
        state = http_call(first.url + "/jobs/" + up["job_id"]).json
        assert state["state"] == "running"
    # When the next server starts on the same store
    with dev_server(home) as second:
        # (its sweep runs at start and then every minute: one that came before the dead
        # worker's lease ran out is run again, as the next minute would)
        pause = threading.Event()
        for tick in range(GATE_SECONDS * 10):
            state = http_call(second.url + "/jobs/" + up["job_id"]).json
            if state["state"] != "running" or pause.wait(0.1):
                break
            if tick % 10 == 9:
                second.run_schedules()
        # Then its sweep resumed the job, and it finished
        assert state["state"] == "succeeded", state
        assert state["result"]["case_count"] == 10
