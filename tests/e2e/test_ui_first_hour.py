"""The web UI's first hour, in a real browser (the system Chromium, driven by Playwright) against
`caseshelf serve` on a temporary store: an export handed over as a download, a large diff read
at a glance (fields changed, a filter by field path, words marked), cases read as text with a
file tree, pages of their own for what does not exist, and a search of the whole version.

Each scenario saves screenshots under `$CASESHELF_TEST_ARTIFACTS/<test name>/` when that is set,
else in its temporary directory."""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.browser import api, chromium, missing_browser, serve
from tests.e2e.test_ui_browser import Page, register, shots_dir

pytestmark = [pytest.mark.e2e]

_why = missing_browser()
if _why:
    pytestmark.append(pytest.mark.skip(reason=_why))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("ui-first-hour")
    with serve(root / "home", log=root / "serve.log") as url:
        yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with chromium(tmp_path_factory.mktemp("ui-first-hour-profile") / "profile") as context:
        yield context


@pytest.fixture
def page(browser: Any, server: str, request: pytest.FixtureRequest) -> Iterator[Page]:
    p = Page(browser, server, shots_dir(request))
    p.requests: list[str] = []  # type: ignore[misc]
    p.tab.on("request", lambda r: p.requests.append(r.url))  # type: ignore[attr-defined]
    yield p
    p.shot("last")
    p.tab.close()
    assert not p.errors, p.errors


QUESTION = "Janet has 3 apples and buys 4 more. How much fruit does she have now?"


def gsm_like(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"gsm8k-{i}",
            "inputs": {"user": f"{QUESTION} (case {i})"},
            "expectations": {"ground_truth": str(i)},
            "metadata": {"row": i},
            "tags": ["math"],
        }
        for i in range(n)
    ]


def download(page: Page, locator: Any, name: str | None = None) -> bytes:
    """The body of the download `locator`'s click starts; `name`: the file name the browser
    must suggest for it (the server's Content-Disposition)."""
    with page.tab.expect_download() as got:
        locator.click()
    if name is not None:
        assert got.value.suggested_filename == name
    return Path(got.value.path()).read_bytes()


