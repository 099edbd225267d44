"""The diff as a pull-request comment (`caseshelf.domain.diff_markdown`), rendered by a CommonMark
renderer with GitHub's table and strikethrough extensions (markdown-it-py) and read back as
HTML: the tables, the counts, the marks, the links, and the cut at GitHub's comment limit."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest
from markdown_it import MarkdownIt

from caseshelf.domain.diff_markdown import (
    COMMENT_LIMIT,
    field_of,
    render_diff_markdown,
    word_diff,
)

pytestmark = pytest.mark.unit

BASE = {"id": "gsm8k", "version": "1.1.0", "content_digest": "sha256:" + "1" * 64}
CAND = {"id": "gsm8k", "version": "1.2.0", "content_digest": "sha256:" + "2" * 64}
GFM = MarkdownIt("commonmark").enable(["table", "strikethrough"])


class Tables(HTMLParser):
    """The tables of rendered HTML: a list of rows (lists of cell texts) each, and what else
    it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.cell: list[str] | None = None
        self.tags: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = []
        elif tag == "a":
            self.links.append(dict(attrs)["href"] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None:
            self.tables[-1][-1].append("".join(self.cell))
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def rendered(text: str) -> Tables:
    parser = Tables()
    parser.feed(GFM.render(text))
    return parser


def head(**summary: int) -> dict[str, Any]:
    counts = {"added": 0, "removed": 0, "changed": 0, "unchanged": 0, **summary}
    return {
        "base": BASE,
        "candidate": CAND,
        "summary": counts,
        "meta": {"changes": [], "case_order_changed": False},
    }


def test_the_comment_has_the_counts_the_fields_and_the_cases() -> None:
    # Given a diff: two changed cases, one added, one removed, the description changed
    h = head(changed=2, added=1, removed=1, unchanged=1316)
    h["meta"]["changes"] = [{"path": "/description", "before": "v1", "after": "v2"}]
    entries = [
        (
            "changed",
            {
                "id": "q|1",
                "changes": [
                    {
                        "path": "/inputs/user",
                        "before": "How many apples?",
                        "after": "How many pears?",
                    },
                    {"path": "/expectations/ground_truth", "before": "4", "after": "5"},
                ],
            },
        ),
        (
            "changed",
            {
                "id": "q2",
                "changes": [{"path": "/expectations/ground_truth", "before": 4, "after": "4"}],
            },
        ),
        ("added", {"id": "new", "user": "<script>alert(1)</script> and @alice"}),
        ("removed", {"id": "old", "user": "What *was* this?"}),
    ]
    # When it is rendered with links to the UI
    text = render_diff_markdown(h, entries, ui_url="https://ui.example/")
    page = rendered(text)

    # Then the counts are a table
    counts, meta, fields, changed, added, removed = page.tables
    assert counts == [
        ["cases", "count"],
        ["changed", "2"],
        ["added", "1"],
        ["removed", "1"],
        ["unchanged", "1,316"],
    ]
    assert meta[1] == ["/description", "v1", "v2"]
    # And the fields that changed, most often first, with the number of cases
    assert fields == [
        ["field", "cases"],
        ["/expectations/ground_truth", "2"],
        ["/inputs/user", "1"],
    ]
    # And each changed field is a row: the case id once (its | kept inside the cell), before
    # and after with the differing words marked
    assert changed[0] == ["case", "field", "before", "after"]
    assert changed[1] == ["q|1", "/inputs/user", "How many apples?", "How many pears?"]
    assert changed[2] == ["", "/expectations/ground_truth", "4", "5"]
    assert changed[3] == ["q2", "/expectations/ground_truth", "4", '"4"']
    html = GFM.render(text)
    assert "<s>apples</s>" in html and "<strong>pears</strong>" in html
    # And added and removed cases show their input as text (no HTML, no emphasis, no mention)
    assert added[1][0] == "new" and added[1][1].startswith("<script>alert(1)</script> and @")
    assert "script" not in page.tags and "em" not in page.tags
    assert "@alice" not in text  # a zero-width space keeps GitHub from notifying alice
    assert removed[1] == ["old", "What *was* this?"]
    # And every case and the diff link to the UI, by content digest
    assert page.links[0] == (
        f"https://ui.example/datasets/gsm8k/diff?base=sha256%3A{'1' * 64}"
        f"&candidate=sha256%3A{'2' * 64}"
    )
    assert (
        f"https://ui.example/datasets/gsm8k/versions/sha256%3A{'2' * 64}/cases/q%7C1" in page.links
    )
    assert f"https://ui.example/datasets/gsm8k/versions/sha256%3A{'1' * 64}/cases/old" in page.links
    assert "left out" not in text


def test_without_a_ui_url_there_are_no_links_and_the_first_n_cases_are_named() -> None:
    entries = [("added", {"id": f"c{i}", "user": "q"}) for i in range(30)]
    text = render_diff_markdown(head(added=30), entries, max_cases=5)
    page = rendered(text)
    assert page.links == []
    assert "#### Added cases (first 5 of 30)" in text
    assert len(page.tables[-1]) == 1 + 5


def test_a_long_string_is_shown_around_the_change() -> None:
    before = "intro " * 200 + "the answer is 42 " + "outro " * 200
    after = "intro " * 200 + "the answer is 43 " + "outro " * 200
    left, right = word_diff(before, after)
    assert left.startswith("…") and left.endswith("…") and len(left) < 200
    assert "the answer is ~~42~~" in left and "the answer is **43**" in right
    # cut between words, never inside one
    assert re.fullmatch(r"… (intro )+the answer is ~~42~~ (outro )+outro…", left)


def test_fields_count_list_positions_as_one() -> None:
    assert field_of("/inputs/user/3") == "/inputs/user/*"
    assert field_of("/graders/0/config/cmd") == "/graders/*/config/cmd"
    assert field_of("/metadata/year") == "/metadata/year"


def test_a_huge_diff_is_cut_at_the_limit_between_rows_with_a_count() -> None:
    # Given 5,000 changed cases whose changes are long strings, all asked for
    n = 5000
    entries = [
        (
            "changed",
            {
                "id": f"case-{i:05}",
                "changes": [
                    {"path": "/inputs/user", "before": f"{i} " + "word " * 100, "after": f"{i} x"},
                    {"path": "/expectations/ground_truth", "before": str(i), "after": str(i + 1)},
                ],
            },
        )
        for i in range(n)
    ]
    text = render_diff_markdown(head(changed=n), entries, max_cases=n)
    # Then the comment fits GitHub's limit
    assert len(text) <= COMMENT_LIMIT
    # And its last line says how many rows were left out
    note = text.rstrip("\n").splitlines()[-1]
    found = re.search(r"([\d,]+) more rows left out \(([\d,]+) of changed cases\)", note)
    assert found, note
    left = int(found.group(1).replace(",", ""))
    assert "65,536-character" in note
    # And every row shown is whole: each has the table's four cells, and with those left out
    # they are every row
    page = rendered(text)
    changed = page.tables[-1]
    assert all(len(row) == 4 for row in changed)
    shown = len(changed) - 1
    assert shown + left == 2 * n
    assert shown > 100  # the room was used
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert all(line.endswith(" |") for line in lines)


def test_a_smaller_limit_cuts_the_later_tables_whole() -> None:
    # Given more changed rows than fit in 4,000 characters, then added cases
    change = {"path": "/tags/0", "before": "a" * 60, "after": "b" * 60}
    entries: list[tuple[str, dict[str, Any]]] = [
        ("changed", {"id": f"c{i}", "changes": [change]}) for i in range(50)
    ]
    entries += [("added", {"id": f"a{i}", "user": "x" * 100}) for i in range(50)]
    text = render_diff_markdown(head(changed=50, added=50), entries, max_cases=50, limit=4000)
    # Then the changed table is cut, and the added one is left out whole, header included
    assert len(text) <= 4000
    assert "#### Changed cases (50)" in text
    assert "Added cases" not in text
    found = re.search(
        r"_(\d+) more rows left out \((\d+) of changed cases, 50 of added cases\)", text
    )
    assert found and int(found.group(1)) == int(found.group(2)) + 50
    # And a zero limit of cases shows the counts and the fields only
    text = render_diff_markdown(head(changed=50, added=50), entries, max_cases=0)
    assert [t[0] for t in rendered(text).tables] == [["cases", "count"], ["field", "cases"]]
