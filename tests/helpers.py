"""Helpers the integration and end-to-end tests share: sample events, Lambda contexts and handler
calls; the local dev server and HTTP calls to it; the `caseshelf` command (in process, or as a
subprocess); and small archives."""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import chdir, contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote_plus

from caseshelf import bootstrap
from caseshelf.api.openapi import load_function
from caseshelf.bootstrap import load_settings
from caseshelf.devserver import DevServer, make_server
from tests.serving import server_thread

REPO_ROOT = Path(__file__).resolve().parents[1]
EVENTS = REPO_ROOT / "tests" / "events"
ETAG = "0123456789abcdef0123456789abcdef"

# -- Lambda handlers ---------------------------------------------------------------------------


def sample_event(name: str) -> dict[str, Any]:
    """A fresh copy of the API Gateway (or S3) event sample `tests/events/<name>`."""
    data: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return copy.deepcopy(data)


def lambda_context(function_name: str = "caseshelf-test", memory_mb: int = 1024) -> Any:
    """What the Lambda runtime hands a handler besides the event."""
    return SimpleNamespace(
        function_name=function_name,
        function_version="$LATEST",
        memory_limit_in_mb=memory_mb,
        invoked_function_arn=f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}",
        aws_request_id=str(uuid.uuid4()),
        log_group_name=f"/aws/lambda/{function_name}",
        log_stream_name="test",
        get_remaining_time_in_millis=lambda: 29_000,
    )


def call_function(name: str, ev: dict[str, Any]) -> tuple[int, Any]:
    """The function `caseshelf.functions.<name>` fed `ev`: (status, decoded JSON body). An
    answer that is not an API Gateway response (the importer's S3 worker) comes back as
    (0, the answer)."""
    handler = load_function(f"caseshelf.functions.{name}").lambda_handler
    out = handler(ev, lambda_context(f"caseshelf-{name}", 2048))
    if "statusCode" not in out:
        return 0, out
    return out["statusCode"], json.loads(out["body"]) if out.get("body") else None


def run_queued(services: Any = None) -> int:
    """Deliver what the functions queued in process (an export job's parts) to the handlers of
    the functions consuming each queue, as SQS would (again after a failure, then to the
    dead-letter queue); the count of deliveries."""
    from caseshelf.gateway import deliver_queued

    svc = services or bootstrap.services()

    def call(rule: Any, event: dict[str, Any]) -> None:
        handler = load_function(rule.module).lambda_handler
        handler(event, lambda_context(rule.function, rule.memory_mb))

    return deliver_queued(svc.local_queues, call)


def export_and_follow(ev: dict[str, Any]) -> tuple[int, Any]:
    """The export route fed `ev`; when it starts a job (202), the job's parts delivered and the
    job read back (`GET /jobs/{id}`): (201, its result) once it succeeded, (202, the job)
    otherwise. Any other answer as it is."""
    status, body = call_function("export", ev)
    if status != 202:
        return status, body
    assert body["url"] == f"/jobs/{body['id']}" and body["kind"] == "export"
    run_queued()
    tenant = ev["requestContext"]["authorizer"]["claims"]["custom:tenant"]
    got, job = importer_api("GET", body["url"], tenant=tenant)
    assert got == 200, job
    if job["state"] != "succeeded":
        return 202, job
    progress = job["progress"]
    assert progress["parts_done"] == progress["parts_total"]
    assert progress["cases_written"] == progress["cases_total"]
    return 201, job["result"]


def s3_event(key: str, etag: str = ETAG) -> dict[str, Any]:
    """The S3 `ObjectCreated` sample naming `key` (URL-encoded, as S3 sends it)."""
    ev = sample_event("s3_object_created.json")
    ev["Records"][0]["s3"]["object"]["key"] = quote_plus(key, safe="/")
    ev["Records"][0]["s3"]["object"]["eTag"] = etag
    return ev


