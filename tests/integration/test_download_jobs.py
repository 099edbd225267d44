"""Download jobs: a version's download document rendered as a job of parts on the export queue.

On AWS's machinery faked by moto (in process, and as a server over HTTP: the stack of
`test_export_jobs`, its SQS queues made from the template, each message handed to the export
worker's handler as Lambda's event source mapping would), and on the embedded store through the
in-process client, whose queue is `LocalQueue`."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

import caseshelf
from caseshelf import bootstrap
from caseshelf.client import Client
from caseshelf.client.transport import InProcess
from caseshelf.domain import export_parts
from caseshelf.domain.canonical import canonical_json
from caseshelf.domain.errors import Upstream
from caseshelf.domain.identity import Identity
from caseshelf.domain.layout import download_key
from caseshelf.services.registry import parse_dataset
from tests.helpers import call_function
from tests.integration.test_export_jobs import CASES, ME, RecordingStore, Stack
from tests.integration.test_export_jobs import stack as stack_fixture  # noqa: F401 - a fixture
from tests.integration.test_registry_handler import event

pytestmark = pytest.mark.integration

PART = 3  # cases per part: parts 0-3, the last of one case
ROUTE = "/datasets/qa/versions/1.0.0/download"


@pytest.fixture
def stack(stack_fixture: Stack) -> Stack:  # noqa: F811 - the imported fixture, by name
    """`test_export_jobs`' stack (moto in process, moto as a server): the template's queues,
    the export worker fed from them, and a registered `qa@1.0.0` of `CASES` cases."""
    return stack_fixture


@pytest.fixture(autouse=True)
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export_parts, "DOWNLOAD_PART_CASES", PART)
    monkeypatch.setattr(export_parts, "DOWNLOAD_PART_CASES_WITH_FILES", PART)


def route(query: dict[str, str] | None = None) -> dict[str, Any]:
    """The download route's whole answer (status, headers, JSON body)."""
    from caseshelf.api.openapi import load_function
    from tests.helpers import lambda_context

    ev = event("GET", ROUTE, query=query, tenant=ME.tenant, principal=ME.principal)
    out = load_function("caseshelf.functions.registry").lambda_handler(
        ev, lambda_context("RegistryFunction")
    )
    return {
        "status": out["statusCode"],
        "headers": {k.lower(): v[-1] for k, v in (out.get("multiValueHeaders") or {}).items()},
        "json": orjson.loads(out["body"]),
    }


def document(stack: Stack) -> bytes:
    rec = bootstrap.services().registry.get_version(ME, "qa", "1.0.0")
    return stack.store.get(download_key(rec.tenant, rec.content_digest))


def test_a_download_is_a_job_joined_while_it_runs_and_its_document_registers_the_same(stack):
    svc = bootstrap.services()
    rec = svc.registry.get_version(ME, "qa", "1.0.0")
    # The first request starts the job: 202, its URL, four parts of cases
    first = route()
    assert first["status"] == 202, first
    job = first["json"]
    assert job["kind"] == "download" and job["state"] == "running"
    assert first["headers"]["location"] == job["url"] == f"/jobs/{job['id']}"
    assert job["progress"]["parts_total"] == 4 and job["progress"]["cases_total"] == CASES
    # A second request while it runs joins it: the same job, nothing more queued
    again = route()
    assert again["status"] == 202 and again["json"]["id"] == job["id"]
    stack.drain()
    assert stack.delivered == Counter({("ExportQueue", n): 1 for n in range(4)})
    done = stack.job(job["id"])
    assert done["state"] == "succeeded", done
    assert done["progress"]["parts_done"] == 4 and done["progress"]["cases_written"] == CASES
    assert done["result"]["url"] == ROUTE
    assert done["result"]["content_digest"] == rec.content_digest
    # The document is the one rendered in one pass, byte for byte, and the scratch area is gone
    doc = document(stack)
    assert doc == svc.registry.render_version(rec)
    assert done["result"]["bytes"] == len(doc)
    assert not list(
        stack.store.list("t/acme/exports/downloads/" + rec.content_digest[7:] + ".parts/")
    )
    # The route now answers it (a presigned URL), and it registers to the same content digest
    answered = route()
    assert answered["status"] == 200 and answered["json"]["filename"] == "qa-1.0.0.json"
    parsed = json.loads(doc)
    again_rec = svc.registry.register(ME, parse_dataset({**parsed, "version": "2.0.0"})).record
    assert again_rec.content_digest == rec.content_digest


