"""Every paged answer fits Lambda's response payload once escaped (`caseshelf.domain.answers`):
cases, search, diff and subset pages are cut at ANSWER_BUDGET_BYTES measured as the runtime
serialises the proxy answer, hand a cursor for the rest, and a case too large on its own is a
stub naming the route that serves it alone."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from caseshelf import bootstrap
from caseshelf.api.openapi import load_function
from caseshelf.domain import layout
from caseshelf.domain.answers import ANSWER_BUDGET_BYTES, LAMBDA_PAYLOAD_BYTES, escaped_size
from caseshelf.domain.canonical import canonical_json, sha256_hex
from caseshelf.domain.identity import Identity
from caseshelf.services.registry import parse_dataset
from tests.helpers import lambda_context
from tests.integration.test_registry_handler import Api, event

pytestmark = pytest.mark.integration

ME = Identity("acme", "alice", frozenset())
SUBSET = "caseshelf.functions.subset"
DIFF = "caseshelf.functions.diff"


def heavy_case(i: int, size: int = 8 * 1024, *, tag: str = "") -> dict[str, Any]:
    """A case of about `size` bytes of text that escaping inflates: quotes, backslashes and
    non-ASCII (about twice its stored size in an answer)."""
    unit = 'say "hi" \\ é \u2013 😀 '
    text = (unit * (size // len(unit.encode()) + 1))[: size // 2]
    return {"id": f"c{i:05d}", "inputs": {"user": f"{tag}{i} {text}"}, "tags": ["t"]}


def register(services: bootstrap.Services, version: str, cases: list[dict[str, Any]]) -> None:
    doc = {"id": "big", "version": version, "cases": cases}
    services.registry.register(ME, parse_dataset(doc))


def within_lambda(out: dict[str, Any]) -> dict[str, Any]:
    """The proxy answer, checked as the Python runtime sends it: its body under the budget
    escaped, the whole serialised answer under the payload limit."""
    assert escaped_size(out["body"]) <= ANSWER_BUDGET_BYTES
    assert len(json.dumps(out)) <= LAMBDA_PAYLOAD_BYTES  # awslambdaric: json.dumps, ensure_ascii
    body: dict[str, Any] = json.loads(out["body"])
    return body


@pytest.fixture
def api(installed_services: bootstrap.Services) -> Api:
    return Api("embedded", installed_services)


def invoke(function: str, ev: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = load_function(function).lambda_handler(ev, lambda_context("Fn"))
    return out


def test_case_pages_of_8_kib_cases_stay_under_the_budget_and_join_to_the_version(
    api: Api,
) -> None:
    # Given 1,000 cases of ~8 KiB that escaping doubles (~16 MB as one page)
    cases = [heavy_case(i) for i in range(1000)]
    register(api.services, "1.0.0", cases)
    want = [orjson.loads(canonical_json(c)) for c in cases]
    # When the cases are paged with limit=1000
    got: list[dict[str, Any]] = []
    pages = 0
    cursor = None
    while True:
        query = {"limit": "1000", **({"cursor": cursor} if cursor else {})}
        out = api.handler(
            event("GET", "/datasets/big/versions/1.0.0/cases", query=query), lambda_context("R")
        )
        page = within_lambda(out)
        pages += 1
        assert len(page["items"]) < 1000
        got.extend(page["items"])
        cursor = page["next_cursor"]
        assert out["multiValueHeaders"].get("X-Next-Cursor", [None]) == [cursor]
        if not cursor:
            break
    # Then every page fits, there are several, and together they are the whole version
    assert pages >= 3
    assert got == want


def test_a_case_over_the_budget_is_a_stub_served_by_its_own_route(api: Api) -> None:
    # Given a version whose second case alone is over the budget once escaped (3 MB of é)
    huge = {"id": "huge", "inputs": {"user": "é" * (1_500_000)}}
    register(api.services, "1.0.0", [heavy_case(0), huge, heavy_case(2)])
    base = "/datasets/big/versions/1.0.0/cases"
    # When its cases are paged
    first = within_lambda(api.handler(event("GET", base), lambda_context("R")))
    second = within_lambda(
        api.handler(event("GET", base, query={"cursor": first["next_cursor"]}), lambda_context("R"))
    )
    third = within_lambda(
        api.handler(
            event("GET", base, query={"cursor": second["next_cursor"]}), lambda_context("R")
        )
    )
    # Then the large case is a page of its own holding a stub that names its route
    assert [c["id"] for c in first["items"]] == ["c00000"]
    (stub,) = second["items"]
    record = canonical_json(huge)
    assert stub["id"] == "huge" and stub["oversized"]["position"] == 1
    assert stub["oversized"]["bytes"] == escaped_size(record) > ANSWER_BUDGET_BYTES
    digest = api.services.registry.get_version(ME, "big", "1.0.0").content_digest
    assert stub["oversized"]["href"] == f"/datasets/big/versions/{digest}/cases/1"
    assert [c["id"] for c in third["items"]] == ["c00002"] and third["next_cursor"] is None
    # And the route answers it: a presigned URL of it alone where the store gives URLs
    one = api("GET", f"/datasets/big/versions/{digest}/cases/1")
    assert one.status == 200
    if api.services.registry.presign_downloads:
        assert one.json["id"] == "huge" and one.json["bytes"] == stub["oversized"]["bytes"]
        key = layout.case_object_key("acme", sha256_hex(record))
        assert api.services.store.get(key) == record
        assert one.json["url"]
    else:
        assert one.json == huge
    small = api("GET", f"/datasets/big/versions/{digest}/cases/2")
    assert small.json == orjson.loads(canonical_json(heavy_case(2)))
    past = api("GET", f"/datasets/big/versions/{digest}/cases/3")
    assert past.status == 404 and "0 to 2" in past.json["detail"]


def test_search_pages_are_cut_at_the_budget_and_resume_at_the_first_left_out(api: Api) -> None:
    # Given 700 heavy cases, all matching the search
    register(api.services, "1.0.0", [heavy_case(i) for i in range(700)])
    base = "/datasets/big/versions/1.0.0/cases"
    found: list[str] = []
    cursor = None
    while True:
        query = {"q": "hi", "by": "text", "limit": "1000", **({"cursor": cursor} if cursor else {})}
        page = within_lambda(api.handler(event("GET", base, query=query), lambda_context("R")))
        found.extend(c["id"] for c in page["items"])
        cursor = page["next_cursor"]
        if not cursor:
            break
    # Then every match is found once, in order
    assert found == [f"c{i:05d}" for i in range(700)]


def test_diff_pages_are_cut_at_the_budget(api: Api) -> None:
    # Given two versions of 400 heavy cases, every case changed
    register(api.services, "1.0.0", [heavy_case(i) for i in range(400)])
    register(api.services, "2.0.0", [heavy_case(i, tag="v2 ") for i in range(400)])
    changed: list[str] = []
    cursor = None
    pages = 0
    while True:
        query = {"base": "1.0.0", "candidate": "2.0.0", "limit": "1000"}
        if cursor:
            query["cursor"] = cursor
        out = invoke(DIFF, event("GET", "/datasets/big/diff", query=query))
        page = within_lambda(out)
        pages += 1
        assert page["summary"]["changed"] == 400
        changed.extend(c["id"] for c in page["changed"])
        cursor = page["next_cursor"]
        if not cursor:
            break
    # Then the pages are several, and together hold every change once
    assert pages >= 2
    assert changed == [f"c{i:05d}" for i in range(400)]


def test_a_change_over_the_budget_names_the_routes_of_its_two_forms(api: Api) -> None:
    # Given a case whose two forms differ by 3 MB of é each
    register(api.services, "1.0.0", [{"id": "x", "inputs": {"user": "é" * 1_500_000}}])
    register(api.services, "2.0.0", [{"id": "x", "inputs": {"user": "è" * 1_500_000}}])
    query = {"base": "1.0.0", "candidate": "2.0.0"}
    page = within_lambda(invoke(DIFF, event("GET", "/datasets/big/diff", query=query)))
    # Then the entry carries no changes but the routes of both forms
    (entry,) = page["changed"]
    assert entry["changes"] == [] and entry["oversized"]["bytes"] > ANSWER_BUDGET_BYTES
    assert entry["oversized"]["base"].endswith("/cases/0")
    assert page["next_cursor"] is None


def test_subset_with_cases_pages_by_cursor(api: Api) -> None:
    # Given 800 heavy cases (~13 MB escaped)
    register(api.services, "1.0.0", [heavy_case(i) for i in range(800)])
    path = "/datasets/big/versions/1.0.0/subset"
    got: list[str] = []
    cursor = None
    pages = 0
    while True:
        query = {"cases": "true", **({"cursor": cursor} if cursor else {})}
        ev = event("POST", path, body={"tags": ["t"]}, query=query)
        ev["resource"] = "/datasets/{id}/versions/{ref}/subset"
        page = within_lambda(invoke(SUBSET, ev))
        pages += 1
        assert len(page["case_ids"]) == 800
        got.extend(c["id"] for c in page["cases"])
        cursor = page["cases_next_cursor"]
        if not cursor:
            break
    assert pages >= 2
    assert got == [f"c{i:05d}" for i in range(800)]
