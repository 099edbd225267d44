"""A local server killed mid-export (SIGKILL: its in-process queue, the part being written and
the parts waiting are lost with it) and started again over the same store: its sweep at start
sends the parts again and the export job ends `succeeded`, with every case exported.

Each server is a subprocess (`SERVER` below) that prints its URL, then `swept` each time its
scheduled functions have run and what they sent has been delivered. The first one's part 1
prints `part-started` and blocks, so the test kills it mid-part by that event; the second one's
job services read a clock ten minutes ahead (what the periodic sweep would see a minute later),
so its sweep at start finds the dead part's lease run out without the test waiting."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest

from caseshelf import bootstrap
from caseshelf.domain.identity import Identity
from caseshelf.services.exports import ExportRequest
from tests.helpers import http_call

pytestmark = [pytest.mark.e2e]

ME = Identity("acme", "alice")

SERVER = r"""
import sys, threading
from datetime import timedelta
from caseshelf import bootstrap
from caseshelf.devserver import DevServer, make_server
from caseshelf.domain import export_parts
from caseshelf.services.export_jobs import ExportJobService
from caseshelf.services.versioned import utc_now

home, mode = sys.argv[1], sys.argv[2]
export_parts.MAX_PART_CASES = 3
if mode == "block":
    write = ExportJobService._write_part

    def blocking(self, job, opened, number, rng):
        if number == 1:
            print("part-started", flush=True)
            threading.Event().wait()
        return write(self, job, opened, number, rng)

    ExportJobService._write_part = blocking
schedules = DevServer.run_schedules


def run_schedules(self):
    schedules(self)
    self.wait_for_workers()
    print("swept", flush=True)


DevServer.run_schedules = run_schedules
settings = bootstrap.load_settings({}, home=home, tenant="acme", principal="alice")
srv = make_server(settings, "127.0.0.1", 0, quiet=True)
if mode == "later":
    services = bootstrap.services()
    services.export_jobs.clock = lambda: utc_now() + timedelta(minutes=10)
print(srv.url, flush=True)
srv.serve_forever()
"""


def start(home: Path, mode: str, log: IO[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(home), mode],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), url
    return proc, url


def wait_for(proc: subprocess.Popen[str], line: str) -> None:
    """Read the server's lines until `line` (the event), failing if it exits first."""
    assert proc.stdout is not None
    while True:
        got = proc.stdout.readline()
        assert got, f"the server exited before printing {line!r}"
        if got.strip() == line:
            return


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def call(url: str, method: str, path: str, body: Any = None) -> Any:
    return http_call(url + path, method, body, timeout=60)


def test_an_export_whose_server_was_killed_mid_part_ends_after_a_restart(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cases = [{"id": f"c{i}", "inputs": {"user": f"q{i}"}} for i in range(10)]
    with (tmp_path / "server.log").open("w") as log:
        first, url = start(home, "block", log)
        try:
            wait_for(first, "swept")  # its sweep at start: nothing to do
            made = call(url, "POST", "/datasets", {"id": "qa", "version": "1.0.0", "cases": cases})
            assert made.status == 201, made.body
            # Given an export of 4 parts whose server dies while part 1 is being written
            started = call(url, "POST", "/datasets/qa/versions/1.0.0/exports", {"bundle": True})
            assert started.status == 202, started.body
            job = started.json
            assert job["progress"]["parts_total"] == 4
            wait_for(first, "part-started")
        finally:
            stop(first)
        assert first.returncode == -signal.SIGKILL
        # When a server is started again over the same store
        second, url = start(home, "later", log)
        try:
            wait_for(second, "swept")  # its sweep at start, and the deliveries it sent
            # Then the job has ended, succeeded, every case exported, the dead part sent again
            done = call(url, "GET", f"/jobs/{job['id']}")
            assert done.status == 200, done.body
            assert done.json["state"] == "succeeded", done.json
            assert done.json["progress"]["parts_done"] == 4
            assert done.json["progress"]["cases_written"] == 10
        finally:
            stop(second)
    # And the export is the one an undisturbed run writes, file for file
    services = bootstrap.build(bootstrap.load_settings({}, home=str(home), tenant="acme"))
    ref = tmp_path / "ref"
    services.exports.export_version(ME, "qa", "1.0.0", ExportRequest(bundle=True), to=str(ref))
    prefix = done.json["result"]["manifest_key"].removesuffix("manifest.json")
    expected = {
        p.relative_to(ref).as_posix(): p.read_bytes() for p in ref.rglob("*") if p.is_file()
    }
    assert len(expected) > 10
    assert {o.key[len(prefix) :] for o in services.store.list(prefix)} == set(expected)
    assert all(services.store.get(prefix + rel) == data for rel, data in expected.items())
