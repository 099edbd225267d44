"""/tmp in the Lambda emulation (an ext4 file system of the function's EphemeralStorage, made
small here): a case-directory archive larger than the importer's /tmp fails its job as
`StorageFull` (507) before anything is written, the invocation itself ending well (no crash, no
500), and one that fits is imported; an export with its bundle, several times larger than the
export worker's /tmp, completes (its parts stream to S3 and stage nothing there)."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from caseshelf.api.errors import status_of
from caseshelf.client.transport import job_error
from tests.lambda_emulation import Emulation, api_event, function_specs, moto_stack, s3_notification

TMP_MB = 40
MiB = 1024 * 1024
WORKER_TMP_MB = 1


@pytest.fixture(scope="module")
def small_tmp(
    layer: Path, moto_server: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Emulation]:
    """The template's importer with a 40 MiB /tmp, its export worker with 1 MiB."""
    every = function_specs()
    specs = {
        "ImporterFunction": dataclasses.replace(every["ImporterFunction"], tmp_mb=TMP_MB),
        "ExportFunction": every["ExportFunction"],
        "ExportWorkerFunction": dataclasses.replace(
            every["ExportWorkerFunction"], tmp_mb=WORKER_TMP_MB
        ),
        "RegistryFunction": every["RegistryFunction"],
    }
    with (
        moto_stack(moto_server) as (bucket, table),
        Emulation(
            endpoint_url=moto_server,
            bucket=bucket,
            table=table,
            layer=layer,
            specs=specs,
            scratch=tmp_path_factory.mktemp("lambda-tmp"),
        ) as emu,
    ):
        yield emu


def archive(name: str, payload: int) -> bytes:
    """A case-directory project (`eval.yaml`, one case carrying `payload` random bytes)."""
    files = {
        f"{name}/eval.yaml": f"name: {name}\ndataset:\n  path: cases\n".encode(),
        f"{name}/cases/c1/input.yaml": b"prompt: write the answer to answer.txt\n",
        f"{name}/cases/c1/data.bin": os.urandom(payload),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=0) as tar:  # random: stored
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def import_case_dirs(emu: Emulation, name: str, data: bytes) -> tuple[Any, dict[str, Any]]:
    """Upload `data` as case directories and deliver its S3 notification: (the worker's
    outcome, the job as `GET /jobs/{id}` answers it)."""
    body = {"kind": "tasks", "format": "case-dirs", "filename": f"{name}.tar.gz"}
    up = emu.call("ImporterFunction", api_event("POST", "/uploads", body=body))
    assert up.status == 201, (up.body[:2000], up.outcome.log[-4000:])
    upload = up.json()
    put = httpx.put(upload["upload_url"], content=data, timeout=60)
    assert put.status_code == 200, put.text
    event = s3_notification(emu.refs["DataBucket"], upload["key"], "0" * 32, len(data))
    outcome = emu.invoke("ImporterFunction", event)
    job = emu.call(
        "ImporterFunction", api_event("GET", "/jobs/{id}", {"id": upload["job_id"]})
    ).json()
    return outcome, job


def test_an_archive_over_the_importers_tmp_fails_as_storage_full(small_tmp: Emulation) -> None:
    # Given the importer's 40 MiB /tmp and a case-directory archive of 22 MiB of files (written
    # out member by member it fits, with the scratch area's 16 MiB reserve; written out once
    # more to be read as case directories it does not)
    outcome, job = import_case_dirs(small_tmp, "big", archive("big", 22 * MiB))
    # Then the invocation ends well (no crash, no OOM, no ENOSPC) and the job fails as
    # StorageFull naming /tmp's size, the bytes needed and free, and the way around it
    assert outcome.kind == "ok" and not outcome.oom, (outcome.error, outcome.log[-4000:])
    error = job["error"]
    assert job["state"] == "failed" and error["code"] == "StorageFull", job
    # (the emulation's /tmp is larger, its spare blocks reserved: what is free is the size)
    assert error["disk"] == "/tmp" and error["limit_bytes"] >= TMP_MB * MiB
    assert error["needed_bytes"] > 22 * MiB > error["free_bytes"]
    assert "EphemeralStorage" in error["detail"]
    # and the client following the job raises the 507's error, not a 500
    assert status_of(job_error(job["id"], error)) == (507, "storage-full")


def test_an_archive_that_fits_the_importers_tmp_is_imported(small_tmp: Emulation) -> None:
    # Given the same /tmp and an archive of 2 MiB of files
    outcome, job = import_case_dirs(small_tmp, "small", archive("small", 2 * MiB))
    # Then it is registered
    assert outcome.kind == "ok", (outcome.error, outcome.log[-4000:])
    assert job["state"] == "succeeded", job
    assert job["result"]["case_count"] == 1


def test_an_export_and_its_bundle_larger_than_the_workers_tmp_complete(
    small_tmp: Emulation,
) -> None:
    # Given a version of 400 cases of 8 KiB of hex (3.2 MB of rows, a bundle of ~1.7 MB:
    # each more than the export worker's 1 MiB /tmp)
    cases = [{"id": f"c{i:04d}", "inputs": {"user": os.urandom(4096).hex()}} for i in range(400)]
    body = {"id": "wide", "version": "1.0.0", "cases": cases}
    made = small_tmp.call("RegistryFunction", api_event("POST", "/datasets", body=body))
    assert made.status == 201, made.body[:2000]
    # When it is exported as jsonl with its bundle, and the worker takes every part
    p = {"id": "wide", "ref": "1.0.0"}
    started = small_tmp.call(
        "ExportFunction",
        api_event(
            "POST",
            "/datasets/{id}/versions/{ref}/exports",
            p,
            body={"format": "jsonl", "bundle": True},
        ),
    )
    assert started.status == 202, (started.body[:2000], started.outcome.log[-4000:])
    outcomes = small_tmp.deliver("ExportQueue", "ExportWorkerFunction")
    # Then every part was written and the job succeeded, manifest and bundle in S3
    assert outcomes and all(o.kind == "ok" for o in outcomes), [o.kind for o in outcomes]
    job = small_tmp.call(
        "ImporterFunction", api_event("GET", "/jobs/{id}", {"id": started.json()["id"]})
    ).json()
    assert job["state"] == "succeeded", json.dumps(job)[:2000]
    result = job["result"]
    assert result["case_count"] == 400 and result["bytes"] > 3 * 2**20
    s3 = boto3.client(
        "s3",
        endpoint_url=small_tmp.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    bundle = s3.head_object(Bucket=small_tmp.refs["DataBucket"], Key=result["bundle_key"])
    assert bundle["ContentLength"] > WORKER_TMP_MB * 2**20
