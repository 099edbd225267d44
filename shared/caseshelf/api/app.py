"""What every Lambda function's resolver shares: validation, error mapping, the body size guard,
the caller's identity, and Powertools' Logger, Metrics and Tracer.

Structured logs and metrics are for Lambda (`on_lambda`): there the Logger writes JSON documents
and the metrics CloudWatch EMF. Run in any other process (the CLI, the embedded client,
`caseshelf serve`), the same handlers log through the standard `caseshelf` logger, which the
application configures, and their metrics are dropped: a terminal shows human lines only.

Importing this module does no I/O and stays light (the registry function's cold start is
measured against importing only boto3, pydantic and the Powertools event handler). On Lambda
the Tracer is the X-Ray one; elsewhere (tests, the local server, or POWERTOOLS_TRACE_DISABLED)
there is none, so the X-Ray SDK is never imported (nor needed: it is the `aws` extra's).
"""

from __future__ import annotations

import base64
import binascii
import functools
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import orjson
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.shared.functions import resolve_truthy_env_var_choice

from caseshelf import bootstrap
from caseshelf.api.auth import identity_from_event
from caseshelf.api.cors import cors_headers, request_origin, with_cors
from caseshelf.api.dto import Problem
from caseshelf.api.errors import PROBLEM_JSON, dumps, problem, register_error_handlers
from caseshelf.domain.answers import escaped_size
from caseshelf.domain.identity import Identity
from caseshelf.domain.strictjson import loads_body

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME") or "caseshelf"
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "caseshelf"
API_VERSION = "1.0.0"
AUTHORIZER = "CognitoAuthorizer"
UPLOADS_ROUTE = "POST /uploads"


# -- tracing ---------------------------------------------------------------------------------


def tracing_enabled(env: Mapping[str, str] | None = None) -> bool:
    """True only on Lambda proper (not SAM local) and when POWERTOOLS_TRACE_DISABLED is not
    set."""
    env = os.environ if env is None else env
    if resolve_truthy_env_var_choice(env=env.get("POWERTOOLS_TRACE_DISABLED", "false")):
        return False
    on_lambda = bool(env.get("LAMBDA_TASK_ROOT") or env.get("AWS_LAMBDA_FUNCTION_NAME"))
    return on_lambda and not env.get("AWS_SAM_LOCAL")


def make_tracer() -> Tracer | None:
    """The X-Ray tracer on Lambda, tracing each invocation (its handler); elsewhere none (the
    X-Ray SDK is the `aws` extra's, and even a disabled Powertools Tracer imports it).

    No library is patched (`auto_patch=False`): the X-Ray SDK's wrapper of each botocore call
    keeps an AWS error it records in a local of its own frame, a reference cycle through every
    caller's frame and its locals, freed only by a full collection of the garbage collector.
    The registry meets such errors on every first read of a version (a missing kept answer is
    S3's NoSuchKey), so a warm function kept each version's search index and records alive
    until then (docs/decisions.md)."""
    return Tracer(service=SERVICE, auto_patch=False) if tracing_enabled() else None


