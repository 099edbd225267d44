"""Identity from the authorizer context, and the one error-to-HTTP mapping (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from caseshelf.api.app import body_size, tracing_enabled
from caseshelf.api.auth import identity_from_event
from caseshelf.api.errors import malformed_json, problem_of, status_of
from caseshelf.domain.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    TooLarge,
    Upstream,
)

pytestmark = pytest.mark.integration


def ev(authorizer: Any) -> dict[str, Any]:
    return {"headers": {"X-Caseshelf-Tenant": "evil"}, "requestContext": {"authorizer": authorizer}}


def test_cognito_claims_give_tenant_subject_and_roles() -> None:
    who = identity_from_event(
        ev({"claims": {"custom:tenant": "acme", "sub": "u-1", "custom:roles": "admin, ops,"}})
    )
    assert (who.tenant, who.principal, who.roles) == ("acme", "u-1", frozenset({"admin", "ops"}))
    assert who.is_admin


def test_lambda_authorizer_context_and_username_fallback() -> None:
    who = identity_from_event(ev({"tenant": "acme", "principalId": "bob", "roles": ""}))
    assert (who.tenant, who.principal, who.roles) == ("acme", "bob", frozenset())
    claims = {"custom:tenant": "acme", "cognito:username": "carol"}
    assert identity_from_event(ev({"claims": claims})).principal == "carol"


@pytest.mark.parametrize(
    "event",
    [
        {},
        {"requestContext": {}},
        ev(None),
        ev({"principalId": "bob"}),
        ev({"tenant": "acme"}),
        ev({"claims": {"sub": "u-1"}}),
        ev({"tenant": "../etc", "principalId": "bob"}),
    ],
)
def test_no_usable_identity_is_forbidden_and_headers_never_count(event: dict[str, Any]) -> None:
    with pytest.raises(Forbidden):
        identity_from_event(event)


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (BadRequest("x"), 400),
        (Forbidden("x"), 403),
        (NotFound("x"), 404),
        (Conflict("x"), 409),
        (TooLarge("x"), 413),
        (Upstream("x"), 502),
        (RuntimeError("x"), 500),
    ],
)
def test_each_error_type_has_its_status(error: Exception, status: int) -> None:
    assert status_of(error)[0] == status
    assert problem_of(error)["status"] == status


def test_problem_carries_fields_but_never_overwrites_members_or_leaks_internals() -> None:
    body = problem_of(Conflict("taken", digests=["a", "b"], status=999, type="x"))
    assert body["status"] == 409
    assert body["type"] == "urn:caseshelf:problem:conflict"
    assert body["digests"] == ["a", "b"]
    internal = problem_of(KeyError("/var/task/secret.py"), request_id="r-1")
    assert "secret" not in str(internal)
    assert internal["request_id"] == "r-1"


def test_malformed_json_names_line_and_column() -> None:
    doc = '{\n  "a": 1,\n  "b": NaN\n}'
    err = malformed_json(doc, doc.index("NaN"), "unexpected character")
    assert (err.fields["line"], err.fields["column"]) == (3, 8)
    assert "NaN" in err.detail


def test_body_size_counts_bytes_not_characters() -> None:
    assert body_size({"body": None}) == 0
    assert body_size({"body": "é" * 10}) == 20
    assert body_size({"body": "QUJD", "isBase64Encoded": True}) == 3


def test_tracing_only_on_lambda_and_not_when_disabled() -> None:
    assert not tracing_enabled({})
    assert tracing_enabled({"AWS_LAMBDA_FUNCTION_NAME": "f", "LAMBDA_TASK_ROOT": "/var/task"})
    assert not tracing_enabled({"LAMBDA_TASK_ROOT": "/x", "POWERTOOLS_TRACE_DISABLED": "true"})
    assert not tracing_enabled({"LAMBDA_TASK_ROOT": "/x", "AWS_SAM_LOCAL": "true"})


def test_the_resolver_never_runs_in_powertools_debug_mode(monkeypatch):
    # Given an environment that would switch Powertools' debug mode on (it prints whole events)
    monkeypatch.setenv("POWERTOOLS_DEV", "true")
    monkeypatch.setenv("POWERTOOLS_EVENT_HANDLER_DEBUG", "true")
    from caseshelf.api.app import make_resolver

    # When a function's resolver is made
    app = make_resolver("t")
    # Then debug stays off, so no event (and no Authorization header) is ever printed
    assert app._debug is False
