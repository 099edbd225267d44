"""A real tmpfs mounted for a test, unmounted after it: a mount point as a pod's volume is, and a
small disk that fills up. Mounting needs root (CAP_SYS_ADMIN); without it the test is skipped,
saying so."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tmpfs(path: Path, size: str = "16m") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path` (made when missing) for the block."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN) and mount(8)")
    path.mkdir(parents=True, exist_ok=True)
    got = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if got.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs at {path} (needs CAP_SYS_ADMIN): {got.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path: Path, leave: int, name: str = "filler") -> Path:
    """Grow the file `path/name` until the disk under it has about `leave` bytes free."""
    filler = path / name
    with open(filler, "ab") as fh:
        extra = free_bytes(path) - leave
        if extra > 0:
            os.posix_fallocate(fh.fileno(), os.fstat(fh.fileno()).st_size, extra)
    return filler
