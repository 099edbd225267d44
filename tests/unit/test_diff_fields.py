"""The field paths of a diff's changed cases (`caseshelf.domain.diff_fields`): list positions as
`*`, one count per case and path, a filter by path prefix, and kept counts that must hold
together."""

from __future__ import annotations

import pytest

from caseshelf.domain.diff import field_changes
from caseshelf.domain.diff_fields import FieldCounts, changes_under, field_path, under

pytestmark = pytest.mark.unit


def test_a_field_path_writes_list_positions_and_matched_elements_as_a_star() -> None:
    before = {
        "inputs": {"user": ["a", "b"]},
        "graders": [{"id": "g", "config": {"x": 1}}],
        "a/b": 1,
    }
    after = {
        "inputs": {"user": ["a", "B"]},
        "graders": [{"id": "g", "config": {"x": 2}}],
        "a/b": 2,
    }
    paths = [field_path(c.path) for c in field_changes(before, after)]
    assert paths == ["/a~1b", "/graders/*/config/x", "/inputs/user/*"]
    assert field_path(()) == "/"


def test_counts_are_cases_per_path_most_first_and_the_filter_takes_prefixes() -> None:
    # Given three changed cases: two change the answer, one of them the question too, and one
    # changes two turns of a list
    pairs = [
        ({"expectations": {"ground_truth": "1"}}, {"expectations": {"ground_truth": "2"}}),
        (
            {"inputs": {"user": "q"}, "expectations": {"ground_truth": "1"}},
            {"inputs": {"user": "Q"}, "expectations": {"ground_truth": "3"}},
        ),
        ({"inputs": {"user": ["a", "b"]}}, {"inputs": {"user": ["A", "B"]}}),
    ]
    counts = FieldCounts.of(field_changes(b, a) for b, a in pairs)
    # Then each case counts once per path, most cases first, then by path
    assert counts.top() == (
        [("/expectations/ground_truth", 2), ("/inputs/user", 1), ("/inputs/user/*", 1)],
        0,
    )
    assert counts.top(1) == ([("/expectations/ground_truth", 2)], 2)
    assert counts.counted == 3
    # And a filter keeps the cases with a change at the path or under it, not a sibling
    assert counts.matching("/expectations") == [0, 1]
    assert counts.matching("/inputs/user") == [1, 2]
    assert counts.matching("/inputs/user/*") == [2]
    assert counts.matching("/input") == []
    assert counts.matching("/") == [0, 1, 2]
    assert under("/inputs/user/*", "/inputs/") and not under("/inputs2", "/inputs")
    kept = changes_under(field_changes(*pairs[1]), "/inputs")
    assert [c.path for c in kept] == [("inputs", "user")]


def test_kept_counts_round_trip_and_refuse_what_does_not_hold_together() -> None:
    counts = FieldCounts.of([field_changes({"a": 1}, {"a": 2}), field_changes({"b": 1}, {})])
    assert FieldCounts.from_json(counts.to_json()) == counts
    with pytest.raises(ValueError):
        FieldCounts.from_json(b'{"format": "other"}')
    bad = counts.to_json().replace(b'"case_paths":[[0],[1]]', b'"case_paths":[[0],[7]]')
    assert bad != counts.to_json()
    with pytest.raises(ValueError):
        FieldCounts.from_json(bad)


def test_counts_made_a_part_at_a_time_equal_the_counts_of_the_whole() -> None:
    # Given five changed cases, counted whole and in parts of two (the later parts change the
    # order of the paths: /b overtakes /a)
    per_case = [
        field_changes({"a": 1}, {"a": 2}),
        field_changes({"a": 1, "b": 1}, {"a": 2, "b": 2}),
        field_changes({"b": 1}, {"b": 2}),
        field_changes({"b": 1}, {"b": 3}),
        field_changes({"c": [1]}, {"c": [2]}),
    ]
    whole = FieldCounts.of(per_case)
    parts = FieldCounts.of(per_case[:2])
    assert parts.top()[0] == [("/a", 2), ("/b", 1)] and parts.counted == 2
    parts = parts.extended(per_case[2:4]).extended(per_case[4:])
    # Then the parts make the whole: the same paths, counts, cases and filter
    assert parts == whole and parts.counted == 5
    assert whole.top()[0] == [("/b", 3), ("/a", 2), ("/c/*", 1)]
    assert parts.matching("/a") == [0, 1]
