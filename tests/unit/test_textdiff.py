"""`caseshelf.domain.textdiff`: word-level segments, cut around the change, plain markers."""

from __future__ import annotations

from itertools import pairwise

import pytest

from caseshelf.domain.textdiff import around_changes, marked, word_diff

pytestmark = pytest.mark.unit


def sides(segments: list[tuple[str, str]]) -> tuple[str, str]:
    before = "".join(t for op, t in segments if op != "+")
    after = "".join(t for op, t in segments if op != "-")
    return before, after


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("How much does he pay?", "Exactly how much does he pay?"),
        ("a b c", "a b c"),
        ("", "new text"),
        ("old text", ""),
        ("line one\nline two\n", "line one\nline 2\n"),
        ("Janet\u2019s ducks, 16 eggs.", "Janet\u2019s geese: 16 eggs!"),
    ],
)
def test_segments_give_both_texts_back(before: str, after: str) -> None:
    segments = word_diff(before, after)
    assert sides(segments) == (before, after)
    # runs of one op are joined
    assert all(a[0] != b[0] for a, b in pairwise(segments))


def test_a_changed_word_is_marked_and_the_rest_is_not() -> None:
    segments = word_diff("How much does he pay?", "Exactly how much does he pay?")
    assert marked(segments) == "[-How-]{+Exactly how+} much does he pay?"
    assert word_diff("same", "same") == [("=", "same")]


def test_long_unchanged_text_is_cut_around_the_change() -> None:
    head = "word " * 50
    tail = " more" * 50
    segments = around_changes(word_diff(head + "old" + tail, head + "new" + tail), context=10)
    text = marked(segments)
    assert text == "…word word [-old-]{+new+} more more…"
    # between two changes both ends are kept
    middle = "x" * 100
    cut = around_changes(word_diff(f"a {middle} b", f"A {middle} B"), context=5)
    assert marked(cut) == "[-a-]{+A+} xxxx…xxxx [-b-]{+B+}"
    # a short run stays whole
    assert around_changes([("=", "ab"), ("-", "c")], context=5) == [("=", "ab"), ("-", "c")]
