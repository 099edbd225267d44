"""Bombs: archives and compressed sources that inflate far beyond their size, members given
twice, too many members, and a task archive whose task.yaml is an alias bomb. Each is refused
while streaming, with the memory of the process that reads it measured from outside the code
under test (a fresh interpreter: its peak RSS, and tracemalloc's peak of Python allocations).

The bombs are built without compressing their payload (concatenated gzip/bzip2 streams of one
compressed megabyte), so building a 1 GiB bomb costs a megabyte of work. `CASESHELF_BOMB_MIB`
sets the inflated size (default 1024, as in the issue: a 1 GiB member).
"""

from __future__ import annotations

import bz2
import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import zipfile
import zlib

import pytest

from caseshelf.domain.errors import BadRequest, TooLarge
from caseshelf.services.archives import Limits, read_tar, read_zip
from caseshelf.services.tasks import read_archive_bytes

pytestmark = pytest.mark.integration

BOMB_MIB = int(os.environ.get("CASESHELF_BOMB_MIB", "1024"))
MIB = 1 << 20


def _streams(compress: str, header: bytes, zero_mib: int, tail: bytes) -> bytes:
    """`header` + `zero_mib` MiB of zeros + `tail`, compressed as concatenated streams (each
    MiB of zeros compressed once and repeated)."""
    if compress == "gz":

        def one(data: bytes) -> bytes:
            c = zlib.compressobj(9, zlib.DEFLATED, 31)
            return c.compress(data) + c.flush()

    else:

        def one(data: bytes) -> bytes:
            return bz2.compress(data, 9)

    return one(header) + one(b"\0" * MIB) * zero_mib + one(tail)


def tar_bomb(compress: str, mib: int = BOMB_MIB) -> bytes:
    info = tarfile.TarInfo("task/big.bin")
    info.size = mib * MIB
    end = b"\0" * 1024  # the end-of-archive blocks (the member needs no padding: whole MiBs)
    return _streams(compress, info.tobuf(format=tarfile.GNU_FORMAT), mib, end)


