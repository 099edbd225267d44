"""The task on-ramp Lambda (`POST /datasets/terminal-bench`, `POST /datasets/harbor`), fed API
Gateway events, on the embedded store and on moto: the route starts an import job (202), whose
queued message the importer's handler runs, and the job is read back with `GET /jobs/{id}`."""

from __future__ import annotations

import base64
import copy
import io
import json
import tarfile
import uuid
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from caseshelf import bootstrap
from caseshelf.api.errors import STATUS
from caseshelf.api.openapi import load_function
from caseshelf.domain import layout
from tests.helpers import EVENTS, importer_api, lambda_context, run_queued, tar_gz

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]

SAMPLE = json.loads((EVENTS / "tasks_terminal_bench_post.json").read_text())


def event(path: str, body: dict[str, Any], tenant: str = "acme") -> dict[str, Any]:
    ev = copy.deepcopy(SAMPLE)
    ev.update(path=path, resource=path, body=json.dumps(body))
    ctx = ev["requestContext"]
    ctx.update(resourcePath=path, path=f"/prod{path}", requestId=str(uuid.uuid4()))
    ctx["authorizer"] = {"principalId": "alice", "tenant": tenant, "roles": ""}
    return ev


@pytest.fixture
def services(installed_services: bootstrap.Services) -> bootstrap.Services:
    return installed_services


def call(path: str, body: dict[str, Any], tenant: str = "acme") -> SimpleNamespace:
    """The route, then its job run by the importer and read back: the job's result with the
    status the version's registration answers (201 new, 200 existing), or its error with the
    status of the error's class. An answer other than 202 as it is."""
    handler = load_function("caseshelf.functions.tasks").lambda_handler
    out = handler(event(path, body, tenant), lambda_context("TasksFunction", 2048))
    answer = orjson.loads(out["body"])
    if out["statusCode"] != 202:
        return SimpleNamespace(status=out["statusCode"], json=answer, job=None)
    location = out["multiValueHeaders"]["Location"]
    assert location == [f"/jobs/{answer['id']}"] and answer["state"] == "pending"
    assert run_queued() >= 1
    got, job = importer_api("GET", answer["url"], tenant=tenant)
    assert got == 200, job
    if job["state"] == "succeeded":
        p = job["progress"]
        assert p["tasks_read"] == p["tasks_total"] >= p["tasks_mapped"]
        assert p["tasks_mapped"] == job["result"]["case_count"]
        return SimpleNamespace(
            status=201 if job["result"]["created"] else 200, json=job["result"], job=job
        )
    assert job["state"] == "failed", job
    status = next(s[0] for c, s in STATUS.items() if c.__name__ == job["error"]["code"])
    return SimpleNamespace(status=status, json=job["error"], job=job)


def test_terminal_bench_archive_inline_registers(services, shared_data):
    # Given the real evoeval tasks (one incomplete) as a .tar.gz
    data = tar_gz(shared_data / "terminal-bench" / "evoeval", "evoeval")
    body = {
        "archive_base64": base64.b64encode(data).decode(),
        "image_template": "reg/tb:{id}",
        "dataset": "evoeval",
        "version": "1.0.0",
    }
    # When it is imported without skip_invalid, the incomplete task is a 400 naming it
    bad = call("/datasets/terminal-bench", body)
    assert bad.status == 400 and "task '5'" in bad.json["detail"]
    assert bad.json["case_ids"] == ["5"]
    # And with skip_invalid it registers the rest and reports the skip
    ok = call("/datasets/terminal-bench", {**body, "skip_invalid": True})
    assert ok.status == 201, ok.json
    assert ok.json["case_count"] == 4 and ok.json["created"] is True
    assert [s["task"] for s in ok.json["skipped"]] == ["5"]
    again = call("/datasets/terminal-bench", {**body, "skip_invalid": True})
    assert again.status == 200 and again.json["created"] is False


def test_harbor_without_image_names_the_task(services, shared_data):
    data = tar_gz(shared_data / "harbor" / "simple-task", "simple-task")
    res = call(
        "/datasets/harbor",
        {"archive_base64": base64.b64encode(data).decode(), "version": "1"},
    )
    assert res.status == 400 and "task 'simple-task'" in res.json["detail"]


def test_harbor_from_an_upload_and_from_the_tenant_prefix(services, shared_data):
    data = tar_gz(shared_data / "harbor", "harbor")
    upload_id = uuid.uuid4().hex
    services.store.put(f"{layout.root('acme')}uploads/{upload_id}/cookbook.tar.gz", data)
    res = call(
        "/datasets/harbor",
        {"upload_id": upload_id, "image_template": "reg/h:{id}", "dataset": "cookbook"},
    )
    assert res.status == 201, res.json
    assert res.json["case_count"] == 6 and res.json["version"] == "1.0.0"
    # Another tenant cannot use that upload
    other = call(
        "/datasets/harbor",
        {"upload_id": upload_id, "image_template": "reg/h:{id}", "dataset": "cookbook"},
        tenant="other",
    )
    assert other.status == 404


def test_unsafe_archive_is_refused(services):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escape/task.yaml")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    res = call(
        "/datasets/terminal-bench",
        {"archive_base64": base64.b64encode(buf.getvalue()).decode(), "version": "1"},
    )
    assert res.status == 400 and "traverses" in res.json["detail"]


def test_exactly_one_source(services):
    res = call("/datasets/terminal-bench", {"version": "1"})
    assert res.status in (400, 422)


def test_s3_prefix_in_the_registry_bucket_is_tenant_scoped(services, shared_data):
    bucket = services.settings.bucket
    if not bucket:
        pytest.skip("the embedded store has no bucket")
    root = shared_data / "harbor" / "simple-task"
    for f in sorted(root.rglob("*")):
        if f.is_file():
            rel = f.relative_to(root.parent).as_posix()
            services.store.put(f"{layout.root('acme')}tasks/{rel}", f.read_bytes())
    body = {"s3": f"s3://{bucket}/t/acme/tasks/", "image_template": "h:{id}", "version": "1"}
    ok = call("/datasets/harbor", {**body, "dataset": "h"})
    assert ok.status == 201, ok.json
    assert ok.json["case_count"] == 1
    denied = call("/datasets/harbor", {**body, "dataset": "h"}, tenant="other")
    assert denied.status == 403
