"""The one place where errors become HTTP answers.

Every answer that is not a success is `application/problem+json` (RFC 9457):
`{type, title, status, detail}` plus the error's own fields (case_ids, row, field, digests, ...)
so a caller can fix the input without reading prose. The status comes from the error's type,
never from its message. Anything unexpected is a 500 that names the request, not the internals.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel, ValidationError

from caseshelf.api.dto import CURSOR_PATTERN, REF_PATTERN
from caseshelf.domain.envelope import PATTERN_RULES, error_message, validation_problem
from caseshelf.domain.errors import (
    BackendUnavailable,
    BadRequest,
    CaseshelfError,
    Conflict,
    Corrupt,
    Forbidden,
    NotFound,
    StorageFull,
    TooLarge,
    Upstream,
)
from caseshelf.domain.models import DatasetVersionInput
from caseshelf.domain.words import CURSOR_RULE, REF_RULE
from caseshelf.extras import MissingExtra
from caseshelf.services.registry import dataset_error

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "urn:caseshelf:problem:"

# Most specific first: the first class in an error's MRO found here decides its status.
STATUS: dict[type[CaseshelfError], tuple[int, str]] = {
    BadRequest: (400, "bad-request"),
    Forbidden: (403, "forbidden"),
    NotFound: (404, "not-found"),
    Conflict: (409, "conflict"),
    TooLarge: (413, "too-large"),
    BackendUnavailable: (503, "backend-unavailable"),
    Corrupt: (502, "corrupt-object"),
    Upstream: (502, "upstream"),
    MissingExtra: (501, "missing-extra"),
    StorageFull: (507, "storage-full"),
}
# OS errors that mean the disk is full: 507 wherever they come from (`status_of`).
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})

_RESERVED = frozenset({"type", "title", "status", "detail", "instance"})

_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    421: "Misdirected Request",
    501: "Not Implemented",
    500: "Internal Server Error",
    502: "Bad Gateway",
    507: "Insufficient Storage",
    503: "Service Unavailable",
}

# Models whose validation errors get a domain-specific message (the dataset body names the
# case id, not only its index).
BodyErrorFn = Callable[[ValidationError, Any], BadRequest]
BODY_ERRORS: dict[type[BaseModel], BodyErrorFn] = {DatasetVersionInput: dataset_error}

log = logging.getLogger(__name__)

# Set by a caller that runs the handlers in its own process (the in-process client): an error
# that is not ours is raised to it as it is, instead of becoming a 500 that hides its cause.
RAISE_UNEXPECTED: ContextVar[bool] = ContextVar("caseshelf_raise_unexpected", default=False)


def status_of(exc: BaseException) -> tuple[int, str]:
    """(HTTP status, problem type suffix) of an error; 500 for anything not ours, except a
    full disk (ENOSPC, EDQUOT), which is 507 wherever it is raised."""
    if isinstance(exc, CaseshelfError):
        for cls in type(exc).__mro__:
            if cls in STATUS:
                return STATUS[cls]
        return 400, "bad-request"
    if isinstance(exc, OSError) and exc.errno in _DISK_FULL:
        return STATUS[StorageFull]
    return 500, "internal"


def problem(
    status: int,
    detail: str,
    /,
    *,
    problem_type: str | None = None,
    fields: Mapping[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A problem+json body. `fields` and `extra` never overwrite the standard members."""
    body: dict[str, Any] = {
        "type": TYPE_PREFIX + (problem_type or _kind_for(status)),
        "title": _TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
    }
    for key, value in {**(fields or {}), **extra}.items():
        if key not in _RESERVED and value is not None:
            body[key] = value
    return body


def _kind_for(status: int) -> str:
    for code, kind in STATUS.values():
        if code == status:
            return kind
    return {405: "method-not-allowed", 415: "unsupported-media-type"}.get(status, "internal")


