"""Browsing decided on plain values: what a search matches, and a version's numbers."""

from __future__ import annotations

import pytest

from caseshelf.domain.browse import (
    Bucket,
    SharedFileInfo,
    StatsBuilder,
    VersionStats,
    case_matches,
    distribution,
    needle_of,
    sniff_text,
)

pytestmark = pytest.mark.unit

CASE = {
    "id": "Algebra-007",
    "inputs": {"user": "Solve for X: 2x = 10"},
    "expectations": {"ground_truth": "5"},
    "metadata": {"source": "Ünïcode Book"},
    "tags": ["Math", "easy"],
    "files": {"data/Table.csv": {"digest": "sha256:" + "ab" * 32, "size": 3}},
}


@pytest.mark.parametrize(
    ("q", "by", "hit"),
    [
        ("algebra", "id", True),  # part of the id, any case
        ("007", "any", True),
        ("math", "tag", True),  # a whole tag, any case
        ("mat", "tag", False),  # not part of one
        ("solve for x", "text", True),
        ("ünïcode", "text", True),  # case-folded beyond ASCII
        ("ground_truth", "text", False),  # keys are not text
        ("algebra", "text", False),  # the id is not text
        ("easy", "text", False),  # nor are the tags
        ("easy", "any", True),
        ("nothing here", "any", False),
        ("table.csv", "text", True),  # a file's path
        ("sha256", "text", False),  # not its digest
    ],
)
def test_a_search_matches_by_id_tag_or_text(q: str, by: str, hit: bool) -> None:
    assert case_matches(CASE, needle_of(q), by) is hit  # type: ignore[arg-type]


def test_a_distribution_has_exact_counts_percentiles_and_power_of_two_buckets() -> None:
    # Given 0, 1, 3 and 100 (four values)
    d = distribution([100, 0, 3, 1])
    # Then every number is over all of them, nearest-rank percentiles
    assert (d.count, d.total, d.min, d.max, d.mean) == (4, 104, 0, 100, 26.0)
    assert (d.p50, d.p90, d.p99) == (1, 100, 100)
    # And the buckets run from zero's to 100's, empty ones kept
    assert d.buckets[0] == Bucket(0, 1, 1)
    assert d.buckets[1] == Bucket(1, 2, 1)
    assert d.buckets[2] == Bucket(2, 4, 1)
    assert d.buckets[-1] == Bucket(64, 128, 1)
    assert sum(b.count for b in d.buckets) == 4 and len(d.buckets) == 8
    assert distribution([]).count == 0 and distribution([]).buckets == []


def test_stats_count_every_case_and_round_trip_as_json() -> None:
    builder = StatsBuilder()
    builder.add(CASE)
    builder.add({"id": "b", "inputs": {"user": ["hi", "there"]}, "tags": ["Math"]})
    builder.add({"id": "c", "inputs": {"user": {"ref": "q.txt"}}, "files": {"q.txt": {"size": 9}}})
    builder.add({"id": "d"})
    stats = builder.build("sha256:" + "0" * 64, [SharedFileInfo("a/b", "sha256:" + "1" * 64, 3)])
    assert stats.case_count == 4
    assert stats.tags == [("Math", 2), ("easy", 1)] and stats.untagged == 2
    assert stats.input_kinds == {"text": 1, "turns": 1, "file": 1, "none": 1}
    assert stats.input_length.count == 2 and stats.input_length.max == len("Solve for X: 2x = 10")
    assert (stats.file_sizes.count, stats.file_sizes.total) == (2, 12)
    assert VersionStats.from_json(stats.to_json()) == stats


def test_text_is_utf8_without_control_characters() -> None:
    assert sniff_text("# Tïtle\n\tcode\r\n".encode())
    assert not sniff_text(b"\x89PNG\r\n\x1a\n\x00\x00")
    assert not sniff_text(b"\xff\xfe")