def on_lambda(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a Lambda function (deployed, or SAM's local emulation): the
    runtime names the function in AWS_LAMBDA_FUNCTION_NAME."""
    env = os.environ if env is None else env
    return bool(env.get("AWS_LAMBDA_FUNCTION_NAME"))


def make_logger() -> Logger | logging.Logger:
    """On Lambda, Powertools' structured Logger: one JSON document per line, with the
    invocation's context. Elsewhere (the CLI, the embedded client, `caseshelf serve`) the
    standard `caseshelf` logger, which this module leaves as it is (no handler, no level): what
    its records look like is the application's choice (the CLI prints human lines,
    `caseshelf.cli.logs`). Powertools' Logger would add a JSON handler, set a level and filter
    the root handlers of whatever process imports the library."""
    if on_lambda():
        # stderr: both streams are the function's log there; stdout carries nothing else.
        return Logger(service=SERVICE, stream=sys.stderr)
    return logging.getLogger(SERVICE)


logger = make_logger()
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = make_tracer()


# Metrics are buffered per process and flushed after each invocation. On Lambda one invocation
# runs at a time; the local server runs several at once in threads, so adding and flushing take
# this lock (a flush iterating the buffer while another thread adds to it would fail).
_metrics_lock = threading.Lock()


def count(name: str, value: float = 1) -> None:
    with _metrics_lock:
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


class SweptJob(Protocol):
    """What a scheduled sweep did with one job (`services.jobs.Outcome`,
    `services.export_jobs.PartOutcome`)."""

    @property
    def job_id(self) -> str | None: ...

    @property
    def status(self) -> str: ...

    @property
    def reason(self) -> str: ...


def report_swept(
    outcomes: Sequence[SweptJob], *, message: str, metric: str, reason_key: str
) -> dict[str, Any]:
    """Log and count each job a sweep resumed or failed (metric `<metric><Status>`), and the
    function's answer listing them."""
    for o in outcomes:
        logger.info(message, extra={"job_id": o.job_id, "status": o.status, reason_key: o.reason})
        count(f"{metric}{o.status.capitalize()}")
    return {"swept": [{"job_id": o.job_id, "status": o.status} for o in outcomes]}


def _flushing_metrics(handler: Handler) -> Handler:
    """`metrics.log_metrics(handler)`, with the flush under `_metrics_lock`. On Lambda the
    metrics are printed as CloudWatch EMF documents, which the function's log turns into
    metrics; elsewhere nothing would read them, and they are dropped."""

    @functools.wraps(handler)
    def run(event: dict[str, Any], context: Any) -> dict[str, Any]:
        try:
            return handler(event, context)
        finally:
            with _metrics_lock:
                if on_lambda():
                    with warnings.catch_warnings():
                        # A request that changes nothing counts nothing: no warning for that.
                        warnings.filterwarnings(
                            "ignore", "No application metrics to publish", UserWarning
                        )
                        metrics.flush_metrics()
                else:
                    metrics.clear_metrics()

    return run


def _count_errors(status: int) -> None:
    count("ServerErrors" if status >= 500 else "ClientErrors")


# -- serialization ---------------------------------------------------------------------------


def serialize(obj: Any) -> str:
    return orjson.dumps(obj, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


# -- the resolver ----------------------------------------------------------------------------


def body_size(event: Mapping[str, Any]) -> int:
    """Bytes of the request body as the client sent it (decoded size for base64 bodies)."""
    body = event.get("body")
    if not body:
        return 0
    if isinstance(body, bytes | bytearray):
        return len(body)
    if event.get("isBase64Encoded"):
        return len(body) * 3 // 4
    return len(body) if body.isascii() else len(body.encode("utf-8"))


def event_body_size(event: Mapping[str, Any]) -> int:
    """Bytes the request body takes inside the Lambda event: API Gateway writes it there as a
    JSON string, escaped (`caseshelf.domain.answers.escaped_size`; a base64 body as it is)."""
    body = event.get("body")
    if not body:
        return 0
    return escaped_size(body)


def max_body_bytes() -> int:
    return bootstrap.services().settings.max_body_bytes


def allowed_origins() -> tuple[str, ...]:
    """The web origins whose pages may read answers (`caseshelf.api.cors`)."""
    return bootstrap.services().settings.cors_origins


def not_utf8(event: Mapping[str, Any]) -> dict[str, Any] | None:
    """The 400 for a body that is not UTF-8 (JSON text is UTF-8), before any parsing; None for
    one that is. API Gateway hands such a body over base64-encoded."""
    body = event.get("body")
    if not body or not event.get("isBase64Encoded"):
        return None
    try:
        base64.b64decode(body, validate=True).decode("utf-8")
    except (binascii.Error, ValueError) as exc:
        at = getattr(exc, "start", None)
        where = f" (byte {at})" if at is not None else ""
        detail = f"the request body is not UTF-8 text{where}; JSON bodies are UTF-8"
        return {
            "statusCode": 400,
            "multiValueHeaders": {"Content-Type": [PROBLEM_JSON]},
            "body": dumps(problem(400, detail, field="body")),
            "isBase64Encoded": False,
        }
    return None


def too_large(size: int, limit: int) -> dict[str, Any]:
    """The proxy response for a body over the limit, built before any parsing happens. `size`
    and `limit` are bytes of the body escaped inside a Lambda event (`event_body_size`)."""
    body = problem(
        413,
        f"the request body takes {size} bytes inside the Lambda event (escaped as API Gateway "
        f"writes it: a quote or backslash counts 2 bytes, a non-ASCII character 6 or 12); the "
        f"limit is {limit}. Send larger input through {UPLOADS_ROUTE} (a presigned upload, "
        "then an import job); the Python client and the CLI do so by themselves.",
        limit=limit,
        size=size,
        upload_route=UPLOADS_ROUTE,
    )
    return {
        "statusCode": 413,
        "multiValueHeaders": {"Content-Type": [PROBLEM_JSON]},
        "body": dumps(body),
        "isBase64Encoded": False,
    }


_NOT_JSON = ("application/x-www-form-urlencoded", "multipart/")


def as_json_body(event: Mapping[str, Any]) -> Mapping[str, Any]:
    """Every body this API takes is JSON. A client that sends JSON labelled as a form (curl's
    `-d` without `-H 'Content-Type: application/json'`) or as multipart would otherwise be
    parsed as form fields (or fail on a missing boundary) and be refused with a baffling
    'unknown key'; read such a body as the JSON it is."""
    headers = event.get("headers") or {}
    ctype = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
    if not event.get("body") or not ctype or not str(ctype).lower().startswith(_NOT_JSON):
        return event
    fixed = dict(event)
    fixed["headers"] = {
        k: ("application/json" if k.lower() == "content-type" else v) for k, v in headers.items()
    }
    multi = event.get("multiValueHeaders")
    if multi:
        fixed["multiValueHeaders"] = {
            k: (["application/json"] if k.lower() == "content-type" else v)
            for k, v in multi.items()
        }
    return fixed


class _RequestState(threading.local):
    """What Powertools keeps about the request being resolved, one copy per thread."""

    def __init__(self) -> None:
        self.event: Any = None
        self.lambda_context: Any = None
        self.context: dict[str, Any] = {}
        self.processed_stack_frames: list[str] = []


class CaseshelfResolver(APIGatewayRestResolver):
    """A REST API resolver that refuses oversized bodies before parsing them.

    The OpenAPI settings and the Swagger UI route are applied on first use, not at import:
    Powertools' OpenAPI models cost more to import than the rest of a handler module, and a
    function serves a request long before anyone asks it for its document (if ever).

    Powertools keeps the request being resolved (`current_event`, `lambda_context`, the routing
    `context`) on the router class and instance: one request at a time, as on Lambda. The local
    server resolves several at once in threads, so these are properties over per-thread state
    (the pattern of Powertools' own `HttpResolver`), and a route's middleware stack is built
    under a lock (`_call_route`); on Lambda nothing changes."""

    def __init__(self, **kwargs: Any) -> None:
        self._request = _RequestState()
        super().__init__(**kwargs)
        self._openapi_settings: dict[str, Any] | None = None
        self._swagger: tuple[str, dict[str, Any]] | None = None
        self._setup_lock = threading.RLock()

    @property
    def current_event(self) -> Any:
        return self._request.event

    @current_event.setter
    def current_event(self, value: Any) -> None:
        self._request.event = value

    @property
    def lambda_context(self) -> Any:
        return self._request.lambda_context

    @lambda_context.setter
    def lambda_context(self, value: Any) -> None:
        self._request.lambda_context = value

    @property
    def context(self) -> dict[str, Any]:
        return self._request.context

    @context.setter
    def context(self, value: dict[str, Any]) -> None:
        self._request.context = value

    @property
    def processed_stack_frames(self) -> list[str]:
        return self._request.processed_stack_frames

    @processed_stack_frames.setter
    def processed_stack_frames(self, value: list[str]) -> None:
        self._request.processed_stack_frames = value

    def resolve(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        result = self._resolve_checked(event, context)
        origin = request_origin(event)
        if origin is None:
            return result
        return with_cors(result, cors_headers(origin, allowed_origins()))

    def _resolve_checked(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        size = event_body_size(event)
        if size:
            limit = max_body_bytes()
            if size > limit:
                _count_errors(413)
                return too_large(size, limit)
        refused = not_utf8(event)
        if refused is not None:
            _count_errors(400)
            return refused
        if self._swagger is not None and str(event.get("path", "")).rstrip("/").endswith(
            self._swagger[0]
        ):
            with self._setup_lock:
                self._install_swagger()
        event = as_json_body(event)
        self._request.context = {}
        self._request.processed_stack_frames = []
        self.current_event = self._to_proxy_event(dict(event))
        self.lambda_context = context
        return super().resolve(event, context)

    def configure_openapi_later(self, **settings: Any) -> None:
        """`configure_openapi(**settings)`, deferred until the document is first built."""
        self._openapi_settings = settings

    def _apply_openapi_settings(self) -> None:
        if self._openapi_settings is not None:
            settings, self._openapi_settings = self._openapi_settings, None
            self.configure_openapi(**{k: v() if callable(v) else v for k, v in settings.items()})

    def enable_swagger(self, *, path: str = "/swagger", **kwargs: Any) -> None:
        """Serve Swagger UI (assets bundled, no network) at `path`; registered on first use."""
        self._swagger = (path.rstrip("/") or "/", kwargs)

    def _install_swagger(self) -> None:
        if self._swagger is not None:
            (path, kwargs), self._swagger = self._swagger, None
            self._apply_openapi_settings()
            super().enable_swagger(path=path, **kwargs)

    def _call_route(self, route: Any, route_arguments: dict[str, str]) -> Any:
        """Powertools builds a route's middleware stack on its first call, unguarded: two
        threads calling a route for the first time at once wrap the stack twice over, and the
        route answers 500 from then on. The local server builds it under the setup lock."""
        if not route._middleware_stack_built:
            with self._setup_lock:
                if not route._middleware_stack_built:
                    route._build_middleware_stack(
                        router_middlewares=self._router_middlewares, app=self
                    )
        return super()._call_route(route, route_arguments)

    def get_openapi_schema(self, *args: Any, **kwargs: Any) -> Any:
        with self._setup_lock:
            self._apply_openapi_settings()
        return tidy_openapi(super().get_openapi_schema(*args, **kwargs))


def _security_schemes() -> dict[str, Any]:
    # Powertools' OpenAPI models: ~65 ms of pydantic model building, for the document alone.
    from aws_lambda_powertools.event_handler.openapi import models  # lazy: ~65 ms, docs only

    return {
        AUTHORIZER: models.APIKey(
            name="Authorization",
            in_=models.APIKeyIn.header,
            description="A Cognito user-pool ID token; the tenant is its custom:tenant.",
        )
    }


def make_resolver(title: str, description: str | None = None) -> CaseshelfResolver:
    """A resolver with request validation, problem+json errors and the authorizer's security
    scheme declared in its OpenAPI document."""
    app = CaseshelfResolver(
        enable_validation=True,
        serializer=serialize,
        # Every value as written: a repeated key is refused, a long integer kept exactly.
        json_body_deserializer=loads_body,
        # Never Powertools' debug mode (POWERTOOLS_DEV): it prints whole events, tokens included.
        debug=False,
    )
    app.configure_openapi_later(
        title=title,
        version=API_VERSION,
        description=description,
        security_schemes=_security_schemes,
        security=[{AUTHORIZER: []}],
    )
    register_error_handlers(app, on_error=_count_errors)
    return app


Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


def instrumented(handler: Handler) -> Handler:
    """A function's `lambda_handler`, inside Powertools' logging context (cleared per call),
    tracing (responses never captured) and metrics flush: the same for every function."""
    wrapped: Handler = _flushing_metrics(handler)
    if tracer is not None:
        wrapped = tracer.capture_lambda_handler(capture_response=False)(wrapped)
    if isinstance(logger, Logger):
        wrapped = logger.inject_lambda_context(clear_state=True)(wrapped)
    return wrapped


def current_identity(app: APIGatewayRestResolver) -> Identity:
    """The caller of the request being handled, from the authorizer context only."""
    return identity_from_event(app.current_event.raw_event)


_METHODS = ("get", "put", "post", "delete", "patch", "options", "head", "trace")
_UNUSED = ("HTTPValidationError", "ValidationError", "ResponseValidationError")


def tidy_openapi(schema: Any) -> Any:
    """Drop the resolver's generic 422 answers: validation errors here are 400 problem+json,
    which every route declares itself."""
    for item in (schema.paths or {}).values():
        for method in _METHODS:
            op = getattr(item, method, None)
            if op is not None and op.responses:
                op.responses.pop(422, None)
    if schema.components is not None and schema.components.schemas:
        for name in _UNUSED:
            schema.components.schemas.pop(name, None)
    return schema


def problems(
    *statuses: int, ok: int | None = 200, description: str = "Success", store: bool = True
) -> dict[int, OpenAPIResponse]:
    """OpenAPI answers of a route: its success (`ok`, described by the return type) and the
    problem+json answers it can give. A route that reaches the registry's storage (`store`,
    all but a few) can also answer 503 with `Retry-After` (`BackendUnavailable`); a route that
    writes to it lists 507 (a full disk on the embedded store)."""
    descriptions = {
        400: "Invalid input; the body names the field (and case id, row) at fault.",
        403: "Not allowed (no tenant in the authorizer context, or not the creator).",
        404: "No such dataset or version for this tenant.",
        409: "The label is registered with other content; both digests are named.",
        413: f"Request body over the limit; use {UPLOADS_ROUTE}.",
        503: "The registry's storage (S3, DynamoDB) failed after its retries; nothing was "
        "changed half-way. Try again after `Retry-After` seconds.",
        507: "The embedded store's disk is full; the body names the store and the space "
        "needed. Free space (`caseshelf gc`, or on the disk) and try again.",
    }
    out: dict[int, OpenAPIResponse] = {}
    if ok is not None:
        out[ok] = {"description": description}
    for s in sorted({*statuses, 503} if store else set(statuses)):
        out[s] = {
            "description": descriptions.get(s, "Error"),
            "content": {PROBLEM_JSON: {"model": Problem}},
        }
        if s == 503:
            out[s]["headers"] = {
                "Retry-After": {
                    "description": "Seconds to wait before trying again.",
                    "schema": {"type": "integer"},
                }
            }
    return out
