"""What the local server refuses before any function runs (`caseshelf.api.localguard`), over
real HTTP on loopback: a `Host` that names another server (DNS rebinding), a write from another
origin's page, a write that is not JSON, and an API call without the token of a server bound to
anything but loopback. Each rule both ways: what it lets through and what it refuses, and that
a refused write changed nothing in the store."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import caseshelf
from caseshelf import bootstrap
from caseshelf.bootstrap import load_settings
from caseshelf.devserver import DevServer, make_server, public_url, redact_tokens
from caseshelf.domain.errors import BadRequest
from tests.browser import free_port
from tests.helpers import REPO_ROOT, http_call, run_cli
from tests.serving import server_thread

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]

JSON = {"Content-Type": "application/json"}
ARITH = {
    "id": "arith",
    "version": "1.0.0",
    "cases": [{"id": "c1", "inputs": {"user": "6*7"}, "expectations": {"ground_truth": 42}}],
}
EVIL = {
    "id": "arith",
    "version": "1.1.0",
    "cases": [{"id": "c1", "inputs": {"user": "6*7"}, "expectations": {"ground_truth": 41}}],
}
# The writes a page could aim at (every POST/PUT/DELETE route of the template), on `arith`.
V = "/datasets/arith/versions/1.0.0"
WRITES = [
    ("POST", "/datasets", EVIL),
    ("POST", "/datasets/validate", EVIL),
    ("PUT", f"{V}/tags", {"tags": ["stable"]}),
    ("DELETE", V, None),
    ("POST", f"{V}/revive", None),
    ("POST", f"{V}/subset", {"ids": ["c1"], "register_as": {"id": "sub", "version": "1.0.0"}}),
    ("POST", f"{V}/exports", {"format": "jsonl"}),
    ("POST", "/uploads", {"filename": "rows.jsonl", "recipe": "gsm8k", "dataset": "x"}),
    ("POST", "/recipes", {"id": "r"}),
    ("POST", "/benchmarks/import", {"source": "hf://x/y"}),
    ("POST", "/bundles", {}),
]


@contextmanager
def guarded_server(
    home: Path,
    host: str = "127.0.0.1",
    *,
    allow_hosts: tuple[str, ...] = (),
    token: str | None = None,
    **settings: Any,
) -> Iterator[DevServer]:
    """`caseshelf serve` on a free port of `host` in this process (tenant acme)."""
    settings = {"tenant": "acme", "principal": "alice", **settings}
    srv = make_server(
        load_settings({}, home=str(home), **settings),
        host,
        0,
        quiet=True,
        allow_hosts=allow_hosts,
        token=token,
    )
    thread = server_thread(srv)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)
        bootstrap.use(None)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[DevServer]:
    with guarded_server(tmp_path / "home") as srv:
        assert srv.guard.token is None  # loopback: no token
        assert http_call(srv.url + "/datasets", "POST", ARITH).status == 201
        yield srv


def port_of(srv: DevServer) -> int:
    return int(srv.server_address[1])


def send(
    srv: DevServer,
    method: str,
    path: str,
    body: Any = None,
    *,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> SimpleNamespace:
    """A request to 127.0.0.1 (whatever the server is bound to), with exactly `headers`."""
    req_headers = dict(headers or {})
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    conn = socket.create_connection(("127.0.0.1", port_of(srv)), timeout=30)
    try:
        if "Host" not in req_headers:
            req_headers["Host"] = f"127.0.0.1:{port_of(srv)}"
        lines = [f"{method} {path} HTTP/1.1"]
        lines += [f"{k}: {v}" for k, v in req_headers.items() if v is not None]
        lines += [f"Content-Length: {len(data or b'')}", "Connection: close", "", ""]
        conn.sendall("\r\n".join(lines).encode("latin-1") + (data or b""))
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    finally:
        conn.close()
    head, _, payload = reply.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    hdrs = {}
    for line in header_lines:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    ctype = hdrs.get("content-type", "")
    parsed = json.loads(payload) if "json" in ctype and payload else None
    return SimpleNamespace(status=int(status_line.split()[1]), headers=hdrs, json=parsed)


def versions_of(srv: DevServer, dataset: str = "arith") -> list[dict[str, Any]]:
    got = http_call(f"{srv.url}/datasets/{dataset}/versions?include_deleted=true")
    return list(got.json["items"]) if got.status == 200 else []


def unchanged(srv: DevServer) -> None:
    """`arith` is still only 1.0.0, live, untagged, answering 42; nothing else registered."""
    items = versions_of(srv)
    assert [(v["version"], v.get("deleted_at"), v.get("version_tags") or []) for v in items] == [
        ("1.0.0", None, [])
    ], items
    cases = http_call(f"{srv.url}{V}/cases").json["items"]
    assert [c["expectations"]["ground_truth"] for c in cases] == [42]
    listed = http_call(f"{srv.url}/datasets").json["items"]
    assert [d["id"] for d in listed] == ["arith"]
    assert http_call(f"{srv.url}/recipes").json["items"] == []


# -- Host (DNS rebinding) -----------------------------------------------------------------------


def test_a_host_naming_this_server_is_served(server: DevServer) -> None:
    p = port_of(server)
    for host in (
        f"127.0.0.1:{p}",
        f"localhost:{p}",
        f"LocalHost:{p}",
        f"[::1]:{p}",
        "localhost",
        f"ui.localhost:{p}",
        "127.0.0.1:9000",  # a tunnel (ssh -L 9000:localhost:8000) changes the port
    ):
        got = send(server, "GET", "/datasets", headers={"Host": host})
        assert got.status == 200, (host, got.json)
        assert [d["id"] for d in got.json["items"]] == ["arith"]


def test_a_rebound_host_is_421_for_reads_writes_and_pages(server: DevServer) -> None:
    p = port_of(server)
    evil = {"Host": f"rebind.evil.example:{p}"}
    admin = {**evil, "X-Caseshelf-Tenant": "acme", "X-Caseshelf-Roles": "admin", **JSON}
    for method, path, body, headers in (
        ("GET", "/datasets", None, evil),
        ("GET", "/", None, {**evil, "Accept": "text/html"}),
        ("GET", "/openapi.json", None, evil),
        ("POST", "/datasets", EVIL, admin),
        ("DELETE", V, None, admin),
        ("OPTIONS", "/datasets", None, {**evil, "Access-Control-Request-Method": "POST"}),
    ):
        got = send(server, method, path, body, headers=headers)
        assert got.status == 421, (method, path, got.json)
        assert got.json["type"].endswith("host-not-allowed")
        assert "rebind.evil.example" in got.json["detail"]
        assert "--allow-host" in got.json["detail"]
    for bad in ("127.0.0.1.evil.example", "localhost.", "a b", "x@127.0.0.1", "127.0.0.1:x"):
        assert send(server, "GET", "/datasets", headers={"Host": bad}).status == 421, bad
    unchanged(server)


def test_a_request_without_a_host_is_421(server: DevServer) -> None:
    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=30) as conn:
        conn.sendall(b"GET /datasets HTTP/1.0\r\n\r\n")
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 421 ") and b"no Host header" in reply


def test_allow_host_adds_names(tmp_path: Path) -> None:
    with guarded_server(tmp_path / "home", allow_hosts=("devbox.example", "Box2:8000")) as srv:
        p = port_of(srv)
        for host in (f"devbox.example:{p}", "devbox.example", "box2:8000", f"localhost:{p}"):
            assert send(srv, "GET", "/datasets", headers={"Host": host}).status == 200, host
        for host in ("devbox.example.evil", "evil.example", "10.0.0.7"):
            assert send(srv, "GET", "/datasets", headers={"Host": host}).status == 421, host
    with (
        pytest.raises(BadRequest, match="allow-host"),
        guarded_server(tmp_path / "home2", allow_hosts=("http://x/y",)),
    ):
        pass


# -- writes from other origins ----------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_a_write_from_another_origin_is_403_and_changes_nothing(
    server: DevServer, method: str, path: str, body: Any
) -> None:
    other = f"http://127.0.0.1:{free_port()}"
    for headers in (
        {"Origin": other, "Sec-Fetch-Site": "same-site", **JSON},
        {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site", **JSON},
        {"Origin": "null", **JSON},
        {"Sec-Fetch-Site": "cross-site", **JSON},
        {"Sec-Fetch-Site": "same-site", **JSON},
        # the form posts of the report: the origin is refused before the type is looked at
        {"Origin": other, "Content-Type": "application/x-www-form-urlencoded"},
        {"Origin": other, "Content-Type": "multipart/form-data; boundary=x"},
    ):
        got = send(server, method, path, body, headers=headers)
        assert got.status == 403, (headers, got.json)
        assert got.json["type"].endswith("cross-site"), got.json
    unchanged(server)


def test_a_write_from_the_servers_own_pages_and_from_clients_is_taken(server: DevServer) -> None:
    p = port_of(server)
    own = {"Origin": f"http://127.0.0.1:{p}", "Sec-Fetch-Site": "same-origin", **JSON}
    assert send(server, "PUT", f"{V}/tags", {"tags": ["a"]}, headers=own).status == 200
    tunnel = {"Host": "localhost:9000", "Origin": "http://localhost:9000", **JSON}
    assert send(server, "PUT", f"{V}/tags", {"tags": ["b"]}, headers=tunnel).status == 200
    typed = {"Sec-Fetch-Site": "none", **JSON}  # the user's own action (a bookmark, the bar)
    assert send(server, "PUT", f"{V}/tags", {"tags": ["c"]}, headers=typed).status == 200
    client = send(server, "PUT", f"{V}/tags", {"tags": []}, headers=JSON)  # no Origin at all
    assert client.status == 200
    # A read from another origin is answered (the browser keeps it from the page: no CORS)
    read = send(server, "GET", "/datasets", headers={"Origin": "http://evil.example"})
    assert read.status == 200 and "access-control-allow-origin" not in read.headers


def test_an_origin_named_in_cors_origins_may_write_and_preflight(tmp_path: Path) -> None:
    ui = "http://localhost:5173"
    with guarded_server(tmp_path / "home", cors_origins=(ui,)) as srv:
        headers = {"Origin": ui, "Sec-Fetch-Site": "same-site", **JSON}
        created = send(srv, "POST", "/datasets", ARITH, headers=headers)
        assert created.status == 201
        assert created.headers["access-control-allow-origin"] == ui
        pre = {"Origin": ui, "Access-Control-Request-Method": "DELETE"}
        ok = send(srv, "OPTIONS", V, headers=pre)
        assert ok.status == 204 and ok.headers["access-control-allow-origin"] == ui
        # Any other origin's preflight is refused, with no CORS headers
        for origin in ("http://evil.example", f"http://127.0.0.1:{free_port()}"):
            pre = {"Origin": origin, "Access-Control-Request-Method": "DELETE"}
            refused = send(srv, "OPTIONS", V, headers=pre)
            assert refused.status == 403, refused.json
            assert not any(k.startswith("access-control-") for k in refused.headers)


def test_a_preflight_from_another_origin_is_403(server: DevServer) -> None:
    for method in ("DELETE", "PUT", "POST"):
        pre = {
            "Origin": "http://evil.example",
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "content-type,x-caseshelf-roles",
        }
        got = send(server, "OPTIONS", f"{V}/tags" if method == "PUT" else V, headers=pre)
        assert got.status == 403 and got.json["type"].endswith("cross-site")
        assert not any(k.startswith("access-control-") for k in got.headers)


# -- writes that are not JSON -----------------------------------------------------------------


@pytest.mark.parametrize(
    "ctype",
    [
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=----x",
        "text/plain",
        "text/plain; charset=utf-8",
        "application/octet-stream",
        "application/jsonx",
        None,
    ],
)
def test_a_write_that_is_not_json_is_415_and_changes_nothing(
    server: DevServer, ctype: str | None
) -> None:
    for method, path, body in WRITES:
        if body is None and ctype is None:
            continue  # a bodiless write may name no type (below)
        got = send(server, method, path, body, headers={"Content-Type": ctype} if ctype else {})
        assert got.status == 415, (method, path, got.json)
        assert "Content-Type: application/json" in got.json["detail"]
        assert (ctype or "no Content-Type") in got.json["detail"]
    unchanged(server)


def test_a_json_write_is_taken_with_or_without_parameters(server: DevServer) -> None:
    for ctype in ("application/json", "application/json; charset=utf-8"):
        got = send(server, "PUT", f"{V}/tags", {"tags": ["x"]}, headers={"Content-Type": ctype})
        assert got.status == 200, (ctype, got.json)
    # A bodiless DELETE and revive may name no type, or JSON; never a form's
    for headers in ({}, JSON):
        assert send(server, "DELETE", V, headers=headers).status == 200
        assert send(server, "POST", f"{V}/revive", headers=headers).status == 200
    for ctype in ("application/x-www-form-urlencoded", "text/plain"):
        refused = send(server, "POST", f"{V}/revive", headers={"Content-Type": ctype})
        assert refused.status == 415
        assert send(server, "DELETE", V, headers={"Content-Type": ctype}).status == 415
    assert versions_of(server)[0]["deleted_at"] is None


def test_an_upload_takes_any_type_but_not_from_another_origin(server: DevServer) -> None:
    req = {"filename": "rows.jsonl", "recipe": "gsm8k", "dataset": "up"}
    up = send(server, "POST", "/uploads", req, headers=JSON).json
    path = "/_uploads/" + up["upload_url"].split("/_uploads/", 1)[1]
    rows = b'{"question": "1+1", "answer": "#### 2"}\n'
    foreign = {"Origin": "http://evil.example", "Content-Type": "text/plain"}
    refused = send(server, "PUT", path, raw=rows, headers=foreign)
    assert refused.status == 403
    assert bootstrap.services().store.head(up["key"]) is None
    assert send(server, "GET", f"/jobs/{up['job_id']}").json["state"] == "pending"
    taken = send(server, "PUT", path, raw=rows, headers={"Content-Type": "text/plain"})
    assert taken.status == 200
    server.wait_for_workers(60)
    job = send(server, "GET", f"/jobs/{up['job_id']}").json
    assert job["state"] == "succeeded", job
    assert [v["version"] for v in versions_of(server, "up")] == [job["result"]["version"]]


# -- the token of a server bound to anything but loopback -------------------------------------


def test_a_wildcard_bind_needs_the_generated_token(tmp_path: Path) -> None:
    with guarded_server(tmp_path / "home", "0.0.0.0") as srv:
        token = srv.guard.token
        assert token is not None and len(token) >= 32 and srv.guard.token_generated
        host = {"Host": f"127.0.0.1:{port_of(srv)}"}
        bearer = {**host, "Authorization": f"Bearer {token}"}
        # Without the token, or with another, every API call is 401 and names what to send
        for auth in (None, f"Bearer {token[:-1]}", token, f"Basic {token}", "Bearer"):
            got = send(srv, "GET", "/datasets", headers={**host, "Authorization": auth})  # type: ignore[dict-item]
            assert got.status == 401, auth
            assert got.headers["www-authenticate"].startswith("Bearer")
            assert "Authorization: Bearer" in got.json["detail"] and "?token=" in got.json["detail"]
        refused = send(srv, "POST", "/datasets", ARITH, headers={**host, **JSON})
        assert refused.status == 401
        # ... and the dev identity headers get nothing without it
        dev = {**host, "X-Caseshelf-Tenant": "globex", "X-Caseshelf-Roles": "admin"}
        assert send(srv, "GET", "/me", headers=dev).status == 401
        # With it, calls are served and the dev headers honoured
        assert send(srv, "POST", "/datasets", ARITH, headers={**bearer, **JSON}).status == 201
        listed = send(srv, "GET", "/datasets", headers=bearer)
        assert [d["id"] for d in listed.json["items"]] == ["arith"]
        me = send(srv, "GET", "/me", headers={**dev, **bearer}).json
        assert (me["tenant"], "admin" in me["roles"]) == ("globex", True)
        # The UI's files, the documents and Swagger need no token (no data in them)
        for path in ("/", "/config.json", "/openapi.json", "/swagger", "/static/app.js"):
            assert send(srv, "GET", path, headers={**host, "Accept": "text/html"}).status == 200
        # Any IP literal names a wildcard-bound server; a name must be allowed
        assert send(srv, "GET", "/datasets", headers={**bearer, "Host": "10.1.2.3"}).status == 200
        assert send(srv, "GET", "/datasets", headers={**bearer, "Host": "box.lan"}).status == 421


def test_a_given_token_is_required_on_loopback_too(tmp_path: Path) -> None:
    given = "a-token-of-my-own-0123456789"
    home = tmp_path / "home2"
    with guarded_server(tmp_path / "home", token=given) as srv:
        assert srv.guard.token == given and not srv.guard.token_generated
        assert srv.guard.start_lines(srv.url) == [
            "Every API call needs the token given with --token or $CASESHELF_SERVE_TOKEN."
        ]
        assert send(srv, "GET", "/datasets").status == 401
        auth = {"Authorization": f"Bearer {given}"}
        assert send(srv, "GET", "/datasets", headers=auth).status == 200
    with pytest.raises(BadRequest, match="at least 16"), guarded_server(home, token="short"):
        pass


def test_the_python_client_and_the_cli_send_the_token(tmp_path: Path) -> None:
    with guarded_server(tmp_path / "home", "0.0.0.0") as srv:
        url, token = public_url(srv), srv.guard.token
        assert url == f"http://127.0.0.1:{port_of(srv)}" and token
        cs = caseshelf.connect(url, token=token, env={})
        assert cs.register(ARITH).version == "1.0.0"
        cs.delete("arith@1.0.0")  # a bodiless write: the client says JSON
        cs.revive("arith@1.0.0")
        with pytest.raises(caseshelf.ApiError) as refused:
            caseshelf.connect(url, env={}).list_datasets()
        assert refused.value.status == 401
        env = {"CASESHELF_API": url, "CASESHELF_TOKEN": token}
        listed = run_cli(tmp_path / "cli", "ls", "--json", env=env)
        assert listed.returncode == 0, listed.stderr
        assert [d["id"] for d in json.loads(listed.stdout)["items"]] == ["arith"]
        no_token = run_cli(tmp_path / "cli", "ls", env={"CASESHELF_API": url})
        assert no_token.returncode == 1 and "needs its token" in no_token.stderr


def test_caseshelf_serve_prints_the_token_once_and_takes_allow_host(tmp_path: Path) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "caseshelf.cli", "serve", "--host", "0.0.0.0", "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASESHELF_")}
    env["CASESHELF_HOME"] = str(tmp_path / "home")
    proc = subprocess.Popen(
        [*cmd, "--allow-host", "devbox.example"],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(6)]
        token_lines = [ln for ln in lines if ln.startswith("Token")]
        assert len(token_lines) == 1, lines
        token = token_lines[0].rsplit(" ", 1)[1].strip()
        ui_line = next(ln for ln in lines if ln.startswith("Web UI with the token"))
        assert ui_line.strip().endswith(f"http://127.0.0.1:{port}/?token={token}")
        srv = SimpleNamespace(server_address=("127.0.0.1", port))
        auth = {"Authorization": f"Bearer {token}"}
        assert send(srv, "GET", "/datasets", headers=auth).status == 200  # type: ignore[arg-type]
        assert send(srv, "GET", "/datasets").status == 401  # type: ignore[arg-type]
        allowed = {**auth, "Host": f"devbox.example:{port}"}
        assert send(srv, "GET", "/datasets", headers=allowed).status == 200  # type: ignore[arg-type]
        rebound = {**auth, "Host": f"rebind.evil.example:{port}"}
        assert send(srv, "GET", "/datasets", headers=rebound).status == 421  # type: ignore[arg-type]
    finally:
        proc.terminate()
        proc.wait(30)
    assert token not in (proc.stdout.read() if proc.stdout else "")  # printed once only


def test_a_short_token_is_refused_by_serve_with_a_one_line_error(tmp_path: Path) -> None:
    env = {"CASESHELF_SERVE_TOKEN": "short"}
    got = run_cli(tmp_path / "home", "serve", "--port", "0", env=env, process=True, timeout=60)
    assert got.returncode == 1
    assert got.stderr.strip().startswith("error: the server token must be at least 16")


def test_the_request_log_never_shows_a_token() -> None:
    line = '"GET /datasets/x?token=s3cr3t-value&limit=2 HTTP/1.1" 200 -'
    assert redact_tokens(line) == '"GET /datasets/x?token=<token>&limit=2 HTTP/1.1" 200 -'
    assert redact_tokens('"GET /?token=abc HTTP/1.1"') == '"GET /?token=<token> HTTP/1.1"'
