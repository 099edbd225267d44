"""The web UI in a real browser (the system Chromium, driven by Playwright) against
`caseshelf serve` on a temporary store: every count the pages show is the API's, the version
actions, the import wizard, the subset builder, the export panel, Swagger over the whole API,
content that must stay text, and keyboard use with labelled controls.

One server and one browser serve the whole module; each scenario registers its own datasets
through the API and saves a screenshot under its temporary directory."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.browser import api, chromium, missing_browser, serve
from tests.moto_infra import load_template

pytestmark = [pytest.mark.e2e]

_why = missing_browser()
if _why:
    pytestmark.append(pytest.mark.skip(reason=_why))

XSS = "<img src=x onerror=alert(1)>"
MD_ATTACK = (
    "# Notes\n\nSee [the docs](javascript:alert(1)) and [ok](https://example.org/x).\n\n"
    "<script>alert(2)</script>\n\n![pixel](javascript:alert(3))\n\n"
    '<a href="javascript:alert(4)">raw</a>\n'
)


@pytest.fixture(scope="module")
def fake_hub() -> Iterator[Any]:
    """A local fake of the Hugging Face Hub and its dataset viewer (loopback)."""
    from tests.hf_fake import standard_hub

    hub = standard_hub()
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, fake_hub: Any) -> Iterator[str]:
    root = tmp_path_factory.mktemp("ui-server")
    hf = {"HF_ENDPOINT": fake_hub.url, "CASESHELF_HF_VIEWER_URL": fake_hub.url}
    with serve(root / "home", log=root / "serve.log", env=hf) as url:
        yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with chromium(tmp_path_factory.mktemp("ui-profile") / "profile") as context:
        yield context


class Page:
    """A browser tab with what went wrong in it: page errors, console errors, dialogs."""

    def __init__(self, context: Any, base: str, shots: Path | None) -> None:
        self.tab = context.new_page()
        self.base = base
        self.shots = shots
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.accept_dialogs = False
        self.expected_failures: set[str] = set()
        self.tab.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.tab.on("console", self._console)
        self.tab.on("response", self._response)
        self.tab.on("request", self._request)
        self.tab.on("dialog", self._dialog)

    def _console(self, message: Any) -> None:
        # A failed request is reported with its URL by _response.
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            self.errors.append(f"console: {message.text}")

    def _response(self, response: Any) -> None:
        if response.status >= 400 and response.url not in self.expected_failures:
            self.errors.append(f"HTTP {response.status} {response.request.method} {response.url}")

    def _request(self, request: Any) -> None:
        # Nothing is fetched from anywhere but the server: the UI works offline.
        if not request.url.startswith((self.base + "/", "about:", "data:", "blob:")):
            self.errors.append(f"a request off the server: {request.url}")

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        if self.accept_dialogs:
            dialog.accept()
        else:
            dialog.dismiss()

    def goto(self, path: str) -> Any:
        resp = self.tab.goto(self.base + path)
        self.ready()
        return resp

    def ready(self) -> None:
        self.tab.wait_for_selector("body[data-ready]", timeout=15_000)

    def click_and_wait(self, locator: Any) -> None:
        self.tab.evaluate("delete document.body.dataset.ready")
        locator.click()
        self.ready()

    def text(self, selector: str) -> str:
        return str(self.tab.locator(selector).first.inner_text()).strip()

    def shot(self, name: str) -> None:
        """A full-page screenshot named `name`, when screenshots are kept (`shots_dir`)."""
        if self.shots is not None:
            self.tab.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)


def shots_dir(request: pytest.FixtureRequest) -> Path | None:
    """Where a scenario's screenshots go: `$CASESHELF_TEST_ARTIFACTS/<test name>/` when that is
    set; otherwise none are taken (nothing checks them, and each full page rendered in software
    costs the browser a few hundred milliseconds of CPU)."""
    root = os.environ.get("CASESHELF_TEST_ARTIFACTS")
    if not root:
        return None
    where = Path(root) / re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    where.mkdir(parents=True, exist_ok=True)
    return where


@pytest.fixture
def page(browser: Any, server: str, request: pytest.FixtureRequest) -> Iterator[Page]:
    p = Page(browser, server, shots_dir(request))
    yield p
    p.shot("last")
    p.tab.close()
    assert not p.errors, p.errors


def register(server: str, doc: dict[str, Any]) -> dict[str, Any]:
    status, body = api(server + "/datasets", "POST", doc)
    assert status in (200, 201), body
    return body  # type: ignore[no-any-return]


def two_versions(server: str, name: str) -> None:
    long_v1 = "\n".join(f"line {i}" for i in range(12))
    long_v2 = long_v1.replace("line 5", "line five")
    base = [
        {
            "id": f"q{i}",
            "inputs": {"user": f"What is {i} + {i}?"},
            "expectations": {"ground_truth": str(2 * i)},
            "tags": ["easy" if i % 2 else "hard"],
        }
        for i in range(6)
    ]
    base.append({"id": "essay", "inputs": {"user": long_v1}, "tags": ["long"]})
    register(
        server,
        {"id": name, "version": "1.0.0", "description": "v1", "tags": ["math"], "cases": base},
    )
    cases = [dict(c) for c in base if c["id"] != "q0"]  # q0 removed
    cases[0] = {**cases[0], "expectations": {"ground_truth": "two"}}  # q1 changed
    cases[-1] = {**cases[-1], "inputs": {"user": long_v2}}  # essay changed, a line diff
    cases.append(
        {"id": "q9", "inputs": {"user": "What is 9 + 9?"}, "expectations": {"ground_truth": "18"}}
    )  # q9 added
    register(
        server,
        {"id": name, "version": "1.1.0", "description": "v2", "tags": ["math"], "cases": cases},
    )


def row_cells(page: Page, table: str, row: str) -> dict[str, str]:
    locator = page.tab.locator(f'table[aria-label="{table}"] tr[{row}]')
    return {
        col: locator.locator(f'td[data-col="{col}"]').inner_text().strip()
        for col in ("cases", "versions")
        if locator.locator(f'td[data-col="{col}"]').count()
    }


def test_walk_list_dataset_version_case_and_diff_shows_the_apis_counts(
    page: Page, server: str
) -> None:
    two_versions(server, "walk")
    _, summary = api(server + "/datasets/walk")
    # The list shows the dataset with the API's counts
    page.goto("/")
    cells = row_cells(page, "Datasets", 'data-dataset="walk"')
    assert cells == {"cases": str(summary["case_count"]), "versions": str(summary["version_count"])}
    tags = page.tab.locator('tr[data-dataset="walk"] td[data-col="tags"] .badge')
    assert tags.all_inner_texts() == summary["tags"] == ["math"]
    page.shot("1-list")
    # The dataset page lists every version with its case count
    page.click_and_wait(page.tab.get_by_role("link", name="walk", exact=True))
    assert page.tab.url.endswith("/datasets/walk")
    _, versions = api(server + "/datasets/walk/versions?include_deleted=true")
    for v in versions["items"]:
        row = page.tab.locator(f'tr[data-version="{v["version"]}"]')
        assert row.locator('td[data-col="cases"]').inner_text() == str(v["case_count"])
    page.shot("2-dataset")
    # The version page pages its cases and says how many there are
    versions_table = page.tab.get_by_role("table", name="Versions")
    page.click_and_wait(versions_table.get_by_role("link", name="1.1.0", exact=True))
    _, v2 = api(server + "/datasets/walk/versions/1.1.0")
    assert page.text('dd[data-field="case_count"]') == str(v2["case_count"])
    assert page.text("#cases-h ~ p[role=status]") == (
        f"Cases 1\N{EN DASH}{v2['case_count']} of {v2['case_count']}"
    )
    assert page.tab.locator("table[aria-label=Cases] tbody tr").count() == v2["case_count"]
    page.tab.wait_for_selector("figure svg[role=img]")
    assert page.tab.get_by_role("link", name="Diff against 1.0.0").get_attribute("href") == (
        "/datasets/walk/diff?base=1.0.0&candidate=1.1.0"
    )
    page.shot("3-version")
    # A case page renders the case's inputs and expectations
    page.click_and_wait(page.tab.get_by_role("link", name="q1", exact=True))
    assert page.text("h1") == "q1"
    assert "What is 1 + 1?" in page.text("#s-inputs ~ pre, section[aria-labelledby=s-inputs]")
    assert "two" in page.tab.locator("section[aria-labelledby=s-expectations]").inner_text()
    page.shot("4-case")
    # The diff, from the dataset page's form, shows the API's summary and every change
    page.goto("/datasets/walk")
    page.tab.get_by_label("Base").select_option("1.0.0")
    page.tab.get_by_label("Candidate").select_option("1.1.0")
    page.click_and_wait(page.tab.get_by_role("button", name="Compare"))
    assert page.tab.url.endswith("/datasets/walk/diff?base=1.0.0&candidate=1.1.0")
    _, diff = api(server + "/datasets/walk/diff?base=1.0.0&candidate=1.1.0")
    for kind, n in diff["summary"].items():
        assert page.text(f'[data-count="{kind}"] .n') == str(n), kind
    page.tab.wait_for_selector("#changed-h")
    assert page.text("#added-h") == f"Added ({len(diff['added'])})"
    assert page.text("#removed-h") == f"Removed ({len(diff['removed'])})"
    assert page.text("#changed-h") == f"Changed ({len(diff['changed'])})"
    essay = page.tab.locator('details[data-case="essay"]')
    assert essay.locator("table.linediff td.del").inner_text() == "line 5"
    assert essay.locator("table.linediff td.add").inner_text() == "line five"
    q1 = page.tab.locator('details[data-case="q1"]')
    assert q1.locator("pre.before").inner_text() == "2"
    assert q1.locator("pre.after").inner_text() == "two"
    assert q1.get_by_role("link", name="candidate").get_attribute("href") == (
        "/datasets/walk/versions/1.1.0/cases/q1"
    )
    page.shot("5-diff")
    # Any ref: the candidate by its digest gives the same diff; an unknown ref is named, and
    # the form stays to fix it
    page.tab.get_by_label("Candidate", exact=True).fill(v2["content_digest"])
    page.click_and_wait(page.tab.get_by_role("button", name="Compare"))
    assert page.text('[data-count="changed"] .n') == str(diff["summary"]["changed"])
    page.expected_failures.add(
        server + "/datasets/walk/diff?base=9.9.9&candidate=1.1.0&summary=true&fields=true"
    )
    page.tab.get_by_label("Base", exact=True).fill("9.9.9")
    page.tab.get_by_label("Candidate", exact=True).fill("1.1.0")
    page.click_and_wait(page.tab.get_by_role("button", name="Compare"))
    assert "9.9.9" in page.text("[role=alert]")
    assert page.tab.get_by_label("Base", exact=True).input_value() == "9.9.9"
    # A diff link pasted into a new tab opens the same page
    resp = page.goto("/datasets/walk/diff?base=1.0.0&candidate=1.1.0")
    assert resp.headers["content-security-policy"].startswith("default-src 'none'")
    assert page.text('[data-count="changed"] .n') == str(diff["summary"]["changed"])


def test_a_long_diff_is_read_a_page_at_a_time_with_show_more(page: Page, server: str) -> None:
    # Given 130 changed, 20 added and 5 removed cases (155 entries: two pages of 100)
    v1 = [{"id": f"c{i:03d}", "inputs": {"user": f"q{i}"}} for i in range(135)]
    v2 = [{"id": f"c{i:03d}", "inputs": {"user": f"Q{i}"}} for i in range(5, 135)]
    v2 += [{"id": f"n{i:02d}", "inputs": {"user": "new"}} for i in range(20)]
    register(server, {"id": "long", "version": "1.0.0", "cases": v1})
    register(server, {"id": "long", "version": "2.0.0", "cases": v2})
    # When the diff page opens
    page.goto("/datasets/long/diff?base=1.0.0&candidate=2.0.0")
    page.tab.wait_for_selector("#changed-h")
    # Then the counts are the whole diff's, and the first page's entries are shown
    assert page.text("#changed-h") == "Changed (130)"
    assert page.text("#added-h") == "Added (20)"
    assert page.text("#removed-h") == "Removed (5)"
    changed = page.tab.locator("section[aria-labelledby=changed-h] details[data-case]")
    assert changed.count() == 100
    assert page.text('[data-shown="changed"]') == "100 of 130 shown"
    assert page.tab.locator("section[aria-labelledby=added-h] li").count() == 0
    # And "Show more" reads the next page, through the cursor, to the end
    more = page.tab.locator("button[data-more]")
    assert more.inner_text() == "Show 55 more of 55"
    more.click()
    page.tab.wait_for_selector("section[aria-labelledby=removed-h] li[data-case=c004]")
    assert changed.count() == 130
    assert page.tab.locator("section[aria-labelledby=added-h] li").count() == 20
    assert page.tab.locator("section[aria-labelledby=removed-h] li").count() == 5
    assert more.is_hidden()
    assert page.tab.locator('[data-shown="changed"]').is_hidden()


def test_tag_delete_and_revive_from_the_dataset_page(page: Page, server: str) -> None:
    two_versions(server, "acts")
    page.accept_dialogs = True
    page.goto("/datasets/acts")
    row = page.tab.locator('tr[data-version="1.0.0"]')
    row.get_by_label("Tags of 1.0.0").fill("stable, reviewed")
    row.get_by_role("button", name="Save tags").click()
    page.tab.get_by_role("status").get_by_text("tags saved: acts@1.0.0").wait_for()
    assert api(server + "/datasets/acts/versions/1.0.0")[1]["version_tags"] == [
        "stable",
        "reviewed",
    ]
    assert row.locator('td[data-col="version-tags"] .badge').all_inner_texts() == [
        "stable",
        "reviewed",
    ]
    # A tag is a pointer: saved on 1.1.0, stable moves there, and both rows and the history say so
    newer = page.tab.locator('tr[data-version="1.1.0"]')
    newer.get_by_label("Tags of 1.1.0").fill("stable")
    newer.get_by_role("button", name="Save tags").click()
    page.tab.get_by_role("status").get_by_text("tags saved: acts@1.1.0").wait_for()
    page.tab.locator('table[aria-label="Tag moves"] tr[data-seq="3"]').wait_for()
    assert newer.locator('td[data-col="version-tags"] .badge').all_inner_texts() == ["stable"]
    assert row.locator('td[data-col="version-tags"] .badge').all_inner_texts() == ["reviewed"]
    latest_move = page.tab.locator('table[aria-label="Tag moves"] tbody tr').first
    assert latest_move.locator("td").all_inner_texts()[:3] == ["stable", "1.0.0", "1.1.0"]
    row = page.tab.locator('tr[data-version="1.0.0"]')
    row.get_by_role("button", name="Delete 1.0.0").click()
    page.tab.get_by_text("deleted: acts@1.0.0").wait_for()
    assert page.dialogs and page.dialogs[0].startswith("confirm: Delete acts@1.0.0?")
    status, _ = api(server + "/datasets/acts/versions/1.0.0")
    assert status == 404
    _, gone = api(server + "/datasets/acts/versions/1.0.0?include_deleted=true")
    assert gone["deleted_at"] is not None
    assert row.locator("td.state").inner_text() == "deleted"
    # Only live versions are offered to compare
    assert page.tab.get_by_label("Base").locator("option").all_inner_texts() == ["1.1.0"]
    page.shot("deleted")
    # A tombstoned version can still be opened from its dataset's page, and says so
    page.click_and_wait(row.get_by_role("link", name="1.0.0", exact=True))
    assert page.tab.url.endswith("/datasets/acts/versions/1.0.0?include_deleted=true")
    assert page.text("dl.meta .badge.deleted").startswith("deleted ")
    assert page.tab.locator("table[aria-label=Cases] tbody tr").count() == 7
    page.tab.go_back()
    page.ready()
    row = page.tab.locator('tr[data-version="1.0.0"]')
    row.get_by_role("button", name="Revive 1.0.0").click()
    page.tab.get_by_text("revived: acts@1.0.0").wait_for()
    assert api(server + "/datasets/acts/versions/1.0.0")[1]["deleted_at"] is None
    assert row.locator("td.state").inner_text() == "live"


def test_search_pictures_and_files_show_what_the_api_answers(page: Page, server: str) -> None:
    # Given 130 cases: every 7th holds "needle" in its text, every 3rd is tagged odd, one has a
    # companion PNG and the version a shared file
    cases: list[dict[str, Any]] = [
        {
            "id": f"s{i:03d}",
            "inputs": {"user": "w" * (i % 40 + 1) + (" needle" if i % 7 == 0 else "")},
            "tags": ["odd"] if i % 3 == 0 else [],
        }
        for i in range(130)
    ]
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(200))
    cases[4]["files"] = {"pic.png": {"base64": base64.b64encode(png).decode()}}
    register(
        server,
        {
            "id": "look",
            "version": "1.0.0",
            "tags": ["demo"],
            "shared_files": [{"dest": "LICENSE", "text": "MIT\n"}],
            "cases": cases,
        },
    )
    _, stats = api(server + "/datasets/look/versions/1.0.0/stats")
    page.goto("/datasets/look/versions/1.0.0")
    # The pictures are over every case, with the API's numbers
    tags = page.tab.locator('[data-picture="tags"]')
    tags.locator("svg[role=img]").wait_for()
    assert "over all 130 cases" in tags.inner_text()
    tags.locator("summary").click()
    rows = [r.split("\t") for r in tags.locator("tbody tr").all_inner_texts()]
    assert rows == [["odd", str(stats["tags"][0]["cases"])], ["(no tag)", str(stats["untagged"])]]
    lengths = page.tab.locator('[data-picture="input-length"]')
    lengths.locator("summary").click()
    shown = [int(r.split("\t")[1]) for r in lengths.locator("tbody tr").all_inner_texts()]
    assert shown == [b["count"] for b in stats["input_length"]["buckets"]] and sum(shown) == 130
    sizes = page.tab.locator('[data-picture="file-sizes"]')
    assert f"File sizes (1 file, {len(png)} B)" in sizes.inner_text()
    # A text search pages the matches the API finds, in dataset order
    _, found = api(server + "/datasets/look/versions/1.0.0/cases?q=needle&by=text&limit=1000")
    page.tab.get_by_label("Search by").select_option("text")
    page.tab.get_by_role("searchbox", name="Search cases").fill("needle")
    page.tab.get_by_role("button", name="Search", exact=True).click()
    page.tab.get_by_text("every case searched").wait_for()
    ids = page.tab.locator("table[aria-label=Cases] tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.case)"
    )
    assert ids == [c["id"] for c in found["items"]] and len(ids) == 19
    status = page.text("#cases-h ~ p[role=status]")
    assert status.startswith("19 cases matching “needle” (text)")
    assert "q=needle" in page.tab.url and "by=text" in page.tab.url
    # By tag: a whole tag, any case
    page.tab.get_by_label("Search by").select_option("tag")
    page.tab.get_by_role("searchbox", name="Search cases").fill("ODD")
    page.tab.get_by_role("button", name="Search", exact=True).click()
    page.tab.get_by_text("44 cases matching “ODD” (tag); every case searched").wait_for()
    # More matches than a page: the next page goes on from the API's cursor, and back
    page.tab.get_by_label("Search by").select_option("any")
    page.tab.get_by_role("searchbox", name="Search cases").fill("w")
    page.tab.get_by_role("button", name="Search", exact=True).click()
    page.tab.get_by_role("button", name="Next page").wait_for()
    first_row = page.tab.locator("table[aria-label=Cases] tbody tr").first
    assert first_row.get_attribute("data-case") == "s000"
    page.tab.get_by_role("button", name="Next page").click()
    page.tab.locator('tr[data-case="s050"]').wait_for()
    assert page.tab.locator("table[aria-label=Cases] tbody tr").count() == 50
    page.tab.get_by_role("button", name="Previous page").click()
    page.tab.locator('tr[data-case="s000"]').wait_for()
    page.shot("search")
    # The shared file's body comes from the file route
    page.tab.get_by_role("button", name="Show LICENSE").click()
    assert page.tab.locator('[data-file="LICENSE"] pre').inner_text().strip() == "MIT"
    # A case's binary file: its size and a download of its bytes
    page.goto("/datasets/look/versions/1.0.0/cases/s004")
    page.tab.get_by_role("button", name="Show pic.png").click()
    pic = page.tab.locator('[data-file="pic.png"]')
    pic.get_by_role("button", name="Download pic.png").wait_for()
    assert f"Binary file, {len(png)} B" in pic.inner_text()
    with page.tab.expect_download() as got:
        pic.get_by_role("button", name="Download pic.png").click()
    assert Path(got.value.path()).read_bytes() == png


def test_delete_and_revive_are_offered_where_the_api_would_allow_them(
    page: Page, server: str
) -> None:
    # Given a version registered by the server's own principal and one by someone else
    two_versions(server, "mine")
    doc = {"id": "mine", "version": "2.0.0", "cases": [{"id": "x", "inputs": {"user": "hi"}}]}
    req = urllib.request.Request(
        server + "/datasets",
        data=json.dumps(doc).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "X-Caseshelf-Principal": "bob"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 201
    _, me = api(server + "/me")
    page.goto("/datasets/mine")
    # Then delete is offered on the caller's own versions only (GET /me says who that is)
    assert me["principal"] != "bob" and not me["admin"]
    assert page.tab.get_by_role("button", name="Delete 1.0.0").count() == 1
    assert page.tab.get_by_role("button", name="Delete 2.0.0").count() == 0
    assert (
        page.tab.locator('tr[data-version="2.0.0"]').get_by_role("button", name="Save tags").count()
        == 1
    )


def test_import_wizard_on_a_local_file_lands_on_the_new_version(
    page: Page, server: str, tmp_path: Path
) -> None:
    rows = [
        {
            "qid": f"r{i}",
            "question": f"How many legs has animal {i}?",
            "answer": str(i * 2),
            "level": "easy" if i < 3 else "hard",
        }
        for i in range(8)
    ]
    src = tmp_path / "animals.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    page.goto("/import")
    page.tab.get_by_label("A file from this computer").check()
    page.tab.get_by_label("File", exact=True).set_input_files(str(src))
    page.tab.get_by_role("button", name="Preview").click()
    page.tab.get_by_role("heading", name="Rows and fields").wait_for()
    fields = page.tab.locator("code.badge").all_inner_texts()
    assert set(fields) == {"qid", "question", "answer", "level"}
    assert page.tab.locator("table[aria-label='First rows'] tbody tr").count() == 5
    page.shot("1-rows")
    page.tab.get_by_role("button", name="Adjust the mapping").click()
    page.tab.get_by_label("Case id from").select_option("qid")
    page.tab.get_by_label("inputs.user from").select_option("question")
    page.tab.get_by_label("Ground truth from").select_option("answer")
    page.tab.get_by_label("Tags from").fill("level")
    page.tab.get_by_label("Tags from").dispatch_event("change")
    page.tab.get_by_role("button", name="Preview the cases").click()
    page.tab.locator("table[aria-label='Previewed cases'] tr[data-case='r0']").wait_for()
    assert "easy" in page.text("table[aria-label='Previewed cases'] tr[data-case='r0']")
    page.shot("2-cases")
    page.tab.get_by_role("button", name="Next: import").click()
    page.tab.get_by_label("Dataset id").fill("animals")
    page.tab.get_by_label("Version").fill("1.0.0")
    page.tab.evaluate("delete document.body.dataset.ready")
    page.tab.get_by_role("button", name="Import", exact=True).click()
    page.tab.wait_for_url(re.compile(r".*/datasets/animals/versions/1\.0\.0$"), timeout=60_000)
    page.ready()
    status, v = api(server + "/datasets/animals/versions/1.0.0")
    assert status == 200 and v["case_count"] == len(rows)
    assert v["produced_by"]["via"] == "upload"
    assert page.text('dd[data-field="case_count"]') == str(len(rows))
    _, cases = api(server + "/datasets/animals/versions/1.0.0/cases?limit=1")
    assert cases["items"][0]["id"] == "r0" and cases["items"][0]["tags"] == ["easy"]
    page.shot("3-landed")


def test_import_wizard_from_the_catalog_a_recipe_and_a_hugging_face_search(
    page: Page, server: str
) -> None:
    # A catalog benchmark, its own recipe's mapping, the first 20 rows
    page.goto("/import")
    page.tab.get_by_label("A catalog benchmark").check()
    page.tab.get_by_label("Benchmark", exact=True).select_option("gsm8k")
    page.tab.get_by_role("button", name="Preview").click()
    page.tab.get_by_role("heading", name="Rows and fields").wait_for()
    assert set(page.tab.locator("code.badge").all_inner_texts()) == {"question", "answer"}
    page.tab.get_by_role("button", name="Adjust the mapping").click()
    assert page.tab.get_by_label("inputs.user from").input_value() == "question"
    page.tab.locator("table[aria-label='Previewed cases'] tbody tr").first.wait_for()
    page.tab.get_by_role("button", name="Next: import").click()
    page.tab.get_by_label("Dataset id").fill("gsm8k-ui")
    page.tab.get_by_label("Limit").fill("20")
    page.tab.get_by_role("button", name="Import", exact=True).click()
    page.tab.wait_for_url(re.compile(r".*/datasets/gsm8k-ui/versions/[^/]+$"), timeout=60_000)
    page.ready()
    _, v = api(server + "/datasets/gsm8k-ui/versions/latest")
    assert v["case_count"] == 20 and v["produced_by"]["recipe"]["id"] == "gsm8k"
    assert page.text('dd[data-field="case_count"]') == "20"
    # A registered recipe (its rows inline), chosen from the tenant's recipes
    rows = "".join(json.dumps({"q": f"Q{i}?", "a": str(i)}) + "\n" for i in range(4))
    recipe = {
        "id": "inline-qa",
        "version": "1.0.0",
        "category": "qa",
        "source": {"kind": "jsonl", "text": rows},
        "mapping": {"task_field": "q", "answer_field": "a"},
    }
    assert api(server + "/recipes", "POST", recipe)[0] == 201
    page.goto("/import")
    page.tab.get_by_label("A registered recipe").check()
    page.tab.get_by_label("Recipe", exact=True).select_option("inline-qa")
    page.tab.get_by_role("button", name="Preview").click()
    page.tab.get_by_role("button", name="Adjust the mapping").click()
    page.tab.locator("table[aria-label='Previewed cases'] tbody tr").first.wait_for()
    page.tab.get_by_role("button", name="Next: import").click()
    page.tab.get_by_role("button", name="Import", exact=True).click()
    page.tab.wait_for_url(re.compile(r".*/datasets/inline-qa/versions/[^/]+$"), timeout=60_000)
    page.ready()
    _, v = api(server + "/datasets/inline-qa/versions/latest")
    assert v["case_count"] == 4 and v["produced_by"]["recipe"]["id"] == "inline-qa"
    # A Hugging Face dataset found by search, with a new mapping guessed from its fields
    page.goto("/import")
    page.tab.get_by_label("A Hugging Face dataset").check()
    page.tab.get_by_label("Search Hugging Face").fill("parq")
    page.tab.get_by_role("button", name="Search", exact=True).click()
    page.tab.get_by_text("datasets found").wait_for()
    page.tab.get_by_label("Dataset", exact=True).select_option("acme/parq")
    page.tab.locator("select option", has_text="default / test").wait_for(state="attached")
    page.tab.get_by_role("button", name="Preview").click()
    page.tab.get_by_role("button", name="Adjust the mapping").click()
    assert page.tab.get_by_label("Ground truth from").input_value() == "answer"
    page.tab.locator("table[aria-label='Previewed cases'] tbody tr").first.wait_for()
    page.tab.get_by_role("button", name="Next: import").click()
    page.tab.get_by_label("Dataset id").fill("parq-ui")
    page.tab.get_by_role("button", name="Import", exact=True).click()
    page.tab.wait_for_url(re.compile(r".*/datasets/parq-ui/versions/[^/]+$"), timeout=60_000)
    page.ready()
    _, v = api(server + "/datasets/parq-ui/versions/latest")
    assert v["case_count"] == 120 and v["produced_by"]["source"]["dataset"] == "acme/parq"
    page.shot("hf")


def test_a_subset_built_in_the_browser_is_stamped_then_registered(page: Page, server: str) -> None:
    two_versions(server, "sub")
    page.goto("/datasets/sub/versions/1.0.0/subset")
    page.tab.get_by_label("Tags").fill("hard")
    page.tab.get_by_role("button", name="Preview the selection").click()
    page.tab.locator('[data-field="selected"]').wait_for()
    _, expected = api(server + "/datasets/sub/versions/1.0.0/subset", "POST", {"tags": ["hard"]})
    stamp = expected["stamp"]
    assert page.text('[data-field="selected"]') == (
        f"{stamp['selected']} of {stamp['total']} cases selected from sub@1.0.0"
    )
    shown = page.tab.locator("table[aria-label='Selected cases'] tbody tr")
    assert shown.count() == len(expected["case_ids"])
    assert api(server + "/datasets/sub-hard")[0] == 404  # nothing registered by a preview
    page.tab.get_by_label("Dataset id").fill("sub-hard")
    page.tab.get_by_label("Version", exact=True).fill("1.0.0")
    page.tab.get_by_role("button", name="Register this subset").click()
    page.tab.get_by_role("link", name="Open sub-hard@1.0.0").wait_for()
    page.shot("registered")
    _, v = api(server + "/datasets/sub-hard/versions/1.0.0")
    assert v["case_count"] == stamp["selected"]
    assert v["produced_by"]["via"] == "subset"
    assert v["produced_by"]["selection"] == {"tags": ["hard"]}


def test_the_export_panel_shows_the_prefix_the_api_answers(page: Page, server: str) -> None:
    two_versions(server, "exp")
    page.goto("/datasets/exp/versions/1.1.0/export")
    # The panel offers the formats the export route's request schema names
    _, doc = api(server + "/openapi.json")
    schemas = doc["components"]["schemas"]
    fmt = schemas["ExportRequest"]["properties"]["format"]
    alternatives = [fmt, *fmt.get("anyOf", []), *fmt.get("oneOf", [])]
    alternatives = [schemas[a["$ref"].split("/")[-1]] if "$ref" in a else a for a in alternatives]
    expected = [
        v for a in alternatives for v in a.get("enum", [a["const"]] if "const" in a else [])
    ]
    assert page.tab.get_by_label("Format").locator("option").all_inner_texts() == expected
    page.tab.get_by_label("Limit").fill("2")
    page.tab.get_by_role("button", name="Export", exact=True).click()
    page.tab.locator('[data-field="prefix"]').wait_for()
    _, res = api(
        server + "/datasets/exp/versions/1.1.0/exports",
        "POST",
        {"format": "case-dirs", "subset": {"limit": 2}},
    )
    assert res["reused"] is True  # the browser's export, asked again
    assert page.text('[data-field="prefix"]') == res["prefix"]
    if res.get("test_data_ref"):
        shown = json.loads(page.text('[data-field="test_data_ref"]'))
        assert shown == {"test_data_ref": res["test_data_ref"]}
    page.shot("export")


def test_case_content_is_shown_as_text_and_never_runs(page: Page, server: str) -> None:
    register(
        server,
        {
            "id": "xss",
            "version": "1.0.0",
            "description": XSS,
            "tags": [XSS],
            "shared_files": [{"dest": "docs/notes.md", "text": MD_ATTACK}],
            "cases": [
                {
                    "id": "evil",
                    "inputs": {"user": XSS},
                    "expectations": {"ground_truth": XSS},
                    "tags": [XSS],
                    "metadata": {"note": XSS},
                    "env": {
                        "kind": "repo",
                        "source": {"files": {"README.md": MD_ATTACK, "x.py": XSS}},
                    },
                    "files": {
                        "notes.md": {"text": MD_ATTACK},
                        "page.html": {"text": XSS},
                        "blob.bin": {"base64": base64.b64encode(bytes(range(256))).decode()},
                    },
                },
                {"id": "md-input", "inputs": {"user": MD_ATTACK}},
            ],
        },
    )
    no_markup = """() => ({
        onerror: document.querySelectorAll('[onerror]').length,
        imgs: document.querySelectorAll('main img').length,
        scripts: document.querySelectorAll('main script').length,
        js_links: [...document.querySelectorAll('a[href]')]
            .filter(a => !/^(https?:|\\/|#|mailto:)/i.test(a.getAttribute('href'))).length,
    })"""
    clean = {"onerror": 0, "imgs": 0, "scripts": 0, "js_links": 0}
    for path in ("/", "/datasets/xss", "/datasets/xss/versions/1.0.0"):
        page.goto(path)
        page.tab.wait_for_timeout(300)
        assert page.tab.evaluate(no_markup) == clean, path
    assert XSS in page.tab.locator("table[aria-label=Cases]").inner_text()
    page.tab.wait_for_selector("figure svg[role=img]")
    # A shared file is read from the file route and rendered as inert as a case's
    page.tab.get_by_role("button", name="Show docs/notes.md").click()
    shared = page.tab.locator('[data-file="docs/notes.md"] .markdown')
    shared.wait_for()
    assert shared.get_by_role("link").all_inner_texts() == ["ok"]
    assert page.tab.evaluate(no_markup) == clean
    # A search for the markup finds the case and shows it as text
    page.tab.get_by_role("searchbox", name="Search cases").fill("onerror")
    page.tab.get_by_role("button", name="Search", exact=True).click()
    page.tab.get_by_text("every case searched").wait_for()
    assert page.tab.locator("table[aria-label=Cases] tbody tr").count() == 1
    assert page.tab.evaluate(no_markup) == clean
    page.goto("/datasets/xss/versions/1.0.0/cases/evil")
    page.tab.get_by_role("button", name="Show notes.md").click()
    page.tab.get_by_role("button", name="Show page.html").click()
    notes = page.tab.locator('[data-file="notes.md"] .markdown')
    notes.wait_for()
    page.tab.locator('[data-file="page.html"] pre').wait_for()
    assert page.tab.evaluate(no_markup) == clean
    # The Markdown's unsafe links are plain text; the safe one stays a link
    assert notes.get_by_role("link").all_inner_texts() == ["ok"]
    assert notes.locator(".md-unsafe-link").all_inner_texts() == ["the docs"]
    assert "<script>alert(2)</script>" in notes.inner_text()
    assert page.tab.locator('[data-file="page.html"] pre').inner_text() == XSS
    assert XSS in page.tab.locator("section[aria-labelledby=s-inputs]").inner_text()
    assert page.tab.get_by_role("button", name="Show as Markdown").count() == 0  # not Markdown
    # Code is highlighted (as spans of text); a binary file is its size, digest and a download
    assert page.tab.locator('[data-env-file="x.py"] pre.code .tok-number').inner_text() == "1"
    page.tab.get_by_role("button", name="Show blob.bin").click()
    blob = page.tab.locator('[data-file="blob.bin"]')
    blob.get_by_role("button", name="Download blob.bin").wait_for()
    assert "Binary file, 256 B" in blob.inner_text() and "sha256:" in blob.inner_text()
    with page.tab.expect_download() as got:
        blob.get_by_role("button", name="Download blob.bin").click()
    assert Path(got.value.path()).read_bytes() == bytes(range(256))
    readme = page.tab.locator('[data-env-file="README.md"] .markdown')
    assert readme.get_by_role("link").all_inner_texts() == ["ok"]
    page.shot("xss")
    # An input that looks like Markdown can be read rendered: still nothing runs
    page.goto("/datasets/xss/versions/1.0.0/cases/md-input")
    page.tab.get_by_role("button", name="Show as Markdown").click()
    rendered = page.tab.locator("section[aria-labelledby=s-inputs] .markdown")
    assert rendered.get_by_role("link").all_inner_texts() == ["ok"]
    assert page.tab.evaluate(no_markup) == clean
    page.tab.get_by_role("button", name="Show as text").click()
    assert rendered.is_hidden()
    assert page.dialogs == []


def test_keyboard_reaches_every_page_and_every_control_is_labelled(page: Page, server: str) -> None:
    two_versions(server, "keys")
    unnamed = """() => [...document.querySelectorAll(
            'main input, main select, main textarea, main button, nav a, main a')]
        .filter(el => !el.closest('[hidden]'))
        .filter(el => {
            const label = el.labels && el.labels.length
                ? [...el.labels].map(l => l.textContent).join(' ') : '';
            const aria = el.getAttribute('aria-label') || '';
            const by = (el.getAttribute('aria-labelledby') || '').split(' ').filter(Boolean)
                .map(id => (document.getElementById(id) || {}).textContent || '').join(' ');
            return !(label.trim() || aria.trim() || by.trim() || (el.textContent || '').trim());
        }).map(el => el.outerHTML.slice(0, 120))"""
    pages = [
        "/",
        "/datasets/keys",
        "/datasets/keys/versions/1.1.0",
        "/datasets/keys/versions/1.1.0/cases/essay",
        "/datasets/keys/diff?base=1.0.0&candidate=1.1.0",
        "/datasets/keys/versions/1.1.0/subset",
        "/datasets/keys/versions/1.1.0/export",
        "/import",
    ]
    for path in pages:
        page.goto(path)
        assert page.tab.evaluate(unnamed) == [], path
        assert page.tab.locator("h1").count() == 1, path
    # From the top of the list: the skip link first, then the menu, then the page
    page.goto("/")
    page.tab.keyboard.press("Tab")
    assert page.tab.evaluate("document.activeElement.textContent") == "Skip to content"
    page.tab.keyboard.press("Enter")
    focused = []
    for _ in range(80):  # past the search box, the import link and every dataset before it
        page.tab.keyboard.press("Tab")
        focused.append(page.tab.evaluate("document.activeElement.textContent.trim()"))
        if focused[-1] == "keys":
            break
    assert focused[-1] == "keys", focused
    assert "caseshelf" not in focused  # the skip link jumped past the menu
    page.tab.evaluate("delete document.body.dataset.ready")
    page.tab.keyboard.press("Enter")
    page.ready()
    assert page.tab.url.endswith("/datasets/keys")
    # The new page's heading has the focus, so a screen reader starts there
    assert page.tab.evaluate("document.activeElement.tagName") == "H1"
    page.shot("keyboard")


def test_swagger_shows_every_operation_of_the_merged_document(page: Page, server: str) -> None:
    _, doc = api(server + "/openapi.json")
    methods = {"get", "post", "put", "delete", "patch"}
    operations = sum(1 for item in doc["paths"].values() for m in item if m in methods)
    assert operations >= 33
    resp = page.tab.goto(server + "/swagger")
    assert "script-src 'self'" in resp.headers["content-security-policy"]
    page.tab.wait_for_selector(".opblock", timeout=20_000)
    assert page.tab.locator(".opblock").count() == operations
    for route in ("/datasets/{id}/diff", "/uploads", "/jobs/{id}", "/benchmarks"):
        assert page.tab.locator(f'.opblock-summary-path[data-path="{route}"]').count() >= 1, route
    page.shot("swagger")


def test_the_deployed_pages_function_sends_the_uis_page_paths_to_index_html(
    page: Page, server: str
) -> None:
    # The CloudFront Function of the template, run as JavaScript: what it leaves alone is a
    # file of the bucket; every UI page path becomes the one document, as on the local server.
    code = load_template()["Resources"]["UiPagesFunction"]["Properties"]["FunctionCode"]
    page.tab.goto("about:blank")
    uris = [
        "/static/app.js",
        "/static/pages/diff.js",
        "/config.json",
        "/openapi.json",
        "/",
        "/datasets",
        "/datasets/gsm8k/diff",
        "/import",
        "/datasets/a/versions/1/cases/b",
    ]
    got = page.tab.evaluate(
        f"uris => {{ {code}; return uris.map(u => handler({{request: {{uri: u}}}}).uri); }}", uris
    )
    assert got == uris[:4] + ["/index.html"] * 5


def test_the_url_filter_and_the_line_diff_as_the_pages_use_them(page: Page) -> None:
    page.goto("/")
    urls = [
        "javascript:alert(1)",
        " JaVaScRiPt:alert(1)",
        "java\tscript:alert(1)",
        "\u0001javascript:alert(1)",
        "data:text/html,<b>x</b>",
        "vbscript:msgbox(1)",
        "https://example.org/a?b=c",
        "http://example.org",
        "mailto:team@example.org",
        "/datasets/x",
        "#top",
        "docs/readme.md",
    ]
    got = page.tab.evaluate(
        "async urls => (await import('/static/dom.js')).safeUrl && "
        "urls.map((await import('/static/dom.js')).safeUrl)",
        urls,
    )
    assert got[:6] == [None] * 6
    assert got[6:] == [
        "https://example.org/a?b=c",
        "http://example.org/",
        "mailto:team@example.org",
        "/datasets/x",
        "#top",
        "docs/readme.md",
    ]
    ops = page.tab.evaluate(
        "async ([a, b]) => (await import('/static/linediff.js')).lineDiff(a, b)"
        ".map(o => o.op + o.text)",
        ["a\nb\nc\nd", "a\nB\nc\nd\ne"],
    )
    assert ops == [" a", "-b", "+B", " c", " d", "+e"]


FOLLOW = """async (alive) => {
  const waits = [];
  const shown = [];
  const real = window.setTimeout;
  window.setTimeout = (fn, ms) => { waits.push(ms); return real(fn, 0); };
  try {
    const { followJob } = await import('/static/api.js');
    const start = { id: "j1", url: "/jobs/j1", state: "pending" };
    const job = await followJob(start, (j) => shown.push(j.state), () => alive);
    return { waits, shown, state: job && job.state };
  } finally {
    window.setTimeout = real;
  }
}"""


def test_a_job_is_looked_at_soon_then_at_most_once_a_second(page: Page) -> None:
    # Given a job that is still running at its first seven looks and done at the eighth (the
    # page's waits recorded, not waited)
    looks: list[str] = []

    def answer(route: Any) -> None:
        looks.append(route.request.url)
        state = "succeeded" if len(looks) == 8 else "running"
        body = {"id": "j1", "url": "/jobs/j1", "state": state}
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    page.goto("/")
    page.tab.route("**/jobs/j1", answer)
    # When the UI follows it
    got = page.tab.evaluate(FOLLOW, True)
    # Then it looks after 100 ms, then twice as long each time, up to once a second, and shows
    # each state it saw until the job ended
    assert got["waits"] == [100, 200, 400, 800, 1000, 1000, 1000, 1000]
    assert got["shown"] == ["pending"] + ["running"] * 7
    assert got["state"] == "succeeded" and len(looks) == 8
    # And a page that was left stops after its wait, without another look
    looks.clear()
    assert page.tab.evaluate(FOLLOW, False) == {"waits": [100], "shown": ["pending"], "state": None}
    assert looks == []


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_sign_in_by_code_and_pkce_sends_the_id_token_to_the_api(page: Page, server: str) -> None:
    # A deployed UI's sign-in, the user pool's endpoints stood in for by the browser's routes
    # (same origin, so the local CSP applies unchanged)
    two_versions(server, "signed")
    domain = server + "/_sign-in"
    config = {
        "api": "",
        "openapi": "/openapi.json",
        "auth": {"domain": domain, "client_id": "ui-client", "redirect_uri": server + "/"},
    }
    claims = {
        "sub": "alice-sub",
        "email": "alice@example.org",
        "custom:tenant": "local",
        "exp": int(time.time()) + 3600,
    }
    token = f"{_b64url(b'{}')}.{_b64url(json.dumps(claims).encode())}.signature"
    seen: dict[str, Any] = {}

    def back_to(url: str) -> str:
        return f'<!doctype html><meta http-equiv="refresh" content="0;url={url}">'

    def authorize(route: Any) -> None:
        q = parse_qs(urlsplit(route.request.url).query)
        seen["authorize"] = q
        code_back = f"{q['redirect_uri'][0]}?code=the-code&state={q['state'][0]}"
        route.fulfill(status=200, content_type="text/html", body=back_to(code_back))

    def token_endpoint(route: Any) -> None:
        form = parse_qs(route.request.post_data)
        seen["token"] = form
        challenge = _b64url(hashlib.sha256(form["code_verifier"][0].encode()).digest())
        ok = challenge == seen["authorize"]["code_challenge"][0] and form["code"] == ["the-code"]
        route.fulfill(status=200 if ok else 400, json={"id_token": token} if ok else {})

    def logout(route: Any) -> None:
        q = parse_qs(urlsplit(route.request.url).query)
        route.fulfill(status=200, content_type="text/html", body=back_to(q["logout_uri"][0]))

    page.tab.route(server + "/config.json", lambda route: route.fulfill(json=config))
    # The deployed API answers /me from the token's claims (the local server acts as its own
    # principal whatever the token): its answer for this token
    me = {
        "tenant": "local",
        "principal": "alice-sub",
        "roles": [],
        "admin": False,
        "reads": ["local", "_shared"],
        "writes_shared": False,
    }
    page.tab.route(server + "/me", lambda route: route.fulfill(json=me))
    page.tab.route(domain + "/oauth2/authorize?*", authorize)
    page.tab.route(domain + "/oauth2/token", token_endpoint)
    page.tab.route(domain + "/logout?*", logout)
    sent: list[str | None] = []
    page.tab.on(
        "request",
        lambda r: (
            sent.append(r.headers.get("authorization"))
            if r.resource_type == "fetch" and r.url.startswith(server + "/datasets")
            else None
        ),
    )
    page.tab.goto(server + "/datasets/signed")
    page.tab.get_by_role("heading", name="Sign in").wait_for()
    assert sent == []  # nothing asked of the API before signing in
    page.tab.get_by_role("main").get_by_role("button", name="Sign in").click()
    page.tab.wait_for_url(server + "/datasets/signed")
    page.ready()
    q = seen["authorize"]
    assert q["client_id"] == ["ui-client"] and q["response_type"] == ["code"]
    assert q["code_challenge_method"] == ["S256"] and "client_secret" not in seen["token"]
    assert seen["token"]["grant_type"] == ["authorization_code"]
    assert sent and all(h == token for h in sent)
    assert "alice@example.org · local" in page.text("header nav")
    # Not the creator (local) and not an admin: no delete or revive is offered; tags are
    assert page.tab.get_by_role("button", name=re.compile("^(Delete|Revive) ")).count() == 0
    assert page.tab.get_by_role("button", name="Save tags").count() == 2
    page.shot("signed-in")
    page.tab.get_by_role("button", name="Sign out").click()
    page.tab.get_by_role("heading", name="Sign in").wait_for()
    assert page.tab.evaluate("sessionStorage.getItem('caseshelf.auth')") is None
