"""The committed OpenAPI document is the one the resolvers generate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from caseshelf.api.openapi import FUNCTION_MODULES, merged_schema

pytestmark = pytest.mark.integration

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def test_committed_openapi_matches_the_resolvers() -> None:
    # Given the document generated from every function module
    generated = merged_schema()
    # Then the committed file is identical (regenerate with `make openapi`)
    assert COMMITTED.is_file(), "docs/openapi.json is missing: run `make openapi`"
    assert COMMITTED.read_text(encoding="utf-8") == generated, (
        "docs/openapi.json is out of date: run `make openapi` and commit it"
    )


def test_document_declares_every_template_route_behind_the_authorizer() -> None:
    from caseshelf.gateway import load_routes

    doc = json.loads(merged_schema())
    # Every route the package's table (held equal to the template) deploys is documented
    for route in load_routes():
        if route.module in FUNCTION_MODULES:
            assert route.method.lower() in doc["paths"].get(route.path, {}), route
    # And the authorizer is the security of the whole API
    assert doc["security"] == [{"CognitoAuthorizer": []}]
    assert "CognitoAuthorizer" in doc["components"]["securitySchemes"]
    # Validation errors are documented as 400 problem+json, not a generic 422
    for ops in doc["paths"].values():
        for op in ops.values():
            assert "422" not in op["responses"]


# Routes that never reach the registry's storage: the caller, the first-party catalog, the Hub.
NO_STORE = {
    ("get", "/me"),
    ("get", "/benchmarks"),
    ("get", "/benchmarks/hf/search"),
    ("get", "/benchmarks/hf/splits"),
    ("get", "/benchmarks/hf/files"),
}
# Routes that write nothing, though they are POSTs: they check or read what they are sent.
READ_ONLY_POSTS = {
    "/datasets/validate",
    "/recipes/validate",
    "/refs/resolve",
    "/benchmarks/preview",
}


def test_storage_failures_and_a_full_disk_are_documented() -> None:
    doc = json.loads(merged_schema())
    checked = 0
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            answers = op["responses"]
            # Every route that reaches the storage may answer 503, saying when to try again
            if (method, path) in NO_STORE:
                assert "503" not in answers, (method, path)
            else:
                assert answers["503"]["headers"]["Retry-After"]["schema"] == {"type": "integer"}
                assert "application/problem+json" in answers["503"]["content"]
                checked += 1
            # And every route that writes may answer 507 (the embedded store's disk full)
            writes = method in {"post", "put", "delete"} and path not in READ_ONLY_POSTS
            if writes:
                assert "application/problem+json" in answers["507"]["content"], (method, path)
    assert checked >= 30
