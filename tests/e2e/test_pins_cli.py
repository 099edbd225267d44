"""Datasets as code from an eval repository, as its users run it: the `caseshelf` command as a
subprocess in a repository with a pyproject.toml, against the local server over HTTP; then a
load with the server gone, a corrupted cache entry, and a cache on a read-only or full disk."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import caseshelf
from tests.helpers import REPO_ROOT, dev_server, run_cli
from tests.tmpfs import fill, tmpfs

pytestmark = pytest.mark.e2e

V1 = [{"id": f"q{i}", "inputs": {"user": f"q {i}"}} for i in range(20)]
V2 = [*V1[:5], {"id": "q5", "inputs": {"user": "q 5 fixed"}}, *V1[6:18], {"id": "new"}]

LOAD = "import caseshelf, sys; print(len(caseshelf.connect(sys.argv[1]).load('gsm')))"


def load(url: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """`cs.load("gsm")` in a fresh interpreter, as an eval script runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASESHELF_")}
    env |= {"CASESHELF_CACHE": str(cache), "PYTHONPATH": str(REPO_ROOT / "shared")}
    return subprocess.run(
        [sys.executable, "-c", LOAD, url],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )


@contextmanager
def read_only_disk(path: Path) -> Iterator[Path]:
    """An empty read-only tmpfs at `path` (root only; skipped otherwise)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only tmpfs needs root")
    path.mkdir(parents=True)
    got = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if got.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {got.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def test_pin_check_move_update_sync_and_load_offline(tmp_path: Path) -> None:
    srv_home, cache = tmp_path / "srv", tmp_path / "cache"
    repo = tmp_path / "evals"
    (repo / "tasks").mkdir(parents=True)
    (repo / "pyproject.toml").write_text("[project]\nname = 'evals'\n")
    here = repo / "tasks"  # commands run below the repository root
    env = {"CASESHELF_CACHE": str(cache)}
    with dev_server(srv_home) as srv:
        with caseshelf.connect(srv.url) as cs:
            cs.register("gsm", cases=V1, version="1.1.0")
            cs.register("gsm", cases=V2, version="1.2.0")
            cs.tag("gsm@1.1.0", ["stable"])

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return run_cli(
                tmp_path / "none", *args, "--api", srv.url, cwd=here, env=env, process=True
            )

        # Given a pin of the stable tag, written at the repository's root
        pinned = cli("pin", "gsm@stable")
        assert pinned.returncode == 0, pinned.stderr
        assert pinned.stdout.startswith("pinned gsm  gsm@stable -> 1.1.0  sha256:")
        assert pinned.stdout.rstrip().endswith("20 cases")
        lock = repo / "caseshelf.lock"
        locked = lock.read_text()
        assert f'registry = "{srv.url}"' in locked
        assert cli("check").returncode == 0
        # When bob moves the tag
        assert cli("tag", "gsm@1.2.0", "stable", "--principal", "bob").returncode == 0
        # Then check passes, check --strict fails naming who, when and the diff's counts
        assert cli("check").returncode == 0
        strict = cli("check", "--strict")
        assert strict.returncode == 1
        (line,) = strict.stdout.splitlines()
        assert line.startswith("gsm: stable moved 1.1.0 -> 1.2.0 (by bob, 20")
        assert line.endswith("); 1 changed, 1 added, 2 removed")
        md = cli("check", "--strict", "--format", "markdown")
        assert md.returncode == 1 and "| pin | ref | locked | now | status |" in md.stdout
        assert "moved: 1 changed, 1 added, 2 removed" in md.stdout
        assert lock.read_text() == locked  # a check writes nothing
        # When the pin is updated, it says what changed and the lock moves with it
        updated = cli("update", "gsm")
        assert updated.returncode == 0, updated.stderr
        assert updated.stdout.startswith("gsm: stable 1.1.0 -> 1.2.0  sha256:")
        assert "20 -> 19 cases" in updated.stdout
        assert cli("check", "--strict").returncode == 0
        # And a sync puts the pinned version into the cache
        synced = cli("sync", "--json")
        assert synced.returncode == 0, synced.stderr
        assert '"source": "registry"' in synced.stdout
    # When the registry is gone, the pinned version still loads, from the cache
    offline = load(srv.url, here, cache)
    assert (offline.returncode, offline.stdout.strip()) == (0, "19"), offline.stderr
    # When the cached copy is corrupted, it is not served: it is fetched again
    (entry,) = (cache / "versions").iterdir()
    cases = entry / "cases.jsonl"
    cases.write_bytes(cases.read_bytes().replace(b"q 3", b"Q 3"))
    with dev_server(srv_home) as again:
        refetched = load(again.url, here, cache)
        assert (refetched.returncode, refetched.stdout.strip()) == (0, "19"), refetched.stderr
        assert "did not verify" in refetched.stderr
        assert b"Q 3" not in cases.read_bytes()
        # And with the cache on a read-only disk, the load still works, with one warning
        with read_only_disk(tmp_path / "ro") as ro:
            got = load(again.url, here, ro)
            assert (got.returncode, got.stdout.strip()) == (0, "19"), got.stderr
            assert got.stderr.count("CacheWarning") == 1
            assert "could not be written" in got.stderr
        # And with the cache on a full disk, the same
        with tmpfs(tmp_path / "full", "1m") as full:
            fill(full, leave=0)
            got = load(again.url, here, full / "cache")
            assert (got.returncode, got.stdout.strip()) == (0, "19"), got.stderr
            assert got.stderr.count("CacheWarning") == 1
            assert "No space left" in got.stderr


def test_a_lock_that_does_not_parse_names_file_line_and_pin(tmp_path: Path) -> None:
    repo = tmp_path / "evals"
    repo.mkdir()
    (repo / ".git").mkdir()
    home = tmp_path / "home"
    with caseshelf.connect(home=home) as cs:
        cs.register("gsm", cases=V1, version="1.1.0")
    assert run_cli(home, "pin", "gsm@1.1.0", "--as", "g", cwd=repo).returncode == 0
    lock = repo / "caseshelf.lock"
    bad = lock.read_text().replace("registry", "registri")
    lock.write_text(bad)
    got = run_cli(home, "update", cwd=repo, process=True)
    assert got.returncode == 1
    assert "error: caseshelf.lock:10: pin g: unknown key 'registri'" in got.stderr
    assert lock.read_text() == bad