def alias_bomb_task_tar() -> bytes:
    """A Terminal-Bench task archive (.tar.gz) whose `task.yaml` is a YAML alias bomb."""
    from tests.unit.test_bounded_yaml import alias_bomb

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in [
            ("t1/task.yaml", alias_bomb().encode()),
            ("t1/run-tests.sh", b"pytest"),
            ("t1/tests/test_x.py", b"def test(): pass"),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def run_measured(code: str) -> dict[str, int]:
    """Run `code` in a fresh interpreter; its `out`, with tracemalloc's peak and its peak RSS.

    `code` calls `tracemalloc.start()` once its imports are done, just before what it measures:
    imports traced from the start take three times as long and are not what is measured."""
    script = (
        textwrap.dedent(
            """
        import json, sys, tracemalloc

        def hwm_kb():  # this process's own high-water RSS (ru_maxrss survives exec)
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM"):
                    return int(line.split()[1])
            return 0

        out = {}
        """
        )
        + textwrap.dedent(code)
        + textwrap.dedent(
            """
        assert tracemalloc.is_tracing(), "the measured code never started tracemalloc"
        out["peak_alloc"] = tracemalloc.get_traced_memory()[1]
        out["peak_rss_kb"] = hwm_kb()
        print(json.dumps(out))
        """
        )
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, int] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


BOUND_BYTES = 64 * MIB  # what refusing any of these may cost, at most


@pytest.mark.parametrize("compress", ["gz", "bz2"])
@pytest.mark.parametrize(
    ("mib", "why"), [(BOMB_MIB, "the limit for one file"), (200, "refused as a bomb")]
)
def test_a_tar_bomb_is_refused_while_streaming_in_bounded_memory(
    compress: str, mib: int, why: str
) -> None:
    # One member of 1 GiB (over the limit for one file: refused from its header), and one of
    # 200 MiB (within it: refused by the ratio after 16 MiB have come out)
    got = run_measured(
        f"""
        from tests.integration.test_archive_bombs import tar_bomb
        from caseshelf.domain.errors import TooLarge
        from caseshelf.services.tasks import read_archive_bytes
        data = tar_bomb({compress!r}, {mib})
        out["compressed"] = len(data)
        tracemalloc.start()
        try:
            read_archive_bytes(data, "bomb.tar.{compress}")
        except TooLarge as exc:
            out["refused"] = str(exc)
        """
    )
    assert got["compressed"] < 2 * MIB  # (a few hundred kB for 1 GiB inflated)
    assert "refused" in got and why in got["refused"], got
    assert got["peak_alloc"] < BOUND_BYTES, got
    assert got["peak_rss_kb"] * 1024 < 256 * MIB, got  # the whole interpreter, imports too


def test_a_gzip_source_bomb_is_refused_while_streaming() -> None:
    got = run_measured(
        f"""
        import io
        from tests.integration.test_archive_bombs import _streams
        from caseshelf.adapters.sources import _decompressor, _lines
        from caseshelf.domain.errors import TooLarge
        data = _streams("gz", b"", {BOMB_MIB}, b"")
        tracemalloc.start()
        try:
            for _ in _lines(_decompressor("rows.jsonl.gz", io.BytesIO(data))):
                pass
        except TooLarge as exc:
            out["refused"] = str(exc)
        """
    )
    assert "refused" in got and "times" in got["refused"], got
    assert got["peak_alloc"] < BOUND_BYTES, got


def test_an_honest_member_over_the_limit_is_refused_from_its_header() -> None:
    # A member that declares (and holds) more than one file may: refused before it is read.
    with pytest.raises(TooLarge, match="the limit for one file"):
        read_tar(io.BytesIO(tar_bomb("gz", mib=8)), "x.tgz", Limits(max_member_bytes=4 * MIB))


def test_the_ratio_stops_an_inflating_stream_early() -> None:
    limits = Limits(ratio_floor_bytes=MIB, max_ratio=50)
    with pytest.raises(TooLarge, match="inflates more than 50 times"):
        read_tar(io.BytesIO(tar_bomb("bz2", mib=16)), "x.tar.bz2", limits)


def test_many_members_are_refused_by_count() -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for i in range(50):
            info = tarfile.TarInfo(f"t/f{i}")
            tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(TooLarge, match="more than 20 entries"):
        read_archive_bytes(buf.getvalue(), "x.tgz", Limits(max_entries=20))


def tar_of(*members: tuple[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize(
    "names", [("t/a.txt", "t/a.txt"), ("t/a.txt", "./t/a.txt"), ("t/a.txt", "t/a.txt/")]
)
def test_a_member_given_twice_is_refused_not_overwritten(names: tuple[str, str]) -> None:
    data = tar_of((names[0], b"first"), (names[1], b"second"))
    with pytest.raises(BadRequest, match="appears twice"):
        read_archive_bytes(data, "x.tgz")


def test_a_zip_member_given_twice_is_refused() -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf, pytest.warns(UserWarning, match="Duplicate name"):
        zf.writestr("a.txt", b"first")
        zf.writestr("a.txt", b"second")
    with pytest.raises(BadRequest, match="appears twice"):
        read_zip(io.BytesIO(buf.getvalue()), "x.zip")


def test_a_non_normalised_member_path_is_refused() -> None:
    with pytest.raises(BadRequest, match="not normalised"):
        read_archive_bytes(tar_of(("t//a.txt", b"x")), "x.tgz")


def test_a_zip_whose_declared_ratio_is_a_bomb_is_refused_before_inflating() -> None:
    raw = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = raw.compress(b"\0" * 32 * MIB) + raw.flush()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("big.bin", b"\0" * 32 * MIB)
    assert len(buf.getvalue()) < len(body) + 1024
    with pytest.raises(TooLarge, match="refused as a bomb"):
        read_zip(io.BytesIO(buf.getvalue()), "x.zip", Limits(ratio_floor_bytes=MIB))


def test_a_task_yaml_alias_bomb_fails_fast_in_bounded_memory() -> None:
    got = run_measured(
        """
        from tests.integration.test_archive_bombs import alias_bomb_task_tar
        from caseshelf.domain.errors import BadRequest
        from caseshelf.services.tasks import build_task_dataset, read_archive_bytes
        tree = read_archive_bytes(alias_bomb_task_tar(), "tb.tar.gz")
        tracemalloc.start()
        try:
            build_task_dataset(tree, "terminal-bench", image_template="r/{id}")
        except BadRequest as exc:
            out["refused"] = exc.detail
        """
    )
    assert "refused" in got and "alias bomb" in got["refused"], got
    assert got["peak_alloc"] < BOUND_BYTES, got  # (imports it makes on the way included)
