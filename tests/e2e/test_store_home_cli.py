"""The embedded store as users meet it, the `caseshelf` command run as a process (its working
directory and environment decide the store): a project's `.caseshelf/` found from below it, the
user's data directory otherwise, `info` and `init`, reads that create nothing, a store path
that is a file or read-only, and two processes creating one store at once.

Where one process has shown how a working directory and environment find the store, the other
commands on that same store run in this process (`Shell.here`: the same `caseshelf.cli.run`
with that working directory and environment), saving an interpreter's start-up each."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from caseshelf.cli import run
from caseshelf.storehome import project_home
from tests.helpers import REPO_ROOT, run_main_here

pytestmark = pytest.mark.e2e

EXAMPLE = REPO_ROOT / "examples" / "arith.yaml"


class Shell:
    """The command in a new process, in a working directory, with HOME and XDG_DATA_HOME of
    the test's own and no CASESHELF_* of the caller's (`env` adds to that)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "xdg-data"
        self.user_store = self.data / "caseshelf"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CASESHELF_")}
        self.env.update(HOME=str(root / "home"), XDG_DATA_HOME=str(self.data))

    def __call__(
        self,
        *args: str | Path,
        cwd: Path,
        env: dict[str, str] | None = None,
        prefix: tuple[str, ...] = (),
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*prefix, sys.executable, "-m", "caseshelf.cli", *map(str, args)],
            capture_output=True,
            text=True,
            cwd=cwd,
            env={**self.env, **(env or {})},
            timeout=180,
            check=False,
        )

    def here(
        self, *args: str | Path, cwd: Path, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The same command in this process, with the same working directory and environment
        (swapped in for the call, then restored)."""
        environ = {**self.env, **(env or {})}
        return run_main_here(run, list(map(str, args)), cwd=cwd, environ=environ, name="caseshelf")


@pytest.fixture
def sh(tmp_path: Path) -> Shell:
    above = project_home(str(tmp_path))
    if above is not None:
        pytest.skip(f"a .caseshelf/ above the temporary directory ({above}) would be found")
    (tmp_path / "home").mkdir()
    return Shell(tmp_path)


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The failed command's one stderr line (no traceback)."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def listed(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    return [d["id"] for d in json.loads(proc.stdout)["items"]]


def test_a_project_store_serves_every_directory_below_it(sh: Shell) -> None:
    project = sh.root / "project"
    nested = project / "evals" / "gsm"
    nested.mkdir(parents=True)
    # Given a project store made at the project's root
    made = sh("init", cwd=project)
    assert made.returncode == 0 and str(project / ".caseshelf") in made.stdout, made.stderr
    # When a dataset is registered from a nested directory
    assert sh("register", EXAMPLE, cwd=nested).returncode == 0
    # Then it is in the project's store, which `info` names from anywhere below the root
    assert (project / ".caseshelf" / "index.sqlite").is_file()
    info = json.loads(sh("--json", "info", cwd=nested).stdout)
    assert info["store"] == str(project / ".caseshelf") and info["found"] == "project"
    assert info["exists"] is True and info["backend"] == "local" and info["version"]
    assert listed(sh("--json", "ls", cwd=project)) == ["arith"]
    # And outside the project another store (the user's) answers, empty, and is not created
    (sh.root / "elsewhere").mkdir()
    assert listed(sh("--json", "ls", cwd=sh.root / "elsewhere")) == []
    assert not sh.data.exists()
    # And `init` again changes nothing
    again = sh("init", cwd=project)
    assert again.returncode == 0 and "already" in again.stdout
    assert listed(sh("--json", "ls", cwd=nested)) == ["arith"]


def test_without_a_project_the_store_is_in_the_users_data_directory(sh: Shell) -> None:
    work, other = sh.root / "work", sh.root / "other"
    work.mkdir()
    other.mkdir()
    info = json.loads(sh("--json", "info", cwd=work).stdout)
    assert info["store"] == str(sh.user_store) and info["found"] == "user"
    assert info["exists"] is False
    assert "not yet" in sh("info", cwd=work).stdout
    # When a dataset is registered in one directory
    assert sh("register", EXAMPLE, cwd=work).returncode == 0
    # Then it is in the user's store, and every other directory sees it
    assert (sh.user_store / "index.sqlite").is_file()
    assert not (work / ".caseshelf").exists()
    assert listed(sh("--json", "ls", cwd=other)) == ["arith"]


READS = (
    ("get", "gsm8k"),
    ("versions", "gsm8k"),
    ("cases", "gsm8k"),
    ("diff", "gsm8k@1.0.0", "gsm8k@1.1.0"),
    ("export", "gsm8k@1.1.0", "--to", "./x"),
    ("download", "gsm8k", "-o", "out.json"),
    ("verify", "gsm8k"),
    ("tag", "gsm8k@1.0.0", "stable"),
)


def test_reading_a_store_that_is_not_there_creates_nothing_and_names_it(sh: Shell) -> None:
    work = sh.root / "work"
    work.mkdir()
    # When every kind of read runs where no store exists yet (the user's, then CASESHELF_HOME's):
    # the first as a process of its own, the others in this one, in the same place
    for env, store in ((None, sh.user_store), ({"CASESHELF_HOME": "new/shelf"}, work / "new")):
        assert listed(sh("--json", "ls", cwd=work, env=env)) == []
        assert sh("info", cwd=work, env=env).returncode == 0
        for n, args in enumerate(READS):
            line = one_error_line((sh if n == 0 else sh.here)(*args, cwd=work, env=env))
            # Then each answers that the dataset is not in the store, named, not there yet
            assert line.startswith("error: no dataset") and "gsm8k" in line, line
            assert "no store there yet" in line, line
            if env is None:
                assert f"in the store at {sh.user_store} (the user's data directory" in line
            else:
                assert f"in the store at {work / 'new' / 'shelf'} (CASESHELF_HOME" in line
        # And nothing was created: no store, no directory, no half-written export
        assert not store.exists()
        assert list(work.iterdir()) == []
    # And a write creates the store, its parents included
    env = {"CASESHELF_HOME": "new/shelf"}
    assert sh("register", EXAMPLE, cwd=work, env=env).returncode == 0
    assert listed(sh("--json", "ls", cwd=work, env=env)) == ["arith"]


def test_a_store_path_that_is_a_file_is_a_one_line_error_naming_it(sh: Shell) -> None:
    work = sh.root / "work"
    work.mkdir()
    (work / "notes.txt").write_text("not a store")
    env = {"CASESHELF_HOME": "notes.txt"}
    for n, args in enumerate((("ls",), ("get", "arith"), ("register", EXAMPLE), ("info",))):
        line = one_error_line((sh if n == 0 else sh.here)(*args, cwd=work, env=env))
        assert str(work / "notes.txt") in line and "not a directory" in line, line
        assert "point CASESHELF_HOME at a directory" in line, line
    assert (work / "notes.txt").read_text() == "not a store"


def read_only_mount(path: Path) -> tuple[str, ...]:
    """A command prefix that runs the command with `path` bound read-only over itself, in a
    mount namespace of its own (root ignores permission bits; a read-only mount it cannot)."""
    return ("unshare", "-m", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', str(path))


def can_mount_read_only(tmp: Path) -> bool:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = tmp / "probe"
    probe.mkdir()
    proc = subprocess.run(
        [*read_only_mount(probe), "sh", "-c", 'touch "$0/x" 2>/dev/null', str(probe)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    return proc.returncode != 0 and not (probe / "x").exists() and b"mount" not in proc.stderr


def test_a_read_only_store_serves_reads_and_refuses_writes_by_name(sh: Shell) -> None:
    if not can_mount_read_only(sh.root):
        pytest.skip("no read-only bind mount here (needs unshare -m and mount, as root)")
    work = sh.root / "work"
    work.mkdir()
    store = sh.root / "store"
    env = {"CASESHELF_HOME": str(store)}
    assert sh("register", EXAMPLE, cwd=work, env=env).returncode == 0
    ro = read_only_mount(store)
    # When the store is read-only, reads answer as before
    assert listed(sh("--json", "ls", cwd=work, env=env, prefix=ro)) == ["arith"]
    got = sh("--json", "get", "arith", cwd=work, env=env, prefix=ro)
    assert got.returncode == 0 and json.loads(got.stdout)["case_count"] == 3, got.stderr
    cases = sh("--json", "cases", "arith", cwd=work, env=env, prefix=ro)
    assert cases.returncode == 0 and len(json.loads(cases.stdout)["items"]) == 3, cases.stderr
    info = json.loads(sh("--json", "info", cwd=work, env=env, prefix=ro).stdout)
    assert info["exists"] is True and info["writable"] is False
    # And a write is one line naming the store and what to do, and changes nothing
    other = work / "other.json"
    other.write_text(json.dumps({"id": "other", "version": "1.0.0", "cases": [{"id": "a"}]}))
    line = one_error_line(sh("register", other, cwd=work, env=env, prefix=ro))
    assert f"the store at {store}" in line and "cannot be written" in line, line
    assert "point CASESHELF_HOME at a directory you can write" in line, line
    assert listed(sh("--json", "ls", cwd=work, env=env)) == ["arith"]
    # And a store that does not exist under a read-only directory reads as empty
    env = {"CASESHELF_HOME": str(store / "inner")}
    assert listed(sh("--json", "ls", cwd=work, env=env, prefix=ro)) == []
    line = one_error_line(sh("register", EXAMPLE, cwd=work, env=env, prefix=ro))
    assert f"the store at {store / 'inner'}" in line and "cannot be written" in line, line


CREATOR = """
import sys
import caseshelf
cs = caseshelf.connect()
assert list(cs.datasets()) == []  # the whole read path loaded; no store made by reading
print("ready", flush=True)
sys.stdin.readline()  # the barrier: both processes wait here until the test lets them go
v = cs.register(sys.argv[1], cases=[{"id": "a", "inputs": {"user": "q"}}], version="1.0.0")
print(v.content_digest, flush=True)
"""


def test_two_processes_creating_one_store_at_once_both_succeed(sh: Shell) -> None:
    store = sh.root / "store"
    env = {**sh.env, "CASESHELF_HOME": str(store)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CREATOR, name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=sh.root,
        )
        for name in ("first", "second")
    ]
    try:
        # Given two processes, each at the point of its first write into a store not there yet
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        assert not store.exists()
        # When both are let go at once
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    # Then both succeed
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
        assert out.strip().startswith("sha256:")
    # And the store is one consistent index holding both
    assert sorted(listed(sh("--json", "ls", cwd=sh.root, env={"CASESHELF_HOME": str(store)}))) == [
        "first",
        "second",
    ]
    with sqlite3.connect(store / "index.sqlite") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        names = conn.execute("SELECT type, name FROM sqlite_master ORDER BY name").fetchall()
        assert conn.execute("SELECT count(*) FROM stamp").fetchone() == (1,)
    assert [n for t, n in names if t == "table"] == ["items", "stamp"]
    assert sorted(n for t, n in names if t == "trigger") == [
        "stamp_delete",
        "stamp_insert",
        "stamp_update",
    ]


INDEX_WRITER = """
import sys
from caseshelf.adapters.sqlite import SqliteIndex
index = SqliteIndex(sys.argv[1])
assert index.get_item("P#" + sys.argv[2], "S") is None  # a read: nothing created
print("ready", flush=True)
sys.stdin.readline()
index.put_item("P#" + sys.argv[2], "S", {"n": sys.argv[2]})
"""


def test_processes_creating_one_index_at_once_all_write_it(tmp_path: Path) -> None:
    # Given, several times over, four processes about to make the first write of one new index
    # (the first writes switch the new file to WAL together: SQLite refuses all but one at once)
    for round_ in range(6):
        path = tmp_path / str(round_) / "index.sqlite"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", INDEX_WRITER, str(path), str(n)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(4)
        ]
        try:
            for p in procs:
                assert p.stdout is not None and p.stdout.readline().strip() == "ready"
            assert not path.parent.exists()
            # When they are let go at once
            for p in procs:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
            errors = [p.communicate(timeout=120)[1] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        # Then every one wrote, into one index
        assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
        with sqlite3.connect(path) as conn:
            rows = conn.execute("SELECT pk FROM items ORDER BY pk").fetchall()
            assert conn.execute("SELECT count(*) FROM stamp").fetchone() == (1,)
        assert rows == [(f"P#{n}",) for n in range(4)]
