"""The local API over real HTTP: routes from the template, events into the same handlers."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import caseshelf
from caseshelf.devserver import DevServer
from tests.helpers import dev_server, http_call

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[DevServer]:
    with dev_server(tmp_path / "home") as srv:
        yield srv


def call(
    srv: DevServer,
    method: str,
    path: str,
    body: Any = None,
    *,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> SimpleNamespace:
    if raw is not None:  # raw bytes are sent as JSON too (malformed or oversized bodies)
        headers = {"Content-Type": "application/json", **(headers or {})}
    return http_call(srv.url + path, method, body, raw=raw, headers=headers, timeout=30)


def dataset(n: int = 5, version: str = "1.0.0") -> dict[str, Any]:
    return {
        "id": "demo",
        "version": version,
        "cases": [{"id": f"c{i}", "inputs": {"user": f"q{i}"}} for i in range(n)],
    }


def test_register_list_get_and_page_cases_over_http(server: DevServer) -> None:
    # When a dataset is registered over HTTP
    created = call(server, "POST", "/datasets", dataset())
    assert created.status == 201, created.body
    assert call(server, "POST", "/datasets", dataset()).status == 200
    # Then it is listed, readable, and its cases page in order
    listed = call(server, "GET", "/datasets")
    assert [d["id"] for d in listed.json["items"]] == ["demo"]
    assert listed.json["items"][0]["owner"] == "acme"
    got = call(server, "GET", "/datasets/demo")
    assert got.json["latest"] == "1.0.0"
    version = call(server, "GET", "/datasets/demo/versions/latest")
    assert version.json["created_by"] == "alice"
    digest = created.json["content_digest"]
    assert call(server, "GET", f"/datasets/demo/versions/{digest}").json["version"] == "1.0.0"
    ids: list[str] = []
    cursor = ""
    while True:
        page = call(server, "GET", f"/datasets/demo/versions/1.0.0/cases?limit=2{cursor}")
        assert page.status == 200
        ids += [c["id"] for c in page.json["items"]]
        if page.json["next_cursor"] is None:
            break
        cursor = f"&cursor={page.json['next_cursor']}"
    assert ids == [f"c{i}" for i in range(5)]


def test_download_streams_the_document_from_the_embedded_store(server: DevServer) -> None:
    call(server, "POST", "/datasets", dataset(n=2))
    # The first download is a job (202), its parts delivered by the server's own queue
    started = call(server, "GET", "/datasets/demo/versions/latest/download")
    assert started.status == 202 and started.json["kind"] == "download", started.body
    assert started.headers["Location"] == started.json["url"]
    # The client follows that job (joined while it runs) over HTTP to the document
    with caseshelf.connect(server.url, env={}) as cs:
        got = cs.download("demo@latest")
    assert got.body is not None and json.loads(got.body)["id"] == "demo"
    job = call(server, "GET", started.json["url"])
    assert job.json["state"] == "succeeded", job.json
    assert job.json["progress"]["cases_written"] == 2
    doc = call(server, "GET", job.json["result"]["url"])
    assert doc.body == got.body
    assert doc.status == 200 and "attachment" in doc.headers["Content-Disposition"]
    assert 'filename="demo-1.0.0.json"' in doc.headers["Content-Disposition"]
    assert [c["id"] for c in doc.json["cases"]] == ["c0", "c1"]


def test_tags_delete_and_revive_with_dev_identity_headers(server: DevServer) -> None:
    call(server, "POST", "/datasets", dataset())
    path = "/datasets/demo/versions/1.0.0"
    # Tags
    tagged = call(server, "PUT", f"{path}/tags", {"tags": ["stable"]})
    assert tagged.json["version_tags"] == ["stable"]
    assert call(server, "GET", "/datasets/demo/versions/stable").json["version"] == "1.0.0"
    # Another principal (dev header) may not delete; an admin (dev header) may
    bob = {"X-Caseshelf-Principal": "bob"}
    assert call(server, "DELETE", path, headers=bob).status == 403
    admin = {"X-Caseshelf-Principal": "root", "X-Caseshelf-Roles": "admin"}
    gone = call(server, "DELETE", path, headers=admin)
    assert gone.status == 200
    assert gone.json["deleted_by"] == "root"
    assert call(server, "GET", path).status == 404
    assert call(server, "GET", f"{path}?include_deleted=true").status == 200
    # The creator revives it
    assert call(server, "POST", f"{path}/revive").json["deleted_at"] is None
    assert call(server, "GET", path).status == 200


def test_tenant_header_switches_tenant_and_isolates(server: DevServer) -> None:
    call(server, "POST", "/datasets", dataset())
    other = {"X-Caseshelf-Tenant": "globex"}
    assert call(server, "GET", "/datasets", headers=other).json["items"] == []
    missing = call(server, "GET", "/datasets/demo", headers=other)
    assert missing.status == 404
    assert missing.headers["Content-Type"] == "application/problem+json"


def test_bad_input_errors_come_back_as_problem_json(server: DevServer) -> None:
    resp = call(server, "POST", "/datasets", raw=b'{"id": "demo",\n "cases": [,]}')
    assert resp.status == 400
    assert resp.headers["Content-Type"] == "application/problem+json"
    assert resp.json["line"] == 2
    big = b'{"pad": "' + b"x" * (6 * 1024 * 1024) + b'"}'
    too_large = call(server, "POST", "/datasets", raw=big)
    assert too_large.status == 413
    assert too_large.json["upload_route"] == "POST /uploads"


def test_swagger_page_and_openapi_document(server: DevServer) -> None:
    page = call(server, "GET", "/swagger")
    assert page.status == 200
    assert page.headers["Content-Type"].startswith("text/html")
    # Its scripts and styles come from this server: nothing to fetch from elsewhere, so it
    # loads on a machine without internet
    assets = re.findall(rb"<(?:script|link)[^>]*(?:src|href)=\"([^\"]+)\"", page.body)
    assert assets and all(a.startswith(b"/static/") for a in assets)
    for asset in assets:
        assert call(server, "GET", asset.decode()).status == 200, asset
    assert b"SwaggerUIBundle" in call(server, "GET", "/static/swagger-init.js").body
    # It shows the merged document: every function's routes, not the registry's alone
    assert b'url: "/openapi.json"' in call(server, "GET", "/static/swagger-init.js").body
    doc = call(server, "GET", "/openapi.json")
    assert doc.status == 200
    assert "/datasets" in doc.json["paths"]
    assert {"/datasets/{id}/diff", "/uploads", "/jobs/{id}", "/benchmarks"} <= set(
        doc.json["paths"]
    )
    committed = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
    assert doc.json == json.loads(committed.read_text())


def test_unknown_route_is_404_and_wrong_method_405(server: DevServer) -> None:
    missing = call(server, "GET", "/no/such/route")
    assert missing.status == 404
    assert missing.headers["Content-Type"] == "application/problem+json"
    assert "/no/such/route" in missing.json["detail"]
    wrong = call(server, "PATCH", "/datasets")
    assert wrong.status == 405
    assert wrong.headers["Allow"] == "GET, POST"


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_serve_stops_cleanly_on_sigterm_and_on_sigint_even_when_started_ignoring_it(
    tmp_path: Path, stop: signal.Signals
) -> None:
    # Given `caseshelf serve` started as a background job is (SIGINT ignored, inherited)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASESHELF_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "caseshelf.cli", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "CASESHELF_HOME": str(tmp_path / "home"), "PYTHONUNBUFFERED": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        assert proc.stdout is not None
        url = re.search(r"http://\S+", proc.stdout.readline())
        assert url, proc.stderr.read() if proc.stderr else ""
        assert http_call(f"{url.group(0)}/datasets").status == 200
        # When it is sent the signal a process manager (or Ctrl-C) sends
        proc.send_signal(stop)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    # Then it stops as on Ctrl-C: exit 0, no traceback
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
