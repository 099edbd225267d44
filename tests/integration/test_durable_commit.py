"""A committed version survives a power cut on the embedded store: every object it references is
fsynced (the file, and the directory that names it) before the index commits the version row.
Checked by the order of the calls, not by timing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from caseshelf.adapters.sqlite import SqliteIndex
from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.identity import Identity
from caseshelf.services.registry import parse_dataset

pytestmark = pytest.mark.integration

ME = Identity("local", "alice")


def test_every_object_and_its_directory_is_synced_before_the_version_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = build(load_settings({}, home=str(tmp_path / "home")))
    calls: list[tuple[str, Any]] = []
    real_fsync = os.fsync
    real_put_version = SqliteIndex._put_version

    def fsync(fd: int) -> None:
        real_fsync(fd)
        st = os.fstat(fd)
        calls.append(("fsync", (st.st_dev, st.st_ino)))

    def put_version(self: SqliteIndex, rec: Any) -> None:
        calls.append(("commit", rec.version))
        real_put_version(self, rec)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(SqliteIndex, "_put_version", put_version)
    # When a version with files and a shared file registers
    body = {
        "id": "durable",
        "version": "1.0.0",
        "cases": [
            {"id": f"c{i}", "inputs": {"user": f"q{i}"}, "files": {"a.txt": {"text": f"{i}"}}}
            for i in range(40)
        ],
        "shared_files": [{"dest": "SKILL.md", "text": "# skill\n"}],
    }
    services.registry.register(ME, parse_dataset(body))
    # Then the commit came after the fsync of every object file and of every directory on the
    # way to it
    commit = calls.index(("commit", "1.0.0"))
    synced = {what for kind, what in calls[:commit] if kind == "fsync"}
    root = Path(services.store.root)
    objects = [root / info.key for info in services.store.list("t/")]
    assert len(objects) >= 3  # packs, the manifest root and its chunks
    for path in objects:
        st = path.stat()
        assert (st.st_dev, st.st_ino) in synced, f"{path} not fsynced before the commit"
        here = path.parent
        while here != root:
            st = here.stat()
            assert (st.st_dev, st.st_ino) in synced, f"directory {here} not fsynced"
            here = here.parent
