"""kill -9 at each write of a registration, in a subprocess, on the embedded store and on moto
as a server over HTTP; then verify, gc and the re-run, from the test process.

The registration (v2 against a committed v1: reused records, new packs, a packed and a
standalone file body, superseded copies, the manifest, the version row, the write fence) runs in
a child process whose store and index send SIGKILL to the process just before their N-th write,
for every N up to one past the last. After each crash: no version is half visible (v2 is absent,
or present and whole), `verify` is clean, gc (once the dead registration's lease has expired)
collects what the crash left and nothing else, and the re-run registers v2 readable in full.

Each registration is a process of its own, forked from one interpreter that has imported the
code once (`Crasher`): a crash point costs the registration, not a second of interpreter
start-up. The forked process builds its own store and index (files, SQLite, boto3 clients)
after the fork, so it shares nothing with the others but the imported modules.
"""

from __future__ import annotations

import base64
import json
import os
import select
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from caseshelf.adapters.localfs import LocalBlobStore
from caseshelf.adapters.sqlite import SqliteIndex
from caseshelf.domain.identity import Identity
from caseshelf.ports import BlobStore, Index
from caseshelf.services.fence import LEASE_SECONDS
from caseshelf.services.gc import collect_garbage
from caseshelf.services.registry import RegistryService, parse_dataset
from caseshelf.services.verify import dataset_versions, verify_versions
from tests.conftest import REPO_ROOT, aws_backend

pytestmark = pytest.mark.contract

ME = Identity("team-a", "alice")
BIG = base64.b64encode(bytes(range(256)) * 1200).decode()  # 300 kB: a standalone blob


def v1() -> dict[str, Any]:
    cases = [{"id": f"c{i}", "inputs": {"user": f"question {i}"}} for i in range(20)]
    return {"id": "demo", "version": "1.0.0", "cases": cases}


def v2() -> dict[str, Any]:
    cases = [{"id": f"c{i}", "inputs": {"user": f"question {i}"}} for i in range(15)]
    cases[3]["inputs"]["user"] = "changed"
    cases.append({"id": "n1", "inputs": {"user": "new"}, "files": {"a.txt": {"text": "A"}}})
    cases.append({"id": "n2", "inputs": {"user": "big"}, "files": {"b.bin": {"base64": BIG}}})
    return {"id": "demo", "version": "2.0.0", "cases": cases}


FORKER = textwrap.dedent(
    """
    import json, os, signal, sys, traceback
    from caseshelf.bootstrap import build_adapters, load_settings
    from caseshelf.domain.identity import Identity
    from caseshelf.services.registry import RegistryService, parse_dataset
    from tests.moto_infra import share_aws_models

    WRITES = {"put_if_absent", "put", "delete", "put_version", "put_item", "update_item"}

    class Killing:
        def __init__(self, inner, count, kill_at):
            self._inner, self._count, self._kill_at = inner, count, kill_at

        def __getattr__(self, name):
            attr = getattr(self._inner, name)
            if name not in WRITES:
                return attr

            def call(*args, **kwargs):
                self._count[0] += 1
                if self._count[0] == self._kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                return attr(*args, **kwargs)

            return call

    def register(kill_at, settings, doc):
        count = [0]
        store, index = build_adapters(load_settings({}, **settings))
        registry = RegistryService(
            Killing(store, count, kill_at), Killing(index, count, kill_at)
        )
        result = registry.register(Identity("team-a", "alice"), parse_dataset(doc))
        return {"writes": count[0], "created": result.created}

    share_aws_models()
    warm = json.loads(sys.argv[1])
    if warm.get("backend") == "aws":
        build_adapters(load_settings({}, **warm))  # the AWS models, read once before forking
    for line in sys.stdin:
        ask = json.loads(line)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the registration's own process
            os.close(r)
            code = 0
            try:
                out = register(ask["kill_at"], ask["settings"], ask["doc"])
                os.write(w, json.dumps(out).encode())
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stderr.flush()
            os._exit(code)
        os.close(w)
        with os.fdopen(r, "rb") as fh:
            out = fh.read().decode()
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        print(json.dumps({"returncode": code, "stdout": out}), flush=True)
    """
)


