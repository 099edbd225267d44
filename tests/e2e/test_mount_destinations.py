"""`caseshelf export --to DIR` and `caseshelf pull ... DIR` where DIR is a mount point (a real
tmpfs, as a pod's volume), and what a killed run leaves there cleaned up by the next one."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.helpers import REPO_ROOT, run_cli
from tests.tmpfs import tmpfs

pytestmark = pytest.mark.e2e

DEMO = {
    "id": "demo",
    "version": "1.0.0",
    "cases": [
        {
            "id": f"HumanEval/{i}",
            "inputs": {"user": f"write f{i}"},
            "expectations": {"ground_truth": f"def f{i}(): ..."},
        }
        for i in range(6)
    ],
    "shared_files": [{"dest": "SKILL.md", "text": "# skill\n"}],
}

# The CLI in a process of its own that dies (exit 9, no clean-up) right after the staging
# moves its second entry into the destination: what kill -9 leaves in the middle of a commit.
DIES_MID_COMMIT = """
import os, sys
from caseshelf.cli import run
real, moved = os.rename, []
def rename(src, dst, **kw):
    real(src, dst, **kw)
    if os.path.basename(os.path.dirname(src)).startswith(".caseshelf-staging-"):
        moved.append(dst)
        if len(moved) == 2:
            os._exit(9)