def problem_of(exc: BaseException, *, request_id: str | None = None) -> dict[str, Any]:
    """The body for an error. A 500 says only that it failed and which request it was."""
    status, kind = status_of(exc)
    if isinstance(exc, OSError) and status == 507:
        return problem(
            507,
            f"no space left on the disk ({exc.strerror or exc}); free space and retry",
            problem_type=kind,
            request_id=request_id,
        )
    if status == 500:
        return problem(
            500,
            "internal error; the request id names it in the logs",
            problem_type=kind,
            request_id=request_id,
        )
    assert isinstance(exc, CaseshelfError)
    return problem(status, exc.detail, problem_type=kind, fields=exc.fields)


def headers_of(exc: BaseException) -> dict[str, str]:
    """The headers an error's answer carries besides its body: `Retry-After` when the error
    says when to try again (storage that stayed unavailable through its retries)."""
    if isinstance(exc, BackendUnavailable):
        return {"Retry-After": str(exc.retry_after)}
    return {}


def dumps(body: Mapping[str, Any]) -> str:
    return orjson.dumps(body, default=str).decode()


def response(body: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> Response:
    # Powertools' event handler (~45 ms) stays off this module's import: the HTTP client maps
    # answers to errors through it (`caseshelf.client.transport`) without a resolver.
    from aws_lambda_powertools.event_handler import Response  # lazy: ~45 ms, as said above

    return Response(
        status_code=int(body["status"]),
        content_type=PROBLEM_JSON,
        body=dumps(body),
        headers=dict(headers or {}),
    )


# -- request validation (pydantic, through the resolver) -------------------------------------


def malformed_json(doc: Any, pos: int, msg: str) -> BadRequest:
    """400 naming where the JSON breaks: character offset, line and column."""
    text = doc.decode("utf-8", "replace") if isinstance(doc, bytes | bytearray) else doc
    if not isinstance(text, str):
        return BadRequest(f"malformed JSON: {msg}", position=pos, field="body")
    pos = max(0, min(pos, len(text)))
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    rest = text[pos : pos + 9].lstrip("-")
    if rest.startswith(("NaN", "Infinity")):
        msg = "NaN and Infinity are not JSON numbers"
    return BadRequest(
        f"malformed JSON at line {line} column {column} (character {pos}): {msg}",
        position=pos,
        line=line,
        column=column,
        field="body",
    )


def _where(loc: Sequence[Any]) -> tuple[str, str]:
    """(source, field path) of a resolver validation error location."""
    if not loc:
        return "request", ""
    source = str(loc[0])
    return source, ".".join(str(p) for p in loc[1:])


# The API's own patterns (a query's ref and cursor), said in words.
API_PATTERN_RULES = {**PATTERN_RULES, REF_PATTERN: REF_RULE, CURSOR_PATTERN: CURSOR_RULE}


def _message(err: Mapping[str, Any]) -> str:
    return error_message(err, API_PATTERN_RULES)


def request_validation_error(
    errors: Sequence[Mapping[str, Any]],
    *,
    doc: Any = None,
    body_model: type[BaseModel] | None = None,
    raw_body: Callable[[], Any] | None = None,
) -> BadRequest:
    """Turn the resolver's validation errors into one BadRequest that names the field.

    For a body whose model has its own error builder (the dataset body), the raw body is
    validated again by that model so the message names the case id, as the CLI's does."""
    if not errors:
        return BadRequest("invalid request")
    err = errors[0]
    loc = tuple(err.get("loc", ()))
    if err.get("type") == "json_invalid":
        pos = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else 0
        msg = str((err.get("ctx") or {}).get("error", err.get("msg", "")))
        return malformed_json(doc, pos, msg)
    source, path = _where(loc)
    if source == "body" and body_model is not None and raw_body is not None:
        rebuilt = _body_error(body_model, raw_body)
        if rebuilt is not None:
            return rebuilt
    msg = _message(err)
    if source == "body":
        if not path and err.get("type") == "missing":
            return BadRequest("a JSON request body is required", field="body")
        if not path and err.get("type") in {"model_attributes_type", "dict_type"}:
            return BadRequest("the request body must be a JSON object", field="body")
        return BadRequest(f"body: {path or 'body'}: {msg}", field=path or "body")
    label = {"query": "query parameter", "path": "path parameter", "header": "header"}.get(
        source, source
    )
    given = err.get("input")
    shown = f" {given!r}" if isinstance(given, str) and len(given) <= 200 else ""
    return BadRequest(f"{label} {path}{shown}: {msg}", field=path or source)


def _body_error(model: type[BaseModel], raw_body: Callable[[], Any]) -> BadRequest | None:
    try:
        raw = raw_body()
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    try:
        model.model_validate(raw)
    except ValidationError as exc:
        build = BODY_ERRORS.get(model)
        if build is not None:
            return build(exc, raw)
        loc, msg = validation_problem(exc)
        return BadRequest(f"body: {loc}: {msg}", field=loc)
    return None


# -- wiring into a resolver ------------------------------------------------------------------


def _route_body_model(app: APIGatewayRestResolver) -> type[BaseModel] | None:
    """The pydantic model of the current route's body, if it has one."""
    route = app.context.get("_route")
    try:
        params = route.dependant.body_params if route is not None else []
    except AttributeError:
        return None
    if len(params) != 1:
        return None
    annotation = getattr(params[0], "type_", None)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _request_id(app: APIGatewayRestResolver) -> str | None:
    try:
        ctx = app.current_event.raw_event.get("requestContext") or {}
    except AttributeError:
        return None
    rid = ctx.get("requestId")
    return rid if isinstance(rid, str) else None


def register_error_handlers(
    app: APIGatewayRestResolver, *, on_error: Callable[[int], None] | None = None
) -> None:
    """Route every exception the resolver sees through this module."""
    from aws_lambda_powertools.event_handler.exceptions import (  # lazy: ~45 ms, see `response`
        NotFoundError,
        ServiceError,
    )
    from aws_lambda_powertools.event_handler.openapi.exceptions import (  # lazy: see `response`
        RequestUnsupportedContentType,
        RequestValidationError,
    )

    def note(status: int) -> None:
        if on_error is not None:
            on_error(status)

    @app.exception_handler(CaseshelfError)
    def _domain(exc: CaseshelfError) -> Response:
        body = problem_of(exc)
        note(body["status"])
        return response(body, headers_of(exc))

    @app.exception_handler(RequestValidationError)
    def _validation(exc: RequestValidationError) -> Response:
        err = request_validation_error(
            list(exc.errors()),
            doc=exc.body,
            body_model=_route_body_model(app),
            raw_body=lambda: app.current_event.json_body,
        )
        note(400)
        return response(problem_of(err))

    @app.exception_handler(RequestUnsupportedContentType)
    def _content_type(exc: RequestUnsupportedContentType) -> Response:
        note(415)
        return response(
            problem(415, "send the request body as application/json", field="content-type")
        )

    @app.exception_handler(NotFoundError)
    def _no_route(exc: NotFoundError) -> Response:
        ev = app.current_event
        return response(
            problem(404, f"no route {ev.http_method} {ev.path}", problem_type="no-route")
        )

    @app.exception_handler(ServiceError)
    def _service(exc: ServiceError) -> Response:
        note(exc.status_code)
        return response(problem(exc.status_code, str(exc.msg)))

    @app.exception_handler(Exception)
    def _internal(exc: Exception) -> Response:
        if RAISE_UNEXPECTED.get():
            raise exc
        rid = _request_id(app)
        body = problem_of(exc, request_id=rid)
        if body["status"] == 500:
            log.exception("unhandled error (request %s)", rid)
        else:
            log.warning("request %s: %s", rid, body["detail"])
        note(body["status"])
        return response(body)


__all__ = [
    "PROBLEM_JSON",
    "STATUS",
    "headers_of",
    "malformed_json",
    "problem",
    "problem_of",
    "register_error_handlers",
    "request_validation_error",
    "response",
    "status_of",
]