class Crasher:
    """One interpreter that has imported the registration's code, forking a process of its own
    for each registration it is asked for (`run`)."""

    def __init__(self, settings: dict[str, Any], errors: Path) -> None:
        self._errors = errors
        self._proc = subprocess.Popen(
            [sys.executable, "-c", FORKER, json.dumps(settings)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors.open("wb"),
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            text=True,
        )

    def run(self, kill_at: int, settings: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        """Register v2 in a new process whose N-th write (N = `kill_at`) is a SIGKILL."""
        assert self._proc.stdin and self._proc.stdout
        ask = {"kill_at": kill_at, "settings": settings, "doc": v2()}
        self._proc.stdin.write(json.dumps(ask) + "\n")
        self._proc.stdin.flush()
        ready, _, _ = select.select([self._proc.stdout], [], [], 120)
        line = self._proc.stdout.readline() if ready else ""
        stderr = self._errors.read_text(errors="replace")
        assert line, f"no answer from the registration (kill at {kill_at}): {stderr[-4000:]}"
        got = json.loads(line)
        return subprocess.CompletedProcess(ask, got["returncode"], got["stdout"], stderr)

    def close(self) -> None:
        if self._proc.stdin:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


Stage = tuple[BlobStore, Index, dict[str, Any]]


@pytest.fixture(params=["embedded", "moto_server"])
def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A factory of fresh, empty storage: (store, index, the settings a child process uses)."""
    n = iter(range(1000))
    if request.param == "embedded":

        def local() -> Stage:
            home = tmp_path / f"h{next(n)}"
            settings = {"home": str(home)}
            return (
                LocalBlobStore(home / "objects"),
                SqliteIndex(home / "index.sqlite"),
                settings,
            )

        yield local
        return
    request.getfixturevalue("aws_env")
    endpoint = request.getfixturevalue("moto_server")

    def aws() -> Stage:
        b = aws_backend("moto_server", endpoint)
        settings = {
            "backend": "aws",
            "bucket": b.settings.bucket,
            "table": b.settings.table,
            "endpoint_url": endpoint,
            "region": "us-east-1",
        }
        return b.store, b.index, settings

    yield aws


def check_after_crash(store: BlobStore, index: Index, kill_at: int) -> dict[str, int]:
    registry = RegistryService(store, index)
    rec = index.get_version(ME.tenant, "dataset", "demo", "2.0.0")
    # No half-visible version: absent, or whole
    report = verify_versions(store, dataset_versions(index, [ME.tenant]))
    assert report.ok, (kill_at, report.to_dict()["problems"])
    if rec is not None:
        assert len(registry.list_cases(ME, "demo", "2.0.0", limit=1000).items) == 17
    # gc, once the dead registration's lease is over, collects the crash's objects and only them
    later = time.time() + LEASE_SECONDS + 7200
    gc = collect_garbage(store, index, now=later, grace_seconds=3600, delete=True)
    assert gc.problems == [] and gc.missing == [], (kill_at, gc.problems)
    assert verify_versions(store, dataset_versions(index, [ME.tenant])).ok
    # The re-run registers v2, whole
    again = registry.register(ME, parse_dataset(v2()))
    assert again.record.case_count == 17
    cases = registry.list_cases(ME, "demo", "2.0.0", limit=1000).items
    assert [c["id"] for c in cases][-2:] == ["n1", "n2"]
    big = registry.file_body(again.record, cases[-1]["files"]["b.bin"]["digest"])
    assert base64.b64encode(big).decode() == BIG
    final = verify_versions(store, dataset_versions(index, [ME.tenant]))
    assert final.ok
    after = collect_garbage(store, index, now=later, grace_seconds=3600, delete=False)
    assert after.orphans == [] and after.problems == []
    return {"collected": len(gc.orphans), "committed_before": int(rec is not None)}


def test_kill_9_at_every_write_of_a_registration_leaves_no_half_version(
    fresh: Any, tmp_path: Path
) -> None:
    # How many writes a whole registration makes
    store, index, settings = fresh()
    RegistryService(store, index).register(ME, parse_dataset(v1()))
    crasher = Crasher(settings, tmp_path / "stderr.txt")
    try:
        whole = crasher.run(0, settings)
        assert whole.returncode == 0, whole.stderr
        writes = json.loads(whole.stdout)["writes"]
        assert writes >= 8  # fence in, packs, blobs, copies, manifest, version row, fence out

        outcomes = []
        # Every write on the embedded store; on moto server (a second a crash, its checks
        # over HTTP) every third, and the last two, unless CASESHELF_CRASH_EVERY_WRITE=1.
        every = settings.get("backend") != "aws" or os.environ.get("CASESHELF_CRASH_EVERY_WRITE")
        last = writes + 1
        points = range(1, last + 1) if every else sorted({*range(1, last + 1, 3), writes, last})
        for kill_at in points:
            store, index, settings = fresh()
            RegistryService(store, index).register(ME, parse_dataset(v1()))
            proc = crasher.run(kill_at, settings)
            if kill_at <= writes:
                assert proc.returncode == -9, (kill_at, proc.returncode, proc.stderr)
            else:
                assert proc.returncode == 0, proc.stderr
            outcomes.append(check_after_crash(store, index, kill_at))
    finally:
        crasher.close()
    # Crashes before the commit left objects that gc collected; after it, none were left
    assert any(o["collected"] for o in outcomes)
    assert outcomes[-1]["committed_before"] == 1
