"""The importer Lambda fed API Gateway and S3 events, on moto (bucket and table built from the
template)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from caseshelf.domain.errors import NotFound
from caseshelf.domain.identity import Identity
from tests.conftest import Backend
from tests.helpers import EVENTS, call_function, s3_event
from tests.helpers import importer_api as api

pytestmark = pytest.mark.integration

ME = Identity("acme", "alice")
ROWS = "".join(
    json.dumps({"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"})
    + "\n"
    for i in range(30)
)


@pytest.fixture
def backend(moto_installed: Backend) -> Backend:
    return moto_installed


def call(ev: dict[str, Any]) -> tuple[int, Any]:
    return call_function("importer", ev)


def test_the_sample_import_event_registers_from_the_catalog_recipe(backend):
    ev = json.loads((EVENTS / "importer_import_post.json").read_text())
    status, body = call(ev)
    assert status == 201, body
    assert (body["id"], body["version"], body["case_count"]) == ("gsm8k-mini", "1.0.0", 1)
    assert body["produced_by"]["recipe"]["id"] == "gsm8k"
    assert body["produced_by"]["source"] == {"kind": "jsonl", "inline": True}
    again, body2 = call(ev)
    assert again == 200 and body2["created"] is False


def test_recipes_register_get_validate_list_and_delete(backend):
    recipe = {
        "id": "mine",
        "version": "1.0.0",
        "category": "qa",
        "source": {"kind": "jsonl"},
        "mapping": {"taskField": "question"},
    }
    assert api("POST", "/recipes/validate", recipe)[1]["would_conflict"] is False
    status, body = api("POST", "/recipes", recipe)
    assert status == 201 and body["created"] is True
    status, got = api("GET", "/recipes/mine")
    assert status == 200 and got["recipe"]["mapping"] == {"task_field": "question"}
    assert got["owner"] == "acme"
    assert api("GET", "/recipes")[1]["items"][0]["id"] == "mine"
    assert api("GET", "/recipes/mine/versions/1.0.0")[0] == 200
    assert api("DELETE", "/recipes/mine/versions/1.0.0")[1]["deleted_at"] is not None
    assert api("GET", "/recipes/mine")[0] == 404
    assert api("GET", "/recipes/mine", tenant="other")[0] == 404


def test_an_unknown_recipe_key_is_400_naming_it(backend):
    bad = {
        "id": "bad",
        "version": "1.0.0",
        "category": "qa",
        "source": {"kind": "jsonl"},
        "mapping": {"task_field": "q", "answer_feild": "a"},
    }
    status, body = api("POST", "/recipes", bad)
    assert status == 400 and "answer_feild" in json.dumps(body)
    status, body = api("POST", "/benchmarks/import", {"recipe": bad, "source": {"text": "{}"}})
    assert status == 400 and "answer_feild" in body["detail"]


def test_the_catalog_and_a_recipe_fallback(backend):
    status, body = api("GET", "/benchmarks")
    assert status == 200
    assert [b["id"] for b in body["items"]] == [
        "gsm8k",
        "humaneval",
        "mmlu",
        "swe-bench-verified",
        "truthfulqa",
    ]
    assert body["items"][0]["origin"]["citation"].startswith("@article{cobbe2021gsm8k")
    status, got = api("GET", "/recipes/humaneval")
    assert status == 200 and got["owner"] == "_shared"


def test_the_api_never_reads_the_servers_disk(backend, tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(ROWS)
    status, body = api(
        "POST", "/benchmarks/import", {"recipe": "gsm8k", "source": {"url": str(path)}}
    )
    assert status == 403 and "local paths" in body["detail"]
    status, body = api(
        "POST",
        "/benchmarks/import",
        {"recipe": "gsm8k", "source": {"url": f"s3://{backend.settings.bucket}/t/other/x.jsonl"}},
    )
    assert status == 403


def test_an_import_reads_a_gzipped_source_under_the_callers_own_prefix(backend):
    # Given a compressed jsonl under the tenant's prefix of the registry's bucket
    import gzip

    key = "t/acme/sources/rows.jsonl.gz"
    backend.s3.put_object(
        Bucket=backend.settings.bucket, Key=key, Body=gzip.compress(ROWS.encode())
    )
    url = f"s3://{backend.settings.bucket}/{key}"
    # When the API imports it by URL
    status, body = api(
        "POST", "/benchmarks/import", {"recipe": "gsm8k", "source": {"url": url}, "dataset": "s3"}
    )
    # Then it is streamed through smart_open, decompressed, and stamped with its URL
    assert status == 201, body
    assert body["case_count"] == 30
    assert body["produced_by"]["source"]["url"] == url


def test_upload_then_s3_event_runs_the_job_once(backend):
    status, up = api(
        "POST", "/uploads", {"filename": "rows.jsonl", "recipe": "gsm8k", "dataset": "big"}
    )
    assert status == 201, up
    assert up["upload_url"].startswith("https://") and up["key"].startswith("t/acme/uploads/")
    status, job = api("GET", f"/jobs/{up['job_id']}")
    assert job["state"] == "pending" and job["request"]["recipe"] == {
        "id": "gsm8k",
        "version": "1.0.0",
    }
    backend.s3.put_object(Bucket=backend.settings.bucket, Key=up["key"], Body=ROWS.encode())

    _, handled = call(s3_event(up["key"]))
    assert handled["objects"][0]["status"] == "succeeded"
    status, job = api("GET", f"/jobs/{up['job_id']}")
    assert job["state"] == "succeeded"
    assert job["result"]["case_count"] == 30 and job["result"]["version"] == "1.0.0"
    rec = backend.services.registry.get_version(ME, "big", "latest")
    assert rec.produced_by["via"] == "upload" and rec.produced_by["rows_read"] == 30

    _, again = call(s3_event(up["key"]))
    assert again["objects"][0]["status"] == "duplicate"
    assert len(backend.services.registry.list_versions(ME, "big").items) == 1
    assert api("GET", f"/jobs/{up['job_id']}", tenant="other")[0] == 404


def test_a_job_is_running_while_its_import_runs_with_the_collector_paused(backend, monkeypatch):
    import gc

    # Given an upload whose file has arrived
    _, up = api("POST", "/uploads", {"filename": "rows.jsonl", "recipe": "gsm8k", "dataset": "s"})
    backend.s3.put_object(Bucket=backend.settings.bucket, Key=up["key"], Body=ROWS.encode())
    seen: list[tuple[str, bool]] = []
    imports = backend.services.jobs.imports
    real_run = imports.run

    def watching_run(*args: Any, **kwargs: Any) -> Any:
        seen.append((api("GET", f"/jobs/{up['job_id']}")[1]["state"], gc.isenabled()))
        return real_run(*args, **kwargs)

    monkeypatch.setattr(imports, "run", watching_run)
    # When the S3 event runs it
    assert gc.isenabled()
    _, handled = call(s3_event(up["key"]))
    # Then the job went pending -> running -> succeeded, the cyclic collector off while it ran
    # (an uploaded document is parsed whole) and back on after
    assert handled["objects"][0]["status"] == "succeeded"
    assert seen == [("running", False)] and gc.isenabled()
    assert api("GET", f"/jobs/{up['job_id']}")[1]["state"] == "succeeded"


def test_a_failed_job_reports_its_error_and_registers_nothing(backend):
    _, up = api(
        "POST", "/uploads", {"filename": "rows.jsonl", "recipe": "gsm8k", "dataset": "broken"}
    )
    backend.s3.put_object(
        Bucket=backend.settings.bucket, Key=up["key"], Body=b'{"question": "q"}\n'
    )
    call(s3_event(up["key"]))
    _, job = api("GET", f"/jobs/{up['job_id']}")
    assert job["state"] == "failed"
    assert job["error"]["detail"] == "row 0: missing field 'answer'; the row has 'question'"
    with pytest.raises(NotFound):
        backend.services.registry.get_version(ME, "broken", "latest")


def test_keys_outside_a_job_or_under_another_tenant_are_rejected(backend):
    _, up = api("POST", "/uploads", {"filename": "rows.jsonl", "recipe": "gsm8k", "dataset": "x"})
    job_id = up["job_id"]
    foreign = f"t/evil/uploads/{job_id}/rows.jsonl"
    backend.s3.put_object(Bucket=backend.settings.bucket, Key=foreign, Body=ROWS.encode())
    _, handled = call(s3_event(foreign))
    assert handled["objects"][0]["status"] == "rejected"
    _, handled = call(s3_event("t/acme/uploads/ffffffffffffffffffffffffffffffff/rows.jsonl"))
    assert handled["objects"][0]["status"] == "rejected"
    _, handled = call(s3_event("somewhere/else.jsonl"))
    assert handled["objects"][0]["status"] == "rejected"
    _, job = api("GET", f"/jobs/{job_id}")
    assert job["state"] == "pending"
    with pytest.raises(NotFound):
        backend.services.registry.get_version(ME, "x", "latest")


def test_a_dropped_key_with_spaces_is_unquote_plus_decoded(backend):
    # Given a drop folder and a data file whose names hold spaces
    bucket = backend.settings.bucket
    folder = "t/acme/imports/nightly run/"
    sidecar = {"recipe": "gsm8k", "dataset": "spaced"}
    backend.s3.put_object(
        Bucket=bucket, Key=f"{folder}import.json", Body=json.dumps(sidecar).encode()
    )
    backend.s3.put_object(Bucket=bucket, Key=f"{folder}rows 1.jsonl", Body=ROWS.encode())
    # When the bucket notification names it URL-encoded ("nightly+run/rows+1.jsonl")
    ev = s3_event(f"{folder}rows 1.jsonl")
    assert "+" in ev["Records"][0]["s3"]["object"]["key"]
    _, handled = call(ev)
    # Then the worker finds the object under its real name and imports it
    assert handled["objects"][0]["status"] == "succeeded", handled
    rec = backend.services.registry.get_version(ME, "spaced", "latest")
    assert rec.case_count == 30


def test_a_drop_with_a_sidecar_imports_once_through_eventbridge(backend):
    bucket = backend.settings.bucket
    sidecar = {"recipe": "gsm8k", "dataset": "nightly", "bump": "patch"}
    backend.s3.put_object(
        Bucket=bucket, Key="t/acme/imports/nightly/import.json", Body=json.dumps(sidecar).encode()
    )
    backend.s3.put_object(
        Bucket=bucket, Key="t/acme/imports/nightly/rows.jsonl", Body=ROWS.encode()
    )
    ev = json.loads((EVENTS / "eventbridge_object_created.json").read_text())
    _, handled = call(ev)
    assert handled["objects"][0]["status"] == "succeeded"
    _, again = call(ev)
    assert again["objects"][0]["status"] == "duplicate"
    rec = backend.services.registry.get_version(ME, "nightly", "latest")
    assert (rec.version, rec.case_count, rec.produced_by["via"]) == ("1.0.0", 30, "s3-drop")