def importer_api(
    method: str,
    path: str,
    body: Any = None,
    *,
    tenant: str = "acme",
    roles: str = "",
    query: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """An importer route called through API Gateway's event (Cognito claims for the caller)."""
    ev = sample_event("importer_import_post.json")
    ev.update(httpMethod=method, path=path, resource=path)
    ev["requestContext"].update(httpMethod=method, resourcePath=path, path=f"/prod{path}")
    claims = ev["requestContext"]["authorizer"]["claims"]
    claims.update({"custom:tenant": tenant, "custom:roles": roles})
    ev["body"] = None if body is None else json.dumps(body)
    ev["queryStringParameters"] = query
    ev["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()} if query else None
    return call_function("importer", ev)


def tar_gz(root: Path, arcname: str, *, compresslevel: int = 9) -> bytes:
    """`root` packed as a .tar.gz under `arcname` (`compresslevel` 0 for random bytes, which
    deflate only spends time on)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=compresslevel) as tar:
        tar.add(root, arcname=arcname)
    return buf.getvalue()


# -- the local dev server ----------------------------------------------------------------------


def forged(token: str) -> str:
    """A signed token `<payload>.<mac>` with its mac's first character changed: a signature
    that differs for certain. (A change at the end may not: the last base64 characters of a mac
    can already be the ones written over it.)"""
    payload, _, mac = token.partition(".")
    return f"{payload}.{'B' if mac[0] == 'A' else 'A'}{mac[1:]}"


@contextmanager
def dev_server(home: Path, *, quiet: bool = True, **settings: Any) -> Iterator[DevServer]:
    """`caseshelf serve` on a free local port over the embedded store at `home` (tenant acme,
    principal alice unless `settings` say otherwise)."""
    settings = {"tenant": "acme", "principal": "alice", **settings}
    srv = make_server(load_settings({}, home=str(home), **settings), "127.0.0.1", 0, quiet=quiet)
    thread = server_thread(srv)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)
        bootstrap.use(None)


def http_call(
    url: str,
    method: str = "GET",
    body: Any = None,
    *,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 60,
) -> SimpleNamespace:
    """One HTTP request (a JSON `body`, or `raw` bytes): status, headers, body and the decoded
    JSON answer (None when it is not JSON). Error statuses are answers, not exceptions."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, hdrs, payload = resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as exc:
        status, hdrs, payload = exc.code, exc.headers, exc.read()
    parsed = json.loads(payload) if "json" in hdrs.get("Content-Type", "") and payload else None
    return SimpleNamespace(status=status, headers=hdrs, body=payload, json=parsed)


# -- the command line --------------------------------------------------------------------------


def run_cli(
    home: Path,
    *args: Any,
    cwd: Path = REPO_ROOT,
    env: dict[str, str] | None = None,
    timeout: float = 180,
    process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """The `caseshelf` command with ARGS, its own CASESHELF_HOME and no CASESHELF_* or
    AWS_ENDPOINT_URL of the caller's environment (`env` adds to it).

    In this process by default (`caseshelf.cli.run`, the function the console script calls,
    with the environment, working directory and standard streams swapped for the call): the
    command's parsing, output and exit code are the same, without a new interpreter's second
    of start-up per call. `process=True` runs `python -m caseshelf.cli` as a subprocess, for
    tests where the process itself matters (signals, its own memory, the console script)."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CASESHELF_") and k != "AWS_ENDPOINT_URL"
    }
    base["CASESHELF_HOME"] = str(home)
    environ = {**base, **(env or {})}
    argv = [str(a) for a in args]
    if not process:
        return _run_cli_here(argv, cwd=cwd, environ=environ)
    return subprocess.run(
        [sys.executable, "-m", "caseshelf.cli", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environ,
        timeout=timeout,
        check=False,
    )


_cli_lock = threading.Lock()


def _run_cli_here(
    argv: list[str], *, cwd: Path, environ: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """`caseshelf.cli.run(argv)` with `environ` as the whole environment, `cwd` as the working
    directory, an empty stdin and captured stdout/stderr; all restored afterwards."""
    from caseshelf.cli import run

    return run_main_here(run, argv, cwd=cwd, environ=environ, name="caseshelf")


def run_main_here(
    main: Any, argv: list[str], *, cwd: Path, environ: dict[str, str], name: str
) -> subprocess.CompletedProcess[str]:
    """`main(argv)` (a command's entry point, answering its exit code or raising SystemExit)
    as `_run_cli_here` runs the CLI's: `environ` as the whole environment, `cwd` as the working
    directory, an empty stdin and captured stdout/stderr; all restored afterwards."""
    out, err = _text_stream(), _text_stream()
    saved_env = dict(os.environ)
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    with _cli_lock:
        os.environ.clear()
        os.environ.update(environ)
        here = threading.get_ident()
        sys.stdin = io.StringIO()
        sys.stdout = _ThreadStream(here, out, saved_streams[1])
        sys.stderr = _ThreadStream(here, err, saved_streams[2])
        try:
            with chdir(cwd):
                try:
                    code = main(argv)
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            sys.stdin, sys.stdout, sys.stderr = saved_streams
            os.environ.clear()
            os.environ.update(saved_env)
    return subprocess.CompletedProcess([name, *argv], code, _text(out), _text(err))


class _ThreadStream:
    """A standard stream for the length of an in-process command: the command's thread writes
    into its capture, every other thread (a dev server serving it from this process) where it
    wrote before."""

    def __init__(self, thread: int, mine: Any, others: Any) -> None:
        self._thread, self._mine, self._others = thread, mine, others

    def _target(self) -> Any:
        return self._mine if threading.get_ident() == self._thread else self._others

    def write(self, text: str) -> int:
        return int(self._target().write(text))

    def flush(self) -> None:
        self._target().flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)


def _text_stream() -> io.TextIOWrapper:
    """A text stream over bytes, like a process's stdout: it has `.buffer` for binary output."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="", write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    raw = stream.buffer
    assert isinstance(raw, io.BytesIO)
    return raw.getvalue().decode("utf-8", errors="replace")


def self_signed_cert(where: Path, name: str) -> tuple[Path, Path]:
    """A certificate for `name` (a DNS name, or an IP address) that no certificate store
    trusts, and its key, written as PEM files in `where`: (certificate, key)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    try:
        alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        alt = x509.DNSName(name)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([alt]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = where / "cert.pem", where / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path
