"""The local server against other sites' pages, in a real browser (the system Chromium, driven by
Playwright) with `caseshelf serve` as a subprocess on loopback:

- a page served by a second loopback server on another port (another origin) posts forms
  (text/plain, urlencoded, multipart) and `no-cors` fetches to `POST /datasets`, and tries
  JSON writes that need a preflight: every request that reaches the server is refused and the
  store is unchanged afterwards;
- a name rebound to 127.0.0.1 (`rebind.evil.example`, mapped by the browser's resolver) gets
  421 for the page and for its same-origin reads and writes;
- on a server that needs its token, the UI takes it from `?token=` once, drops it from the
  address bar, and sends it on its reads and writes; a tab without it shows what to do."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.browser import api, chromium, missing_browser, serve
from tests.serving import server_thread

pytestmark = [pytest.mark.e2e]

_why = missing_browser()
if _why:
    pytestmark.append(pytest.mark.skip(reason=_why))

REBOUND = "rebind.evil.example"
TOKEN = "browser-test-token-0123456789abcdef"
ARITH = {
    "id": "arith",
    "version": "1.0.0",
    "cases": [{"id": "c1", "inputs": {"user": "6*7"}, "expectations": {"ground_truth": 42}}],
}
EVIL = {**ARITH, "version": "1.1.0"}
EVIL["cases"] = [{"id": "c1", "inputs": {"user": "6*7"}, "expectations": {"ground_truth": 41}}]

ATTACK_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>cute cats</title></head><body>
<iframe name="sink-text"></iframe><iframe name="sink-url"></iframe>
<iframe name="sink-multi"></iframe>
<form id="text" method="POST" action="@TARGET@/datasets" enctype="text/plain" target="sink-text">
  <input name='EVIL_NAME' value='"}'></form>
<form id="url" method="POST" action="@TARGET@/datasets"
  enctype="application/x-www-form-urlencoded" target="sink-url">
  <input name="doc" value='EVIL_VALUE'></form>
<form id="multi" method="POST" action="@TARGET@/datasets" enctype="multipart/form-data"
  target="sink-multi"><input name="doc" value='EVIL_VALUE'></form>
<script>
const TARGET = "@TARGET@";
const BODY = 'EVIL_VALUE';
async function outcome(p) {
  try { const r = await p; return r.type === "opaque" ? "opaque" : r.status; }
  catch (e) { return "blocked"; }
}
window.noCors = async () => {
  const out = {};
  for (const ct of ["application/x-www-form-urlencoded", "text/plain", "multipart/form-data"]) {
    out[ct] = await outcome(fetch(TARGET + "/datasets",
      { method: "POST", mode: "no-cors", headers: { "Content-Type": ct }, body: BODY }));
  }
  const fd = new FormData();
  fd.append("doc", BODY);
  out.formdata = await outcome(fetch(TARGET + "/datasets",
    { method: "POST", mode: "no-cors", body: fd }));
  out.bodiless = await outcome(fetch(TARGET + "/datasets/arith/versions/1.0.0/revive",
    { method: "POST", mode: "no-cors" }));
  return out;
};
window.preflighted = async () => {
  const json = { "Content-Type": "application/json", "X-Caseshelf-Roles": "admin" };
  const v = TARGET + "/datasets/arith/versions/1.0.0";
  return {
    post: await outcome(fetch(TARGET + "/datasets", { method: "POST", headers: json, body: BODY })),
    put: await outcome(fetch(v + "/tags",
      { method: "PUT", headers: json, body: '{"tags":["x"]}' })),
    del: await outcome(fetch(v, { method: "DELETE", headers: json })),
    read: await outcome(fetch(TARGET + "/datasets")),
  };
};
</script></body></html>"""