os.rename = rename
sys.exit(run(sys.argv[1:]))
"""


def run(tmp: Path, *args: Any, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_cli(tmp / "home", *args, cwd=tmp, env=env)


def run_dying(tmp: Path, *args: Any, env: dict[str, str] | None = None) -> int:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CASESHELF_") and k != "AWS_ENDPOINT_URL"
    }
    environ = {**base, "CASESHELF_HOME": str(tmp / "home"), **(env or {})}
    got = subprocess.run(
        [sys.executable, "-c", DIES_MID_COMMIT, *map(str, args)],
        cwd=REPO_ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=180,
    )
    return got.returncode


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def registered(tmp_path: Path) -> Path:
    (tmp_path / "demo.json").write_text(json.dumps(DEMO))
    got = run(tmp_path, "register", tmp_path / "demo.json")
    assert got.returncode == 0, got.stderr
    return tmp_path


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "mnt" / "td", "8m") as path:
        yield path


@pytest.fixture
def bucket(moto_server: str, aws_env: None) -> str:
    """A bucket of this test's own on the session's moto server."""
    name = f"mnt-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1").create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_env(moto_server: str, bucket: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": moto_server,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def test_export_into_a_mount_point(registered: Path, mount: Path) -> None:
    # Given a tmpfs mounted at the destination (its parent is another file system)
    assert os.path.ismount(mount)
    # When a version is exported into it
    got = run(registered, "export", "demo@1.0.0", "--to", mount, "--json")
    # Then the export is there, complete, with nothing hidden left, and the mount intact
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)
    assert (mount / "manifest.json").is_file() and os.path.ismount(mount)
    assert (mount / "~HumanEval%2F0~42" / "SKILL.md").read_text() == "# skill\n"
    assert [p.name for p in mount.iterdir() if p.name.startswith(".")] == []
    assert [p.name for p in mount.parent.iterdir()] == ["td"]
    local = run(registered, "export", "demo@1.0.0", "--to", registered / "local")
    assert local.returncode == 0, local.stderr
    assert tree(mount) == tree(registered / "local")
    # And again into the same mount point is the same export, reused
    again = run(registered, "export", "demo@1.0.0", "--to", mount, "--json")
    assert json.loads(again.stdout)["reused"] is True
    assert json.loads(again.stdout)["export_id"] == out["export_id"]


@pytest.mark.parametrize("bundle", [False, True], ids=["per-file", "bundle"])
def test_pull_into_a_mount_point(
    registered: Path, mount: Path, s3_env: dict[str, str], bucket: str, bundle: bool
) -> None:
    # Given an export in a bucket
    got = run(
        registered,
        *("export", "demo@1.0.0", "--to", f"s3://{bucket}/evals/demo", "--bundle"),
        env=s3_env,
    )
    assert got.returncode == 0, got.stderr
    # When it is pulled into the mount point, as a pod's init container does
    flags = ["--bundle"] if bundle else []
    pulled = run(registered, "pull", f"s3://{bucket}/evals/demo", mount, *flags, env=s3_env)
    # Then it lands complete, as a local export does, nothing hidden left
    assert pulled.returncode == 0, pulled.stderr
    local = run(registered, "export", "demo@1.0.0", "--to", registered / "local")
    assert local.returncode == 0, local.stderr
    assert tree(mount) == tree(registered / "local")
    assert [p.name for p in mount.iterdir() if p.name.startswith(".")] == []
    assert os.path.ismount(mount)


def test_an_export_killed_mid_commit_is_cleaned_and_redone(registered: Path, mount: Path) -> None:
    # Given an export into the mount point killed after moving two entries into place
    code = run_dying(registered, "export", "demo@1.0.0", "--to", mount)
    assert code == 9
    left = sorted(p.name for p in mount.iterdir())
    assert "manifest.json" not in left and len(left) == 3  # two moved, and the staging
    assert any(n.startswith(".caseshelf-staging-") for n in left)
    # And the hidden sibling an earlier release staged into, beside a plain directory
    plain = registered / "plain"
    plain.mkdir()
    old = registered / ".plain.export-0123456789ab"
    (old / "x").mkdir(parents=True)
    # When the export runs again into each
    again = run(registered, "export", "demo@1.0.0", "--to", mount)
    beside = run(registered, "export", "demo@1.0.0", "--to", plain)
    # Then both finish, complete, and nothing of the killed runs is left
    assert again.returncode == 0, again.stderr
    assert beside.returncode == 0, beside.stderr
    assert tree(mount) == tree(plain)
    assert [p.name for p in mount.iterdir() if p.name.startswith(".")] == []
    assert not old.exists()


def test_a_pull_killed_mid_commit_is_cleaned_and_redone(
    registered: Path, mount: Path, s3_env: dict[str, str], bucket: str
) -> None:
    got = run(registered, "export", "demo@1.0.0", "--to", f"s3://{bucket}/evals/k", env=s3_env)
    assert got.returncode == 0, got.stderr
    old = mount.parent / ".td.pull-0123456789ab"  # what an earlier release left beside it
    old.mkdir()
    assert run_dying(registered, "pull", f"s3://{bucket}/evals/k", mount, env=s3_env) == 9
    assert not (mount / "manifest.json").exists()
    again = run(registered, "pull", f"s3://{bucket}/evals/k", mount, env=s3_env)
    assert again.returncode == 0, again.stderr
    local = run(registered, "export", "demo@1.0.0", "--to", registered / "local")
    assert local.returncode == 0, local.stderr
    assert tree(mount) == tree(registered / "local")
    assert sorted(p.name for p in mount.parent.iterdir()) == ["td"]


def test_a_second_export_into_a_destination_being_written_is_refused(
    registered: Path, mount: Path
) -> None:
    # Given a destination another export holds (its lock taken, as a running one does)
    fd = os.open(mount, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        # When an export into it starts
        got = run(registered, "export", "demo@1.0.0", "--to", mount)
    finally:
        os.close(fd)
    # Then it is refused, saying why and what to do, and writes nothing
    assert got.returncode == 1
    assert "another pull or export" in got.stderr and str(mount) in got.stderr
    assert list(mount.iterdir()) == []


def test_an_export_into_a_full_mount_says_so_and_goes_on_once_there_is_room(
    tmp_path: Path,
) -> None:
    # Given a version of ~1.6 MB and a 1 MiB volume mounted as the destination
    big = {
        "id": "big",
        "version": "1.0.0",
        "cases": [
            {"id": f"c{i:02d}", "inputs": {"user": f"q{i}"}, "files": {"big.txt": {"text": t}}}
            for i, t in enumerate(os.urandom(20_000).hex() + f"{n:02d}" for n in range(40))
        ],
    }
    (tmp_path / "big.json").write_text(json.dumps(big))
    assert run(tmp_path, "register", tmp_path / "big.json").returncode == 0
    with tmpfs(tmp_path / "mnt" / "td", "1m") as mount:
        # When it is exported there, the disk fills: one line naming the destination and the room
        got = run(tmp_path, "export", "big@1.0.0", "--to", mount)
        assert got.returncode == 1
        last = got.stderr.strip().splitlines()[-1]
        assert last.startswith("error: ") and "Traceback" not in got.stderr, got.stderr
        assert str(mount) in last and "bytes free" in last and "run it again" in last
        # And nothing there looks complete: only the hidden staging, with what fitted
        [staging] = list(mount.iterdir())
        assert staging.name.startswith(".caseshelf-staging-")
        written = {
            p.relative_to(staging).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in staging.rglob("big.txt")
            if p.stat().st_size == 40_002
        }
        assert written
        # When the volume grows and the export runs again
        grown = subprocess.run(["mount", "-o", "remount,size=8m", str(mount)], check=False)
        assert grown.returncode == 0
        again = run(tmp_path, "export", "big@1.0.0", "--to", mount)
        # Then it completes, equal to an export elsewhere, the files that fitted kept as they were
        assert again.returncode == 0, again.stderr
        local = run(tmp_path, "export", "big@1.0.0", "--to", tmp_path / "local")
        assert local.returncode == 0, local.stderr
        assert tree(mount) == tree(tmp_path / "local")
        kept = {
            rel: ((mount / rel).stat().st_ino, (mount / rel).stat().st_mtime_ns) for rel in written
        }
        assert kept == written
