"""The export Lambda fed API Gateway events, on moto (bucket and table built from the template)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from typing import Any

import pytest

from caseshelf.domain.identity import Identity
from caseshelf.services.registry import parse_dataset
from tests.conftest import Backend
from tests.helpers import export_and_follow, sample_event

pytestmark = pytest.mark.integration

ME = Identity("acme", "alice")


@pytest.fixture
def backend(moto_installed: Backend) -> Backend:
    return moto_installed


def event(*, tenant: str = "acme", body: Any = None) -> dict[str, Any]:
    ev = sample_event("export_post.json")
    ev["requestContext"]["authorizer"]["claims"]["custom:tenant"] = tenant
    if body is not None:
        ev["body"] = json.dumps(body)
    return ev


def call(ev: dict[str, Any]) -> tuple[int, Any]:
    """The route, and when it answers a job (202), the job followed to its result (201)."""
    return export_and_follow(ev)


def register(backend: Any) -> None:
    cases = [
        {
            "id": f"HumanEval/{i}",
            "inputs": {"user": f"q{i}"},
            "expectations": {"ground_truth": str(i)},
            "tags": ["fizz"] if i % 3 == 0 else ["plain"],
        }
        for i in range(7)
    ]
    body = {"id": "qa", "version": "1.0.0", "cases": cases}
    backend.services.registry.register(ME, parse_dataset(body))


def test_export_writes_under_the_tenant_prefix_and_answers_the_snippet(backend):
    # Given a registered version
    register(backend)
    # When the export route is called with a subset and a shared file
    status, body = call(event())
    # Then a new export is written (201) under t/acme/exports/<id>/
    assert status == 201, body
    bucket = backend.settings.bucket
    key = f"t/acme/exports/{body['export_id']}"
    assert body["prefix"] == f"s3://{bucket}/{key}/"
    assert body["test_data_ref"] == {
        "s3": {"bucket": bucket, "key": key + "/", "secret_ref": "evalhub-s3"}
    }
    assert body["test_data_ref_problem"] is None
    assert body["case_count"] == 3 and body["file_count"] == 3 * 4
    assert body["manifest_key"] == key + "/manifest.json" and body["reused"] is False
    assert body["bundle_url"].startswith("https://")
    assert body["bundle_key"] == key + ".bundle.tar.gz"  # beside the prefix, not in it
    manifest = json.loads(backend.store.get(body["manifest_key"]))
    assert list(manifest["cases"]) == ["HumanEval/0", "HumanEval/3", "HumanEval/6"]
    assert manifest["subset"]["tags"] == ["fizz"] and manifest["subset"]["total"] == 7
    raw = gzip.decompress(backend.store.get(body["bundle_key"]))
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        assert "~HumanEval%2F3~42/skill/SKILL.md" in tar.getnames()
    # And asking again reuses it (200, nothing written)
    before = [o.key for o in backend.store.list(key)]
    assert body["bundle_key"] in before and len(before) == body["file_count"] + 2
    status, again = call(event())
    assert status == 200 and again["reused"] is True
    assert again["export_id"] == body["export_id"]
    assert [o.key for o in backend.store.list(key)] == before


def test_without_a_secret_ref_the_answer_says_why_there_is_no_test_data_ref(backend):
    register(backend)
    status, body = call(event(body={"subset": {"limit": 2}}))
    assert status == 201, body
    assert body["test_data_ref"] is None
    assert "secret_ref" in body["test_data_ref_problem"]
    assert body["bundle_url"] is None and body["bundle_key"] is None


def test_the_deployment_default_secret_ref_is_used(backend):
    from caseshelf import bootstrap
    from caseshelf.domain.errors import BadRequest

    register(backend)
    assert bootstrap.load_settings({"CASESHELF_EVALHUB_SECRET_REF": "team-s3"}).evalhub_secret_ref
    with pytest.raises(BadRequest, match="CASESHELF_EVALHUB_SECRET_REF"):
        bootstrap.load_settings({"CASESHELF_EVALHUB_SECRET_REF": "Team_S3"})
    settings = backend.settings.model_copy(update={"evalhub_secret_ref": "team-s3"})
    svc = bootstrap.build(settings, store=backend.store, index=backend.index)
    res = svc.exports.export_version(ME, "qa", "1.0.0")
    assert res.test_data_ref is not None
    assert res.test_data_ref["s3"]["secret_ref"] == "team-s3"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"format": "tarball"}, 400),
        ({"secret_ref": "Not_A_Label"}, 400),
        ({"secret_ref": "-leading-dash"}, 400),
        ({"secret_ref": "x" * 64}, 400),
        ({"shared_files": [{"dest": "input.yaml", "text": "x"}]}, 400),
        ({"shared_files": [{"dest": "../x", "text": "x"}]}, 400),
        ({"subset": {"ids": ["nope"]}}, 400),
        ({"to": "s3://elsewhere/x"}, 400),
    ],
)
def test_bad_export_requests_are_problems(backend, body, status):
    register(backend)
    got, problem = call(event(body=body))
    assert got == status and problem["status"] == status
    assert not list(backend.store.list("t/acme/exports/"))


def test_another_tenant_cannot_export_it(backend):
    register(backend)
    status, problem = call(event(tenant="other"))
    assert status == 404 and problem["status"] == 404