def test_an_export_is_handed_over_as_a_download(page: Page, server: str) -> None:
    # Given a version without files
    cases = gsm_like(12)
    register(server, {"id": "dl", "version": "1.0.0", "description": "d", "cases": cases})
    page.goto("/datasets/dl/versions/1.0.0")
    # The version's first actions are its own; the export (and EvalHub) is under "Export…"
    toolbar = page.tab.locator("main .toolbar").first
    assert "EvalHub" not in toolbar.locator("a, button").all_inner_texts()
    page.tab.get_by_text("Export…").click()
    menu = page.tab.locator("details.menu")
    assert "EvalHub" in menu.inner_text()
    # When the dataset document is downloaded, then it is the version, as the API renders it
    document = menu.locator('[data-download-format="document"]')
    doc = json.loads(download(page, document, "dl-1.0.0.json"))
    assert [c["id"] for c in doc["cases"]] == [c["id"] for c in cases]
    status, checked = api(server + "/datasets/validate", "POST", doc)
    assert status == 200, checked
    _, v = api(server + "/datasets/dl/versions/1.0.0")
    assert checked["content_digest"] == v["content_digest"]
    # And jsonl is its one file; case-dirs a .tar.gz holding every case directory; each saved
    # under the version's name, not the stored object's
    rows = download(page, menu.locator('[data-download-format="jsonl"]'), "dl-1.0.0.jsonl")
    assert [json.loads(line)["id"] for line in rows.splitlines()] == [c["id"] for c in cases]
    dirs = menu.locator('[data-download-format="case-dirs"]')
    bundle = download(page, dirs, "dl-1.0.0.case-dirs.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(bundle), mode="r:gz") as tar:
        names = tar.getnames()
    assert any(n.endswith("manifest.json") for n in names)
    assert sum(n.endswith("input.yaml") for n in names) == len(cases)
    page.shot("1-menu")
    # And the export panel's result offers its download too
    page.goto("/datasets/dl/versions/1.0.0/export")
    assert "EvalHub" in page.tab.get_by_role("group", name="EvalHub").inner_text()
    page.tab.get_by_label("Format").select_option("parquet")
    page.tab.get_by_label("Limit").fill("5")
    page.tab.get_by_role("button", name="Export", exact=True).click()
    link = page.tab.locator('a[data-download="file"]')
    link.wait_for()
    body = download(page, link, "dl-1.0.0.parquet")
    assert body[:4] == b"PAR1" and body[-4:] == b"PAR1"
    page.shot("2-panel")


def large_diff(server: str) -> None:
    v1 = gsm_like(300)
    v2 = [dict(c) for c in v1[2:]]  # gsm8k-0 and gsm8k-1 removed
    for c in v2[:120]:  # 120 answers
        c["expectations"] = {"ground_truth": c["expectations"]["ground_truth"] + "!"}
    for c in v2[200:210]:  # 10 questions, one word
        c["inputs"] = {"user": c["inputs"]["user"].replace("How much", "Exactly how much")}
    for c in v2[250:255]:  # 5 metadata
        c["metadata"] = {"row": c["metadata"]["row"], "source": "fixed"}
    v2 += [{"id": f"new-{i}", "inputs": {"user": "new"}} for i in range(3)]
    register(server, {"id": "big", "version": "1.0.0", "cases": v1})
    register(server, {"id": "big", "version": "1.1.0", "cases": v2})


def test_a_large_diff_reads_at_a_glance_and_filters_by_field(page: Page, server: str) -> None:
    large_diff(server)
    q = "base=1.0.0&candidate=1.1.0"
    _, summary = api(f"{server}/datasets/big/diff?{q}&summary=true&fields=true")
    page.goto(f"/datasets/big/diff?{q}")
    # The summary names each field changed with the API's count of cases, one bar each
    rows = page.tab.locator("table[aria-label='Fields changed'] tbody tr")
    shown = [
        (r.get_attribute("data-field-path"), r.locator("td.num").inner_text()) for r in rows.all()
    ]
    assert shown == [(f["path"], str(f["cases"])) for f in summary["fields"]["paths"]]
    assert shown == [
        ("/expectations/ground_truth", "120"),
        ("/inputs/user", "10"),
        ("/metadata/source", "5"),
    ]
    for kind in ("added", "removed", "changed"):
        assert page.text(f'[data-count="{kind}"] .n') == str(summary["summary"][kind])
    assert rows.first.locator("svg rect").count() == 1
    # And the first page's "Show more" sits under the list it fills, the changed cases
    page.tab.wait_for_selector("#changed-h")
    assert page.tab.locator("section[aria-labelledby=changed-h] button[data-more]").is_visible()
    # Each changed case names its field; "Expand all" opens every one shown
    first = page.tab.locator('details[data-case="gsm8k-2"]')
    assert "/expectations/ground_truth" in first.locator("summary").inner_text()
    assert page.tab.locator("details[data-case][open]").count() == 0
    page.tab.get_by_role("button", name="Expand all").click()
    assert page.tab.locator("details[data-case]:not([open])").count() == 0
    page.shot("1-summary")
    # When filtered by a field (its bar's link), only those cases and changes come
    page.click_and_wait(page.tab.get_by_role("link", name="/inputs/user", exact=True))
    assert parse_qs(urlsplit(page.tab.url).query)["path"] == ["/inputs/user"]
    page.tab.wait_for_selector("#changed-h")
    assert page.text("#changed-h") == "Changed at /inputs/user (10)"
    changed = page.tab.locator("section[aria-labelledby=changed-h] details[data-case]")
    assert changed.count() == 10
    assert page.tab.locator("#added-h").count() == 0
    # Then the changed words are marked, the rest of the text is not
    one = page.tab.locator('details[data-case="gsm8k-202"]')
    assert one.get_attribute("open") is not None  # ten or fewer: open from the start
    after = one.locator("pre.after")
    assert after.inner_text() == f"{QUESTION.replace('How much', 'Exactly how much')} (case 202)"
    marked = "".join(after.locator("ins").all_inner_texts())
    assert "Exactly" in marked and "Janet" not in marked and "fruit" not in marked
    assert "".join(one.locator("pre.before del").all_inner_texts()).strip() in ("How", "How much")
    page.shot("2-filtered")
    # And the filter box takes any path, under which changes count
    page.tab.get_by_label("Field path", exact=True).fill("/expectations")
    page.click_and_wait(page.tab.get_by_role("button", name="Filter", exact=True))
    page.tab.wait_for_selector("#changed-h")
    assert page.text("#changed-h") == "Changed at /expectations (120)"
    page.click_and_wait(page.tab.get_by_role("link", name="Show every change"))
    assert "path=" not in page.tab.url


def test_field_counts_not_yet_complete_read_as_at_least(page: Page, server: str) -> None:
    # Given a diff of 8 changed cases: 6 answers, 2 metadata
    v1 = gsm_like(20)
    v2 = [dict(c) for c in v1]
    for c in v2[:6]:
        c["expectations"] = {"ground_truth": "changed"}
    for c in v2[10:12]:
        c["metadata"] = {"row": c["metadata"]["row"], "source": "fixed"}
    register(server, {"id": "parts", "version": "1.0.0", "cases": v1})
    register(server, {"id": "parts", "version": "1.1.0", "cases": v2})
    # And a server that answers the counts of the first 3 changed cases only, as AWS answers a
    # diff of more than 50,000 (then, in the second part, the whole counts on the next ask)
    answers: list[int] = []
    finish = {"on": False}

    def counted_in_parts(route: Any) -> None:
        real = route.fetch()
        body = real.json()
        if not (finish["on"] and answers):
            body["fields"] = {
                "paths": [{"path": "/expectations/ground_truth", "cases": 3}],
                "other_paths": 0,
                "counted": 3,
                "complete": False,
            }
        answers.append(body["fields"]["counted"])
        route.fulfill(response=real, json=body)

    page.tab.route(re.compile(r".*/datasets/parts/diff\?.*summary=true.*"), counted_in_parts)
    q = "base=1.0.0&candidate=1.1.0"
    # When the diff page opens on counts that are not complete (and stay so)
    page.goto(f"/datasets/parts/diff?{q}")
    # Then each count reads as "at least", and a note says how far they are
    cell = page.tab.locator("table[aria-label='Fields changed'] td.num")
    assert cell.all_inner_texts() == ["≥ 3"]
    note = page.text("[data-fields-note]")
    assert "first 3 of 8 changed cases" in note and "at least" in note
    page.shot("1-partial")
    # When the next ask counts the rest, then the page draws the whole counts, without a note
    finish["on"] = True
    answers.clear()
    page.goto(f"/datasets/parts/diff?{q}")
    page.tab.wait_for_selector("[data-fields-note]", state="detached")
    rows = page.tab.locator("table[aria-label='Fields changed'] tbody tr")
    shown = [
        (r.get_attribute("data-field-path"), r.locator("td.num").inner_text()) for r in rows.all()
    ]
    assert shown == [("/expectations/ground_truth", "6"), ("/metadata/source", "2")]
    assert answers == [3, 8]
    page.shot("2-counted")


def test_a_case_reads_as_text_with_its_files_as_a_tree(page: Page, server: str) -> None:
    # Given a task with a multi-line instruction, a multi-line note and 34 files
    long_id = "terminal-bench/fix-the-broken-build-with-a-very-long-identifier-0001"
    files = {f"src/pkg/mod{i:02d}.py": {"text": f"x = {i}\n"} for i in range(30)}
    files.update({f"tests/test_{i}.py": {"text": "def test():\n    pass\n"} for i in range(3)})
    files["README.md"] = {"text": "# Task\n\nFix it.\n"}
    case = {
        "id": long_id,
        "inputs": {"user": "Step one.\nStep two.\nStep three."},
        "metadata": {"notes": "first line\nsecond line", "difficulty": "hard"},
        "files": files,
    }
    register(server, {"id": "tb", "version": "1.0.0", "cases": [case]})
    page.goto("/datasets/tb/versions/1.0.0")
    # The pictures sit above the cases; the id is one unbroken token
    pictures = page.tab.locator("#pictures-h").bounding_box()
    cases_h = page.tab.locator("#cases-h").bounding_box()
    assert pictures and cases_h and pictures["y"] < cases_h["y"]
    cell = page.tab.locator("table[aria-label=Cases] td.id").first
    assert cell.evaluate("el => getComputedStyle(el).whiteSpace") == "nowrap"
    page.shot("1-version")
    page.click_and_wait(page.tab.get_by_role("link", name=long_id))
    assert page.tab.locator("h1").evaluate("el => getComputedStyle(el).whiteSpace") == "nowrap"
    # The text keeps its line breaks, never a JSON string full of \n
    inputs = page.tab.locator("section[aria-labelledby=s-inputs] pre").first
    assert inputs.inner_text() == "Step one.\nStep two.\nStep three."
    meta = page.tab.locator("section[aria-labelledby=s-metadata]")
    assert "\\n" not in meta.inner_text()
    assert meta.locator("pre", has_text="first line").inner_text() == "first line\nsecond line"
    # And the 34 files are a tree, one open at a time, its body read as it is opened
    tree = page.tab.locator("section[aria-labelledby^=s-files] .filetree")
    assert tree.locator("nav button[data-tree-file]").count() == 34
    assert tree.locator(".open-file [data-file]").count() == 1
    opened = tree.locator('.open-file [data-file="README.md"] .markdown')
    opened.wait_for()
    tree.locator('button[data-tree-file="src/pkg/mod07.py"]').click()
    body = tree.locator('.open-file [data-file="src/pkg/mod07.py"] pre')
    body.wait_for()
    assert body.inner_text().strip() == "x = 7"
    assert tree.locator(".open-file [data-file]").count() == 1
    current = tree.locator('button[aria-current="true"]')
    assert current.get_attribute("data-tree-file") == "src/pkg/mod07.py"
    page.shot("2-case")


def test_what_does_not_exist_gets_a_page_of_its_own(page: Page, server: str) -> None:
    register(server, {"id": "here", "version": "1.1.0", "cases": gsm_like(3)})
    for url in (
        "/datasets/nope",
        "/datasets/nope/versions/1.0.0",
        "/datasets/here/versions/9.9.9",
        "/datasets/here/versions/1.1.0/cases/nope",
    ):
        page.expected_failures.add(server + url)
    page.expected_failures.add(server + "/datasets/nope/versions?include_deleted=true&limit=1000")
    page.expected_failures.add(server + "/datasets/nope/versions/1.0.0/cases?limit=50")
    page.expected_failures.add(server + "/datasets/here/versions/9.9.9/cases?limit=50")
    # An unknown case: named with its version, the path above it, and a way back
    page.goto("/datasets/here/versions/1.1.0/cases/nope")
    assert page.text("h1") == "Not found"
    assert page.text("[data-not-found]") == "no case 'nope' in here@1.1.0"
    crumbs = page.tab.locator(".crumbs a").all_inner_texts()
    assert crumbs == ["Datasets", "here", "1.1.0"]
    back = page.tab.get_by_role("link", name="Back to here@1.1.0")
    assert back.get_attribute("href") == "/datasets/here/versions/1.1.0"
    api_calls = [u for u in page.requests if "/static/" not in u]  # type: ignore[attr-defined]
    assert not [u for u in api_calls if "/subset" in u]  # never the subset route
    page.shot("1-case")
    # An unknown version and an unknown dataset: the API's words, and the way back up
    page.goto("/datasets/here/versions/9.9.9")
    assert page.text("h1") == "Not found" and "9.9.9" in page.text("[data-not-found]")
    assert page.tab.get_by_role("link", name="Back to here").get_attribute("href") == (
        "/datasets/here"
    )
    page.shot("2-version")
    page.goto("/datasets/nope")
    assert page.text("h1") == "Not found" and "nope" in page.text("[data-not-found]")
    page.click_and_wait(page.tab.get_by_role("link", name="Back to Datasets"))
    assert urlsplit(page.tab.url).path == "/datasets"


def test_a_search_covers_the_whole_version_in_pages(page: Page, server: str) -> None:
    # Given 6,000 cases, one holding a rare word at the end, and every 100th "ninety"
    cases = [
        {
            "id": f"s{i:05d}",
            "inputs": {"user": f"question {i}" + (" ninety" if i % 100 == 0 else "")},
        }
        for i in range(6000)
    ]
    cases[-1]["inputs"]["user"] += " zebra"
    register(server, {"id": "wide", "version": "1.0.0", "cases": cases})
    page.goto("/datasets/wide/versions/1.0.0")
    # When searching for the rare word, then the one case is found and every case was searched
    before = len(page.requests)  # type: ignore[attr-defined]
    page.tab.get_by_label("Search by").select_option("text")
    page.tab.get_by_role("searchbox", name="Search cases").fill("zebra")
    page.tab.get_by_role("button", name="Search", exact=True).click()
    page.tab.get_by_text("every case searched").wait_for()
    rows = page.tab.locator("table[aria-label=Cases] tbody tr")
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.case)") == ["s05999"]
    asked = [u for u in page.requests[before:] if "q=zebra" in u]  # type: ignore[attr-defined]
    assert len(asked) == 1  # the server searched the whole version in one answer
    page.shot("1-rare")
    # And a common word pages through the server's cursor: 60 matches, 50 then 10
    page.tab.get_by_role("searchbox", name="Search cases").fill("ninety")
    page.tab.get_by_role("button", name="Search", exact=True).click()
    page.tab.get_by_role("button", name="Next page").wait_for()
    assert rows.count() == 50
    assert page.text("#cases-h ~ p[role=status]").startswith(
        "Cases 1\N{EN DASH}50 matching “ninety”"
    )
    page.tab.get_by_role("button", name="Next page").click()
    page.tab.locator('tr[data-case="s05900"]').wait_for()
    assert rows.count() == 10
    _, found = api(server + "/datasets/wide/versions/1.0.0/cases?q=ninety&by=text&limit=1000")
    assert len(found["items"]) == 60 and found["next_cursor"] is None
    page.shot("2-pages")
