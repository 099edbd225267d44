"""A task archive is processed member by member: its import holds about one task at a time,
not the archive. Measured in process with `tracemalloc` (Python's own allocations), against an
archive whose files add up to several times the budget; and the version registered is the one
the same tree held in memory registers."""

from __future__ import annotations

import io
import os
import tarfile
import tracemalloc
import zipfile
from pathlib import Path

import pytest

from caseshelf import bootstrap
from caseshelf.domain.identity import Identity
from caseshelf.services import tasks as tasks_module
from caseshelf.services.registry import parse_dataset
from caseshelf.services.tasks import (
    TaskOptions,
    TaskProgress,
    build_task_dataset,
    read_archive_bytes,
)

pytestmark = pytest.mark.integration

ME = Identity("acme", "alice")
TASKS = 80
TASK_BYTES = 1 << 20  # each task's data file: 80 MiB of tasks in all
BATCH_BYTES = 1 << 20  # the registry is handed a task at a time (the default batches 8 MiB)
# The import's traced peak: the 8 MiB object reader and a task or two, and room for what other
# threads of the process allocate meanwhile (tracemalloc counts them all; the suite measured
# up to 27.4 MiB once). Still well under the 80 MiB the archive holds.
BUDGET = 32 << 20


def _task_files(n: int) -> dict[str, bytes]:
    return {
        f"tasks/t{n:03d}/task.yaml": f"instruction: do task {n}\n".encode(),
        f"tasks/t{n:03d}/docker-compose.yaml": b"services:\n  client:\n    image: reg/t:1\n",
        f"tasks/t{n:03d}/run-tests.sh": b"#!/bin/sh\npytest\n",
        f"tasks/t{n:03d}/tests/test_outputs.py": b"def test_ok():\n    assert True\n",
        # Incompressible, so the archive is as large as its files (a binary body: base64).
        f"tasks/t{n:03d}/data.bin": os.urandom(TASK_BYTES),
    }


def _write_tar(dest: Path, order: list[int]) -> None:
    # A gzip stream of stored blocks: its data would not shrink, and deflating it costs seconds
    with tarfile.open(dest, "w:gz", compresslevel=0) as tar:
        for n in order:
            for path, data in _task_files(n).items():
                info = tarfile.TarInfo(path)
                info.size = len(data)
                info.mode = 0o755 if path.endswith(".sh") else 0o644
                tar.addfile(info, io.BytesIO(data))


def _write_zip(dest: Path, order: list[int]) -> None:
    with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_STORED) as z:
        for n in order:
            for path, data in _task_files(n).items():
                z.writestr(path, data)


@pytest.fixture
def services(tmp_path: Path) -> bootstrap.Services:
    return bootstrap.build(bootstrap.load_settings(backend="local", home=str(tmp_path / "store")))


@pytest.mark.parametrize(("kind", "write"), [("tar.gz", _write_tar), ("zip", _write_zip)])
def test_a_large_archive_is_imported_a_task_at_a_time(services, tmp_path, monkeypatch, kind, write):
    monkeypatch.setattr(tasks_module, "STREAM_BATCH_BYTES", BATCH_BYTES)
    # Given an archive of 80 tasks of 1 MiB each, in an order that is not the tasks' own
    order = [n for n in range(TASKS) if n % 2] + [n for n in range(TASKS) if not n % 2]
    archive = tmp_path / f"big.{kind}"
    write(archive, order)
    assert archive.stat().st_size > 2.4 * BUDGET
    key = f"t/acme/uploads/{'a' * 32}/big.{kind}"
    with archive.open("rb") as fh:
        writer = services.store.open_writer(key)
        while chunk := fh.read(1 << 20):
            writer.write(chunk)
        writer.commit()
    # When the upload is imported, with the traced peak measured
    progress = TaskProgress()
    tracemalloc.start()
    try:
        res = services.tasks.import_object(
            ME, "terminal-bench", key, TaskOptions(dataset="big", version="1"), progress=progress
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Then every task is registered, in path order, and memory held a task or two, not 80
    assert res.created and res.case_count == TASKS and not res.skipped
    assert (progress.total, progress.read, progress.mapped) == (TASKS, TASKS, TASKS)
    assert peak < BUDGET, f"peak {peak} bytes of traced memory"
    ids = services.registry.manifest(res.record).ids
    assert list(ids) == [f"t{n:03d}" for n in range(TASKS)]
    # And the version is the one the same tree, held in memory, registers
    tree = read_archive_bytes(archive.read_bytes(), archive.name)
    tree.name = "big"
    built = build_task_dataset(tree, "terminal-bench", dataset="big", version="2")
    held = services.registry.register(ME, parse_dataset(built.body))
    assert held.record.content_digest == res.record.content_digest
