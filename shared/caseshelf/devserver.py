"""The local API: the same Lambda handlers, behind a small HTTP server.

Routes come from the package's table (`caseshelf.functions`, held equal to
`infra/template.yaml`'s events by a test), so the local server answers what the deployed API
would. Each request becomes an API
Gateway REST proxy event with an authorizer context and is handed to the function's
`lambda_handler`; its answer is written back as it is. The route table, the event and the
reading of the answer are `caseshelf.gateway`'s, which the in-process client uses too.

Identity: the server's `--tenant`/`--principal` (settings), overridden per request by the
dev-only headers `X-Caseshelf-Tenant`, `X-Caseshelf-Principal` and `X-Caseshelf-Roles` (a comma
list). The deployed API never reads them: there the authorizer alone says who is calling.

`/openapi.json` is the merged document of every function, and `/swagger` shows it (Swagger UI
from the package, no network needed). `/` and the pages a browser opens are the web UI, served
by `caseshelf.ui`. CORS preflights are answered here, as API Gateway answers them
(`caseshelf.api.cors`).

Uploads (dev only, in no template and no OpenAPI document): the embedded store's upload URLs
are `PUT /_uploads/<token>` on this server (`LocalBlobStore.presign_put`). The store checks the
token (HMAC-signed, expiring, naming the tenant and key) and writes the body; then, as S3 would,
the server delivers an EventBridge `Object Created` event for the key to every function whose
S3 `EventBridgeRule` in the template matches it, in the background. Functions with a `Schedule`
event (the import jobs' sweep) run at start and every `SWEEP_SECONDS`.

Requests are served at once, each in its own thread, as concurrent Lambda invocations would be.

Downloads (dev only, likewise): the embedded store's presigned GET URLs are
`GET /_downloads/<token>` on this server (`LocalBlobStore.presign_get`): the store checks the
token (HMAC-signed, expiring, naming the tenant and key, made for GET) and the server streams
the object. The request log never shows a token.

Before any of that, `caseshelf.api.localguard` decides what a page of another site or a
rebound name may not do: a `Host` that does not name this server is 421, a write from another
origin 403, a write that is not JSON 415, and on a server bound to anything but loopback an API
call without the server's token 401 (`DevServer.guard`).
"""

from __future__ import annotations

import errno
import re
import sys
import threading
import uuid
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from caseshelf import bootstrap, ui
from caseshelf.api.cors import preflight_headers
from caseshelf.api.localguard import LocalGuard, Refusal
from caseshelf.bootstrap import Settings
from caseshelf.domain.answers import escaped_size
from caseshelf.domain.downloads import attachment
from caseshelf.domain.errors import CaseshelfError
from caseshelf.gateway import (
    LOCAL_BUCKET,
    STAGE,
    FakeLambdaContext,
    Handler,
    ObjectRule,
    QueueRule,
    Route,
    ScheduleRule,
    build_event,
    deliver_queued,
    handler_for,
    load_object_rules,
    load_routes,
    load_schedule_rules,
    match,
    object_created_event,
    read_result,
    scheduled_event,
)

DEV_TENANT = "x-caseshelf-tenant"
DEV_PRINCIPAL = "x-caseshelf-principal"
DEV_ROLES = "x-caseshelf-roles"
DEV_HEADERS = frozenset({DEV_TENANT, DEV_PRINCIPAL, DEV_ROLES})
SWAGGER_PATH = "/swagger"
OPENAPI_PATH = "/openapi.json"
SWAGGER_FUNCTION = "RegistryFunction"
DRAIN_LIMIT = 64 * 1024 * 1024  # an oversized body up to this is read and dropped, not kept
UPLOADS_PATH = "/_uploads/"
DOWNLOADS_PATH = "/_downloads/"
_TOKEN_IN_PATH = re.compile(r"(/_(?:uploads|downloads)/)[^\s?#\"]+")
_TOKEN_IN_QUERY = re.compile(r"([?&]token=)[^\s&#\"]+")  # the server token in a UI URL
_CONTENT_TYPES = (
    (".json", "application/json"),
    (".tar.gz", "application/gzip"),
    (".tgz", "application/gzip"),
    (".gz", "application/gzip"),
    (".zip", "application/zip"),
    (".jsonl", "application/x-ndjson"),
)
WORKER_TIMEOUT_MS = 900_000
SWEEP_SECONDS = 60.0  # how often the template's scheduled functions run locally


