"""Export jobs on AWS's machinery, faked by moto (in process, and as a server over HTTP): the
export route starts a job whose parts go to a real SQS queue made from the template's declaration
(its redrive policy and visibility timeout), and each message received from SQS is handed to the
export worker's handler, as Lambda's event source mapping would (batch size 1): deleted when the
handler returns, made visible again when it raises."""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from caseshelf import bootstrap
from caseshelf.domain import export_parts
from caseshelf.domain.identity import Identity
from caseshelf.ports import BlobStore, ObjectWriter
from caseshelf.services.export_fanout import PartMeta, done_part, part_key
from caseshelf.services.exports import ExportRequest
from caseshelf.services.registry import parse_dataset
from tests.conftest import Backend, aws_backend
from tests.helpers import call_function, importer_api, lambda_context, sample_event
from tests.moto_infra import create_queues, make_moto_dynamodb_atomic

pytestmark = pytest.mark.integration

ME = Identity("acme", "alice")
CASES = 10
PART = 3  # cases per part: parts 0-3, the last of one case


class Fault(Exception):
    """A crash injected into a part (what a killed invocation looks like to SQS)."""


@dataclass
class RecordingStore:
    """The registry's store, recording every object made visible (in order) and crashing the
    writes whose key contains one of `crash_on` while `crashes` lasts."""

    inner: BlobStore
    written: list[str] = field(default_factory=list)
    crash_on: list[str] = field(default_factory=list)
    crashes: int = 0

    def _check(self, key: str) -> None:
        if self.crashes and any(c in key for c in self.crash_on):
            self.crashes -= 1
            raise Fault(f"injected crash writing {key}")

    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> None:
        self._check(key)
        self.inner.put(key, data, content_type=content_type)
        self.written.append(key)

    def open_writer(self, key: str, *, content_type: str | None = None) -> ObjectWriter:
        self._check(key)
        return _Recorded(self, key, self.inner.open_writer(key, content_type=content_type))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass
class _Recorded:
    store: RecordingStore
    key: str
    inner: ObjectWriter

    def write(self, data: bytes) -> int:
        return self.inner.write(data)

    def copy(self, key: str, size: int) -> None:
        self.inner.copy(key, size)

    def commit(self) -> int:
        size = self.inner.commit()
        self.store.written.append(self.key)
        return size

    def abort(self) -> None:
        self.inner.abort()


