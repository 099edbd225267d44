"""The subset and diff Lambdas fed API Gateway events, on moto (bucket and table built from the
template)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from caseshelf import bootstrap
from caseshelf.domain.identity import Identity
from caseshelf.services.registry import parse_dataset
from tests.conftest import Backend
from tests.helpers import call_function, importer_api, run_queued, sample_event

pytestmark = pytest.mark.integration

ME = Identity("acme", "alice")


@pytest.fixture
def services(moto_installed: Backend) -> bootstrap.Services:
    return moto_installed.services


def event(name: str, *, tenant: str = "acme", **changes: Any) -> dict[str, Any]:
    ev = sample_event(name)
    ev["requestContext"]["authorizer"]["claims"]["custom:tenant"] = tenant
    for key, value in changes.items():
        ev[key] = value
    query = ev.get("queryStringParameters")
    if query is not None:
        ev["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()}
    return ev


def case(i: int, **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {
        "id": f"c{i:02d}",
        "inputs": {"user": f"question {i}"},
        "tags": ["fizz"] if i % 3 == 0 else ["plain"],
    }
    c.update(extra)
    return c


def register(svc: bootstrap.Services, version: str, cases: list[dict[str, Any]], **kw: Any):
    body = {"id": "qa", "version": version, "cases": cases, **kw}
    return svc.registry.register(ME, parse_dataset(body)).record


# -- subset ------------------------------------------------------------------------------


def test_subset_answers_a_stamped_selection(services):
    rec = register(services, "1.0.0", [case(i) for i in range(10)])
    status, body = call_function("subset", event("subset_post.json"))
    assert status == 200
    assert body == {
        "stamp": {
            "id": "qa",
            "version": "1.0.0",
            "content_digest": rec.content_digest,
            "total": 10,
            "selected": 2,
            "ids": None,
            "tags": ["fizz"],
            "limit": 2,
            "sample": None,
            "seed": None,
        },
        "case_ids": ["c00", "c03"],
        "cases": None,
        "registered": None,
        "cases_next_cursor": None,
    }


def follow(ev: dict[str, Any], tenant: str = "acme") -> tuple[int, Any]:
    """The subset route fed `ev`; a job it starts (202) delivered to the importer as the
    import queue would and read back with `GET /jobs/{id}`."""
    status, job = call_function("subset", ev)
    if status != 202:
        return status, job
    assert job["state"] == "pending" and job["url"] == f"/jobs/{job['id']}"
    assert job["request"]["kind"] == "subset"
    assert run_queued() == 1
    got, done = importer_api("GET", job["url"], tenant=tenant)
    assert got == 200 and done["state"] in ("succeeded", "failed"), done
    return status, done


def test_subset_register_as_is_a_job(services):
    parent = register(services, "1.0.0", [case(i) for i in range(10)])
    body = {"sample": 3, "seed": "x", "register_as": {"id": "qa-mini", "bump": "major"}}
    ev = event("subset_post.json", body=json.dumps(body))
    status, job = follow(ev)
    assert status == 202 and job["state"] == "succeeded", job
    result = job["result"]
    plain = call_function(
        "subset", event("subset_post.json", body=json.dumps(body | {"register_as": None}))
    )
    assert plain[0] == 200
    assert result["stamp"] == plain[1]["stamp"] and result["stamp"]["selected"] == 3
    assert result["parent"] == {
        "id": "qa",
        "version": "1.0.0",
        "content_digest": parent.content_digest,
    }
    assert result["registered"]["id"] == "qa-mini" and result["registered"]["created"] is True
    assert result["registered"]["case_count"] == 3
    assert job["progress"] == {"cases_selected": 3, "cases_registered": 3}
    rec = services.registry.get_version(ME, "qa-mini", result["registered"]["version"])
    assert rec.produced_by and rec.produced_by["via"] == "subset"
    # The same selection again registers nothing new; another one under that label conflicts
    again = follow(event("subset_post.json", body=json.dumps(body)))[1]
    assert again["result"]["registered"] == {**result["registered"], "created": False}
    label = {"id": "qa-mini", "version": result["registered"]["version"]}
    other = {"limit": 2, "register_as": label}
    failed = follow(event("subset_post.json", body=json.dumps(other)))[1]
    assert failed["state"] == "failed" and failed["error"]["code"] == "Conflict"
    assert "qa-mini" in failed["error"]["detail"]


@pytest.mark.parametrize(
    ("body", "query", "ref", "status", "field"),
    [
        ({"limit": 0}, None, "1.0.0", 400, "detail"),
        ({"seed": 3}, None, "1.0.0", 400, "field"),
        ({}, {"cases": "true"}, "1.0.0", 400, "field"),
        ({}, None, "7.0.0", 404, "detail"),
        ({"ids": ["c01"] * 30_000}, None, "1.0.0", 413, "limit"),
    ],
)
def test_subset_register_as_fails_at_once_before_any_work(
    services, body, query, ref, status, field
):
    register(services, "1.0.0", [case(i) for i in range(4)])
    body = {**body, "register_as": {"id": "qa-mini", "version": "1.0.0"}}
    ev = event("subset_post.json", body=json.dumps(body), pathParameters={"id": "qa", "ref": ref})
    ev["path"] = f"/datasets/qa/versions/{ref}/subset"
    if query is not None:
        ev = event("subset_post.json", body=json.dumps(body), queryStringParameters=query)
    got, problem = call_function("subset", ev)
    assert got == status, problem
    assert problem["status"] == status and field in problem
    assert run_queued() == 0  # nothing was queued


def test_subset_register_as_of_unknown_ids_fails_the_job_naming_them(services):
    register(services, "1.0.0", [case(i) for i in range(4)])
    body = {"ids": ["c01", "zz"], "register_as": {"id": "qa-mini", "version": "1.0.0"}}
    status, job = follow(event("subset_post.json", body=json.dumps(body)))
    assert status == 202 and job["state"] == "failed"
    assert job["error"]["code"] == "BadRequest" and job["error"]["case_ids"] == ["zz"]


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"ids": ["c01", "zz"]}, 400, "case_ids"),
        ({"tags": ["none-such"]}, 400, "detail"),
        ({"limit": 0}, 400, "detail"),
        ({"sample": 0}, 400, "detail"),
        ({"bogus": 1}, 400, "detail"),
    ],
)
def test_subset_bad_input_is_a_problem(services, body, status, field):
    register(services, "1.0.0", [case(i) for i in range(4)])
    got, problem = call_function("subset", event("subset_post.json", body=json.dumps(body)))
    assert got == status
    assert problem["status"] == status and field in problem


def test_subset_of_unknown_dataset_or_ref_is_404(services):
    register(services, "1.0.0", [case(i) for i in range(4)])
    ev = event("subset_post.json", pathParameters={"id": "qa", "ref": "7.0.0"})
    ev["path"] = "/datasets/qa/versions/7.0.0/subset"
    assert call_function("subset", ev)[0] == 404
    ev = event("subset_post.json", pathParameters={"id": "nope", "ref": "1.0.0"})
    ev["path"] = "/datasets/nope/versions/1.0.0/subset"
    assert call_function("subset", ev)[0] == 404
    # Another tenant does not see it at all
    assert call_function("subset", event("subset_post.json", tenant="globex"))[0] == 404


# -- diff --------------------------------------------------------------------------------


def test_diff_answers_changes_with_pointers(services):
    register(services, "1.0.0", [case(i) for i in range(6)])
    v2 = [case(i) for i in range(1, 6)] + [case(9)]
    v2[1] = case(2, metadata={"level": None})
    register(services, "1.1.0", v2, tags=["new"])
    status, body = call_function("diff", event("diff_get.json"))
    assert status == 200
    assert body["summary"] == {"added": 1, "removed": 1, "changed": 1, "unchanged": 4}
    assert body["added"] == [{"id": "c09", "user": "question 9"}]
    assert body["removed"] == [{"id": "c00", "user": "question 0"}]
    assert body["changed"] == [
        {"id": "c02", "changes": [{"path": "/metadata", "after": {"level": None}}]}
    ]
    assert body["meta"]["changes"] == [{"path": "/tags", "before": [], "after": ["new"]}]
    assert body["base"]["version"] == "1.0.0" and body["candidate"]["version"] == "1.1.0"


def test_diff_of_a_ref_with_itself_is_empty(services):
    register(services, "1.0.0", [case(i) for i in range(3)])
    q = {"base": "1.0.0", "candidate": "latest"}
    status, body = call_function("diff", event("diff_get.json", queryStringParameters=q))
    assert status == 200
    assert body["summary"] == {"added": 0, "removed": 0, "changed": 0, "unchanged": 3}
    assert body["changed"] == [] and body["meta"]["changes"] == []


def test_diff_summary_only(services):
    register(services, "1.0.0", [case(i) for i in range(3)])
    register(services, "1.1.0", [case(i) for i in range(4)])
    q = {"base": "1.0.0", "candidate": "1.1.0", "summary": "true"}
    status, body = call_function("diff", event("diff_get.json", queryStringParameters=q))
    assert status == 200
    assert body["summary"]["added"] == 1 and body["added"] is None


def test_diff_tombstoned_only_with_include_deleted(services):
    register(services, "1.0.0", [case(1)])
    register(services, "1.1.0", [case(2)])
    services.registry.delete_version(ME, "qa", "1.1.0")
    assert call_function("diff", event("diff_get.json"))[0] == 404
    q = {"base": "1.0.0", "candidate": "1.1.0", "include_deleted": "true"}
    assert call_function("diff", event("diff_get.json", queryStringParameters=q))[0] == 200


def test_diff_never_reaches_another_tenant(services):
    register(services, "1.0.0", [case(1)])
    register(services, "1.1.0", [case(2)])
    assert call_function("diff", event("diff_get.json", tenant="globex"))[0] == 404
    q = {"base": "1.0.0", "candidate": "1.0.0", "candidate_id": "nope"}
    assert call_function("diff", event("diff_get.json", queryStringParameters=q))[0] == 404


def test_diff_needs_both_refs(services):
    register(services, "1.0.0", [case(1)])
    status, problem = call_function(
        "diff", event("diff_get.json", queryStringParameters={"base": "1.0.0"})
    )
    assert status == 400
    assert "candidate" in json.dumps(problem)


def test_diff_pages_with_a_cursor_on_moto(services):
    # Given 1.1.0 with 3 changed, 2 added and 1 removed case
    register(services, "1.0.0", [case(i) for i in range(8)])
    v2 = [case(i, inputs={"user": f"q{i}"}) if i < 4 else case(i) for i in range(1, 8)]
    register(services, "1.1.0", [*v2, case(20), case(21)])
    # When paged 3 entries at a time over the Lambda
    seen: list[tuple[str, str]] = []
    cursor = None
    summaries = []
    while True:
        q = {"base": "1.0.0", "candidate": "1.1.0", "limit": "3"}
        if cursor:
            q["cursor"] = cursor
        status, body = call_function("diff", event("diff_get.json", queryStringParameters=q))
        assert status == 200
        summaries.append(body["summary"])
        for kind in ("changed", "added", "removed"):
            seen += [(kind, e["id"]) for e in body[kind]]
        cursor = body["next_cursor"]
        if not cursor:
            break
    # Then two pages hold every entry once, in order, each with the whole summary
    assert len(summaries) == 2
    assert all(s == {"added": 2, "removed": 1, "changed": 3, "unchanged": 4} for s in summaries)
    assert seen == [
        ("changed", "c01"),
        ("changed", "c02"),
        ("changed", "c03"),
        ("added", "c20"),
        ("added", "c21"),
        ("removed", "c00"),
    ]


@pytest.mark.parametrize(
    "query", [{"limit": "0"}, {"limit": "1001"}, {"cursor": "bm90LWEtY3Vyc29y"}]
)
def test_diff_bad_limit_or_cursor_is_400(services, query):
    register(services, "1.0.0", [case(1)])
    q = {"base": "1.0.0", "candidate": "1.0.0", **query}
    status, problem = call_function("diff", event("diff_get.json", queryStringParameters=q))
    assert status == 400
    assert next(iter(query)) in json.dumps(problem)


def test_field_counts_of_a_large_diff_are_counted_on_until_complete(services):
    # Given a diff of 7 changed cases, and a service that counts 3 more a request (50,000 on
    # AWS; the local server counts all at once)
    register(services, "1.0.0", [case(i) for i in range(9)])
    v2 = [case(i) for i in range(9)]
    for i in range(7):
        v2[i]["metadata"] = {"edit": i}
    for i in (1, 5):
        v2[i]["inputs"] = {"user": f"question {i}, edited"}
    register(services, "1.1.0", v2)
    assert services.diff.field_count_cases == 50_000  # as deployed on AWS
    services.diff.field_count_cases = 3
    q = {"base": "1.0.0", "candidate": "1.1.0", "summary": "true", "fields": "true"}
    answers = []
    for _ in range(4):
        status, body = call_function("diff", event("diff_get.json", queryStringParameters=q))
        assert status == 200, body
        answers.append(body["fields"])
    # Then each answer says how far it counted, the counts at least what they end at
    assert [(a["counted"], a["complete"]) for a in answers] == [
        (3, False),
        (6, False),
        (7, True),
        (7, True),
    ]
    assert answers[0]["paths"] == [
        {"path": "/metadata", "cases": 3},
        {"path": "/inputs/user", "cases": 1},
    ]
    # And the counts made a part at a time are the counts of the whole diff
    assert answers[-1]["paths"] == [
        {"path": "/metadata", "cases": 7},
        {"path": "/inputs/user", "cases": 2},
    ]


def test_diff_counts_field_paths_over_the_whole_diff_and_filters_by_one(services):
    # Given 1.1.0 with 5 changed cases: 3 change the answer (one the question too), 2 the
    # metadata; and one added case
    register(services, "1.0.0", [case(i, expectations={"ground_truth": str(i)}) for i in range(8)])
    v2 = [case(i, expectations={"ground_truth": str(i)}) for i in range(8)]
    for i in (1, 4, 6):
        v2[i]["expectations"] = {"ground_truth": f"{i}!"}
    v2[4]["inputs"] = {"user": "question four"}
    for i in (2, 7):
        v2[i]["metadata"] = {"source": "x"}
    register(services, "1.1.0", [*v2, case(20)])
    q = {"base": "1.0.0", "candidate": "1.1.0", "summary": "true", "fields": "true"}
    # When the summary is asked with its fields (no page: every changed case is counted)
    status, body = call_function("diff", event("diff_get.json", queryStringParameters=q))
    assert status == 200, body
    # Then each field path is named with how many cases changed there
    assert body["fields"] == {
        "paths": [
            {"path": "/expectations/ground_truth", "cases": 3},
            {"path": "/metadata", "cases": 2},
            {"path": "/inputs/user", "cases": 1},
        ],
        "other_paths": 0,
        "counted": 5,
        "complete": True,
    }
    # And a filter by path pages only the cases changed there, with only those changes
    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        q = {"base": "1.0.0", "candidate": "1.1.0", "limit": "2", "path": "/expectations"}
        if cursor:
            q["cursor"] = cursor
        status, body = call_function("diff", event("diff_get.json", queryStringParameters=q))
        assert status == 200, body
        assert body["summary"]["changed"] == 5 and body["path_matches"] == 3
        assert body["added"] == [] and body["removed"] == []
        seen += body["changed"]
        cursor = body["next_cursor"]
        if not cursor:
            break
    assert [c["id"] for c in seen] == ["c01", "c04", "c06"]
    assert {ch["path"] for c in seen for ch in c["changes"]} == {"/expectations/ground_truth"}
    # A path that is not a pointer is refused, naming the parameter
    q = {"base": "1.0.0", "candidate": "1.1.0", "path": "metadata"}
    status, problem = call_function("diff", event("diff_get.json", queryStringParameters=q))
    assert status == 400 and "path" in json.dumps(problem)


def test_the_local_server_counts_a_diffs_fields_in_one_request(tmp_path):
    services = bootstrap.build(bootstrap.load_settings({}, backend="local", home=str(tmp_path)))
    assert services.diff.field_count_cases is None
