"""The web UI over the local server's real HTTP: `/` is the page, a browser's navigation to an
API path gets the page while every other client gets the API, and the UI's answers carry the
CSP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from caseshelf.devserver import DevServer
from tests.helpers import dev_server, http_call

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    with dev_server(tmp_path_factory.mktemp("ui-http") / "home") as srv:
        yield srv


def test_the_root_is_the_ui_not_a_404(server: DevServer) -> None:
    got = http_call(server.url + "/")
    assert got.status == 200
    assert got.headers["Content-Type"].startswith("text/html")
    assert b'src="/static/app.js"' in got.body
    assert "script-src 'self'" in got.headers["Content-Security-Policy"]
    head = http_call(server.url + "/", "HEAD")
    assert head.status == 200 and head.body == b""


def test_a_browser_gets_the_page_and_every_other_client_the_api(server: DevServer) -> None:
    doc = {"id": "demo", "version": "1.0.0", "cases": [{"id": "a", "inputs": {"user": "q"}}]}
    assert http_call(server.url + "/datasets", "POST", doc).status == 201
    path = "/datasets/demo/diff?base=1.0.0&candidate=1.0.0"
    page = http_call(server.url + path, headers={"Accept": BROWSER})
    assert page.status == 200 and page.headers["Content-Type"].startswith("text/html")
    for accept in ("application/json", "*/*"):
        answer = http_call(server.url + path, headers={"Accept": accept})
        assert answer.status == 200 and answer.json["summary"]["unchanged"] == 1, accept
    # A download stays the API's, even when a browser opens it: its job (202), never the page
    download = http_call(
        server.url + "/datasets/demo/versions/1.0.0/download", headers={"Accept": BROWSER}
    )
    assert download.status == 202 and download.json["kind"] == "download", download.body
    # Writes are never the UI's
    assert http_call(server.url + "/", "POST", {}).status in (404, 405)


def test_static_files_and_config(server: DevServer) -> None:
    js = http_call(server.url + "/static/pages/version.js")
    assert js.status == 200 and js.headers["Content-Type"].startswith("text/javascript")
    assert http_call(server.url + "/static/../devserver.py").status == 404
    config = http_call(server.url + "/config.json")
    assert config.json == {"api": "", "auth": None, "openapi": "/openapi.json"}
