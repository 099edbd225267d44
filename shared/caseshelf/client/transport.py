"""How a client request reaches the API: over HTTP (`Http`, on httpx), or in this process
(`InProcess`, the same function handlers the local server calls, fed the same API Gateway event).

A transport sends a `Request` and answers an `Answer`; an error answer (problem+json) is turned
back into the API's typed error here, in one place, the same way for both (`problem_error`).
"""

from __future__ import annotations

import io
import logging
import random
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

import orjson

from caseshelf.domain.answers import EVENT_BODY_LIMIT, escaped_size
from caseshelf.domain.errors import BadRequest, CaseshelfError, NotFound, Upstream
from caseshelf.domain.identity import Identity
from caseshelf.storehome import placed

if TYPE_CHECKING:
    import httpx

    from caseshelf.bootstrap import Services, Settings

IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
# The largest request body sent as it is over HTTP, in bytes as it sits escaped in the Lambda
# event (`caseshelf.domain.answers`): the server's own limit. A larger registration goes
# through `POST /uploads`.
HTTP_BODY_LIMIT = EVENT_BODY_LIMIT
_PROBLEM_KEYS = {"type", "title", "status", "detail"}
log = logging.getLogger(__name__)
# No body cap in process: the cap is the size an HTTP request or a Lambda answer may be.
UNCAPPED = 1 << 62
# The embedded store's presigned URLs, in process: served by `InProcess` itself (as
# `caseshelf serve` serves them over HTTP), so a download streams from the stored document and
# an upload lands in the store without a socket. `.invalid` never resolves (RFC 6761).
IN_PROCESS_URL = "http://in-process.caseshelf.invalid"


@dataclass(frozen=True)
class Request:
    """One API call: `segments` are the path's segments, unquoted (each is quoted when sent)."""

    method: str
    segments: tuple[str, ...]
    query: Mapping[str, Any] = field(default_factory=dict)
    body: Any = None

    @property
    def path(self) -> str:
        return "/" + "/".join(urllib.parse.quote(s, safe="") for s in self.segments)

    def query_string(self) -> str:
        """`None` and `False` are left out (every flag of the API defaults to false)."""
        pairs = {
            k: ("true" if v is True else str(v))
            for k, v in self.query.items()
            if v is not None and v is not False
        }
        return urllib.parse.urlencode(pairs)

    def body_bytes(self) -> bytes:
        return b"" if self.body is None else orjson.dumps(self.body)

    @property
    def idempotent(self) -> bool:
        return self.method in IDEMPOTENT


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        if not self.body:
            return None
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError:
            raise Upstream(f"the API answered HTTP {self.status} with non-JSON") from None

    def header(self, name: str) -> str | None:
        low = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == low), None)


class Transport(Protocol):
    def send(self, request: Request) -> Answer:
        """The success answer of `request`; an error answer raises its typed error."""

    def close(self) -> None: ...


class ApiError(CaseshelfError):
    """An API answer that is an error and has no better-matching domain error class."""

    def __init__(self, detail: str, *, status: int, **fields: Any) -> None:
        super().__init__(detail, **fields)
        self.status = status


def problem_error(status: int, body: bytes, reason: str = "") -> CaseshelfError:
    """The typed error an error answer stands for: the class from the API's own status mapping
    (read backwards), problem+json's `detail` as the message and its other members (case ids,
    row, field, digests...) as the error's fields."""
    doc: Any = None
    try:
        doc = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("detail"), str):
        detail = doc["detail"]
        fields = {k: v for k, v in doc.items() if k not in _PROBLEM_KEYS}
    elif isinstance(doc, dict) and isinstance(doc.get("message"), str):
        detail, fields = doc["message"], {}  # API Gateway's own answers (e.g. the authorizer)
    else:
        text = body.decode("utf-8", "replace").strip()[:300] if body else ""
        detail, fields = f"HTTP {status} {reason}".strip() + (f": {text}" if text else ""), {}
    from caseshelf.api.errors import STATUS  # lazy: api.errors ~45 ms (api.dto)

    cls = next((c for c, (code, _) in STATUS.items() if code == status), None)
    if cls is not None:
        return cls(detail, **fields)
    return ApiError(detail, status=status, **fields)