@dataclass
class Stack:
    backend: Backend
    store: RecordingStore
    sqs: Any
    queues: dict[str, tuple[str, str]]
    delivered: Counter[tuple[str, int]] = field(default_factory=Counter)

    def export(self, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        ev = sample_event("export_post.json")
        ev["body"] = json.dumps(body if body is not None else {"bundle": True})
        return call_function("export", ev)

    def job(self, job_id: str) -> dict[str, Any]:
        status, job = importer_api("GET", f"/jobs/{job_id}")
        assert status == 200, job
        return job

    def drain(self) -> None:
        """Receive every message of the export queue, then of its dead-letter queue, and hand
        each to the worker's handler until both are empty (SQS moves a message to the
        dead-letter queue on the receive past its maxReceiveCount)."""
        handler = __import__("caseshelf.functions.export_worker", fromlist=["x"]).lambda_handler
        for name in (
            "ExportQueue",
            "ExportDeadLetterQueue",
            "ExportQueue",
            "ExportDeadLetterQueue",
        ):
            url, arn = self.queues[name]
            while True:
                got = self.sqs.receive_message(
                    QueueUrl=url, MaxNumberOfMessages=1, AttributeNames=["All"]
                ).get("Messages", [])
                if not got:
                    break
                msg = got[0]
                record = {
                    "messageId": msg["MessageId"],
                    "receiptHandle": msg["ReceiptHandle"],
                    "body": msg["Body"],
                    "attributes": msg["Attributes"],
                    "eventSource": "aws:sqs",
                    "eventSourceARN": arn,
                }
                doc = json.loads(msg["Body"])
                self.delivered[(name, doc["part"])] += 1
                try:
                    handler({"Records": [record]}, lambda_context("ExportWorkerFunction", 2048))
                except Fault:
                    self.sqs.change_message_visibility(
                        QueueUrl=url, ReceiptHandle=msg["ReceiptHandle"], VisibilityTimeout=0
                    )
                    continue
                self.sqs.delete_message(QueueUrl=url, ReceiptHandle=msg["ReceiptHandle"])


def _stack(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    sqs = _sqs(backend)
    queues = create_queues(sqs, uuid.uuid4().hex[:8])
    settings = backend.settings.model_copy(
        update={
            "export_queue_url": queues["ExportQueue"][0],
            "export_dead_letter_arn": queues["ExportDeadLetterQueue"][1],
            "evalhub_secret_ref": "evalhub-s3",
        }
    )
    store = RecordingStore(backend.store)
    services = bootstrap.build(settings, store=store, index=backend.index)  # type: ignore[arg-type]
    monkeypatch.setattr(export_parts, "MAX_PART_CASES", PART)
    cases = [
        {
            "id": f"q{i}",
            "inputs": {"user": f"question {i}"},
            "expectations": {"ground_truth": str(i)},
        }
        for i in range(CASES)
    ]
    services.registry.register(ME, parse_dataset({"id": "qa", "version": "1.0.0", "cases": cases}))
    bootstrap.use(services)
    try:
        yield Stack(backend, store, sqs, queues)
    finally:
        bootstrap.use(None)


def _sqs(backend: Backend) -> Any:
    import boto3

    return boto3.client("sqs", region_name="us-east-1", endpoint_url=backend.endpoint_url)


@pytest.fixture(params=["moto", "moto_server"])
def stack(
    request: pytest.FixtureRequest, aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Stack]:
    if request.param == "moto":
        from moto import mock_aws

        make_moto_dynamodb_atomic()
        with mock_aws():
            yield from _stack(aws_backend("moto", None), monkeypatch)
        return
    url = request.getfixturevalue("moto_server")
    yield from _stack(aws_backend("moto_server", url), monkeypatch)


FORMATS = ("case-dirs", "harbor")


def one_pass(stack: Stack, tmp_path: Path, fmt: str = "case-dirs") -> Path:
    """The same export written in one pass, in process, to a directory: the reference."""
    svc = bootstrap.services()
    ref = tmp_path / f"ref-{fmt}"
    svc.exports.export_version(
        ME, "qa", "1.0.0", ExportRequest(bundle=True, format=fmt), to=str(ref)
    )
    return ref


def assert_same_export(stack: Stack, prefix: str, ref: Path) -> None:
    """The job's export holds the reference's files, byte for byte, under its prefix and in
    its bundle (`manifest.json` its last entry); nothing else."""
    files = [p for p in ref.rglob("*") if p.is_file()]
    expected = {p.relative_to(ref).as_posix(): p.read_bytes() for p in files}
    listed = {o.key[len(prefix) :] for o in stack.store.list(prefix)}
    assert listed == set(expected)
    for rel, data in expected.items():
        assert stack.store.get(prefix + rel) == data, rel
    bundle = stack.store.get(prefix[:-1] + ".bundle.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(bundle), mode="r:gz") as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        got = {m.name: tar.extractfile(m).read() for m in members}  # type: ignore[union-attr]
    assert got == expected and members[-1].name == "manifest.json"


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_export_fans_out_into_parts_and_the_manifest_is_written_last(stack, tmp_path, fmt):
    status, job = stack.export({"bundle": True, "format": fmt})
    assert status == 202 and job["state"] == "running"
    assert job["progress"]["parts_total"] == 4 and job["progress"]["cases_total"] == CASES
    stack.drain()
    # Each part was one message, delivered once to the worker
    assert stack.delivered == Counter({("ExportQueue", n): 1 for n in range(4)})
    done = stack.job(job["id"])
    assert done["state"] == "succeeded", done
    assert done["progress"]["parts_done"] == 4 and done["progress"]["cases_written"] == CASES
    result = done["result"]
    prefix = f"t/acme/exports/{result['export_id']}/"
    # The manifest is the last object made visible, after every file and the bundle
    exported = [k for k in stack.store.written if k.startswith(prefix[:-1])]
    exported = [k for k in exported if ".parts/" not in k]
    assert exported[-1] == prefix + "manifest.json"
    assert prefix[:-1] + ".bundle.tar.gz" in exported
    ref = one_pass(stack, tmp_path, fmt)
    assert_same_export(stack, prefix, ref)
    assert result["file_count"] == len([p for p in ref.rglob("*") if p.is_file()]) - 1
    if fmt == "harbor":  # dataset.toml is written before the manifest, which lists it
        assert prefix + "dataset.toml" in exported
    # The scratch area is gone; asking again answers the export at once
    assert not list(stack.store.list(prefix[:-1] + ".parts/"))
    status, again = stack.export({"bundle": True, "format": fmt})
    assert status == 200 and again["reused"] is True and again["export_id"] == result["export_id"]


@pytest.mark.parametrize(("fmt", "piece"), [("case-dirs", "entries"), ("harbor", "toml")])
def test_a_crashed_part_is_delivered_again_and_the_job_finishes(stack, tmp_path, fmt, piece):
    stack.store.crash_on, stack.store.crashes = [f"part-00002.{piece}"], 1
    status, job = stack.export({"bundle": True, "format": fmt})
    assert status == 202
    stack.drain()
    assert stack.delivered[("ExportQueue", 2)] == 2  # the crash, then the redelivery
    assert all(stack.delivered[("ExportQueue", n)] == 1 for n in (0, 1, 3))
    done = stack.job(job["id"])
    assert done["state"] == "succeeded", done
    prefix = done["result"]["manifest_key"].removesuffix("manifest.json")
    assert_same_export(stack, prefix, one_pass(stack, tmp_path, fmt))


def test_a_part_past_its_retries_fails_the_job_naming_it_and_a_rerun_reuses_the_rest(stack):
    stack.store.crash_on, stack.store.crashes = ["part-00001.entries"], 99
    status, job = stack.export()
    stack.drain()
    assert stack.delivered[("ExportQueue", 1)] == 3  # maxReceiveCount
    assert stack.delivered[("ExportDeadLetterQueue", 1)] == 1
    failed = stack.job(job["id"])
    assert failed["state"] == "failed"
    assert failed["error"]["part"] == 1 and failed["error"]["code"] == "PartFailed"
    assert "part 1 (cases 3-5)" in failed["error"]["detail"]
    assert "injected crash" in failed["error"]["detail"]
    # Nothing looks complete: no manifest anywhere under the exports
    keys = [o.key for o in stack.store.list("t/acme/exports/")]
    assert keys and not [k for k in keys if k.endswith("manifest.json")]
    # Asked again, the new job writes only the part that failed; the others are reused
    stack.store.crashes = 0
    stack.store.written.clear()
    stack.delivered.clear()
    status, rerun = stack.export()
    assert status == 202 and rerun["id"] != job["id"]
    stack.drain()
    done = stack.job(rerun["id"])
    assert done["state"] == "succeeded", done
    case_files = [k for k in stack.store.written if "/q" in k and ".parts/" not in k]
    assert {k.split("/")[4] for k in case_files} == {"q3", "q4", "q5"}  # part 1's cases only


def test_a_stream_appends_objects_copied_by_the_store_itself(backend):
    # Given objects under a tenant's exports area, of a part's size and of less
    big = bytes(range(256)) * (6 * 4096)  # 6 MiB
    small = b"tail" * 25
    prefix = "t/acme/exports/x.parts/"
    backend.store.put(prefix + "big", big)
    backend.store.put(prefix + "small", small)
    # When a stream holds a little, then appends both, then a little more
    out = backend.store.open_writer("t/acme/exports/x.bundle.tar.gz")
    out.write(b"head")
    out.copy(prefix + "big", len(big))
    out.copy(prefix + "small", len(small))
    out.copy(prefix + "big", len(big))
    out.write(b"end")
    # Then nothing is visible before the commit, and the object is the concatenation after it
    assert not backend.store.exists("t/acme/exports/x.bundle.tar.gz")
    size = out.commit()
    expected = b"head" + big + small + big + b"end"
    assert size == len(expected)
    assert backend.store.get("t/acme/exports/x.bundle.tar.gz") == expected


def test_a_harbor_part_is_reused_only_with_its_dataset_toml_entries(backend):
    # Given a part's marker written without `[[tasks]]` entries (a marker of a format without
    # them, or of a part that kept none), and one with them
    scratch = "t/acme/exports/x.parts/"
    bare, full = PartMeta(0, 0, 3, 15, 900, 300), PartMeta(1, 3, 6, 15, 900, 300, tasks_size=120)
    for meta in (bare, full):
        backend.store.put(part_key(scratch, meta.number, "json"), meta.to_json())
    # Then a harbor export writes the first again and reuses the second; other formats reuse both
    assert done_part(backend.store, scratch, 0, (0, 3), False, tasks=True) is None
    assert done_part(backend.store, scratch, 1, (3, 6), False, tasks=True) == full
    assert done_part(backend.store, scratch, 0, (0, 3), False) == bare