# -- the server -------------------------------------------------------------------------------


class DevServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # connections waiting to be accepted while all threads are busy

    def __init__(
        self,
        address: tuple[str, int],
        settings: Settings,
        routes: list[Route],
        *,
        quiet: bool = False,
        object_rules: list[ObjectRule] | None = None,
        schedule_rules: list[ScheduleRule] | None = None,
        sweep_seconds: float = SWEEP_SECONDS,
        guard: LocalGuard | None = None,
    ) -> None:
        self.settings = settings
        self.guard = guard or LocalGuard.for_server(address[0], cors_origins=settings.cors_origins)
        self.routes = routes
        self.quiet = quiet
        self.object_rules = list(object_rules or [])
        self.schedule_rules = list(schedule_rules or [])
        self.sweep_seconds = sweep_seconds
        self._stopping = threading.Event()
        self._workers: list[threading.Thread] = []
        self._workers_lock = threading.Lock()
        # Requests and object-created deliveries run at once, each in its own thread: the
        # resolvers keep the request per thread (`CaseshelfResolver`), the SQLite index has a
        # connection per thread, and the blob store writes by atomic rename. This lock only
        # guards building the merged OpenAPI document once.
        self.openapi_lock = threading.Lock()
        self._openapi: bytes | None = None
        super().__init__(address, _RequestHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Serve, with the template's scheduled functions run once before the first request
        (the jobs' sweep: a job whose worker died with the last server is resumed by the next
        one) and then every `sweep_seconds` in the background. The first sweep runs alone, so
        no request builds the store's services or imports a function alongside it."""
        self.run_schedules()
        sweeper = threading.Thread(target=self._sweep, name="schedules", daemon=True)
        sweeper.start()
        try:
            super().serve_forever(poll_interval)
        finally:
            self._stopping.set()
            sweeper.join(timeout=30)

    def _sweep(self) -> None:
        while not self._stopping.wait(self.sweep_seconds):
            self.run_schedules()

    def run_schedules(self) -> None:
        """Run every scheduled function once, now (and wait for it), then deliver what they
        queued (the parts and jobs the sweeps sent again)."""
        for rule in self.schedule_rules:
            self._deliver(rule, scheduled_event(rule.function))
        self.deliver_queued()

    def handler_for(self, route: Route | ObjectRule | ScheduleRule | QueueRule) -> Handler:
        return handler_for(route)

    def swagger_route(self) -> Route | None:
        owner = next((r for r in self.routes if r.function == SWAGGER_FUNCTION), None)
        owner = owner or (self.routes[0] if self.routes else None)
        if owner is None:
            return None
        return Route(
            method="GET",
            path=SWAGGER_PATH,
            function=owner.function,
            module=owner.module,
            handler_name=owner.handler_name,
            memory_mb=owner.memory_mb,
        )

    def object_created(self, key: str, etag: str, size: int) -> None:
        """Deliver an object-created event to every function subscribed to the key, in the
        background (S3 answers the PUT first; the worker runs after)."""
        event = object_created_event(key, etag, size)
        for rule in self.object_rules:
            if rule.matches(key):
                worker = threading.Thread(
                    target=self._deliver, args=(rule, event), name=f"s3-event-{rule.function}"
                )
                worker.start()
                with self._workers_lock:
                    self._workers = [w for w in self._workers if w.is_alive()] + [worker]

    def _deliver(self, rule: ObjectRule | ScheduleRule, event: dict[str, Any]) -> None:
        request_id = str(uuid.uuid4())
        context = FakeLambdaContext(
            function_name=rule.function,
            memory_limit_in_mb=rule.memory_mb,
            aws_request_id=request_id,
            log_group_name=f"/aws/lambda/{rule.function}",
            timeout_ms=WORKER_TIMEOUT_MS,
        )
        try:
            handler = self.handler_for(rule)
            handler(event, context)
        except Exception as exc:  # a worker's failure is the function's log, as on AWS
            print(f"caseshelf serve: {rule.function} failed on an event: {exc!r}", file=sys.stderr)

    def deliver_queued(self) -> None:
        """Deliver what the functions queued (an export job's parts), in the background, to the
        function consuming each queue, as SQS would (again after a failure, then to the
        dead-letter queue). Deliveries run side by side, as Lambda runs a queue's messages."""
        queues = bootstrap.services().local_queues
        if not any(len(q) for q in queues.values()):
            return
        worker = threading.Thread(target=self._drain, args=(queues,), name="sqs-deliveries")
        worker.start()
        with self._workers_lock:
            self._workers = [w for w in self._workers if w.is_alive()] + [worker]

    def _drain(self, queues: Mapping[str, Any]) -> None:
        def call(rule: QueueRule, event: dict[str, Any]) -> None:
            context = FakeLambdaContext(
                function_name=rule.function,
                memory_limit_in_mb=rule.memory_mb,
                log_group_name=f"/aws/lambda/{rule.function}",
                timeout_ms=WORKER_TIMEOUT_MS,
            )
            try:
                self.handler_for(rule)(event, context)
            except Exception as exc:  # the function's log on AWS; the queue delivers it again
                print(
                    f"caseshelf serve: {rule.function} failed on a message: {exc!r}",
                    file=sys.stderr,
                )
                raise

        deliver_queued(queues, call)

    def wait_for_workers(self, timeout: float | None = None) -> None:
        """Wait for the object-created deliveries under way (tests, shutdown)."""
        with self._workers_lock:
            workers = list(self._workers)
        for worker in workers:
            worker.join(timeout)

    def server_close(self) -> None:
        self.wait_for_workers()
        super().server_close()

    def openapi_document(self) -> bytes:
        if self._openapi is None:
            from caseshelf.api.openapi import merged_schema  # lazy: ~180 ms, /openapi.json only

            with self.openapi_lock:
                if self._openapi is None:
                    self._openapi = merged_schema().encode("utf-8")
        return self._openapi


class _RequestHandler(BaseHTTPRequestHandler):
    server: DevServer
    protocol_version = "HTTP/1.1"
    server_version = "caseshelf-dev"

    def log_message(self, format: str, *args: Any) -> None:
        if not self.server.quiet:
            # An upload or download URL's token is a credential: the log shows its place only.
            shown = tuple(redact_tokens(a) if isinstance(a, str) else a for a in args)
            super().log_message(format, *shown)

    # -- plumbing ----------------------------------------------------------------------------

    def _send(
        self,
        status: int,
        body: bytes,
        headers: list[tuple[str, str]] | None = None,
        *,
        close: bool = False,
    ) -> None:
        self.send_response(status)
        sent = set()
        for k, v in headers or []:
            if k.lower() in {"content-length", "connection", "transfer-encoding"}:
                continue
            self.send_header(k, v)
            sent.add(k.lower())
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _problem(
        self,
        status: int,
        detail: str,
        *,
        headers: list[tuple[str, str]] | None = None,
        close: bool = False,
        **fields: Any,
    ) -> None:
        from caseshelf.api.errors import PROBLEM_JSON, dumps, problem  # lazy: ~100 ms off start-up

        body = dumps(problem(status, detail, **fields)).encode("utf-8")
        self._send(status, body, [("Content-Type", PROBLEM_JSON), *(headers or [])], close=close)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors the HTTP layer itself answers (a malformed request line or header, a method
        this server has no handler for) as problem+json, like every other error, and close."""
        command = getattr(self, "command", None) or ""
        if code == HTTPStatus.NOT_IMPLEMENTED and command:
            self._method_not_allowed(command)
            return
        detail = message or self.responses.get(code, ("", "error"))[1]
        self.log_error("code %d, message %s", code, message)
        try:
            self._problem(code, detail, close=True)
        except OSError:  # the client is gone
            self.close_connection = True

    def _method_not_allowed(self, method: str) -> None:
        """405 for a method no route takes (TRACE, CONNECT, or one this server does not know)
        on a path that exists, naming the methods it does take; 404 on a path that does not."""
        path = urlsplit(self.path).path or "/"
        found = {r.method for r in self.server.routes if r.regex.match(path)}
        if not found:
            self._problem(404, f"no route {method} {unquote(path)}", problem_type="no-route")
            return
        if "ANY" in found:
            found = (found - {"ANY"}) | {"GET", "POST", "PUT", "DELETE", "PATCH"}
        listed = ", ".join(sorted(found))
        self._problem(
            405,
            f"{method} is not allowed on {unquote(path)}; allowed: {listed}",
            headers=[("Allow", listed)],
            allowed=sorted(found),
            close=True,
        )

    def _content_length(self) -> int | None:
        """The request's Content-Length (0 when absent), or None after answering 400 for one
        that is not a number, or 411 for a body sent without one (chunked)."""
        raw = self.headers.get_all("Content-Length") or []
        if self.headers.get("Transfer-Encoding"):
            self._problem(
                411,
                "a request body needs a Content-Length (chunked bodies are not taken)",
                close=True,
            )
            return None
        if not raw:
            return 0
        values = {v.strip() for v in raw}
        value = values.pop()
        if values or not value.isdigit() or not value.isascii() or len(value) > 18:
            self._problem(
                400,
                f"Content-Length {', '.join(raw)!r} is not one non-negative integer",
                field="Content-Length",
                close=True,
            )
            return None
        return int(value)

    def _read_body(self) -> bytes | None:
        """The request body, or None after answering 413 for one over the limit (the body is
        drained, not kept, so the client reads the answer instead of a reset connection), or
        400/411 for a Content-Length that cannot be read."""
        length = self._content_length()
        if length is None:
            return None
        limit = self.server.settings.max_body_bytes
        # The limit is on the body escaped inside a Lambda event (`api.app.event_body_size`),
        # never smaller than the body: one longer than the limit is refused unread.
        if length > limit:
            self._too_large(length, limit, unread=length)
            return None
        body = self.rfile.read(length) if length > 0 else b""
        if body:
            try:
                size = escaped_size(body)
            except UnicodeDecodeError:  # bytes: base64 in the event, as API Gateway sends them
                size = (len(body) + 2) // 3 * 4
            if size > limit:
                self._too_large(size, limit, unread=0)
                return None
        return body

    def _too_large(self, size: int, limit: int, *, unread: int) -> None:
        """Answer the 413 of a body over the limit. The `unread` rest of the body is drained
        first when small enough, so the client reads the answer instead of a reset
        connection; else the connection closes."""
        from caseshelf.api.app import too_large  # lazy: ~180 ms off serve's start-up

        drain = unread <= DRAIN_LIMIT
        left = unread if drain else 0
        while left > 0:
            chunk = self.rfile.read(min(left, 1 << 16))
            if not chunk:
                break
            left -= len(chunk)
        resp = too_large(size, limit)
        self._send(
            413,
            resp["body"].encode("utf-8"),
            [("Content-Type", resp["multiValueHeaders"]["Content-Type"][0])],
            close=not drain,
        )

    def _refuse_upload(
        self,
        status: int,
        detail: str,
        length: int,
        *,
        headers: list[tuple[str, str]] | None = None,
        **fields: Any,
    ) -> None:
        """Answer an upload that is not taken; its body is drained when small enough, so the
        client reads the answer instead of a reset connection, else the connection closes."""
        from caseshelf.api.errors import PROBLEM_JSON, dumps, problem  # lazy: ~100 ms off start-up

        drain = 0 <= length <= DRAIN_LIMIT
        left = length if drain else 0
        while left > 0:
            chunk = self.rfile.read(min(left, 1 << 16))
            if not chunk:
                break
            left -= len(chunk)
        body = dumps(problem(status, detail, **fields)).encode("utf-8")
        answer = [("Content-Type", PROBLEM_JSON), *(headers or [])]
        self._send(status, body, answer, close=not drain)

    def _refuse(self, refusal: Refusal) -> None:
        """Answer a request `DevServer.guard` refused (its body drained or the connection
        closed, as for a refused upload)."""
        raw = self.headers.get("Content-Length") or "0"
        length = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 18 else -1
        if self.headers.get("Transfer-Encoding"):
            length = -1
        self._refuse_upload(
            refusal.status,
            refusal.detail,
            length,
            headers=list(refusal.headers),
            problem_type=refusal.problem_type,
        )

    def _guarded(self, method: str, raw_path: str) -> Refusal | None:
        """What `DevServer.guard` refuses before the request goes anywhere: a `Host` that
        names another server, a write or preflight from another origin, a write that is not
        JSON (the upload `PUT /_uploads/<token>` excepted)."""
        guard = self.server.guard
        preflight = method == "OPTIONS" and bool(self.headers.get("Access-Control-Request-Method"))
        return (
            guard.check_host(self.headers.get("Host"))
            or guard.check_origin(method, self.headers, preflight=preflight)
            or guard.check_content_type(
                method,
                self.headers.get("Content-Type"),
                has_body=bool(self.headers.get("Transfer-Encoding"))
                or (self.headers.get("Content-Length") or "0").strip() != "0",
                upload=raw_path.startswith(UPLOADS_PATH),
            )
        )

    def _upload(self, token: str) -> None:
        """`PUT /_uploads/<token>`: the embedded store's stand-in for a presigned S3 PUT."""
        from caseshelf.api.errors import status_of  # lazy: ~100 ms off serve's start-up

        store = bootstrap.services().store
        receive = getattr(store, "receive_upload", None)
        check = getattr(store, "upload_key", None)
        raw_length = self.headers.get("Content-Length") or ""
        length = int(raw_length) if raw_length.isascii() and raw_length.isdigit() else -1
        if receive is None or check is None:
            self._refuse_upload(404, "this server's store takes no uploads", length)
            return
        if length < 0 or self.headers.get("Transfer-Encoding"):
            self._refuse_upload(411, "an upload needs a Content-Length", length)
            return
        limit = self.server.settings.max_upload_bytes
        if length > limit:
            self._refuse_upload(
                413,
                f"the upload is {length} bytes; the limit is {limit}",
                length,
                size=length,
                limit=limit,
            )
            return
        try:
            check(token)
        except CaseshelfError as exc:
            self._refuse_upload(status_of(exc)[0], exc.detail, length)
            return
        try:
            key, md5 = receive(token, self.rfile, length)
        except CaseshelfError as exc:
            self._refuse_upload(status_of(exc)[0], exc.detail, 0)
            return
        # The delivery is under way before the answer, so a client that waits for the workers
        # after its PUT never misses it; the worker itself runs in the background.
        self.server.object_created(key, md5, length)
        self._send(200, b"", [("ETag", f'"{md5}"')])

    def _download(self, token: str) -> None:
        """`GET /_downloads/<token>`: the embedded store's stand-in for a presigned S3 GET. The
        object is streamed as it is, named as the token says (`<dataset>-<version>.<ext>` for a
        version's or an export's download), else after its key."""
        from caseshelf.api.errors import status_of  # lazy: ~100 ms off serve's start-up

        if self._read_body() is None:
            return
        store = bootstrap.services().store
        opener = getattr(store, "open_download", None)
        if opener is None:
            self._problem(404, "this server's store serves no downloads")
            return
        try:
            _, fh, size = opener(token)
        except CaseshelfError as exc:
            status, _ = status_of(exc)
            self._problem(status, exc.detail)
            return
        with fh:
            name = store.download_filename(token)  # type: ignore[attr-defined]
            ctype = next(
                (t for suffix, t in _CONTENT_TYPES if name.lower().endswith(suffix)),
                "application/octet-stream",
            )
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(size))
            self.send_header("Content-Disposition", attachment(name))
            self.send_header("Cache-Control", "private, no-store")
            self.end_headers()
            if self.command == "HEAD":
                return
            left = size
            while left > 0:
                chunk = fh.read(min(left, 1 << 20))
                if not chunk:  # the object shrank under us: the client sees a short body
                    self.close_connection = True
                    break
                self.wfile.write(chunk)
                left -= len(chunk)

    def _dispatch(self) -> None:
        split = urlsplit(self.path)
        raw_path = split.path or "/"
        path = unquote(raw_path)
        method = self.command.upper()
        refusal = self._guarded(method, raw_path)
        if refusal is not None:
            self._refuse(refusal)
            return
        page = ui.answer(method, path, self.headers.get("Accept"))
        if page is not None:  # the web UI's files and pages (caseshelf.ui)
            self._send(page.status, page.body, page.headers)
            return
        if method in {"GET", "HEAD"} and path == OPENAPI_PATH:
            self._send(200, self.server.openapi_document(), [("Content-Type", "application/json")])
            return
        if method == "PUT" and raw_path.startswith(UPLOADS_PATH):
            self._upload(raw_path[len(UPLOADS_PATH) :])
            return
        if method in {"GET", "HEAD"} and raw_path.startswith(DOWNLOADS_PATH):
            self._download(raw_path[len(DOWNLOADS_PATH) :])
            return
        if method == "OPTIONS" and self.headers.get("Access-Control-Request-Method"):
            self._preflight(raw_path)
            return
        # Every API call from here on; the UI's files, the documents and the signed upload and
        # download URLs above need no token.
        refusal = self.server.guard.check_token(self.headers.get("Authorization"))
        if refusal is not None:
            self._refuse(refusal)
            return
        route: Route | None
        params: dict[str, str] = {}
        if method in {"GET", "HEAD"} and path == SWAGGER_PATH:
            route = self.server.swagger_route()
        else:
            route, params, allowed = match(self.server.routes, method, raw_path)
            if route is None:
                body = self._read_body()
                if body is None:
                    return
                if allowed:
                    self._problem(
                        405,
                        f"{method} is not allowed on {path}; allowed: {', '.join(sorted(allowed))}",
                        headers=[("Allow", ", ".join(sorted(allowed)))],
                        allowed=sorted(allowed),
                    )
                else:
                    self._problem(404, f"no route {method} {path}", problem_type="no-route")
                return
        if route is None:
            self._problem(404, f"no route {method} {path}", problem_type="no-route")
            return
        body = self._read_body()
        if body is None:
            return
        self._invoke(route, method, path, params, split.query, body)

    def _preflight(self, raw_path: str) -> None:
        """A CORS preflight, answered as API Gateway answers it (the template's `Cors`): no
        function runs and no identity is needed; 204 with the allowed methods and headers for
        an origin the settings name (`cors_origins`), without them for any other."""
        _, _, allowed = match(self.server.routes, "OPTIONS", raw_path)
        if not allowed:
            self._problem(404, f"no route at {unquote(raw_path)}", problem_type="no-route")
            return
        headers = preflight_headers(self.headers.get("Origin"), self.server.settings.cors_origins)
        self._send(204, b"", list(headers.items()))

    # Every method goes the same way; the routes say which are allowed where.
    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _dispatch

    def do_TRACE(self) -> None:
        """TRACE would echo the request (credentials included) back: never taken."""
        self._method_not_allowed("TRACE")

    do_CONNECT = do_TRACE

    def _invoke(
        self,
        route: Route,
        method: str,
        path: str,
        params: dict[str, str],
        query: str,
        body: bytes,
    ) -> None:
        settings = self.server.settings
        headers: list[tuple[str, str]] = []
        dev: dict[str, str] = {}
        # The dev headers are read only here, on a request that passed `guard.check_token`:
        # with the server's token, or on a loopback server that asks for none. The server's
        # token itself goes no further (no function and no log sees it).
        keep_auth = self.server.guard.token is None
        for k, v in self.headers.items():
            if k.lower() in DEV_HEADERS:
                dev[k.lower()] = v.strip()
            elif keep_auth or k.lower() != "authorization":
                headers.append((k, v))
        request_id = str(uuid.uuid4())
        event = build_event(
            method="GET" if method == "HEAD" else method,
            path=path,
            resource=route.path,
            path_params=params,
            query=query,
            headers=headers,
            body=body,
            tenant=dev.get(DEV_TENANT) or settings.tenant,
            principal=dev.get(DEV_PRINCIPAL) or settings.principal,
            roles=dev.get(DEV_ROLES, ",".join(settings.roles)),
            request_id=request_id,
            source_ip=str(self.client_address[0]),
        )
        context = FakeLambdaContext(
            function_name=route.function,
            memory_limit_in_mb=route.memory_mb,
            aws_request_id=request_id,
            log_group_name=f"/aws/lambda/{route.function}",
        )
        try:
            handler = self.server.handler_for(route)
            result = handler(event, context)
        except Exception as exc:  # the handler's own errors are already problem+json
            print(f"caseshelf serve: {route.function} failed: {exc!r}", file=sys.stderr)
            self._problem(
                502,
                f"function {route.function} failed; see the server log (request {request_id})",
                problem_type="function-error",
                request_id=request_id,
            )
            return
        self._write_result(result)
        self.server.deliver_queued()

    def _write_result(self, result: Mapping[str, Any]) -> None:
        answer = read_result(result)
        self._send(answer.status, answer.body, answer.headers)