REBOUND_PAGE = """<!doctype html><html><head><meta charset="utf-8"></head><body><script>
async function outcome(p) {
  try { const r = await p; return r.status; } catch (e) { return "blocked"; }
}
window.rebound = async () => {
  const admin = { "Content-Type": "application/json", "X-Caseshelf-Tenant": "acme",
                  "X-Caseshelf-Roles": "admin" };
  return {
    read: await outcome(fetch("/datasets")),
    post: await outcome(fetch("/datasets",
      { method: "POST", headers: admin, body: 'EVIL_VALUE' })),
    del: await outcome(fetch("/datasets/arith/versions/1.0.0",
      { method: "DELETE", headers: admin })),
  };
};
</script></body></html>"""


def page_text(template: str, target: str = "") -> str:
    evil = json.dumps(EVIL)
    # text/plain form: name=value is sent as `name=value`, so the name carries the JSON up to
    # a last string member that the value closes.
    evil_name = evil[:-1] + ', "pad": "'
    return (
        template.replace("EVIL_NAME", evil_name.replace("'", "&#39;"))
        .replace("EVIL_VALUE", evil.replace("'", "&#39;"))
        .replace("@TARGET@", target)
    )


class _AttackHandler(BaseHTTPRequestHandler):
    page = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.page)))
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("guard-server")
    with serve(root / "home", log=root / "serve.log") as url:
        assert api(url + "/datasets", "POST", ARITH)[0] == 201
        yield url


@pytest.fixture(scope="module")
def attacker(server: str) -> Iterator[str]:
    """A second loopback server, on another port: another origin, serving the attack page."""
    handler = type("Handler", (_AttackHandler,), {"page": page_text(ATTACK_PAGE, server).encode()})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = server_thread(httpd)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    # The rebound name resolves to loopback. Chromium's own Local Network Access checks are off:
    # they would stop the rebound page's calls before they left the browser, and what is under
    # test is what the server answers them (other browsers send them).
    args = [
        f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1",
        "--disable-features=LocalNetworkAccessChecks,PrivateNetworkAccessRespectPreflightResults,"
        "BlockInsecurePrivateNetworkRequests",
    ]
    with chromium(tmp_path_factory.mktemp("guard-profile") / "profile", args=args) as context:
        yield context


def assert_unchanged(server: str) -> None:
    status, versions = api(server + "/datasets/arith/versions?include_deleted=true")
    assert status == 200
    assert [(v["version"], v["deleted_at"], v["version_tags"]) for v in versions["items"]] == [
        ("1.0.0", None, [])
    ]
    _, cases = api(server + "/datasets/arith/versions/1.0.0/cases")
    assert [c["expectations"]["ground_truth"] for c in cases["items"]] == [42]
    _, listed = api(server + "/datasets")
    assert [d["id"] for d in listed["items"]] == ["arith"]


def answers_to(tab: Any, server: str) -> list[tuple[str, str, int]]:
    """Every answer the server gave the tab from now on: (method, path, status)."""
    seen: list[tuple[str, str, int]] = []
    tab.on(
        "response",
        lambda r: (
            seen.append((r.request.method, r.url[len(server) :], r.status))
            if r.url.startswith(server + "/")
            else None
        ),
    )
    return seen


def test_another_origins_forms_and_fetches_change_nothing(
    browser: Any, server: str, attacker: str
) -> None:
    tab = browser.new_page()
    seen = answers_to(tab, server)
    tab.goto(attacker + "/attack.html")
    # The three forms a page can post anywhere, each into its own frame
    for form in ("text", "url", "multi"):
        with tab.expect_response(lambda r: r.url == server + "/datasets") as got:
            tab.evaluate(f"document.getElementById({form!r}).submit()")
        assert got.value.status == 403, (form, got.value.text())
        assert "refused" in json.loads(got.value.text())["detail"]
    # no-cors fetches: sent, answered, unreadable to the page
    assert set(tab.evaluate("window.noCors()").values()) == {"opaque"}
    # Writes that need a preflight never go: the preflight is refused; a read is not readable
    assert tab.evaluate("window.preflighted()") == {
        "post": "blocked",
        "put": "blocked",
        "del": "blocked",
        "read": "blocked",
    }
    assert_unchanged(server)
    writes = [s for s in seen if s[0] != "GET"]
    assert len(writes) == 3 + 5, seen  # the forms and the no-cors fetches reached the server
    assert {status for _, _, status in writes} == {403}, seen
    tab.close()