def job_error(job_id: str, error: Any) -> CaseshelfError:
    """The typed error a failed job stands for: the class its `code` names (the same class the
    route would have answered), with the job's detail and fields; else `Upstream`."""
    from caseshelf.api.errors import STATUS  # lazy: api.errors ~45 ms (api.dto)

    doc = error if isinstance(error, dict) else {}
    detail = doc.get("detail") if isinstance(doc.get("detail"), str) else None
    fields = {k: v for k, v in doc.items() if k not in {"title", "code", "detail", "status"}}
    cls = next((c for c in STATUS if c.__name__ == doc.get("code")), None)
    if cls is not None and detail is not None:
        return cls(detail, job_id=job_id, **fields)
    return Upstream(f"job {job_id} failed: {detail or 'no detail'}", job_id=job_id, **fields)


def check_url(url: str, what: str = "api") -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BadRequest(f"not an http(s) URL: {url!r}", field=what)
    return url


# -- HTTP ---------------------------------------------------------------------------------------


class Http:
    """The API over HTTP: one pooled httpx client, timeouts, and retries with exponential
    backoff and jitter on connection errors, 429 and 5xx, for idempotent calls only (a POST that
    may have been applied is never sent twice). `Retry-After` is honoured up to `max_backoff`.

    The bearer token goes in `Authorization` and is never shown (`repr`), and never follows a
    redirect (redirects are not followed at all). The dev identity headers
    (`X-Caseshelf-Tenant/Principal/Roles`) go only when asked for; only the local server reads
    them."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        tenant: str | None = None,
        principal: str | None = None,
        roles: tuple[str, ...] | None = None,
        timeout: float = 120.0,
        connect_timeout: float = 10.0,
        retries: int = 4,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
        transport: httpx.BaseTransport | None = None,
        max_body_bytes: int = HTTP_BODY_LIMIT,
    ) -> None:
        self.base_url = check_url(base_url).rstrip("/")
        # Bodies above this go through an upload instead (`Client.register`); lowered to the
        # server's own limit when a 413 names it.
        self.max_body_bytes = max_body_bytes
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._timeout = (timeout, connect_timeout)
        self._token = token
        self._transport = transport
        headers = {"Accept": "application/json", "User-Agent": "caseshelf-client"}
        if tenant:
            headers["X-Caseshelf-Tenant"] = tenant
        if principal:
            headers["X-Caseshelf-Principal"] = principal
        if roles is not None:
            headers["X-Caseshelf-Roles"] = ",".join(roles)
        self._headers = headers

    def __repr__(self) -> str:  # never the token
        return f"Http({self.base_url!r})"

    def fits(self, data: bytes) -> bool:
        """Whether a request body of `data` is within `max_body_bytes` as API Gateway puts it
        into the Lambda event: escaped (`caseshelf.domain.answers.escaped_size`), never
        smaller than the body itself."""
        return len(data) <= self.max_body_bytes and escaped_size(data) <= self.max_body_bytes

    @cached_property
    def _client(self) -> httpx.Client:
        import httpx  # lazy: httpx ~80 ms

        read, connect = self._timeout
        return httpx.Client(
            headers=self._headers,
            timeout=httpx.Timeout(read, connect=connect),
            follow_redirects=False,
            transport=self._transport,
        )

    def url(self, request: Request) -> str:
        qs = request.query_string()
        return f"{self.base_url}{request.path}" + (f"?{qs}" if qs else "")

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def send(self, request: Request) -> Answer:
        headers = self._auth()
        data = None
        if request.body is not None:
            data = request.body_bytes()
            headers["Content-Type"] = "application/json"
        resp = self._with_retries(
            request.idempotent,
            lambda: self._client.request(
                request.method, self.url(request), content=data, headers=headers
            ),
        )
        if resp.status_code >= 400:
            raise problem_error(resp.status_code, resp.content, resp.reason_phrase)
        return Answer(resp.status_code, dict(resp.headers), resp.content)

    def _with_retries(self, idempotent: bool, call: Any) -> httpx.Response:
        import httpx  # lazy: httpx ~80 ms

        attempt = 0
        while True:
            try:
                resp: httpx.Response = call()
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                # Nothing reached the server: safe to send again, whatever the method.
                if attempt >= self.retries:
                    raise Upstream(f"cannot reach the API at {self.base_url}: {exc}") from None
            except httpx.TimeoutException:
                if not idempotent or attempt >= self.retries:
                    raise Upstream(f"the API at {self.base_url} did not answer in time") from None
            except httpx.TransportError as exc:
                if not idempotent or attempt >= self.retries:
                    raise Upstream(f"the API at {self.base_url} failed: {exc}") from None
            else:
                retryable = resp.status_code == 429 or resp.status_code >= 500
                if not retryable or not idempotent or attempt >= self.retries:
                    return resp
                resp.close()
                wait = _retry_after(resp.headers.get("retry-after"))
                if wait is not None:
                    time.sleep(min(wait, self.max_backoff))
                    attempt += 1
                    continue
            time.sleep(self._delay(attempt))
            attempt += 1

    def _delay(self, attempt: int) -> float:
        """Exponential backoff with full jitter."""
        return random.uniform(0, min(self.max_backoff, self.backoff * (2**attempt)))

    @property
    def read_timeout(self) -> float:
        """Seconds a read may wait (a download's too: `caseshelf.client.urlget`)."""
        return self._timeout[0]

    def close(self) -> None:
        if "_client" in self.__dict__:
            self._client.close()


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def put_url(
    url: str,
    data: bytes | Any,
    *,
    size: int | None = None,
    timeout: float = 600,
    progress: Callable[[int], None] | None = None,
) -> None:
    """PUT `data` (bytes, or a binary file object of `size` bytes) to a presigned URL (no
    credentials of ours go with it), sent 1 MiB at a time; `progress(n)` is told each piece's
    size as it goes."""
    import httpx  # lazy: httpx ~80 ms, the HTTP transport only (an embedded client never loads it)

    check_url(url, "upload_url")
    if isinstance(data, bytes | bytearray):
        size = len(data)
        pieces: Iterator[bytes] = _slices(bytes(data))
    else:
        pieces = _chunks(data)
    headers = {"Content-Length": str(size)} if size is not None else None
    content = pieces if progress is None else _counted(pieces, progress)
    try:
        resp = httpx.put(url, content=content, headers=headers, timeout=timeout)
    except httpx.TransportError as exc:
        raise Upstream(f"the upload failed: {exc}") from None
    if resp.status_code >= 400:
        raise Upstream(f"the upload was refused: HTTP {resp.status_code} {resp.reason_phrase}")


def _chunks(fh: Any, size: int = 1 << 20) -> Iterator[bytes]:
    while chunk := fh.read(size):
        yield chunk


def _slices(data: bytes, size: int = 1 << 20) -> Iterator[bytes]:
    view = memoryview(data)
    for start in range(0, len(data), size):
        yield bytes(view[start : start + size])


def _counted(pieces: Iterator[bytes], progress: Callable[[int], None]) -> Iterator[bytes]:
    for piece in pieces:
        yield piece
        progress(len(piece))


# -- in process ---------------------------------------------------------------------------------


class InProcess:
    """The API in this process, on the embedded store (or any store the settings name): each
    request becomes the API Gateway event the local server builds (`caseshelf.gateway`) and goes
    to the same function's handler, so the answers are the local API's by construction.

    The services are this transport's own (`bootstrap.scoped` around each call), never the
    process-wide ones. Nothing caps the size of a body or of an answer: the cap belongs to HTTP.
    Calls take turns (the resolver keeps the current event on the function's module, as Lambda
    runs one event at a time). What a handler prints (its metrics) is the function's log on
    Lambda and is dropped here, so stdout stays the caller's. An error that is not one of the
    API's is raised here as it is (`RAISE_UNEXPECTED`), where a Lambda would answer a 500 that
    names only the request."""

    _lock = threading.Lock()

    def __init__(self, settings: Settings, *, services: Services | None = None) -> None:
        local = settings.backend == "local"
        self.settings = settings.model_copy(
            update={
                "public_url": IN_PROCESS_URL if local else None,
                "presign_local_downloads": local,
                "max_body_bytes": UNCAPPED,
            }
        )
        self._given = services

    def __repr__(self) -> str:
        local = self.settings.backend == "local"
        where = self.settings.store_home.path if local else self.settings.bucket
        return f"InProcess({str(where)!r})"

    @cached_property
    def services(self) -> Services:
        from caseshelf import bootstrap  # lazy: bootstrap ~35 ms, the embedded transport only

        if self._given is not None:
            return self._given
        return bootstrap.build(self.settings)

    @cached_property
    def identity(self) -> Identity:
        s = self.settings
        return Identity(s.tenant, s.principal, frozenset(s.roles))

    @cached_property
    def _routes(self) -> tuple[Any, ...]:
        from caseshelf.gateway import routes_of  # lazy: gateway (powertools) ~10 ms

        return routes_of()

    def send(self, request: Request) -> Answer:
        from caseshelf import bootstrap  # lazy: bootstrap ~35 ms, the embedded transport only
        from caseshelf.gateway import (  # lazy: gateway (powertools) ~10 ms, embedded only
            FakeLambdaContext,
            build_event,
            handler_for,
            match,
        )

        raw_path = request.path
        route, params, allowed = match(list(self._routes), request.method, raw_path)
        if route is None:
            if allowed:
                raise BadRequest(
                    f"{request.method} is not allowed on {raw_path}; allowed: "
                    f"{', '.join(sorted(allowed))}"
                )
            raise NotFound(f"no route {request.method} {raw_path}")
        s = self.settings
        request_id = str(uuid.uuid4())
        body = request.body_bytes()
        headers = [("Accept", "application/json")]
        if body:
            headers.append(("Content-Type", "application/json"))
        event = build_event(
            method=request.method,
            path=urllib.parse.unquote(raw_path),
            resource=route.path,
            path_params=params,
            query=request.query_string(),
            headers=headers,
            body=body,
            tenant=s.tenant,
            principal=s.principal,
            roles=",".join(s.roles),
            request_id=request_id,
        )
        context = FakeLambdaContext(
            function_name=route.function,
            memory_limit_in_mb=route.memory_mb,
            aws_request_id=request_id,
            log_group_name=f"/aws/lambda/{route.function}",
        )
        handler = handler_for(route)
        services = self.services
        from caseshelf.api.errors import RAISE_UNEXPECTED  # lazy: api.errors ~45 ms

        started = time.perf_counter()
        with self._lock, bootstrap.scoped(services), redirect_stdout(_DISCARD):
            token = RAISE_UNEXPECTED.set(True)
            try:
                result = handler(event, context)
            finally:
                RAISE_UNEXPECTED.reset(token)
        from caseshelf.gateway import read_result  # lazy: gateway (powertools) ~10 ms

        answer = read_result(result)
        log.debug(
            "%s %s: %d, answered by %s (%.1f ms)",
            request.method,
            raw_path,
            answer.status,
            route.function,
            (time.perf_counter() - started) * 1000,
        )
        if answer.status >= 400:
            raise self.placed(problem_error(answer.status, answer.body))
        return Answer(answer.status, dict(answer.headers), answer.body)

    def placed(self, error: CaseshelfError) -> CaseshelfError:
        """`error`, where it says an entry is not on the embedded store, with the store named
        (`caseshelf.storehome.placed`)."""
        if self.settings.backend != "local":
            return error
        return placed(error, self.settings.store_home)

    def serves(self, url: str) -> bool:
        """Whether `url` is one of this store's own presigned URLs (`IN_PROCESS_URL`)."""
        return url.startswith(IN_PROCESS_URL + "/")

    def open_url(self, url: str) -> tuple[BinaryIO, int]:
        """A download URL of this store, opened (the file and its size): the token is checked
        as the local server checks it (`LocalBlobStore.open_download`). The caller closes it."""
        from caseshelf.adapters.localfs import DOWNLOAD_PATH  # lazy: localfs ~9 ms

        token = self._token(url, DOWNLOAD_PATH)
        _, fh, size = self.services.store.open_download(token)  # type: ignore[attr-defined]
        return fh, size

    def put_url(self, url: str, fh: BinaryIO, size: int) -> None:
        """An upload URL of this store: the object written as the local server writes it
        (`LocalBlobStore.receive_upload`), then its object-created event delivered to the
        functions subscribed to the key, in this thread."""
        from caseshelf import bootstrap  # lazy: bootstrap ~35 ms, the embedded transport only
        from caseshelf.adapters.localfs import UPLOAD_PATH  # lazy: localfs ~9 ms
        from caseshelf.gateway import (  # lazy: gateway (powertools) ~10 ms
            FakeLambdaContext,
            handler_for,
            load_object_rules,
            object_created_event,
        )

        token = self._token(url, UPLOAD_PATH)
        key, md5 = self.services.store.receive_upload(token, fh, size)  # type: ignore[attr-defined]
        event = object_created_event(key, md5, size)
        for rule in load_object_rules():
            if not rule.matches(key):
                continue
            context = FakeLambdaContext(
                function_name=rule.function,
                memory_limit_in_mb=rule.memory_mb,
                aws_request_id=str(uuid.uuid4()),
                log_group_name=f"/aws/lambda/{rule.function}",
            )
            with self._lock, bootstrap.scoped(self.services), redirect_stdout(_DISCARD):
                handler_for(rule)(event, context)

    def run_queued(self, limit: int | None = None) -> int:
        """Deliver what this store's functions queued (an export job's parts) to the function
        consuming each queue, in this thread, as SQS would deliver them (again after a failure,
        then to the dead-letter queue); at most `limit` deliveries. The count delivered."""
        from caseshelf import bootstrap  # lazy: bootstrap ~35 ms, the embedded transport only
        from caseshelf.gateway import (  # lazy: gateway (powertools) ~10 ms
            WORKER_TIMEOUT_MS,
            FakeLambdaContext,
            deliver_queued,
            handler_for,
        )

        services = self.services

        def call(rule: Any, event: dict[str, Any]) -> None:
            context = FakeLambdaContext(
                function_name=rule.function,
                memory_limit_in_mb=rule.memory_mb,
                log_group_name=f"/aws/lambda/{rule.function}",
                timeout_ms=WORKER_TIMEOUT_MS,
            )
            with self._lock, bootstrap.scoped(services), redirect_stdout(_DISCARD):
                handler_for(rule)(event, context)

        return deliver_queued(services.local_queues, call, limit=limit)

    @staticmethod
    def _token(url: str, path: str) -> str:
        prefix = IN_PROCESS_URL + path
        if not url.startswith(prefix):
            raise BadRequest(f"not a URL of this store: {url[: len(prefix) + 8]}...", field="url")
        return url[len(prefix) :]

    def close(self) -> None:
        return None


class _Discard(io.TextIOBase):
    """A text sink (what a function prints goes to its log on Lambda; in process, nowhere)."""

    def write(self, text: str) -> int:
        return len(text)


_DISCARD = _Discard()