def make_server(
    settings: Settings,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    quiet: bool = False,
    allow_hosts: Sequence[str] = (),
    token: str | None = None,
) -> DevServer:
    """A server bound to (host, port) (port 0 picks a free one) over the services that
    `settings` build; call `serve_forever()` on it (tests run it in a thread). `allow_hosts`
    are more names its `Host` may say; `token` is the bearer token every API call must carry
    (one is generated when `host` is not loopback and none is given: `server.guard.token`)."""
    guard = LocalGuard.for_server(
        host, allow_hosts=allow_hosts, token=token, cors_origins=settings.cors_origins
    )
    routes = load_routes()
    server = DevServer(
        (host, port),
        settings,
        routes,
        quiet=quiet,
        object_rules=load_object_rules(),
        schedule_rules=load_schedule_rules(),
        guard=guard,
    )
    # A server reads only the sources its callers may make it read (caseshelf.adapters.fence).
    settings = settings.model_copy(update={"fence_sources": True})
    server.settings = settings
    try:
        if settings.backend == "local" and settings.public_url is None:
            # The store's upload URLs point back at this server (CASESHELF_PUBLIC_URL wins).
            settings = settings.model_copy(update={"public_url": public_url(server)})
            server.settings = settings
        bootstrap.use(bootstrap.build(settings))
    except BaseException:
        server.server_close()
        raise
    return server


