"""The API Gateway in front of the functions, in process: the route table, the REST proxy event
a request becomes, the Lambda context, and the proxy answer read back.

The local server (`caseshelf.devserver`) and the in-process client transport
(`caseshelf.client.transport.InProcess`) both turn a request into a function call here, so the
embedded client and the local API answer the same thing by construction.

Routes come from the package's table (`caseshelf.functions.FUNCTIONS`), which a test holds
equal to `infra/template.yaml`'s events, so the in-process answers are what the deployed API
would give, with no source tree at hand. Importing this module does no I/O.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote_plus, unquote

import yaml

from caseshelf.functions import FUNCTIONS, Function

STAGE = "local"
WORKER_TIMEOUT_MS = 900_000  # the Timeout of the functions that work off events and queues
LOCAL_BUCKET = "local"
_PARAM = re.compile(r"\{([A-Za-z0-9_]+)(\+?)\}")

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


# -- routes from the package's table ---------------------------------------------------------


@dataclass(frozen=True)
class Route:
    method: str  # upper case, or ANY
    path: str  # the template's resource path, e.g. /datasets/{id}
    function: str  # the function's logical id
    module: str  # the module holding its handler, e.g. caseshelf.functions.registry
    handler_name: str = "lambda_handler"
    memory_mb: int = 1024
    regex: re.Pattern[str] = field(init=False, compare=False, repr=False)
    params: int = field(init=False, compare=False, repr=False)
    greedy: bool = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        parts: list[str] = []
        pos = 0
        for m in _PARAM.finditer(self.path):
            parts.append(re.escape(self.path[pos : m.start()]))
            parts.append(f"(?P<{m.group(1)}>.+)" if m.group(2) else f"(?P<{m.group(1)}>[^/]+)")
            pos = m.end()
        parts.append(re.escape(self.path[pos:]))
        object.__setattr__(self, "regex", re.compile("^" + "".join(parts) + "$"))
        object.__setattr__(self, "params", len(_PARAM.findall(self.path)))
        object.__setattr__(self, "greedy", "+}" in self.path)

    def specificity(self) -> tuple[int, int, int]:
        """API Gateway prefers literal segments over parameters, and parameters over greedy
        ones."""
        return (int(self.greedy), self.params, -len(self.path))


@dataclass(frozen=True)
class ObjectRule:
    """A function the template subscribes to S3 `Object Created` events (an `EventBridgeRule`
    with `source: aws.s3`), and the key patterns it matches (`wildcard`, `prefix`, exact)."""

    function: str
    module: str
    handler_name: str
    keys: tuple[re.Pattern[str], ...]
    memory_mb: int = 1024

    def matches(self, key: str) -> bool:
        return any(p.fullmatch(key) for p in self.keys)


@dataclass(frozen=True)
class ScheduleRule:
    """A function the template runs on a schedule (a `Schedule` event): the local server runs
    it at start and every `SWEEP_SECONDS`, with the event EventBridge would send."""

    function: str
    module: str
    handler_name: str
    memory_mb: int = 1024


@dataclass(frozen=True)
class QueueRule:
    """A function the template gives an SQS event source (batch size 1): the queue (logical
    id) whose messages it consumes."""

    function: str
    module: str
    handler_name: str
    queue: str
    memory_mb: int = 1024


def _key_pattern(spec: Any) -> re.Pattern[str] | None:
    if isinstance(spec, str):
        return re.compile(re.escape(spec))
    if isinstance(spec, dict) and isinstance(spec.get("wildcard"), str):
        return re.compile(".*".join(re.escape(p) for p in spec["wildcard"].split("*")))
    if isinstance(spec, dict) and isinstance(spec.get("prefix"), str):
        return re.compile(re.escape(spec["prefix"]) + ".*")
    return None


def _table(functions: Iterable[Function] | None) -> Iterable[Function]:
    return FUNCTIONS if functions is None else functions


def load_routes(functions: Iterable[Function] | None = None) -> list[Route]:
    """Every API route of every function (the package's table by default)."""
    return [
        Route(method, path, fn.name, fn.module, fn.handler, fn.memory_mb)
        for fn in _table(functions)
        for method, path in fn.routes
    ]


def load_object_rules(functions: Iterable[Function] | None = None) -> list[ObjectRule]:
    """Every function wired to S3 object-created events through EventBridge."""
    rules: list[ObjectRule] = []
    for fn in _table(functions):
        keys = tuple(p for p in map(_key_pattern, fn.object_keys) if p is not None)
        if keys:
            rules.append(ObjectRule(fn.name, fn.module, fn.handler, keys, fn.memory_mb))
    return rules


def load_schedule_rules(functions: Iterable[Function] | None = None) -> list[ScheduleRule]:
    """Every function a `Schedule` runs."""
    return [
        ScheduleRule(fn.name, fn.module, fn.handler, fn.memory_mb)
        for fn in _table(functions)
        if fn.scheduled
    ]


def load_queue_rules(functions: Iterable[Function] | None = None) -> list[QueueRule]:
    """Every function an SQS queue delivers to."""
    return [
        QueueRule(fn.name, fn.module, fn.handler, queue, fn.memory_mb)
        for fn in _table(functions)
        for queue in fn.queues
    ]


@cache
def routes_of() -> tuple[Route, ...]:
    """`load_routes()` of the package's table, built once per process."""
    return tuple(load_routes())


# -- the SAM template, read for the drift check and the deployment tooling --------------------


class _CfnLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """A safe loader that keeps CloudFormation's short tags (!Ref, !Sub, !GetAtt, ...) as plain
    `{tag: value}` mappings instead of failing on them."""


def _cfn_tag(loader: Any, suffix: str, node: Any) -> Any:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {suffix: value}


_CfnLoader.add_multi_constructor("!", _cfn_tag)


def load_template(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as fh:
        doc = yaml.load(fh, Loader=_CfnLoader)  # noqa: S506 - a SafeLoader subclass
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a template")
    return doc


@dataclass(frozen=True)
class TemplateFunction:
    """A serverless function as the template declares it: its code directory and handler
    (`app.lambda_handler`), and the table entry its events make (`module` is left empty: the
    template names files, not modules)."""

    code_dir: Path
    handler: str
    entry: Function


def _events_entry(name: str, memory: int, events: list[dict[str, Any]]) -> Function:
    routes: list[tuple[str, str]] = []
    keys: list[str | dict[str, str]] = []
    scheduled = False
    queues: list[str] = []
    for event in events:
        props = event.get("Properties") or {}
        if event.get("Type") == "SQS":
            arn = props.get("Queue")
            if isinstance(arn, dict) and isinstance(arn.get("GetAtt"), str):
                queues.append(arn["GetAtt"].split(".")[0])
        elif event.get("Type") == "Api":
            routes.append((str(props.get("Method", "")).upper(), str(props.get("Path", ""))))
        elif event.get("Type") == "Schedule":
            scheduled = True
        elif event.get("Type") == "EventBridgeRule":
            pattern = props.get("Pattern") or {}
            if "aws.s3" in (pattern.get("source") or []) and "Object Created" in (
                pattern.get("detail-type") or ["Object Created"]
            ):
                keys.extend(((pattern.get("detail") or {}).get("object") or {}).get("key") or [])
    return Function(name, "", memory, tuple(routes), tuple(keys), scheduled, tuple(queues))


def template_functions(template: Path) -> list[TemplateFunction]:
    """Every `AWS::Serverless::Function` of the template (properties left out fall back to
    the template's `Globals`)."""
    doc = load_template(template)
    glob = ((doc.get("Globals") or {}).get("Function")) or {}
    found: list[TemplateFunction] = []
    for name, res in (doc.get("Resources") or {}).items():
        if not isinstance(res, dict) or res.get("Type") != "AWS::Serverless::Function":
            continue
        props = res.get("Properties") or {}
        code_uri = props.get("CodeUri", glob.get("CodeUri"))
        handler = props.get("Handler", glob.get("Handler"))
        if not isinstance(code_uri, str) or not isinstance(handler, str):
            continue
        memory = props.get("MemorySize", glob.get("MemorySize", 1024))
        events = [e for e in (props.get("Events") or {}).values() if isinstance(e, dict)]
        entry = _events_entry(name, memory if isinstance(memory, int) else 1024, events)
        found.append(TemplateFunction((template.parent / code_uri).resolve(), handler, entry))
    return found


def scheduled_event(function: str) -> dict[str, Any]:
    """An EventBridge `Scheduled Event`, as a `Schedule` rule sends it."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "000000000000",
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": [f"arn:aws:events:us-east-1:000000000000:rule/{function}-local"],
        "detail": {},
    }


def queue_arn(queue: str) -> str:
    """A local queue's ARN: its logical id as its name."""
    return f"arn:aws:sqs:us-east-1:000000000000:{queue}"


def sqs_event(queue: str, body: str, receive_count: int) -> dict[str, Any]:
    """An SQS event of one message (batch size 1), as Lambda's event source mapping sends it."""
    now = str(int(time.time() * 1000))
    return {
        "Records": [
            {
                "messageId": str(uuid.uuid4()),
                "receiptHandle": uuid.uuid4().hex,
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": str(receive_count),
                    "SentTimestamp": now,
                    "SenderId": "000000000000",
                    "ApproximateFirstReceiveTimestamp": now,
                },
                "messageAttributes": {},
                "md5OfBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn(queue),
                "awsRegion": "us-east-1",
            }
        ]
    }


def deliver_queued(
    queues: Mapping[str, Any],
    call: Callable[[QueueRule, dict[str, Any]], Any],
    *,
    limit: int | None = None,
) -> int:
    """Deliver the messages of local queues (`caseshelf.adapters.queues.LocalQueue`), one
    message per event, to the function consuming each (`call(rule, event)`), until none is
    left (or `limit` deliveries): a delivery whose call raises is handed back to its queue,
    which delivers it again or dead-letters it. The count of deliveries."""
    rules = {r.queue: r for r in load_queue_rules()}
    done = 0
    for queue in queues.values():
        while limit is None or done < limit:
            delivery = queue.take()
            if delivery is None:
                break
            done += 1
            rule = rules.get(delivery.queue)
            if rule is None:
                continue  # no function consumes it (a dead-letter queue kept for inspection)
            try:
                call(rule, sqs_event(delivery.queue, delivery.body, delivery.receive_count))
            except Exception:  # the function failed: SQS would deliver the message again
                queue.failed(delivery)
    return done


def object_created_event(key: str, etag: str, size: int) -> dict[str, Any]:
    """An EventBridge `Object Created` event for one object, shaped as S3 sends it (the key
    URL-encoded, as the worker expects)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": "000000000000",
        "time": now,
        "region": "us-east-1",
        "resources": [f"arn:aws:s3:::{LOCAL_BUCKET}"],
        "detail": {
            "version": "0",
            "bucket": {"name": LOCAL_BUCKET},
            "object": {
                "key": quote_plus(key, safe="/"),
                "size": size,
                "etag": etag,
                "sequencer": f"{time.time_ns():020X}",
            },
            "request-id": str(uuid.uuid4()),
            "requester": "000000000000",
            "reason": "PutObject",
        },
    }


def match(
    routes: list[Route], method: str, path: str
) -> tuple[Route | None, dict[str, str], set[str]]:
    """(route, path parameters, methods allowed on that path). No route and an empty set: no
    such path; no route and a non-empty set: 405."""
    found: list[tuple[Route, dict[str, str]]] = []
    for route in routes:
        m = route.regex.match(path)
        if m is not None:
            found.append((route, {k: unquote(v) for k, v in m.groupdict().items()}))
    found.sort(key=lambda rp: rp[0].specificity())
    for route, params in found:
        if route.method in (method, "ANY"):
            return route, params, set()
    return None, {}, {r.method for r, _ in found}


# -- events and the Lambda context ------------------------------------------------------------


@dataclass
class FakeLambdaContext:
    function_name: str
    memory_limit_in_mb: int = 1024
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = "local"
    timeout_ms: int = 29_000
    started: float = field(default_factory=time.monotonic)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:000000000000:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self.timeout_ms - int((time.monotonic() - self.started) * 1000))


def build_event(
    *,
    method: str,
    path: str,
    resource: str,
    path_params: Mapping[str, str] | None,
    query: str,
    headers: list[tuple[str, str]],
    body: bytes,
    tenant: str,
    principal: str,
    roles: str,
    request_id: str,
    source_ip: str = "127.0.0.1",
) -> dict[str, Any]:
    """An API Gateway REST (v1) proxy event, as the deployed API would hand it to the
    function, with a Lambda-authorizer context carrying the identity."""
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for k, v in headers:
        single[k] = v
        multi.setdefault(k, []).append(v)
    qs = parse_qs(query, keep_blank_values=True)
    text: str | None
    encoded = False
    if not body:
        text = None
    else:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text, encoded = base64.b64encode(body).decode("ascii"), True
    return {
        "resource": resource,
        "path": path,
        "httpMethod": method,
        "headers": single or None,
        "multiValueHeaders": multi or None,
        "queryStringParameters": {k: v[-1] for k, v in qs.items()} or None,
        "multiValueQueryStringParameters": qs or None,
        "pathParameters": dict(path_params) if path_params else None,
        "stageVariables": None,
        "requestContext": {
            "resourcePath": resource,
            "httpMethod": method,
            "path": path,
            "stage": STAGE,
            "requestId": request_id,
            "requestTimeEpoch": int(time.time() * 1000),
            "protocol": "HTTP/1.1",
            "accountId": "000000000000",
            "apiId": "local",
            "identity": {"sourceIp": source_ip},
            "authorizer": {"tenant": tenant, "principalId": principal, "roles": roles},
        },
        "body": text,
        "isBase64Encoded": encoded,
    }


# -- calling a function and reading its answer ------------------------------------------------


def handler_for(route: Route | ObjectRule | ScheduleRule | QueueRule) -> Handler:
    """The `lambda_handler` of a route's function, its module imported once per process, as
    the Lambda runtime imports it."""
    fn = getattr(importlib.import_module(route.module), route.handler_name, None)
    if not callable(fn):
        raise LookupError(f"{route.module} has no {route.handler_name}")
    return fn


@dataclass(frozen=True)
class ProxyAnswer:
    """A function's REST proxy result as an HTTP answer: status, headers (in order, repeated
    ones kept) and the body bytes."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        low = name.lower()
        return next((v for k, v in self.headers if k.lower() == low), None)


def read_result(result: Mapping[str, Any]) -> ProxyAnswer:
    """The HTTP answer API Gateway makes of a proxy result (`multiValueHeaders` win over
    `headers`; a base64 body is decoded)."""
    status = int(result.get("statusCode") or 200)
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for k, values in (result.get("multiValueHeaders") or {}).items():
        for v in values if isinstance(values, list) else [values]:
            out.append((k, str(v)))
        seen.add(k.lower())
    for k, v in (result.get("headers") or {}).items():
        if k.lower() not in seen:
            out.append((k, str(v)))
    raw = result.get("body")
    if raw is None:
        data = b""
    elif result.get("isBase64Encoded"):
        data = base64.b64decode(raw)
    else:
        data = raw.encode("utf-8") if isinstance(raw, str) else bytes(raw)
    return ProxyAnswer(status, out, data)


__all__ = [
    "FakeLambdaContext",
    "ObjectRule",
    "ProxyAnswer",
    "Route",
    "build_event",
    "handler_for",
    "load_object_rules",
    "load_routes",
    "match",
    "object_created_event",
    "read_result",
    "routes_of",
    "template_functions",
]
