"""A task archive is written out to the temporary directory (a Lambda function's /tmp) member by
member, and a case-directory tree once more to be read: when that disk cannot hold what comes
next, the import job fails as `StorageFull` (507) naming the bytes needed and free and the way
around it, before it is written; never a bare `ENOSPC` (500) halfway through. The importer
Lambda fed API Gateway and S3 events on moto, the disk a real small tmpfs, or
`shutil.disk_usage` answering for a full one."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from caseshelf.client.transport import job_error
from caseshelf.domain.errors import NotFound, StorageFull
from caseshelf.domain.identity import Identity
from caseshelf.services.staging import ensure_room, staged_bytes
from tests.conftest import Backend
from tests.helpers import call_function, s3_event, tar_gz
from tests.helpers import importer_api as api
from tests.tmpfs import free_bytes, tmpfs

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]

ME = Identity("acme", "alice")
CASE_DIRS = {"kind": "tasks", "format": "case-dirs"}


@pytest.fixture
def backend(moto_installed: Backend) -> Backend:
    return moto_installed


def case_tree(root: Path, name: str, payload: int) -> bytes:
    """A case-directory project (`eval.yaml`, one case) whose case carries a file of `payload`
    random (incompressible) bytes, as a .tar.gz."""
    case = root / name / "cases" / "c1"
    case.mkdir(parents=True)
    (case / "input.yaml").write_text("prompt: write the answer to answer.txt\n")
    (case / "data.bin").write_bytes(os.urandom(payload))
    (root / name / "eval.yaml").write_text(f"name: {name}\ndataset:\n  path: cases\n")
    return tar_gz(root / name, name, compresslevel=0)


def import_upload(
    backend: Any, name: str, data: bytes, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """POST /uploads for a case-directory archive, the object put, its S3 event delivered with
    the temporary directory at `tmp` (only then: moto keeps large objects in temporary files):
    the job as `GET /jobs/{id}` answers it."""
    status, up = api("POST", "/uploads", {**CASE_DIRS, "filename": f"{name}.tar.gz"})
    assert status == 201, up
    backend.s3.put_object(Bucket=backend.settings.bucket, Key=up["key"], Body=data)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    _, handled = call_function("importer", s3_event(up["key"]))
    assert handled["objects"][0]["job_id"] == up["job_id"]
    status, job = api("GET", f"/jobs/{up['job_id']}")
    assert status == 200, job
    return dict(job)


MiB = 1024 * 1024


def test_a_tree_the_disk_cannot_hold_twice_fails_before_its_second_copy(
    backend: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a temporary directory on a real 40 MiB disk, and an archive of 22 MiB of files:
    # written out member by member it fits (with the scratch area's 16 MiB reserve), written
    # out once more to be read as case directories it does not
    disk = tmp_path / "disk"
    with tmpfs(disk, "40m"):
        data = case_tree(tmp_path / "src", "big", 22 * MiB)
        # When it is uploaded as case directories
        job = import_upload(backend, "big", data, disk, monkeypatch)
        # Then the job fails as StorageFull before the second copy, naming the bytes needed and
        # free, the disk and its size, and the ways around it; nothing is left on the disk and
        # nothing is registered
        assert job["state"] == "failed", job
        error = job["error"]
        assert (error["code"], error["title"]) == ("StorageFull", "Insufficient Storage")
        assert "written out to be read" in error["detail"]
        assert error["needed_bytes"] > 22 * MiB > error["free_bytes"]
        assert error["limit_bytes"] == 40 * MiB and error["disk"] == str(disk)
        assert f"{error['needed_bytes']:,} bytes" in error["detail"]
        assert "EphemeralStorage" in error["detail"] and "caseshelf register" in error["detail"]
        assert list(disk.iterdir()) == [] and free_bytes(disk) == 40 * MiB
        with pytest.raises(NotFound):
            backend.services.registry.get_version(ME, "big", "latest")
        # and a client following the job gets the 507's error type
        assert isinstance(job_error(job["id"], error), StorageFull)


def test_a_member_the_disk_cannot_hold_fails_before_it_is_written(
    backend: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the same 40 MiB disk and an archive whose one file is 48 MiB
    disk = tmp_path / "disk"
    with tmpfs(disk, "40m"):
        data = case_tree(tmp_path / "src", "huge", 48 * MiB)
        job = import_upload(backend, "huge", data, disk, monkeypatch)
        # Then the job fails as StorageFull naming the entry, through the same check
        assert job["state"] == "failed" and job["error"]["code"] == "StorageFull", job
        error = job["error"]
        assert error["path"] == "huge/cases/c1/data.bin" and error["limit_bytes"] == 40 * MiB
        assert error["needed_bytes"] > 48 * MiB and "EphemeralStorage" in error["detail"]
        assert list(disk.iterdir()) == []


def test_a_tree_that_fits_the_temporary_disk_is_imported(
    backend: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the same 40 MiB disk and an archive of 4 MiB of files
    disk = tmp_path / "disk"
    with tmpfs(disk, "40m"):
        data = case_tree(tmp_path / "src", "small", 4 * MiB)
        # When it is uploaded as case directories
        job = import_upload(backend, "small", data, disk, monkeypatch)
        # Then it is registered, and nothing is left on the disk
        assert job["state"] == "succeeded", job
        rec = backend.services.registry.get_version(ME, "small", "latest")
        assert rec.case_count == 1
        assert list(disk.iterdir()) == []


def test_the_check_asks_the_disk_of_the_temporary_directory(
    backend: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a disk that reports 10 KiB free where the temporary directory is (and only there)
    real = shutil.disk_usage
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    asked: list[str] = []

    def usage(path: Any) -> Any:
        asked.append(str(path))
        got = real(path)
        if Path(path) == tmp:
            return type(got)(512 * 2**20, 512 * 2**20 - 10240, 10240)
        return got

    monkeypatch.setattr(shutil, "disk_usage", usage)
    # When a 64 KiB archive tree is uploaded as case directories
    data = case_tree(tmp_path / "src", "full", 64 * 1024)
    job = import_upload(backend, "full", data, tmp, monkeypatch)
    # Then the job fails as StorageFull naming that disk's 512 MiB, 10 KiB free
    assert job["state"] == "failed" and job["error"]["code"] == "StorageFull", job
    assert (job["error"]["limit_bytes"], job["error"]["free_bytes"]) == (512 * 2**20, 10240)
    assert str(tmp) in asked and list(tmp.iterdir()) == []


def test_staged_bytes_counts_a_block_more_for_every_file_and_directory(tmp_path: Path) -> None:
    # Given three files of 1, 4096 and 0 bytes in two directories
    needed = staged_bytes([1, 4096, 0], directories=2)
    # Then each takes its bytes and at most one block more; each directory a block
    assert needed == 4097 + 5 * 4096
    # and a disk with that much free takes them, one with a byte less does not
    free = shutil.disk_usage(tmp_path).free
    ensure_room(tmp_path, free, what="x", around="y")
    with pytest.raises(StorageFull) as err:
        ensure_room(tmp_path, free + 2**30, what="the thing", around="do less")
    assert err.value.detail.startswith("the thing needs") and err.value.detail.endswith("do less")
