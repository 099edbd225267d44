"""A version's search index (`caseshelf.services.search_index`): one case-folded line a case,
found by substring, kept as bytes that must hold together."""

from __future__ import annotations

import pytest

from caseshelf.domain.browse import indexable, text_matches
from caseshelf.services.search_index import IndexBuilder, SearchIndex

pytestmark = pytest.mark.integration

CASES = [
    {"id": "a", "inputs": {"user": "Straße"}, "tags": ["needle"]},
    {"id": "needle", "inputs": {"user": "two\nlines"}},
    {"id": "c", "inputs": {"user": "x"}, "expectations": {"ground_truth": "NEEDLE"}},
    {"id": "d", "inputs": {"user": "y"}, "files": {"needle.txt": {"digest": "sha256:00"}}},
]


def test_the_index_finds_what_text_matches_finds_from_any_position() -> None:
    builder = IndexBuilder()
    builder.add_all(CASES)
    index = builder.build("sha256:" + "0" * 64)
    for needle in ("needle", "strasse", "lines", "two", "x", "sha256"):
        expected = [i for i, c in enumerate(CASES) if text_matches(c, needle)]
        assert index.find(needle, 0, len(index), 10) == expected, needle
    assert index.find("needle", 3, 4, 10) == [3]
    assert index.find("needle", 0, 4, 1) == [2]
    assert not indexable("two\nlines") and indexable("two lines")
    # Kept and read back, the same; cut short, refused
    again = SearchIndex.from_bytes(index.content_digest, index.to_bytes())
    assert again == index
    with pytest.raises(ValueError):
        SearchIndex.from_bytes(index.content_digest, index.to_bytes()[:-3])
    with pytest.raises(ValueError):
        SearchIndex.from_bytes(index.content_digest, b"other")
