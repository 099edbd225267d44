"""Uploads that declare what they are (`kind: benchmark | tasks`), task archives imported by the
S3 worker, recipe revive and catalog publishing: the importer Lambda fed API Gateway and S3
events on moto (bucket and table built from the template)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from caseshelf.domain.canonical import digest_of
from caseshelf.domain.errors import NotFound
from caseshelf.domain.identity import Identity
from tests.conftest import Backend
from tests.helpers import call_function, s3_event, tar_gz
from tests.helpers import importer_api as api

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]

ME = Identity("acme", "alice")


@pytest.fixture
def backend(moto_installed: Backend) -> Backend:
    return moto_installed


def call(ev: dict[str, Any]) -> tuple[int, Any]:
    return call_function("importer", ev)


def upload(backend: Any, body: dict[str, Any], data: bytes) -> dict[str, Any]:
    """POST /uploads, put the object where the presigned URL points, deliver its S3 event."""
    status, up = api("POST", "/uploads", body)
    assert status == 201, up
    backend.s3.put_object(Bucket=backend.settings.bucket, Key=up["key"], Body=data)
    _, handled = call(s3_event(up["key"]))
    assert handled["objects"][0]["job_id"] == up["job_id"]
    return up


# -- what an upload is ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"filename": "a.jsonl", "recipe": "gsm8k", "image_template": "x"}, "image_template"),
        ({"kind": "jsonl", "filename": "a.jsonl", "recipe": "gsm8k"}, "kind"),
        ({"kind": "tasks", "filename": "t.tar.gz"}, "format"),
        ({"kind": "tasks", "filename": "t.tar.gz", "format": "harbor", "recipe": "x"}, "recipe"),
        (
            {"kind": "tasks", "filename": "t.tar.gz", "format": "case-dirs", "skip_invalid": True},
            "container tasks",
        ),
        ({"kind": "tasks", "filename": "tasks.txt", "format": "harbor"}, ".tar.gz"),
        (
            {
                "kind": "tasks",
                "filename": "t.zip",
                "format": "harbor",
                "version": "1",
                "bump": "minor",
            },
            "either version or bump",
        ),
    ],
)
def test_an_upload_request_that_does_not_fit_its_kind_is_400_naming_why(
    backend: Any, body: dict[str, Any], named: str
) -> None:
    # When an upload declares itself badly
    status, problem = api("POST", "/uploads", body)
    # Then it is refused before any job exists, naming the key or the rule
    assert status == 400, problem
    assert named in problem["detail"]


def test_a_benchmark_upload_names_its_format_and_runs_through_the_recipe(backend: Any) -> None:
    # Given a rows file whose name does not tell its format
    rows = "".join(
        json.dumps({"question": f"q{i}", "answer": f"a\n#### {i}"}) + "\n" for i in range(7)
    )
    # When it is uploaded as a benchmark with an explicit format
    up = upload(
        backend,
        {"kind": "benchmark", "filename": "rows.data", "format": "jsonl", "recipe": "gsm8k"},
        rows.encode(),
    )
    # Then the job imports it through the pinned recipe
    _, job = api("GET", f"/jobs/{up['job_id']}")
    assert job["state"] == "succeeded", job
    assert job["request"]["format"] == "jsonl" and job["request"]["kind"] == "benchmark"
    assert (job["result"]["id"], job["result"]["case_count"]) == ("gsm8k", 7)
    # And the provenance names the uploaded file and its digest, not the server's object key
    rec = backend.services.registry.get_version(ME, "gsm8k", job["result"]["version"])
    source = rec.produced_by["source"]
    assert "url" not in source
    assert source["upload"] == {
        "filename": "rows.data",
        "sha256": digest_of(rows.encode()),
        "size": len(rows.encode()),
    }


# -- task archives ---------------------------------------------------------------------------


def test_a_terminal_bench_archive_upload_fails_whole_then_imports_with_skip_invalid(
    backend: Any, shared_data: Path
) -> None:
    # Given the real evoeval tasks (task 5 has no tests) as one .tar.gz
    data = tar_gz(shared_data / "terminal-bench" / "evoeval", "evoeval")
    base = {
        "kind": "tasks",
        "format": "terminal-bench",
        "filename": "evoeval.tar.gz",
        "image_template": "registry.example/tb:{id}",
        "dataset": "evoeval",
        "version": "1.0.0",
    }
    # When it is uploaded without skip_invalid
    bad = upload(backend, base, data)
    # Then the job fails naming the task, and nothing is registered
    _, job = api("GET", f"/jobs/{bad['job_id']}")
    assert job["state"] == "failed"
    assert "task '5'" in job["error"]["detail"] and job["error"]["case_ids"] == ["5"]
    with pytest.raises(NotFound):
        backend.services.registry.get_version(ME, "evoeval", "latest")

    # When it is uploaded again with skip_invalid
    ok = upload(backend, {**base, "skip_invalid": True}, data)
    # Then the four complete tasks are registered, the skip reported and stamped
    _, job = api("GET", f"/jobs/{ok['job_id']}")
    assert job["state"] == "succeeded", job
    result = job["result"]
    assert (result["version"], result["case_count"], result["created"]) == ("1.0.0", 4, True)
    assert [s["task"] for s in result["skipped"]] == ["5"]
    rec = backend.services.registry.get_version(ME, "evoeval", "1.0.0")
    assert rec.produced_by["via"] == "upload" and rec.produced_by["skip_invalid"] is True
    assert rec.produced_by["source"]["kind"] == "terminal-bench"
    assert rec.produced_by["source"]["origin"] == "evoeval.tar.gz"
    assert rec.produced_by["source"]["upload"] == {
        "filename": "evoeval.tar.gz",
        "sha256": digest_of(data),
        "size": len(data),
    }
    assert "uploads/" not in json.dumps(rec.produced_by)
    # And a redelivered event changes nothing; the finished upload is gone
    _, again = call(s3_event(ok["key"]))
    assert again["objects"][0]["status"] == "duplicate"
    assert backend.store.head(ok["key"]) is None
    assert len(backend.services.registry.list_versions(ME, "evoeval").items) == 1


def test_a_case_directory_archive_dropped_with_a_sidecar_imports_once(
    backend: Any, shared_data: Path
) -> None:
    # Given a case-directory tree archived and dropped next to a `kind: tasks` sidecar
    data = tar_gz(shared_data / "agent-eval-harness" / "opencode-smoke", "opencode-smoke")
    bucket = backend.settings.bucket
    sidecar = {"kind": "tasks", "format": "case-dirs", "dataset": "smoke"}
    backend.s3.put_object(
        Bucket=bucket, Key="t/acme/imports/smoke/import.json", Body=json.dumps(sidecar).encode()
    )
    key = "t/acme/imports/smoke/opencode-smoke.tar.gz"
    backend.s3.put_object(Bucket=bucket, Key=key, Body=data)
    # When the data file's event arrives (twice)
    _, handled = call(s3_event(key))
    _, again = call(s3_event(key))
    # Then the tree is registered once, its case files kept byte for byte
    assert handled["objects"][0]["status"] == "succeeded", handled
    assert again["objects"][0]["status"] == "duplicate"
    rec = backend.services.registry.get_version(ME, "smoke", "latest")
    assert (rec.version, rec.case_count, rec.produced_by["via"]) == ("1.0.0", 1, "s3-drop")
    assert rec.produced_by["source"]["kind"] == "case-dirs"
    cases = backend.services.registry.list_cases(ME, "smoke", "1.0.0").items
    original = (
        shared_data / "agent-eval-harness" / "opencode-smoke" / "cases" / "case-001" / "input.yaml"
    ).read_bytes()
    assert cases[0]["inputs"]["user"].startswith("Create a file called hello.txt")
    assert cases[0]["files"]["input.yaml"]["digest"] == digest_of(original)


def test_a_case_directory_archive_may_not_point_outside_itself(
    backend: Any, tmp_path: Path
) -> None:
    # Given a case-directory archive whose eval.yaml points its dataset at the server's disk
    root = tmp_path / "evil"
    (root / "cases" / "c1").mkdir(parents=True)
    (root / "cases" / "c1" / "input.yaml").write_text("prompt: hi\n")
    (root / "eval.yaml").write_text(f"name: evil\ndataset:\n  path: {tmp_path}\n")
    # When it is uploaded
    up = upload(
        backend,
        {"kind": "tasks", "format": "case-dirs", "filename": "evil.tar.gz"},
        tar_gz(root, "evil"),
    )
    # Then the job fails naming the rule, and nothing is registered
    _, job = api("GET", f"/jobs/{up['job_id']}")
    assert job["state"] == "failed"
    assert "dataset.path points outside the archive" in job["error"]["detail"]
    with pytest.raises(NotFound):
        backend.services.registry.get_version(ME, "evil", "latest")


def test_an_archive_with_a_traversing_entry_fails_its_job(backend: Any) -> None:
    # Given a tar whose entry climbs out of the tree
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escape/task.yaml")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    # When it is uploaded as Harbor tasks
    up = upload(
        backend, {"kind": "tasks", "format": "harbor", "filename": "t.tar.gz"}, buf.getvalue()
    )
    # Then the job fails naming the entry
    _, job = api("GET", f"/jobs/{up['job_id']}")
    assert job["state"] == "failed" and "../escape/task.yaml" in job["error"]["detail"]


# -- recipes ---------------------------------------------------------------------------------


def test_a_tombstoned_recipe_version_is_revived_by_its_creator(backend: Any) -> None:
    recipe = {
        "id": "mine",
        "version": "1.0.0",
        "category": "qa",
        "source": {"kind": "jsonl"},
        "mapping": {"task_field": "question"},
    }
    assert api("POST", "/recipes", recipe)[0] == 201
    assert api("DELETE", "/recipes/mine/versions/1.0.0")[0] == 200
    assert api("GET", "/recipes/mine")[0] == 404
    # When another tenant tries, then the creator revives it
    assert api("POST", "/recipes/mine/versions/1.0.0/revive", tenant="other")[0] == 404
    status, body = api("POST", "/recipes/mine/versions/1.0.0/revive")
    # Then it is live again
    assert status == 200 and body["deleted_at"] is None
    assert api("GET", "/recipes/mine")[1]["version"] == "1.0.0"


def test_publishing_the_catalog_needs_an_admin_of_shared_and_is_idempotent(backend: Any) -> None:
    # An admin of another tenant, and a non-admin of _shared, may not publish
    assert api("POST", "/benchmarks/publish", roles="admin")[0] == 403
    assert api("POST", "/benchmarks/publish", tenant="_shared")[0] == 403
    # An admin of _shared registers every catalog recipe
    status, first = api("POST", "/benchmarks/publish", tenant="_shared", roles="admin")
    assert status == 200, first
    ids = [r["id"] for r in first["items"]]
    assert ids == ["gsm8k", "humaneval", "mmlu", "swe-bench-verified", "truthfulqa"]
    assert all(r["created"] for r in first["items"])
    # And again changes nothing
    _, second = api("POST", "/benchmarks/publish", tenant="_shared", roles="admin")
    assert [r["created"] for r in second["items"]] == [False] * 5
    assert [r["content_digest"] for r in second["items"]] == [
        r["content_digest"] for r in first["items"]
    ]
    # A tenant now reads a registered version from _shared (with its creator)
    status, got = api("GET", "/recipes/gsm8k")
    assert status == 200 and (got["owner"], got["created_by"]) == ("_shared", "alice")
    listed = api("GET", "/recipes", query={"shared": "true"})[1]
    assert len(listed["items"]) == 5


# -- dataset documents -----------------------------------------------------------------------

DOC_CASES = [{"id": f"d{i}", "inputs": {"user": f"question {i}"}} for i in range(5)]


def test_a_dataset_document_upload_registers_as_post_datasets_would(backend: Any) -> None:
    # Given a whole dataset document, as POST /datasets takes it
    doc = {"id": "big", "version": "1.0.0", "description": "uploaded", "cases": DOC_CASES}
    # When it is uploaded as a dataset and its object lands
    up = upload(backend, {"kind": "dataset", "filename": "big.json"}, json.dumps(doc).encode())
    # Then the job registered it, answering what the route answers
    _, job = api("GET", f"/jobs/{up['job_id']}")
    assert job["state"] == "succeeded", job
    assert set(job["result"]) == {"id", "version", "content_digest", "case_count", "created"}
    assert (job["result"]["id"], job["result"]["version"]) == ("big", "1.0.0")
    assert job["result"]["case_count"] == 5 and job["result"]["created"] is True
    # And the same document registered directly is that version, unchanged
    from caseshelf.services.registry import parse_dataset

    again = backend.services.registry.register(ME, parse_dataset(doc))
    assert again.created is False
    assert again.record.content_digest == job["result"]["content_digest"]
    assert backend.services.registry.get_version(ME, "big", "1.0.0").description == "uploaded"


def test_a_dry_run_dataset_upload_answers_as_validate_and_stores_nothing(backend: Any) -> None:
    # Given a dataset document
    doc = {"id": "dry", "version": "1.0.0", "cases": DOC_CASES}
    # When it is uploaded with dry_run
    up = upload(
        backend,
        {"kind": "dataset", "filename": "dry.json", "dry_run": True},
        json.dumps(doc).encode(),
    )
    _, job = api("GET", f"/jobs/{up['job_id']}")
    # Then the job answers what POST /datasets/validate answers, and nothing was registered
    assert job["state"] == "succeeded", job
    assert job["result"]["valid"] is True and job["result"]["would_conflict"] is False
    assert (job["result"]["version"], job["result"]["case_count"]) == ("1.0.0", 5)
    with pytest.raises(NotFound):
        backend.services.registry.get_version(ME, "dry", "1.0.0")


def test_a_jsonl_of_cases_takes_its_id_and_version_from_the_upload(backend: Any) -> None:
    # Given a bare list of cases, one per line
    rows = "".join(json.dumps(c) + "\n" for c in DOC_CASES).encode()
    # When uploaded with the dataset id and a bump, as the CLI's options give them
    up = upload(
        backend,
        {"kind": "dataset", "filename": "cases.jsonl", "dataset": "lines", "bump": "minor"},
        rows,
    )
    _, job = api("GET", f"/jobs/{up['job_id']}")
    # Then it is registered under that id, with the next label
    assert job["state"] == "succeeded", job
    assert (job["result"]["id"], job["result"]["version"]) == ("lines", "1.0.0")


def test_a_jsonl_of_cases_dropped_with_a_dataset_sidecar_registers_once(backend: Any) -> None:
    # Given cases dropped as JSON Lines next to a `kind: dataset` sidecar, as a pipeline does
    bucket = backend.settings.bucket
    sidecar = {"kind": "dataset", "dataset": "nightly", "bump": "minor"}
    backend.s3.put_object(
        Bucket=bucket, Key="t/acme/imports/nightly/import.json", Body=json.dumps(sidecar).encode()
    )
    key = "t/acme/imports/nightly/cases.jsonl"
    rows = "".join(json.dumps(c) + "\n" for c in DOC_CASES).encode()
    backend.s3.put_object(Bucket=bucket, Key=key, Body=rows)
    # When the data file's event arrives (twice: S3 delivers at least once)
    _, handled = call(s3_event(key))
    _, again = call(s3_event(key))
    # Then the cases are registered once, as the dataset the sidecar names
    assert handled["objects"][0]["status"] == "succeeded", handled
    assert again["objects"][0]["status"] == "duplicate"
    rec = backend.services.registry.get_version(ME, "nightly", "latest")
    assert (rec.version, rec.case_count) == ("1.0.0", 5)


def test_a_bad_dataset_upload_fails_naming_the_case_and_field_and_registers_nothing(
    backend: Any,
) -> None:
    # Given a document whose third case has a wrong field type
    cases = [dict(c) for c in DOC_CASES]
    cases[2]["tags"] = "not-a-list"
    doc = {"id": "bad", "version": "1.0.0", "cases": cases}
    # When it is uploaded
    up = upload(backend, {"kind": "dataset", "filename": "bad.json"}, json.dumps(doc).encode())
    _, job = api("GET", f"/jobs/{up['job_id']}")
    # Then the job failed with the error POST /datasets answers for it
    from caseshelf.domain.errors import BadRequest
    from caseshelf.services.registry import parse_dataset

    with pytest.raises(BadRequest) as direct:
        parse_dataset(doc)
    assert job["state"] == "failed"
    assert job["error"]["code"] == "BadRequest"
    assert job["error"]["detail"] == direct.value.detail
    assert (job["error"]["case_id"], job["error"]["field"]) == ("d2", "tags")
    # And nothing was registered
    with pytest.raises(NotFound):
        backend.services.registry.get_version(ME, "bad", "1.0.0")


def test_a_dataset_upload_over_other_content_fails_as_a_conflict_with_both_digests(
    backend: Any,
) -> None:
    # Given a registered version, and a document of other content under its label
    first = {"id": "c", "version": "1.0.0", "cases": DOC_CASES}
    upload(backend, {"kind": "dataset", "filename": "c.json"}, json.dumps(first).encode())
    other = {**first, "cases": DOC_CASES[:2]}
    # When that document is uploaded
    up = upload(backend, {"kind": "dataset", "filename": "c.json"}, json.dumps(other).encode())
    _, job = api("GET", f"/jobs/{up['job_id']}")
    # Then the job failed as POST /datasets would: a conflict naming both digests
    assert job["state"] == "failed" and job["error"]["code"] == "Conflict", job
    stored = backend.services.registry.get_version(ME, "c", "1.0.0").content_digest
    assert job["error"]["digests"][0] == stored and len(set(job["error"]["digests"])) == 2


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"kind": "dataset", "filename": "doc.csv"}, ".jsonl"),
        ({"kind": "dataset", "filename": "d.json", "version": "1.0.0", "bump": "minor"}, "either"),
        ({"kind": "dataset", "filename": "d.json", "recipe": "gsm8k"}, "recipe"),
    ],
)
def test_a_dataset_upload_request_that_does_not_fit_is_400(
    backend: Any, body: dict[str, Any], named: str
) -> None:
    status, problem = api("POST", "/uploads", body)
    assert status == 400 and named in problem["detail"], problem