def test_a_part_past_its_retries_fails_the_job_naming_it_and_a_rerun_reuses_the_rest(stack):
    stack.store.crash_on, stack.store.crashes = ["part-00001.rows"], 99
    job = route()["json"]
    stack.drain()
    assert stack.delivered[("ExportQueue", 1)] == 3  # maxReceiveCount
    assert stack.delivered[("ExportDeadLetterQueue", 1)] == 1
    failed = stack.job(job["id"])
    assert failed["state"] == "failed"
    assert failed["error"]["part"] == 1 and failed["error"]["code"] == "PartFailed"
    assert failed["error"]["title"] == "Download Part Failed"
    assert "part 1 (cases 3-5)" in failed["error"]["detail"]
    assert "injected crash" in failed["error"]["detail"]
    assert "ask for the download again" in failed["error"]["detail"]
    # No document is there
    with pytest.raises(caseshelf.NotFound):
        document(stack)
    # Asked again, a new job renders only the part that failed; the others are reused
    stack.store.crashes = 0
    stack.store.written.clear()
    stack.delivered.clear()
    rerun = route()
    assert rerun["status"] == 202 and rerun["json"]["id"] != job["id"]
    stack.drain()
    done = stack.job(rerun["json"]["id"])
    assert done["state"] == "succeeded", done
    pieces = [k.rsplit("/", 1)[1] for k in stack.store.written if ".parts/" in k]
    assert pieces == ["part-00001.rows", "part-00001.json"]
    rec = bootstrap.services().registry.get_version(ME, "qa", "1.0.0")
    assert document(stack) == bootstrap.services().registry.render_version(rec)


def test_a_version_with_files_renders_their_bodies_inline_across_parts(stack):
    # Given a version whose cases carry files (read and inlined per window) and a shared file
    svc = bootstrap.services()
    cases = [
        {"id": f"f{i}", "inputs": {"user": f"q{i}"}, "files": {"a.txt": {"text": f"b{i}"}}}
        for i in range(7)
    ]
    shared = [{"dest": "s.txt", "text": "shared"}]
    body = {"id": "qa", "version": "3.0.0", "cases": cases, "shared_files": shared}
    rec = svc.registry.register(ME, parse_dataset(body)).record
    ev = event("GET", "/datasets/qa/versions/3.0.0/download", tenant=ME.tenant)
    status, job = call_function("registry", ev)
    assert status == 202 and job["progress"]["parts_total"] == 3
    stack.drain()
    assert stack.job(job["id"])["state"] == "succeeded"
    doc = stack.store.get(download_key(rec.tenant, rec.content_digest))
    assert doc == svc.registry.render_version(rec)
    assert doc == canonical_json(json.loads(doc))
    parsed = json.loads(doc)
    assert [c["files"]["a.txt"]["text"] for c in parsed["cases"]] == [f"b{i}" for i in range(7)]
    again = svc.registry.register(ME, parse_dataset({**parsed, "version": "4.0.0"})).record
    assert again.content_digest == rec.content_digest


# -- the embedded store, through the client ------------------------------------------------------


def test_the_embedded_client_follows_the_job_and_names_a_failed_part(tmp_path: Path) -> None:
    settings = bootstrap.load_settings({}, home=str(tmp_path / "home"))
    me = Identity(settings.tenant, settings.principal, frozenset(settings.roles))
    services = bootstrap.build(settings)
    store = RecordingStore(services.store)
    services = bootstrap.build(settings, store=store, index=services.index)  # type: ignore[arg-type]
    cases = [{"id": f"c{i}", "inputs": {"user": f"q{i}"}} for i in range(CASES)]
    services.registry.register(me, parse_dataset({"id": "qa", "version": "1.0.0", "cases": cases}))
    bootstrap.use(services)
    try:
        with Client(InProcess(settings, services=services)) as cs:
            # A part that crashes on every delivery: the client raises the job's error
            store.crash_on, store.crashes = ["part-00002.rows"], 99
            with pytest.raises(Upstream) as failed:
                cs.download("qa@1.0.0")
            assert "part 2 (cases 6-8)" in str(failed.value)
            # Asked again, the job resumes and the client answers the document
            store.crashes = 0
            got = cs.download("qa@1.0.0", to=tmp_path)
            assert got.path is not None and got.path.name == "qa-1.0.0.json"
            rec = services.registry.get_version(me, "qa", "1.0.0")
            assert got.path.read_bytes() == services.registry.render_version(rec)
    finally:
        bootstrap.use(None)
