"""A case-directory archive is written out to the temporary directory (a Lambda function's /tmp)
to be read: when that disk cannot hold it, the import job fails as `StorageFull` (507) naming
the bytes needed and free and the way around it, before anything is written; never a bare
`ENOSPC` (500) halfway through. The importer Lambda fed API Gateway and S3 events on moto, the
disk a real small tmpfs, or `shutil.disk_usage` answering for a full one."""

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
    return tar_gz(root / name, name)


def import_upload(backend: Any, name: str, data: bytes) -> dict[str, Any]:
    """POST /uploads for a case-directory archive, the object put, its S3 event delivered:
    the job as `GET /jobs/{id}` answers it."""
    status, up = api("POST", "/uploads", {**CASE_DIRS, "filename": f"{name}.tar.gz"})
    assert status == 201, up
    backend.s3.put_object(Bucket=backend.settings.bucket, Key=up["key"], Body=data)
    _, handled = call_function("importer", s3_event(up["key"]))
    assert handled["objects"][0]["job_id"] == up["job_id"]
    status, job = api("GET", f"/jobs/{up['job_id']}")
    assert status == 200, job
    return dict(job)


def staged_dirs(tmp: Path) -> list[str]:
    return [p.name for p in tmp.iterdir() if p.name.startswith("caseshelf-case-dirs-")]


def test_a_tree_the_temporary_disk_cannot_hold_fails_as_storage_full(
    backend: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a temporary directory on a real 1 MiB disk, and an archive of 2 MiB of files
    disk = tmp_path / "disk"
    with tmpfs(disk, "1m"):
        monkeypatch.setattr(tempfile, "tempdir", str(disk))
        data = case_tree(tmp_path / "src", "big", 2 * 1024 * 1024)
        # When it is uploaded as case directories
        job = import_upload(backend, "big", data)
        # Then the job fails as StorageFull, naming the bytes needed and free, the disk's size
        # and the ways around it; nothing was written to the disk and nothing is registered
        assert job["state"] == "failed", job
        error = job["error"]
        assert (error["code"], error["title"]) == ("StorageFull", "Insufficient Storage")
        assert error["needed_bytes"] > 2 * 1024 * 1024 > error["free_bytes"]
        assert error["limit_bytes"] == 1024 * 1024 and error["path"] == str(disk)
        assert f"{error['needed_bytes']:,} bytes" in error["detail"]
        assert "EphemeralStorage" in error["detail"] and "caseshelf register" in error["detail"]
        assert staged_dirs(disk) == [] and free_bytes(disk) == error["free_bytes"]
        with pytest.raises(NotFound):
            backend.services.registry.get_version(ME, "big", "latest")
        # and a client following the job gets the 507's error type
        assert isinstance(job_error(job["id"], error), StorageFull)


def test_a_tree_that_fits_the_temporary_disk_is_imported(
    backend: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the same 1 MiB disk and an archive of 256 KiB of files
    disk = tmp_path / "disk"
    with tmpfs(disk, "1m"):
        monkeypatch.setattr(tempfile, "tempdir", str(disk))
        data = case_tree(tmp_path / "src", "small", 256 * 1024)
        # When it is uploaded as case directories
        job = import_upload(backend, "small", data)
        # Then it is registered, and its staging directory is gone
        assert job["state"] == "succeeded", job
        rec = backend.services.registry.get_version(ME, "small", "latest")
        assert rec.case_count == 1
        assert staged_dirs(disk) == []


def test_the_check_asks_the_disk_of_the_temporary_directory(
    backend: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a disk that reports 10 KiB free where the temporary directory is (and only there)
    real = shutil.disk_usage
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    asked: list[str] = []

    def usage(path: Any) -> Any:
        asked.append(str(path))
        got = real(path)
        if Path(path) == tmp:
            return type(got)(512 * 2**20, 512 * 2**20 - 10240, 10240)
        return got

    monkeypatch.setattr(shutil, "disk_usage", usage)
    # When a 64 KiB archive tree is uploaded as case directories
    job = import_upload(backend, "full", case_tree(tmp_path / "src", "full", 64 * 1024))
    # Then the job fails as StorageFull naming that disk's 512 MiB, 10 KiB free
    assert job["state"] == "failed" and job["error"]["code"] == "StorageFull", job
    assert (job["error"]["limit_bytes"], job["error"]["free_bytes"]) == (512 * 2**20, 10240)
    assert str(tmp) in asked and staged_dirs(tmp) == []


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
