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
