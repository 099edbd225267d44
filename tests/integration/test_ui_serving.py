"""What the local server answers for the web UI: which GETs are pages, the static files, and the
headers every UI answer carries. Plain values; no socket."""

from __future__ import annotations

import pytest

from caseshelf import ui

pytestmark = pytest.mark.integration

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8"


@pytest.mark.parametrize(
    ("accept", "page"),
    [
        (BROWSER, True),
        ("text/html", True),
        ("application/json", False),
        ("application/json, text/html", False),
        ("*/*", False),
        (None, False),
        ("", False),
    ],
)
def test_a_page_is_what_a_browser_navigates_to(accept: str | None, page: bool) -> None:
    assert ui.wants_page(accept) is page


def test_the_root_static_files_config_and_swagger_are_always_the_uis() -> None:
    for path in ("/", "/static/app.js", "/config.json", "/swagger"):
        assert ui.is_ui_request("GET", path, "*/*"), path
        assert ui.is_ui_request("HEAD", path, None), path
    assert not ui.is_ui_request("POST", "/", BROWSER)


def test_api_paths_are_pages_only_for_a_browser_and_never_documents_or_downloads() -> None:
    # Given the path of a diff, as a reviewer pastes it
    path = "/datasets/gsm8k/diff"
    assert ui.is_ui_request("GET", path, BROWSER)
    assert not ui.is_ui_request("GET", path, "application/json")
    assert not ui.is_ui_request("GET", path, "*/*")
    # The API's own documents, uploads and downloads are never pages
    for other in (
        "/openapi.json",
        "/_downloads/tok",
        "/datasets/a/versions/1/download",
        "/datasets/a/versions/1/files/sha256:" + "0" * 64,
    ):
        assert not ui.is_ui_request("GET", other, BROWSER), other


def test_every_page_path_answers_the_one_document_with_a_strict_csp() -> None:
    got = ui.answer("GET", "/datasets/gsm8k/versions/1.0.0/cases/q1", BROWSER)
    assert got is not None and got.status == 200
    headers = dict(got.headers)
    assert headers["Content-Type"].startswith("text/html")
    assert got.body == ui.static_files()["index.html"]
    csp = headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert "frame-ancestors 'none'" in csp
    assert headers["X-Content-Type-Options"] == "nosniff"
    # The same path is JSON for an API client: never cached as one for the other
    assert headers["Vary"] == "Accept" and headers["Cache-Control"] == "no-store"


def test_static_files_are_looked_up_never_joined_onto_a_directory() -> None:
    js = ui.answer("GET", "/static/app.js", None)
    assert js is not None and js.status == 200
    assert dict(js.headers)["Content-Type"].startswith("text/javascript")
    for bad in (
        "/static/../__init__.py",
        "/static/%2e%2e/__init__.py",
        "/static//etc/passwd",
        "/static/nope.js",
        "/static/index.html",
    ):
        got = ui.answer("GET", bad, None)
        assert got is not None and got.status == 404, bad


def test_the_page_has_no_inline_script_and_no_secret() -> None:
    files = ui.static_files()
    index = files["index.html"].decode()
    assert '<script type="module" src="/static/app.js"></script>' in index
    assert "<script>" not in index and "onload=" not in index
    for name, body in files.items():
        text = body.decode("utf-8", "replace")
        assert "innerHTML" not in text and "outerHTML" not in text, name
        assert "insertAdjacentHTML" not in text and "eval(" not in text, name
        assert "client_secret" not in text, name


def test_local_config_needs_no_sign_in() -> None:
    got = ui.answer("GET", "/config.json", None)
    assert got is not None
    assert got.body == b'{"api":"","auth":null,"openapi":"/openapi.json"}'


def test_swagger_loads_the_merged_document_with_its_assets_from_the_package() -> None:
    page = ui.answer("GET", "/swagger", BROWSER)
    assert page is not None and b"/static/swagger-init.js" in page.body
    assert b'url: "/openapi.json"' in ui.static_files()["swagger-init.js"]
    bundle = ui.answer("GET", "/static/swagger-ui/swagger-ui-bundle.min.js", None)
    assert bundle is not None and bundle.status == 200 and len(bundle.body) > 100_000