def test_a_rebound_name_gets_421_for_the_page_and_its_calls(browser: Any, server: str) -> None:
    port = server.rsplit(":", 1)[1]
    rebound = f"http://{REBOUND}:{port}"
    tab = browser.new_page()
    # The UI opened under the rebound name is refused, and says why
    resp = tab.goto(rebound + "/")
    assert resp.status == 421
    assert "does not name this server" in tab.content()
    # A page the attacker's DNS served first under that name, calling it once it points here
    tab.route(
        rebound + "/attack",
        lambda route: route.fulfill(
            status=200, content_type="text/html", body=page_text(REBOUND_PAGE)
        ),
    )
    seen = answers_to(tab, rebound)
    tab.goto(rebound + "/attack")
    assert tab.evaluate("window.rebound()") == {"read": 421, "post": 421, "del": 421}
    assert sorted(s for s in seen if s[1] != "/attack") == [
        ("DELETE", "/datasets/arith/versions/1.0.0", 421),
        ("GET", "/datasets", 421),
        ("POST", "/datasets", 421),
    ]
    assert_unchanged(server)
    tab.close()


def call(url: str, method: str = "GET", body: Any = None, token: str | None = TOKEN) -> Any:
    req = urllib.request.Request(
        url, data=None if body is None else json.dumps(body).encode(), method=method
    )
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=60) as got:
            return got.status, json.loads(got.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_the_ui_takes_the_token_from_its_url_and_sends_it(browser: Any, tmp_path: Path) -> None:
    env = {"CASESHELF_SERVE_TOKEN": TOKEN}
    with serve(tmp_path / "home", log=tmp_path / "serve.log", env=env) as url:
        assert call(url + "/datasets", "POST", ARITH)[0] == 201
        assert call(url + "/datasets", token=None)[0] == 401
        tab = browser.new_page()
        tab.goto(f"{url}/datasets?token={TOKEN}")
        tab.wait_for_selector("body[data-ready]", timeout=15_000)
        # The token left the address bar (and the history) for the tab's sessionStorage
        assert tab.url == f"{url}/datasets"
        assert tab.evaluate("sessionStorage.getItem('caseshelf.serverToken')") == TOKEN
        assert tab.locator('tr[data-id="arith"], a[href="/datasets/arith"]').count() >= 1
        # Writes from the UI carry it (and say JSON): tags, then a bodiless delete
        tab.goto(f"{url}/datasets/arith")
        tab.wait_for_selector("body[data-ready]", timeout=15_000)
        row = tab.locator('tr[data-version="1.0.0"]')
        row.get_by_label("Tags of 1.0.0").fill("stable")
        row.get_by_role("button", name="Save tags").click()
        tab.get_by_role("status").get_by_text("tags saved: arith@1.0.0").wait_for()
        assert call(url + "/datasets/arith/versions/1.0.0")[1]["version_tags"] == ["stable"]
        tab.on("dialog", lambda d: d.accept())
        row.get_by_role("button", name="Delete 1.0.0").click()
        tab.get_by_text("deleted: arith@1.0.0").wait_for()
        assert call(url + "/datasets/arith/versions/1.0.0")[0] == 404
        tab.close()
        # A tab that never had the token shows the server's answer: what to send
        bare = browser.new_page()
        bare.goto(url + "/datasets")
        bare.wait_for_selector("div.error[role=alert]", timeout=15_000)
        shown = bare.locator("div.error[role=alert]").inner_text()
        assert "401" in shown and "?token=" in shown
        bare.close()
