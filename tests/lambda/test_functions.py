"""Every function of the template, every route family, run as Lambda runs them: the real
runtime interface client in the emulation's sandbox, events as API Gateway, EventBridge and S3
send them, AWS a moto server made from the template (`tests/lambda_emulation.py`).

Each limit of an invocation is approached from both sides here at the project's level (an event
at the request limit reaches the handler, one byte more never does; a page of cases just under
the response limit comes back whole); `make lambda-check` runs the sizes users reach."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from caseshelf.gateway import sqs_event
from tests.helpers import tar_gz
from tests.lambda_emulation import (
    REQUEST_LIMIT,
    RESPONSE_LIMIT,
    ApiAnswer,
    Caller,
    Emulation,
    api_event,
    eventbridge_object_created,
    s3_notification,
    scheduled_event,
)

QA = "qa"
V = "/datasets/{id}/versions/{ref}"


def case(i: int, text: str = "") -> dict[str, Any]:
    return {
        "id": f"c{i:04d}",
        "inputs": {"user": f"question {i}{text}"},
        "tags": ["fizz"] if i % 3 == 0 else ["plain"],
    }


def call(emu: Emulation, function: str, method: str, resource: str, **kw: Any) -> ApiAnswer:
    params = kw.pop("params", {})
    return emu.call(function, api_event(method, resource, params, **kw))


def ok(answer: ApiAnswer, *statuses: int) -> Any:
    """The answer's JSON, after checking its status (the function's own log on failure)."""
    wanted = statuses or (200,)
    assert answer.status in wanted, (
        answer.status,
        answer.body[:2000],
        answer.outcome.kind,
        answer.outcome.error,
        answer.outcome.log[-4000:],
    )
    return answer.json() if answer.body else None


@pytest.fixture(scope="module")
def seeded(emulation: Emulation) -> Emulation:
    """Two versions of `qa` registered through the registry function itself."""
    for version, n in (("1.0.0", 9), ("1.1.0", 10)):
        body = {"id": QA, "version": version, "cases": [case(i) for i in range(n)]}
        ok(call(emulation, "RegistryFunction", "POST", "/datasets", body=body), 201)
    return emulation


# -- registry ----------------------------------------------------------------------------------


def test_registry_reads(seeded: Emulation) -> None:
    emu, p = seeded, {"id": QA, "ref": "1.0.0"}
    assert any(
        d["id"] == QA for d in ok(call(emu, "RegistryFunction", "GET", "/datasets"))["items"]
    )
    assert ok(call(emu, "RegistryFunction", "GET", "/datasets/{id}", params={"id": QA}))["id"] == QA
    versions = ok(
        call(emu, "RegistryFunction", "GET", "/datasets/{id}/versions", params={"id": QA})
    )
    assert {v["version"] for v in versions["items"]} >= {"1.0.0", "1.1.0"}
    assert ok(call(emu, "RegistryFunction", "GET", V, params=p))["version"] == "1.0.0"
    page = ok(call(emu, "RegistryFunction", "GET", V + "/cases", params=p, query={"limit": "4"}))
    assert [c["id"] for c in page["items"]] == ["c0000", "c0001", "c0002", "c0003"]
    assert ok(call(emu, "RegistryFunction", "GET", V + "/stats", params=p))
    download = call(emu, "RegistryFunction", "GET", V + "/download", params=p)
    assert download.status in (200, 202), download.body[:500]  # test_download follows it
    missing = {**p, "digest": "sha256:" + "0" * 64}
    ok(call(emu, "RegistryFunction", "GET", V + "/files/{digest}", params=missing), 404)
    assert ok(call(emu, "RegistryFunction", "GET", "/me"))["tenant"] == "acme"


def test_download(seeded: Emulation) -> None:
    """The download route starts the document's job; the export worker renders its parts from
    the export queue; the route then answers the document, which registers as it is."""
    p = {"id": QA, "ref": "1.0.0"}
    first = call(seeded, "RegistryFunction", "GET", V + "/download", params=p)
    if first.status == 202:  # not rendered yet (test_registry_reads may have started it)
        job = ok(first, 202)
        assert job["kind"] == "download" and first.headers["Location"] == job["url"]
        outcomes = seeded.deliver("ExportQueue", "ExportWorkerFunction")
        assert outcomes and all(o.kind == "ok" for o in outcomes), outcomes[-1].log[-4000:]
    # The worker's scheduled sweep finds no part whose worker stopped
    swept = seeded.invoke("ExportWorkerFunction", scheduled_event("SweepParts"))
    assert swept.kind == "ok" and swept.json() == {"swept": []}, swept.log[-4000:]
    answer = ok(call(seeded, "RegistryFunction", "GET", V + "/download", params=p))
    doc = httpx.get(answer["url"], timeout=30).json()
    assert [c["id"] for c in doc["cases"]] == [f"c{i:04d}" for i in range(9)]
    valid = ok(
        call(seeded, "RegistryFunction", "POST", "/datasets/validate", body={**doc, "id": "copy"})
    )
    got = ok(call(seeded, "RegistryFunction", "GET", V, params=p))
    assert valid["content_digest"] == got["content_digest"]


def test_registry_writes(seeded: Emulation) -> None:
    emu, p = seeded, {"id": QA, "ref": "1.1.0"}
    body = {"id": "scratch", "version": "1.0.0", "cases": [case(1)]}
    assert ok(call(emu, "RegistryFunction", "POST", "/datasets/validate", body=body))
    ok(call(emu, "RegistryFunction", "PUT", V + "/tags", params=p, body={"tags": ["stable"]}))
    ok(call(emu, "RegistryFunction", "DELETE", V, params=p))
    ok(call(emu, "RegistryFunction", "GET", V, params=p), 404)
    ok(call(emu, "RegistryFunction", "POST", V + "/revive", params=p))
    assert ok(call(emu, "RegistryFunction", "GET", V, params=p))["version"] == "1.1.0"


def test_tenant_comes_from_the_authorizer_claims(seeded: Emulation) -> None:
    other = Caller(tenant="globex", sub="someone-else", username="bob")
    answer = call(
        seeded, "RegistryFunction", "GET", "/datasets/{id}", params={"id": QA}, caller=other
    )
    ok(answer, 404)


# -- diff, subset, export, tasks ----------------------------------------------------------------


def test_diff(seeded: Emulation) -> None:
    q = {"base": "1.0.0", "candidate": "1.1.0"}
    body = ok(
        call(seeded, "DiffFunction", "GET", "/datasets/{id}/diff", params={"id": QA}, query=q)
    )
    assert body["summary"]["added"] == 1


def test_subset(seeded: Emulation) -> None:
    p = {"id": QA, "ref": "1.1.0"}
    body = ok(
        call(seeded, "SubsetFunction", "POST", V + "/subset", params=p, body={"tags": ["fizz"]})
    )
    assert body["case_ids"] == ["c0000", "c0003", "c0006", "c0009"]


def test_subset_register_as(seeded: Emulation) -> None:
    p = {"id": QA, "ref": "1.1.0"}
    body = {"tags": ["fizz"], "register_as": {"id": "qa-fizz", "version": "1.0.0"}}
    answer = call(seeded, "SubsetFunction", "POST", V + "/subset", params=p, body=body)
    job = ok(answer, 202)
    assert job["state"] == "pending" and answer.headers["Location"] == f"/jobs/{job['id']}"
    # Nothing is registered until the importer runs the job's message
    ok(call(seeded, "RegistryFunction", "GET", V, params={"id": "qa-fizz", "ref": "1.0.0"}), 404)
    done = _run_import_job(seeded, job["id"])
    assert done["progress"] == {"cases_selected": 4, "cases_registered": 4}
    result = done["result"]
    assert result["parent"]["version"] == "1.1.0" and result["stamp"]["selected"] == 4
    assert result["registered"]["case_count"] == 4 and result["registered"]["created"] is True
    got = ok(call(seeded, "RegistryFunction", "GET", V, params={"id": "qa-fizz", "ref": "1.0.0"}))
    assert got["produced_by"]["via"] == "subset"


def _run_import_job(emulation: Emulation, job_id: str) -> Any:
    """The job's message, received from the import job queue as the importer's event source
    mapping receives it, run by the importer; the job, succeeded, read back."""
    sqs = boto3.client(
        "sqs",
        endpoint_url=emulation.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    got = sqs.receive_message(
        QueueUrl=emulation.refs["ImportJobQueue"], AttributeNames=["All"], MaxNumberOfMessages=1
    )["Messages"]
    assert len(got) == 1 and json.loads(got[0]["Body"]) == {"job": job_id}
    event = sqs_event("ImportJobQueue", got[0]["Body"], 1)
    event["Records"][0]["eventSourceARN"] = emulation.refs["ImportJobQueue.Arn"]
    outcome = emulation.invoke("ImporterFunction", event)
    assert outcome.kind == "ok", (outcome.error, outcome.log[-4000:])
    assert outcome.json()["records"] == [{"job_id": job_id, "status": "succeeded"}]
    sqs.delete_message(
        QueueUrl=emulation.refs["ImportJobQueue"], ReceiptHandle=got[0]["ReceiptHandle"]
    )
    done = ok(call(emulation, "ImporterFunction", "GET", "/jobs/{id}", params={"id": job_id}))
    assert done["state"] == "succeeded", done
    return done


def test_export(seeded: Emulation) -> None:
    p = {"id": QA, "ref": "1.1.0"}
    body = {"format": "case-dirs", "subset": {"tags": ["fizz"]}}
    answer = call(seeded, "ExportFunction", "POST", V + "/exports", params=p, body=body)
    assert ok(answer, 200, 201, 202)


def test_tasks(emulation: Emulation, shared_data: Path) -> None:
    data = tar_gz(shared_data / "terminal-bench" / "evoeval", "evoeval")
    body = {
        "archive_base64": base64.b64encode(data).decode(),
        "filename": "evoeval.tar.gz",
        "image_template": "registry.example/tb:{id}",
        "skip_invalid": True,
        "dataset": "tb-mini",
        "version": "1.0.0",
    }
    answer = call(emulation, "TasksFunction", "POST", "/datasets/terminal-bench", body=body)
    job = ok(answer, 202)
    assert job["state"] == "pending" and answer.headers["Location"] == f"/jobs/{job['id']}"
    # The job's message runs the import in the importer.
    done = _run_import_job(emulation, job["id"])
    assert done["result"]["case_count"] == 4 and [s["task"] for s in done["result"]["skipped"]] == [
        "5"
    ]
    assert done["progress"] == {"tasks_total": 5, "tasks_read": 5, "tasks_mapped": 4}


# -- the importer: API, EventBridge, S3 notifications, the schedule ------------------------------


def _upload(emu: Emulation, name: str, document: dict[str, Any]) -> tuple[str, str, int]:
    """`POST /uploads` for a dataset document, then the PUT to the presigned URL: (job id, key,
    the object's etag and size)."""
    answer = ok(
        call(
            emu,
            "ImporterFunction",
            "POST",
            "/uploads",
            body={"kind": "dataset", "filename": f"{name}.json"},
        ),
        201,
    )
    data = json.dumps(document).encode()
    put = httpx.put(answer["upload_url"], content=data, timeout=60)
    assert put.status_code == 200, put.text
    return answer["job_id"], answer["key"], len(data)


@pytest.mark.parametrize("source", ["eventbridge", "s3-notification"])
def test_upload_then_object_created_event(emulation: Emulation, source: str) -> None:
    name = f"up-{source}"
    doc = {"id": name, "version": "1.0.0", "cases": [case(i) for i in range(5)]}
    job, key, size = _upload(emulation, name, doc)
    etag = hashlib.md5(json.dumps(doc).encode()).hexdigest()
    bucket = emulation.refs["DataBucket"]
    make = eventbridge_object_created if source == "eventbridge" else s3_notification
    outcome = emulation.invoke("ImporterFunction", make(bucket, key, etag, size))
    assert outcome.kind == "ok", (outcome.error, outcome.log[-4000:])
    assert outcome.json()["objects"][0]["status"] == "succeeded", outcome.json()
    state = ok(call(emulation, "ImporterFunction", "GET", "/jobs/{id}", params={"id": job}))
    assert state["state"] == "succeeded"


def test_importer_routes_and_sweep(emulation: Emulation) -> None:
    assert ok(call(emulation, "ImporterFunction", "GET", "/benchmarks"))["items"]
    body = {
        "recipe": "gsm8k",
        "source": {
            "kind": "jsonl",
            "text": '{"question": "What is 1 + 1?", "answer": "1 + 1 = 2\\n#### 2"}\n',
        },
        "dataset": "gsm8k-mini",
        "version": "1.0.0",
    }
    ok(call(emulation, "ImporterFunction", "POST", "/benchmarks/import", body=body), 200, 201, 202)
    assert ok(call(emulation, "ImporterFunction", "GET", "/recipes")) is not None
    outcome = emulation.invoke("ImporterFunction", scheduled_event("SweepJobs"))
    assert outcome.kind == "ok" and "swept" in outcome.json(), outcome.log[-4000:]


# -- the payload limits, at the project's level ---------------------------------------------------


def _event_of_size(size: int) -> dict[str, Any]:
    """A `POST /datasets/validate` event of exactly `size` bytes as Lambda receives it (the body
    escaped inside the event's JSON)."""
    pad = "x"
    ev = api_event("POST", "/datasets/validate", raw_body="")
    for _ in range(3):
        body = json.dumps({"id": "big", "version": "1.0.0", "cases": [case(0, pad)]})
        ev["body"] = body
        missing = size - len(json.dumps(ev).encode())
        if missing == 0:
            return ev
        pad = "x" * (len(pad) + missing)
    raise AssertionError("could not size the event")


def test_an_event_at_the_request_limit_reaches_the_handler(emulation: Emulation) -> None:
    answer = emulation.call("RegistryFunction", _event_of_size(REQUEST_LIMIT))
    assert answer.outcome.kind == "ok", (answer.outcome.error, answer.outcome.log[-2000:])
    # the project's own answer (a problem naming the limit it applies), not API Gateway's
    assert answer.status < 500, answer.body[:2000]
    assert answer.headers.get("Content-Type", "").startswith("application/")


def test_an_event_over_the_request_limit_never_reaches_it(emulation: Emulation) -> None:
    env = emulation.env("RegistryFunction")
    before = env.cold_starts
    answer = emulation.call("RegistryFunction", _event_of_size(REQUEST_LIMIT + 1))
    assert answer.outcome.kind == "refused" and answer.status == 502
    assert str(REQUEST_LIMIT) in answer.outcome.error["errorMessage"]
    assert env.cold_starts == before  # Lambda refused it before any environment saw it


def test_a_page_just_under_the_response_limit_comes_back_whole(emulation: Emulation) -> None:
    # 640 cases of ~8 KiB: a 5.3 MB page as the function answers it
    text = "y" * 8192
    cases = [case(i, text) for i in range(640)]
    body = {"id": "wide", "version": "1.0.0", "cases": cases}
    ok(call(emulation, "RegistryFunction", "POST", "/datasets", body=body), 201)
    p = {"id": "wide", "ref": "1.0.0"}
    answer = call(
        emulation, "RegistryFunction", "GET", V + "/cases", params=p, query={"limit": "640"}
    )
    page = ok(answer)
    assert answer.outcome.kind == "ok" and len(answer.outcome.answer) <= RESPONSE_LIMIT
    ids = [c["id"] for c in page["items"]]
    assert ids == [c["id"] for c in cases[: len(ids)]] and ids
    assert (page.get("next_cursor") is None) == (len(ids) == len(cases))