def redact_tokens(text: str) -> str:
    """`text` with the token of every upload or download path, and a `token=` query parameter
    (the server's token in a UI URL), replaced by `<token>`."""
    return _TOKEN_IN_QUERY.sub(r"\1<token>", _TOKEN_IN_PATH.sub(r"\1<token>", text))


def public_url(server: DevServer) -> str:
    """The server's URL as a client reaches it (a wildcard bind answers on loopback)."""
    host, port = server.server_address[:2]
    host = str(host)
    if host in {"0.0.0.0", "::", ""}:  # noqa: S104 - naming the wildcard, not binding it
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(
    settings: Settings,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    allow_hosts: Sequence[str] = (),
    token: str | None = None,
) -> None:
    """Serve the local API until interrupted."""
    try:
        server = make_server(settings, host, port, allow_hosts=allow_hosts, token=token)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise OSError(
            exc.errno,
            f"port {port} on {host} is already in use (another `caseshelf serve`?); "
            "pick another with --port",
        ) from None
    if settings.backend == "local":
        home = settings.store_home
        where = f"{home.path} ({home.found})"
    else:
        where = f"s3://{settings.bucket}"
    print(f"caseshelf API on {server.url}  (store: {where}, tenant: {settings.tenant})")
    print(f"Web UI: {server.url}/")
    print(f"Swagger UI: {server.url}{SWAGGER_PATH}   OpenAPI: {server.url}{OPENAPI_PATH}")
    for line in server.guard.start_lines(public_url(server)):
        print(line)
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


__all__ = [
    "LOCAL_BUCKET",
    "STAGE",
    "DevServer",
    "FakeLambdaContext",
    "Route",
    "build_event",
    "load_object_rules",
    "load_routes",
    "load_schedule_rules",
    "make_server",
    "match",
    "object_created_event",
    "serve",
]
