"""The browsing routes over the client, in process and over real HTTP: searching a version's
cases (paged, bounded), one file's body, a version's numbers, who the caller is, the dataset
summary's tags, and CORS for a UI on another origin."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import pytest

import caseshelf
from caseshelf.client import Client
from caseshelf.domain.errors import BadRequest, NotFound, TooLarge
from tests.helpers import dev_server, http_call

pytestmark = pytest.mark.integration

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))
README = "# Notes\n\nSee [here](javascript:alert(1)).\n"


def cases(n: int = 40) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for i in range(n):
        case: dict[str, object] = {
            "id": f"q{i:03d}",
            "inputs": {"user": "x" * (i + 1) + (" needle" if i % 10 == 3 else "")},
            "tags": ["Math"] if i % 4 == 0 else [],
        }
        if i == 5:
            case["files"] = {
                "README.md": {"text": README},
                "img/pic.png": {"base64": base64.b64encode(PNG).decode()},
            }
        out.append(case)
    return out


def digest_of(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def register(cs: Client) -> None:
    cs.register(
        "browse",
        cases=cases(),
        version="1.0.0",
        tags=["demo", "math"],
        shared_files=[{"dest": "shared/LICENSE", "text": "MIT\n"}],
    )


def test_a_search_pages_every_match_in_dataset_order(cs: Client) -> None:
    # Given 40 cases, 4 of which hold "needle" in their text and 10 tagged Math
    register(cs)
    # When searching a page at a time for the text
    first = cs.search_cases("browse@1.0.0", "NEEDLE", by="text", limit=3)
    # Then the page holds the first three matches, and a cursor goes on from the third
    assert [c["id"] for c in first.items] == ["q003", "q013", "q023"]
    assert first.next_cursor and first.case_count == 40 and first.scanned_to == 24
    rest = cs.search_cases("browse@1.0.0", "needle", by="text", cursor=first.next_cursor)
    assert [c["id"] for c in rest.items] == ["q033"] and rest.next_cursor is None
    assert rest.scanned_from == 24 and rest.scanned_to == 40
    # And by tag, by id, and by any of them
    assert len(list(cs.search("browse@1.0.0", "math", by="tag"))) == 10
    assert [c.id for c in cs.search("browse@1.0.0", "q00", by="id")] == [
        f"q00{i}" for i in range(10)
    ]
    assert {c.id for c in cs.search("browse", "q039")} == {"q039"}
    # And the cases found are the cases as listed
    listed = {c["id"]: c for c in cs.cases("browse@1.0.0", raw=True)}
    assert all(listed[c["id"]] == c for c in first.items)
    # An empty search is refused, naming q
    with pytest.raises(BadRequest) as err:
        cs.search_cases("browse@1.0.0", "  ")
    assert err.value.fields.get("field") == "q"


def test_a_text_search_stops_at_its_budget_and_says_where(local: Client) -> None:
    # Given a version too large for a search index, and a scan budget of 7 cases a page
    register(local)
    browse = local.transport.services.browse  # type: ignore[attr-defined]
    browse.text_scan_cases = 7
    browse.max_indexed_bytes = 0
    # When searching for text only the last case holds
    page = local.search_cases("browse@1.0.0", "x" * 40, by="text")
    # Then a page stops after 7 cases with no match and a cursor to go on
    assert page.items == [] and page.scanned_to == 7 and page.next_cursor
    found, cursor, pages = [], page.next_cursor, 1
    while cursor:
        more = local.search_cases("browse@1.0.0", "x" * 40, by="text", cursor=cursor)
        found += [c["id"] for c in more.items]
        cursor, pages = more.next_cursor, pages + 1
    assert found == ["q039"] and pages == 6


def test_the_search_index_answers_what_the_scan_does_over_the_whole_version(
    local: Client,
) -> None:
    # Given cases whose text folds case beyond ASCII, holds line breaks, and one file path
    texts = ["Straße", "STRASSE", "Kelvin \u212a", "two\nlines", "a\ttab", "plain"]
    body = [
        {"id": f"t{i}", "inputs": {"user": t}, "metadata": {"n": i}} for i, t in enumerate(texts)
    ]
    body += [{"id": f"pad{i:04d}", "inputs": {"user": "filler"}} for i in range(3000)]
    body.append(
        {"id": "last", "inputs": {"user": "rare word"}, "files": {"docs/x.md": {"text": "a"}}}
    )
    local.register("idx", cases=body, version="1.0.0")
    browse = local.transport.services.browse  # type: ignore[attr-defined]
    browse.text_scan_cases = 500  # the scan: many pages

    def scanned(q: str, by: str) -> list[str]:
        browse.max_indexed_bytes = 0
        try:
            return [c["id"] for c in local.search("idx@1.0.0", q, by=by, raw=True)]
        finally:
            browse.max_indexed_bytes = 1 << 30

    for q, by in [
        ("ss", "text"),
        ("strasse", "any"),
        ("k", "text"),
        ("two lines", "text"),
        ("lines", "text"),
        ("RARE", "any"),
        ("x.md", "text"),
        ("t3", "any"),
        ("a\ttab", "text"),  # a control character: never the index
    ]:
        # When the same search runs over the whole version at once (a scan of the records, the
        # index once kept: tests/integration/test_search_scan.py), then it finds what the
        # bounded scan finds
        indexed = [c["id"] for c in local.search("idx@1.0.0", q, by=by, raw=True)]
        assert indexed == scanned(q, by), q
    # And a rare text is found in one page: the search covers every case at once
    page = local.search_cases("idx@1.0.0", "rare", by="text")
    assert [c["id"] for c in page.items] == ["last"] and page.next_cursor is None
    assert page.scanned_from == 0 and page.scanned_to == len(body)


def test_one_file_is_answered_by_its_digest(cs: Client) -> None:
    # Given a case with a Markdown file and a PNG, and a shared file
    register(cs)
    case = next(c for c in cs.cases("browse@1.0.0", raw=True) if c["id"] == "q005")
    readme, png = case["files"]["README.md"], case["files"]["img/pic.png"]
    # When each is read by its digest, then it is the stored body
    assert cs.file("browse@1.0.0", readme["digest"]) == README.encode()
    assert cs.file("browse@1.0.0", png["digest"]) == PNG
    assert cs.file("browse@1.0.0", digest_of(b"MIT\n")) == b"MIT\n"
    # And a digest the version does not hold is not found
    with pytest.raises(NotFound):
        cs.file("browse@1.0.0", digest_of(b"other"))


def test_a_file_over_the_limit_is_413(local: Client) -> None:
    register(local)
    local.transport.services.browse.max_file_bytes = 100  # type: ignore[attr-defined]
    case = next(c for c in local.cases("browse@1.0.0", raw=True) if c["id"] == "q005")
    with pytest.raises(TooLarge) as err:
        local.file("browse@1.0.0", case["files"]["img/pic.png"]["digest"])
    assert err.value.fields["size"] == len(PNG) and err.value.fields["limit"] == 100


def test_the_files_content_types_and_headers(tmp_path: Path) -> None:
    with dev_server(tmp_path / "srv") as srv, caseshelf.connect(srv.url) as cs:
        register(cs)
        base = f"{srv.url}/datasets/browse/versions/1.0.0/files/"
        text = http_call(base + digest_of(README.encode()))
        binary = http_call(base + digest_of(PNG))
        missing = http_call(base + "sha256:nothex")
    assert text.status == 200 and text.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert binary.status == 200 and binary.headers["Content-Type"] == "application/octet-stream"
    assert binary.body == PNG and "attachment" in binary.headers["Content-Disposition"]
    assert "sandbox" in binary.headers["Content-Security-Policy"]
    assert binary.headers["X-Content-Type-Options"] == "nosniff"
    assert missing.status == 400


def test_stats_count_every_case_and_are_kept_by_content(cs: Client) -> None:
    register(cs)
    stats = cs.stats("browse@1.0.0")
    assert stats.case_count == 40 and stats.id == "browse" and stats.version == "1.0.0"
    assert [(t.tag, t.cases) for t in stats.tags] == [("Math", 10)] and stats.untagged == 30
    assert stats.input_kinds.text == 40
    assert stats.input_length.count == 40 and stats.input_length.min == 1
    lengths = [len(c["inputs"]["user"]) for c in cases()]  # type: ignore[index]
    assert (stats.input_length.max, stats.input_length.total) == (max(lengths), sum(lengths))
    assert sum(b.count for b in stats.input_length.buckets) == 40
    assert stats.file_sizes.count == 2 and stats.file_sizes.total == len(README) + len(PNG)
    assert [(s.dest, s.size) for s in stats.shared_files] == [("shared/LICENSE", 4)]
    # The same content under another label answers the same numbers (kept once)
    cs.register(
        "browse",
        cases=cases(),
        version="2.0.0",
        tags=["demo", "math"],
        shared_files=[{"dest": "shared/LICENSE", "text": "MIT\n"}],
    )
    again = cs.stats("browse@2.0.0")
    assert again.content_digest == stats.content_digest and again.version == "2.0.0"
    assert again.model_dump(exclude={"version"}) == stats.model_dump(exclude={"version"})


def test_me_and_the_dataset_summary_tags(cs: Client) -> None:
    register(cs)
    me = cs.me()
    assert (me.tenant, me.principal, me.admin) == ("acme", "alice", False)
    assert me.reads == ["acme", "_shared"] and not me.writes_shared
    assert cs.dataset("browse").tags == ["demo", "math"]
    assert [d.tags for d in cs.datasets()] == [["demo", "math"]]


def test_cors_only_for_the_configured_origin(tmp_path: Path) -> None:
    ui = "http://ui.example:8080"
    with dev_server(tmp_path / "srv", cors_origins=(ui,)) as srv:
        url = f"{srv.url}/datasets"
        preflight = {
            "Origin": ui,
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "authorization",
        }
        ok = http_call(url, "OPTIONS", headers=preflight)
        other = http_call(url, "OPTIONS", headers={**preflight, "Origin": "https://evil.example"})
        answer = http_call(url, headers={"Origin": ui})
        refused = http_call(url, headers={"Origin": "https://evil.example"})
        plain = http_call(url)
    assert ok.status == 204 and ok.headers["Access-Control-Allow-Origin"] == ui
    assert "Authorization" in ok.headers["Access-Control-Allow-Headers"]
    assert "DELETE" in ok.headers["Access-Control-Allow-Methods"]
    assert "Access-Control-Allow-Origin" not in other.headers
    assert answer.status == 200 and answer.headers["Access-Control-Allow-Origin"] == ui
    assert "X-Next-Cursor" in answer.headers["Access-Control-Expose-Headers"]
    assert "Origin" in answer.headers["Vary"]
    assert "Access-Control-Allow-Credentials" not in answer.headers
    assert refused.status == 200 and "Access-Control-Allow-Origin" not in refused.headers
    assert "Access-Control-Allow-Origin" not in plain.headers


def test_on_every_backend_the_numbers_are_kept_and_files_read(installed_services: Any) -> None:
    # Given the embedded store, then moto (S3 + DynamoDB), behind the in-process client
    from caseshelf.client import InProcess
    from caseshelf.services.browse import stats_key

    services = installed_services
    with Client(InProcess(services.settings, services=services)) as cs:
        register(cs)
        stats = cs.stats("browse@1.0.0")
        # Then the numbers are kept under the caller's tenant, in the transient exports area
        kept = services.store.get(stats_key(services.settings.tenant, stats.content_digest))
        assert b'"case_count":40' in kept
        assert cs.stats("browse@1.0.0") == stats
        png = next(c for c in cs.cases("browse", raw=True) if c["id"] == "q005")["files"][
            "img/pic.png"
        ]
        assert cs.file("browse@1.0.0", png["digest"]) == PNG
        assert [c.id for c in cs.search("browse", "needle", by="text")] == [
            "q003",
            "q013",
            "q023",
            "q033",
        ]
