"""The registry Lambda, fed API Gateway REST proxy events, on the embedded store and on moto.

Events start from the samples in `tests/events/` (as API Gateway sends them) and are adjusted
per test: method, path, path parameters, query, body and the authorizer context.
"""

from __future__ import annotations

import copy
import json
import re
import urllib.parse
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from caseshelf import bootstrap
from caseshelf.api.openapi import load_function
from caseshelf.domain.answers import EVENT_BODY_LIMIT, LAMBDA_PAYLOAD_BYTES, escaped_size
from tests.helpers import EVENTS, importer_api, lambda_context, run_queued

pytestmark = [
    pytest.mark.integration,
    # Read-only requests emit no metric; Powertools warns about every such flush.
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]

REGISTRY = "caseshelf.functions.registry"


def sample(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return data


BASE = sample("registry_get_version_lambda_authorizer.json")
COGNITO = sample("registry_register_cognito.json")


def resource_of(path: str) -> tuple[str, dict[str, str] | None]:
    """The template resource and path parameters of a concrete registry path."""
    parts = path.strip("/").split("/")
    if len(parts) == 1 or parts[1] == "validate":
        return path, None
    params = {"id": parts[1]}
    resource = ["datasets", "{id}"]
    if len(parts) > 2:
        resource.append("versions")
    if len(parts) > 3:
        params["ref"] = urllib.parse.unquote(parts[3])
        resource.append("{ref}")
    resource.extend(parts[4:])
    return "/" + "/".join(resource), params


def event(
    method: str,
    path: str,
    *,
    body: Any = None,
    raw: str | None = None,
    query: dict[str, str] | None = None,
    tenant: str = "acme",
    principal: str = "alice",
    roles: str = "",
    authorizer: dict[str, Any] | bool | None = True,
) -> dict[str, Any]:
    ev = copy.deepcopy(BASE)
    resource, params = resource_of(path)
    ev.update(
        httpMethod=method,
        path=path,
        resource=resource,
        pathParameters=params,
        queryStringParameters=query or None,
        multiValueQueryStringParameters={k: [v] for k, v in query.items()} if query else None,
        body=raw if raw is not None else (None if body is None else json.dumps(body)),
    )
    if ev["body"] is not None:
        ev["headers"]["Content-Type"] = "application/json"
        ev["multiValueHeaders"]["Content-Type"] = ["application/json"]
    ctx = ev["requestContext"]
    ctx.update(
        httpMethod=method,
        resourcePath=resource,
        path=f"/prod{path}",
        requestId=str(uuid.uuid4()),
    )
    if authorizer is True:
        ctx["authorizer"] = {"principalId": principal, "tenant": tenant, "roles": roles}
    elif authorizer is None or authorizer is False:
        ctx.pop("authorizer", None)
    else:
        ctx["authorizer"] = authorizer
    return ev


class Api:
    def __init__(self, backend: str, services: bootstrap.Services, module: str = REGISTRY) -> None:
        self.backend = backend
        self.services = services
        self.handler = load_function(module).lambda_handler

    def invoke(self, ev: dict[str, Any]) -> SimpleNamespace:
        out = self.handler(ev, lambda_context("RegistryFunction"))
        headers = {k.lower(): v[-1] for k, v in (out.get("multiValueHeaders") or {}).items()}
        headers.update({k.lower(): v for k, v in (out.get("headers") or {}).items()})
        body = out["body"]
        parsed = None
        if headers.get("content-type", "").startswith(("application/json", "application/problem")):
            parsed = orjson.loads(body)
        return SimpleNamespace(status=out["statusCode"], headers=headers, body=body, json=parsed)

    def __call__(self, method: str, path: str, **kw: Any) -> SimpleNamespace:
        return self.invoke(event(method, path, **kw))


@pytest.fixture
def api(installed_services: bootstrap.Services) -> Api:
    return Api(
        "embedded" if installed_services.settings.backend == "local" else "moto", installed_services
    )


def dataset(version: str = "1.0.0", n: int = 3, **extra: Any) -> dict[str, Any]:
    cases = [{"id": f"c{i}", "inputs": {"user": f"question {i}"}} for i in range(n)]
    return {"id": "demo", "version": version, "cases": cases, **extra}


def problem_of(resp: SimpleNamespace, status: int) -> dict[str, Any]:
    assert resp.status == status, resp.body
    assert resp.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = resp.json
    assert body["status"] == status
    assert {"type", "title", "detail"} <= set(body)
    return body


# -- register and validate --------------------------------------------------------------------


def test_register_answers_201_then_200_for_the_same_content(api: Api) -> None:
    # Given a new dataset version
    body = dataset()
    # When it is registered twice
    first = api("POST", "/datasets", body=body)
    again = api("POST", "/datasets", body=body)
    # Then the first creates it and the second is an idempotent 200
    assert first.status == 201, first.body
    assert first.json["created"] is True
    assert first.json["content_digest"].startswith("sha256:")
    assert first.json["case_count"] == 3
    assert again.status == 200
    assert again.json == {**first.json, "created": False}


def test_register_sample_event_with_cognito_claims(api: Api) -> None:
    # Given the API Gateway sample of a Cognito-authorized registration
    ev = copy.deepcopy(COGNITO)
    # When the function handles it
    resp = api.invoke(ev)
    # Then the version is created for the claims' tenant, by the token's subject
    assert resp.status == 201, resp.body
    me = sample("registry_register_cognito.json")["requestContext"]["authorizer"]["claims"]
    got = api("GET", "/datasets/demo/versions/1.0.0", tenant=me["custom:tenant"])
    assert got.json["created_by"] == me["sub"]
    assert got.json["owner"] == "acme"
    assert got.json["description"] == "two tiny cases"


def test_register_other_content_under_a_taken_label_is_409_naming_both_digests(api: Api) -> None:
    first = api("POST", "/datasets", body=dataset()).json
    # When other content claims the same label
    resp = api("POST", "/datasets", body=dataset(n=4))
    # Then 409 names the stored digest and the new one
    body = problem_of(resp, 409)
    assert body["digests"][0] == first["content_digest"]
    assert body["digests"][1] != first["content_digest"]
    assert first["content_digest"] in body["detail"]


def test_bump_registers_the_next_version(api: Api) -> None:
    api("POST", "/datasets", body=dataset())
    body = dataset(n=4)
    del body["version"]
    resp = api("POST", "/datasets", body={**body, "bump": "minor"})
    assert resp.status == 201
    assert resp.json["version"] == "1.1.0"


def test_validate_reports_digest_and_would_conflict_without_registering(api: Api) -> None:
    # Given nothing registered, validate is a dry run
    resp = api("POST", "/datasets/validate", body=dataset())
    assert resp.status == 200
    assert resp.json["valid"] is True
    assert resp.json["would_conflict"] is False
    assert resp.json["case_count"] == 3
    assert resp.json["version"] == "1.0.0"
    assert api("GET", "/datasets/demo").status == 404
    # When the label is taken by other content, validate says it would conflict
    api("POST", "/datasets", body=dataset())
    other = api("POST", "/datasets/validate", body=dataset(n=2))
    assert other.status == 200
    assert other.json["would_conflict"] is True
    # And an invalid body gets the same 400 as register
    bad = dataset()
    bad["cases"][1]["bogus"] = 1
    assert problem_of(api("POST", "/datasets/validate", body=bad), 400)["case_id"] == "c1"


# -- bad input --------------------------------------------------------------------------------


def test_json_sent_with_curls_form_content_type_is_read_as_json(api: Api) -> None:
    # Given a client that labels its JSON body as a form (curl -d without a Content-Type)
    ev = event("POST", "/datasets", body=dataset())
    ev["headers"]["Content-Type"] = "application/x-www-form-urlencoded"
    ev["multiValueHeaders"]["Content-Type"] = ["application/x-www-form-urlencoded"]
    # When it registers
    resp = api.invoke(ev)
    # Then the body is read as the JSON it is
    assert resp.status == 201, resp.body
    assert resp.json["case_count"] == 3


def test_malformed_json_is_400_with_its_position(api: Api) -> None:
    raw = '{"id": "demo",\n  "version": "1.0.0",\n  "cases": [}'
    body = problem_of(api("POST", "/datasets", raw=raw), 400)
    assert body["line"] == 3
    assert body["column"] == 13
    assert body["position"] == raw.index("}")
    assert "line 3 column 13" in body["detail"]


def test_nan_in_the_body_is_400(api: Api) -> None:
    raw = '{"id": "demo", "version": "1.0.0", "cases": [{"id": "a", "inputs": {"user": "x"}, '
    raw += '"expectations": {"ground_truth": NaN}}]}'
    body = problem_of(api("POST", "/datasets", raw=raw), 400)
    assert "NaN" in body["detail"]
    assert body["position"] == raw.index("NaN")


def test_unknown_key_is_400_naming_it_and_its_case(api: Api) -> None:
    bad = dataset()
    bad["cases"][2]["inputz"] = {"user": "typo"}
    body = problem_of(api("POST", "/datasets", body=bad), 400)
    assert "inputz" in body["detail"]
    assert body["case_id"] == "c2"
    # An unknown top-level key is named too
    top = problem_of(api("POST", "/datasets", body={**dataset(), "colour": "red"}), 400)
    assert "colour" in top["detail"]
    assert top["field"] == "colour"


def test_duplicate_case_ids_are_400_naming_them(api: Api) -> None:
    bad = dataset(n=3)
    bad["cases"].append({"id": "c1", "inputs": {"user": "again"}})
    body = problem_of(api("POST", "/datasets", body=bad), 400)
    assert body["case_ids"] == ["c1"]


@pytest.mark.parametrize("label", ["not a label", "x" * 65, "v1/2"])
def test_invalid_label_is_400_naming_the_field(api: Api, label: str) -> None:
    body = problem_of(api("POST", "/datasets", body=dataset(version=label)), 400)
    assert body["field"] == "version"


def test_invalid_dataset_id_in_the_path_is_400(api: Api) -> None:
    body = problem_of(api("GET", "/datasets/..hidden"), 400)
    assert "..hidden" in body["detail"]


def test_an_invalid_label_or_ref_in_the_path_is_400_not_404(api: Api) -> None:
    api("POST", "/datasets", body=dataset())
    base = "/datasets/demo/versions"
    # Reads: a ref that no label or tag could be
    assert problem_of(api("GET", f"{base}/a b"), 400)["field"] == "ref"
    assert problem_of(api("GET", f"{base}/a b/cases"), 400)["field"] == "ref"
    # Changes: a label that could never have been registered (the path's `ref`, which the
    # OpenAPI document declares with the label pattern)
    assert problem_of(api("DELETE", f"{base}/a b"), 400)["field"] == "ref"
    assert problem_of(api("POST", f"{base}/a b/revive"), 400)["field"] == "ref"
    tags = api("PUT", f"{base}/latest/tags", body={"tags": ["x"]})
    assert "latest" in problem_of(tags, 400)["detail"]
    # A well-formed label that is not there is still simply not found
    problem_of(api("DELETE", f"{base}/9.9.9"), 404)


def test_non_object_body_and_missing_body_are_400(api: Api) -> None:
    assert "object" in problem_of(api("POST", "/datasets", raw="[1, 2]"), 400)["detail"]
    assert problem_of(api("POST", "/datasets", raw=None), 400)["field"] == "body"


def test_body_over_the_event_limit_is_413_pointing_to_uploads(api: Api) -> None:
    limit = api.services.settings.max_body_bytes
    assert limit == EVENT_BODY_LIMIT < LAMBDA_PAYLOAD_BYTES
    raw = '{"id": "demo", "pad": "' + "x" * limit + '"}'
    body = problem_of(api("POST", "/datasets", raw=raw), 413)
    assert body["upload_route"] == "POST /uploads"
    assert "/uploads" in body["detail"]
    assert body["size"] == len(raw) + raw.count('"')  # as escaped inside the event
    assert body["limit"] == limit


@pytest.mark.parametrize(
    ("unit", "escaped"),
    [(r"\"", 4), (r"\u00e9", 7), ("é", 6), ("😀", 12)],
    ids=["quotes", "json-escapes", "non-ascii", "astral"],
)
def test_the_body_limit_is_on_the_escaped_body_both_sides(
    api: Api, unit: str, escaped: int
) -> None:
    # Given bodies whose text is well under the limit but which escaping inflates
    limit = api.services.settings.max_body_bytes
    frame = '{"id": "demo", "pad": ""}'
    room = limit - escaped_size(frame)
    over = frame[:-2] + unit * (room // escaped + 1) + '"}'
    under = frame[:-2] + unit * (room // escaped) + '"}'
    assert len(over.encode("utf-8")) < limit and escaped_size(over) > limit
    assert escaped_size(under) <= limit
    # Then one past the limit gets the 413 naming its escaped size, one at it is read
    refused = problem_of(api("POST", "/datasets", raw=over), 413)
    assert refused["size"] == escaped_size(over)
    assert refused["upload_route"] == "POST /uploads"
    assert problem_of(api("POST", "/datasets", raw=under), 400)["status"] == 400


def test_bad_query_parameter_is_400_naming_it(api: Api) -> None:
    body = problem_of(api("GET", "/datasets", query={"limit": "0"}), 400)
    assert body["field"] == "limit"
    api("POST", "/datasets", body=dataset())
    bad_cursor = api("GET", "/datasets/demo/versions", query={"cursor": "%%%"})
    assert problem_of(bad_cursor, 400)["field"] == "cursor"
    assert problem_of(api("GET", "/datasets", query={"shared": "maybe"}), 400)["field"] == "shared"


# -- reads ------------------------------------------------------------------------------------


def test_list_datasets_pages_with_a_cursor(api: Api) -> None:
    for name in ("alpha", "beta", "gamma"):
        assert api("POST", "/datasets", body={**dataset(), "id": name}).status == 201
    first = api("GET", "/datasets", query={"limit": "2"})
    assert first.status == 200
    assert [d["id"] for d in first.json["items"]] == ["alpha", "beta"]
    assert first.json["next_cursor"]
    rest = api("GET", "/datasets", query={"limit": "2", "cursor": first.json["next_cursor"]})
    assert [d["id"] for d in rest.json["items"]] == ["gamma"]
    assert rest.json["next_cursor"] is None
    one = first.json["items"][0]
    assert one["latest"] == "1.0.0"
    assert one["case_count"] == 3
    assert one["owner"] == "acme"


def test_shared_datasets_are_listed_with_shared_true_and_readable(api: Api) -> None:
    # Given an admin registering into _shared
    admin = {"tenant": "_shared", "principal": "ops", "roles": "admin"}
    assert api("POST", "/datasets", body={**dataset(), "id": "common"}, **admin).status == 201
    # Then a tenant sees it with shared=true, not in its own list, and can read it
    assert api("GET", "/datasets").json["items"] == []
    shared = api("GET", "/datasets", query={"shared": "true"})
    assert [d["id"] for d in shared.json["items"]] == ["common"]
    assert shared.json["items"][0]["owner"] == "_shared"
    assert api("GET", "/datasets/common/versions/latest").json["owner"] == "_shared"
    # And a non-admin cannot write to _shared
    denied = api("POST", "/datasets", body=dataset(), tenant="_shared", principal="eve")
    problem_of(denied, 403)


def test_get_dataset_and_its_404s(api: Api) -> None:
    api("POST", "/datasets", body=dataset())
    got = api("GET", "/datasets/demo")
    assert got.status == 200
    assert got.json["id"] == "demo"
    assert got.json["latest"] == "1.0.0"
    assert got.json["version_count"] == 1
    # An unknown dataset, and another tenant's dataset, are both simply not found
    problem_of(api("GET", "/datasets/nope"), 404)
    other = problem_of(api("GET", "/datasets/demo", tenant="globex"), 404)
    assert "acme" not in other["detail"]
    problem_of(api("GET", "/datasets/demo/versions/latest/cases", tenant="globex"), 404)


def test_versions_and_refs(api: Api) -> None:
    v1 = api("POST", "/datasets", body=dataset("1.0.0")).json
    v2 = api("POST", "/datasets", body=dataset("1.10.0", n=4)).json
    api("POST", "/datasets", body=dataset("1.9.0", n=5))
    listed = api("GET", "/datasets/demo/versions")
    assert [v["version"] for v in listed.json["items"]] == ["1.10.0", "1.9.0", "1.0.0"]
    assert api("GET", "/datasets/demo/versions/latest").json["version"] == "1.10.0"
    by_digest = api("GET", f"/datasets/demo/versions/{v1['content_digest']}")
    assert by_digest.json["version"] == "1.0.0"
    one = api("GET", "/datasets/demo/versions/1.10.0").json
    assert one["content_digest"] == v2["content_digest"]
    assert one["case_count"] == 4
    assert one["created_by"] == "alice"
    assert one["deleted_at"] is None
    problem_of(api("GET", "/datasets/demo/versions/9.9.9"), 404)
    page = api("GET", "/datasets/demo/versions", query={"limit": "2"})
    assert len(page.json["items"]) == 2
    assert page.json["next_cursor"]


def test_cases_page_in_dataset_order(api: Api) -> None:
    api("POST", "/datasets", body=dataset(n=5))
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        query = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        resp = api("GET", "/datasets/demo/versions/1.0.0/cases", query=query)
        assert resp.status == 200
        seen += [c["id"] for c in resp.json["items"]]
        pages += 1
        cursor = resp.json["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"c{i}" for i in range(5)]
    assert pages == 3
    first = api("GET", "/datasets/demo/versions/latest/cases", query={"limit": "1"})
    assert first.json["items"] == [{"id": "c0", "inputs": {"user": "question 0"}}]


def test_download_gives_a_document_that_registers_to_the_same_digest(api: Api) -> None:
    reg = api("POST", "/datasets", body=dataset(description="d")).json
    # The first download renders the document as a job (202), followed with GET /jobs/{id}
    started = api("GET", "/datasets/demo/versions/latest/download")
    assert started.status == 202 and started.json["kind"] == "download", started.body
    assert started.headers["location"] == f"/jobs/{started.json['id']}"
    assert_matches_openapi("/datasets/{id}/versions/{ref}/download", started.json, status="202")
    assert run_queued(api.services) >= 1
    status, job = importer_api("GET", started.json["url"])
    assert status == 200 and job["state"] == "succeeded", job
    assert job["result"]["url"] == "/datasets/demo/versions/1.0.0/download"
    assert job["result"]["content_digest"] == reg["content_digest"]
    # Then the route answers the document (as it does from now on)
    resp = api("GET", "/datasets/demo/versions/latest/download")
    assert resp.status == 200
    if api.backend == "embedded":
        # The embedded store streams the document as an attachment
        assert resp.headers["content-disposition"] == 'attachment; filename="demo-1.0.0.json"'
        doc = resp.json
    else:
        # AWS answers a presigned URL to the document
        assert set(resp.json) == {"url", "filename", "expires_in"}
        assert resp.json["filename"] == "demo-1.0.0.json"
        assert resp.json["expires_in"] == api.services.settings.presign_expiry
        url = urllib.parse.urlsplit(resp.json["url"])
        assert "X-Amz-Signature" in url.query
        key = urllib.parse.unquote(url.path.lstrip("/").split("/", 1)[1])
        if url.netloc.startswith(f"{api.services.settings.bucket}."):
            key = urllib.parse.unquote(url.path.lstrip("/"))
        doc = orjson.loads(api.services.store.get(key))
    again = api("POST", "/datasets/validate", body={**doc, "version": "2.0.0"})
    assert again.json["content_digest"] == reg["content_digest"]
    # Both forms are what the OpenAPI document says the 200 is
    assert_matches_openapi("/datasets/{id}/versions/{ref}/download", resp.json)


def assert_matches_openapi(path: str, body: Any, method: str = "get", status: str = "200") -> None:
    import jsonschema

    doc = json.loads((Path(__file__).resolve().parents[2] / "docs" / "openapi.json").read_text())
    schema = doc["paths"][path][method]["responses"][status]["content"]["application/json"]
    jsonschema.Draft202012Validator({**schema["schema"], "components": doc["components"]}).validate(
        body
    )


# -- tags, tombstones, identity ---------------------------------------------------------------


def test_tags_replace_and_clear(api: Api) -> None:
    api("POST", "/datasets", body=dataset())
    path = "/datasets/demo/versions/1.0.0/tags"
    tagged = api("PUT", path, body={"tags": ["stable", "prod"]})
    assert tagged.status == 200
    assert sorted(tagged.json["version_tags"]) == ["prod", "stable"]
    assert api("GET", "/datasets/demo/versions/stable").json["version"] == "1.0.0"
    replaced = api("PUT", path, body={"tags": ["canary"]})
    assert replaced.json["version_tags"] == ["canary"]
    problem_of(api("GET", "/datasets/demo/versions/stable"), 404)
    assert api("PUT", path, body={"tags": []}).json["version_tags"] == []
    # Bad bodies name the field
    assert problem_of(api("PUT", path, body={"tag": ["x"]}), 400)["field"] in {"tag", "tags"}
    problem_of(api("PUT", "/datasets/demo/versions/9.0.0/tags", body={"tags": []}), 404)


def test_delete_and_revive_by_the_creator_or_an_admin_only(api: Api) -> None:
    api("POST", "/datasets", body=dataset())
    path = "/datasets/demo/versions/1.0.0"
    # A non-creator cannot delete
    body = problem_of(api("DELETE", path, principal="bob"), 403)
    assert body["id"] == "demo"
    # The creator can; the version is then hidden unless include_deleted
    gone = api("DELETE", path)
    assert gone.status == 200
    assert gone.json["deleted_at"]
    problem_of(api("GET", path), 404)
    assert api("GET", path, query={"include_deleted": "true"}).json["deleted_at"]
    assert api("GET", "/datasets/demo/versions").json["items"] == []
    listed = api("GET", "/datasets/demo/versions", query={"include_deleted": "true"})
    assert [v["version"] for v in listed.json["items"]] == ["1.0.0"]
    # A non-creator cannot revive; an admin can
    problem_of(api("POST", f"{path}/revive", principal="bob"), 403)
    back = api("POST", f"{path}/revive", principal="root", roles="admin")
    assert back.status == 200
    assert back.json["deleted_at"] is None
    assert api("GET", path).status == 200


def test_missing_or_empty_authorizer_context_is_403(api: Api) -> None:
    problem_of(api("GET", "/datasets", authorizer=None), 403)
    problem_of(api("GET", "/datasets", authorizer={"principalId": "alice"}), 403)
    problem_of(api("POST", "/datasets", body=dataset(), authorizer={"claims": {"sub": "a"}}), 403)


def test_a_tenant_header_is_never_an_identity(api: Api) -> None:
    # Given another tenant's dataset
    api("POST", "/datasets", body=dataset(), tenant="globex")
    # When a caller of acme sends the local server's dev headers to the function itself
    ev = event("GET", "/datasets/demo")
    ev["headers"]["X-Caseshelf-Tenant"] = "globex"
    ev["multiValueHeaders"]["X-Caseshelf-Tenant"] = ["globex"]
    # Then the function reads the authorizer only
    problem_of(api.invoke(ev), 404)


def with_dev_headers(ev: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    for name, value in headers.items():
        ev["headers"][name] = value
        ev["multiValueHeaders"][name] = [value]
    return ev


def test_dev_principal_and_role_headers_grant_nothing(api: Api) -> None:
    # Given alice's version
    api("POST", "/datasets", body=dataset())
    path = "/datasets/demo/versions/1.0.0"
    dev = {"X-Caseshelf-Principal": "alice", "X-Caseshelf-Roles": "admin"}
    # When bob sends the dev headers naming alice, and the admin role
    ev = with_dev_headers(event("DELETE", path, principal="bob"), dev)
    # Then he is still bob without a role: not the creator, not an admin
    assert "only the creator" in problem_of(api.invoke(ev), 403)["detail"]
    assert api("GET", path).json["deleted_at"] is None
    # And with no authorizer context at all, the dev headers are no identity either
    bare = with_dev_headers(
        event("GET", "/datasets", authorizer=None), {**dev, "X-Caseshelf-Tenant": "acme"}
    )
    problem_of(api.invoke(bare), 403)
    # And a non-admin cannot write to _shared by claiming the role in a header
    shared = with_dev_headers(
        event("POST", "/datasets", body=dataset(), tenant="_shared", principal="eve"),
        {"X-Caseshelf-Roles": "admin"},
    )
    problem_of(api.invoke(shared), 403)


def test_unexpected_errors_are_500_without_internals(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("secret internal detail /var/task/x.py")

    monkeypatch.setattr(api.services.registry, "summary", boom)
    body = problem_of(api("GET", "/datasets/demo"), 500)
    assert "secret" not in json.dumps(body)
    assert body["request_id"]


def test_unknown_route_is_404_problem(api: Api) -> None:
    body = problem_of(api("GET", "/nothing-here"), 404)
    assert "/nothing-here" in body["detail"]


# -- wire conventions (architecture §7) ------------------------------------------------------------

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
VERSION_KEYS = {
    "id",
    "version",
    "content_digest",
    "case_count",
    "description",
    "tags",
    "version_tags",
    "created_at",
    "created_by",
    "deleted_at",
    "produced_by",
}


def digests_in(value: Any, key: str = "") -> list[str]:
    """Every value the wire calls a digest: under a key naming one, or a list of them."""
    if isinstance(value, dict):
        return [d for k, v in value.items() for d in digests_in(v, k)]
    if isinstance(value, list):
        return [d for v in value for d in digests_in(v, key)]
    return [value] if "digest" in key else []


def test_every_answer_keeps_the_wire_conventions(api: Api) -> None:
    # Given a version with a companion file, and a second one of other content
    doc = dataset()
    doc["cases"][0]["files"] = {"notes.md": {"text": "a note\n"}}
    reg = api("POST", "/datasets", body=doc)
    api("POST", "/datasets", body=dataset("1.1.0", n=4))
    answers = {
        "register": reg,
        "validate": api("POST", "/datasets/validate", body=dataset("2.0.0")),
        "datasets": api("GET", "/datasets"),
        "dataset": api("GET", "/datasets/demo"),
        "versions": api("GET", "/datasets/demo/versions"),
        "version": api("GET", "/datasets/demo/versions/1.0.0"),
        "cases": api("GET", "/datasets/demo/versions/1.0.0/cases"),
        "tags": api("PUT", "/datasets/demo/versions/1.0.0/tags", body={"tags": ["stable"]}),
        "conflict": api("POST", "/datasets", body=dataset(n=5)),
    }
    # Then register, validate, version metadata and every list have their documented shape
    assert set(answers["register"].json) == {
        "id",
        "version",
        "content_digest",
        "case_count",
        "created",
    }
    validate = answers["validate"].json
    assert {"valid", "would_conflict", "content_digest", "case_count"} <= set(validate)
    assert validate["valid"] is True
    for name in ("version", "tags"):
        assert set(answers[name].json) >= VERSION_KEYS, name
    for name in ("datasets", "versions", "cases"):
        assert set(answers[name].json) == {"items", "next_cursor"}, name
    assert all(set(v) >= VERSION_KEYS for v in answers["versions"].json["items"])
    # And errors are problem+json
    problem_of(answers["conflict"], 409)
    # And every digest anywhere is written sha256:<64 hex>
    found = [d for resp in answers.values() for d in digests_in(resp.json)]
    assert len(found) == 11  # content, latest, file and conflict digests all took part
    assert [d for d in found if not isinstance(d, str) or not DIGEST.match(d)] == []
    assert answers["cases"].json["items"][0]["files"]["notes.md"]["digest"].startswith("sha256:")


# -- logs -------------------------------------------------------------------------------------

SECRET_TOKEN = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LXBheWxvYWQ.c2lnbmF0dXJlLW5ldmVyLWxvZ2dlZA"


def test_no_token_reaches_the_logs_on_success_error_or_crash(
    api: Api,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given requests that carry a bearer token, as API Gateway passes them on
    def signed(ev: dict[str, Any]) -> dict[str, Any]:
        return with_dev_headers(ev, {"Authorization": f"Bearer {SECRET_TOKEN}"})

    caplog.set_level("DEBUG")
    # When one succeeds, one is refused and one crashes inside the service
    assert api.invoke(signed(event("POST", "/datasets", body=dataset()))).status == 201
    assert api.invoke(signed(event("POST", "/datasets", raw="{"))).status == 400

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("failure while reading")

    monkeypatch.setattr(api.services.registry, "summary", boom)
    assert api.invoke(signed(event("GET", "/datasets/demo"))).status == 500
    # Then the crash is logged, but no log line holds the token
    out, err = capfd.readouterr()
    logged = out + err + caplog.text
    assert "unhandled error" in logged
    assert SECRET_TOKEN not in logged
    assert "c2VjcmV0LXBheWxvYWQ" not in logged


def test_the_deployed_functions_never_log_or_print_whole_events() -> None:
    # Whole events carry the caller's Authorization header: neither the Logger's event logging
    # nor the resolver's debug printing may be switched on in the template.
    from tests.moto_infra import load_template

    template = load_template()
    envs = [template.get("Globals", {}).get("Function", {}).get("Environment", {})]
    envs += [
        r.get("Properties", {}).get("Environment", {})
        for r in template["Resources"].values()
        if r.get("Type") == "AWS::Serverless::Function"
    ]
    assert len(envs) > 1, "the template names no function environments"
    for env in envs:
        variables = {k: str(v).lower() for k, v in (env.get("Variables") or {}).items()}
        for name in (
            "POWERTOOLS_LOGGER_LOG_EVENT",
            "POWERTOOLS_DEV",
            "POWERTOOLS_EVENT_HANDLER_DEBUG",
        ):
            assert variables.get(name, "false") in {"false", "0"}, name
