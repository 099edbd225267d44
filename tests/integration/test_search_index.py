"""A version's search index (`caseshelf.services.search_index`): one case-folded line a case,
found by substring, kept as bytes that must hold together."""

from __future__ import annotations

from pathlib import Path

import pytest

from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.browse import indexable, text_matches
from caseshelf.domain.errors import NotFound
from caseshelf.domain.identity import Identity
from caseshelf.services.browse import BrowseService, stats_key
from caseshelf.services.registry import parse_dataset
from caseshelf.services.search_index import (
    INDEX_MAGIC,
    MAX_INDEXED_BYTES,
    IndexBuilder,
    SearchIndex,
    index_bytes_for,
    index_key,
)

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


def test_the_index_bound_follows_the_function_memory(tmp_path: Path) -> None:
    small = build(load_settings({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "128"}, home=str(tmp_path)))
    assert small.browse.index_bytes == index_bytes_for(128 * 2**20) == 16 * 2**20
    assert index_bytes_for(1024 * 2**20) == 128 * 2**20
    assert index_bytes_for(10240 * 2**20) == MAX_INDEXED_BYTES


def test_a_version_over_the_process_s_index_bound_has_no_index_and_is_still_searched(
    tmp_path: Path,
) -> None:
    # Given a version, and a process whose index bound is one byte under its records
    services = build(load_settings({}, home=str(tmp_path)))
    me = Identity("acme", "alice", frozenset())
    cases = [{"id": f"c{i:04d}", "inputs": {"user": f"question {i}"}} for i in range(2000)]
    rec = services.registry.register(
        me, parse_dataset({"id": "qa", "version": "1", "cases": cases})
    ).record
    browse = BrowseService(services.registry, index_bytes=rec.bytes - 1)
    # When its numbers are made
    _, stats = browse.stats(me, "qa", "1")
    assert stats.case_count == 2000
    # Then no index was made (it would be held whole in memory)
    with pytest.raises(NotFound):
        services.store.get(index_key("acme", rec.content_digest))
    # And a text search still searches the whole version (by its records)
    page = browse.search_cases(me, "qa", "1", "question 1999", by="text")
    assert [c["id"] for c in page.items] == ["c1999"]
    # While a process whose bound holds the version makes its index with the numbers
    roomy = BrowseService(services.registry, index_bytes=rec.bytes)
    services.store.delete(stats_key("acme", rec.content_digest))  # made again, with the index
    roomy.stats(me, "qa", "1")
    assert services.store.get(index_key("acme", rec.content_digest)).startswith(INDEX_MAGIC)
