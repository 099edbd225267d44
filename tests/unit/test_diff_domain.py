"""The pure diff: field-level changes between JSON values and the manifest-level plan."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caseshelf.domain.canonical import canonical_json, content_digest, sha256_hex
from caseshelf.domain.diff import (
    ABSENT,
    Change,
    Keyed,
    differing_digests,
    field_changes,
    plan_diff,
    to_pointer,
)
from caseshelf.domain.manifest import Manifest, ManifestBuilder

pytestmark = pytest.mark.unit

json_scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=4)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(alphabet="ab/~c", max_size=3), inner, max_size=4)
    ),
    max_leaves=20,
)
grader = st.fixed_dictionaries(
    {"id": st.sampled_from(["steps", "cost", "latency", "judge"])},
    optional={"config": st.dictionaries(st.sampled_from(["x", "y"]), json_scalars, max_size=2)},
)
graders = st.lists(grader, max_size=4, unique_by=lambda g: g["id"])
cases = st.fixed_dictionaries(
    {"id": st.just("c1")},
    optional={
        "inputs": st.fixed_dictionaries(
            {"user": st.text(max_size=5) | st.lists(st.text(max_size=3))}
        ),
        "graders": graders,
        "tags": st.lists(st.sampled_from(["a", "b", "c"]), unique=True),
        "metadata": st.dictionaries(st.text(max_size=3), json_values, max_size=3),
    },
)


def reorder_keys(value: Any, rnd: Any) -> Any:
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {k: reorder_keys(value[k], rnd) for k in keys}
    if isinstance(value, list):
        return [reorder_keys(v, rnd) for v in value]
    return value


# -- properties --------------------------------------------------------------------------


@given(json_values)
def test_a_value_never_differs_from_itself(value):
    assert field_changes(value, value) == []


@given(cases | json_values, cases | json_values)
def test_diff_b_a_mirrors_diff_a_b(a, b):
    # Given two values, When diffed both ways, Then each change of one is the other mirrored.
    forward = field_changes(a, b)
    backward = field_changes(b, a)
    assert [c.mirrored() for c in forward] == backward


@given(cases | json_values, st.randoms(use_true_random=False))
def test_key_order_is_never_a_change(value, rnd):
    assert field_changes(value, reorder_keys(value, rnd)) == []


@given(cases, cases)
def test_no_change_exactly_when_canonical_bytes_are_equal(a, b):
    same_bytes = canonical_json(a) == canonical_json(b)
    changes = field_changes(a, b)
    # Reordered graders are one whole-list change, so every byte difference shows.
    assert (changes == []) == same_bytes


# -- examples ----------------------------------------------------------------------------


def test_absent_is_distinct_from_null():
    changes = field_changes({"a": None}, {})
    assert changes == [Change(("a",), None, ABSENT)]
    assert field_changes({}, {"a": None}) == [Change(("a",), ABSENT, None)]


def test_true_is_not_one_and_one_is_not_one_point_zero():
    assert field_changes({"a": True}, {"a": 1}) == [Change(("a",), True, 1)]
    assert field_changes([1], [1.0]) == [Change((0,), 1, 1.0)]


def test_graders_are_matched_by_id_whatever_their_position():
    before = {"graders": [{"id": "steps"}, {"id": "cost", "config": {"max": 1}}]}
    after = {"graders": [{"id": "cost", "config": {"max": 2}}]}
    changes = field_changes(before, after)
    assert changes == [
        Change(("graders", Keyed("cost", 1, 0), "config", "max"), 1, 2),
        Change(("graders", Keyed("steps", 0, None)), {"id": "steps"}, ABSENT),
    ]
    # The pointer resolves where the value lives: the candidate, or the base for a removal.
    assert [to_pointer(c.path) for c in changes] == ["/graders/0/config/max", "/graders/0"]


def test_reordered_graders_are_one_whole_list_change():
    before = {"graders": [{"id": "a"}, {"id": "b"}]}
    after = {"graders": [{"id": "b"}, {"id": "a"}]}
    assert field_changes(before, after) == [
        Change(("graders",), before["graders"], after["graders"])
    ]


def test_other_lists_are_compared_by_position():
    assert field_changes({"hitl": ["x", "y"]}, {"hitl": ["x", "z", "w"]}) == [
        Change(("hitl", 1), "y", "z"),
        Change(("hitl", 2), ABSENT, "w"),
    ]


def test_a_type_change_is_one_change_at_its_path():
    assert field_changes({"inputs": {"user": "hi"}}, {"inputs": {"user": ["hi", "there"]}}) == [
        Change(("inputs", "user"), "hi", ["hi", "there"])
    ]


def test_pointer_escapes_slash_and_tilde():
    change = field_changes({"files": {"src/a~b.py": 1}}, {"files": {}})[0]
    assert to_pointer(change.path) == "/files/src~1a~0b.py"
    assert to_pointer(change.path, "/cases/3") == "/cases/3/files/src~1a~0b.py"


# -- the plan over manifests -------------------------------------------------------------


def manifest(
    cases: list[dict[str, Any]],
    *,
    description: str = "d",
    tags: list[str] | None = None,
    shared: list[dict[str, str]] | None = None,
) -> Manifest:
    b = ManifestBuilder(description=description, tags=tags or [], shared_files=shared or [])
    digests = []
    for c in cases:
        h = sha256_hex(canonical_json(c))
        digests.append((c["id"], "sha256:" + h))
        b.add_case(c["id"], h, c.get("tags", []), "p" * 64, 0, 1)
    cd = content_digest(
        description=description, tags=tags or [], shared_files=shared or [], case_digests=digests
    )
    return b.build(cd)


def test_plan_uses_digests_and_matches_by_id():
    base = manifest([{"id": "a"}, {"id": "b", "x": 1}, {"id": "c"}])
    cand = manifest([{"id": "a"}, {"id": "b", "x": 2}, {"id": "d"}], description="e")
    plan = plan_diff(base, cand)
    assert plan.added == [2]
    assert plan.removed == [2]
    assert plan.changed == [(1, 1)]
    assert plan.unchanged == 1
    assert not plan.order_changed
    assert plan.meta == [Change(("description",), "d", "e")]


def test_plan_of_a_version_with_itself_is_empty():
    m = manifest([{"id": "a"}, {"id": "b"}])
    plan = plan_diff(m, m)
    assert plan.empty
    assert plan.unchanged == 2


def test_plan_notices_a_new_order_of_the_same_cases():
    plan = plan_diff(manifest([{"id": "a"}, {"id": "b"}]), manifest([{"id": "b"}, {"id": "a"}]))
    assert plan.order_changed
    assert (plan.added, plan.removed, plan.changed, plan.unchanged) == ([], [], [], 2)


def test_plan_reports_tags_and_shared_files_by_destination():
    d1, d2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    base = manifest(
        [{"id": "a"}],
        tags=["x"],
        shared=[{"dest": "a.md", "digest": d1}, {"dest": "b.md", "digest": d1}],
    )
    cand = manifest([{"id": "a"}], tags=["x", "y"], shared=[{"dest": "b.md", "digest": d2}])
    meta = plan_diff(base, cand).meta
    assert meta[0] == Change(("tags",), ["x"], ["x", "y"])
    assert [(to_pointer(c.path), c.before, c.after) for c in meta[1:]] == [
        ("/shared_files/0", {"dest": "a.md", "digest": d1}, ABSENT),
        ("/shared_files/0/digest", d1, d2),
    ]


@settings(max_examples=50)
@given(
    st.lists(st.sampled_from("abcdefgh"), unique=True),
    st.lists(st.sampled_from("abcdefgh"), unique=True),
)
def test_plan_counts_add_up(left, right):
    base = manifest([{"id": i} for i in left])
    cand = manifest([{"id": i, "v": 1} if i in "abc" else {"id": i} for i in right])
    plan = plan_diff(base, cand)
    assert len(plan.added) + len(plan.changed) + plan.unchanged == len(right)
    assert len(plan.removed) + len(plan.changed) + plan.unchanged == len(left)


@given(
    st.lists(st.binary(min_size=32, max_size=32), min_size=1, max_size=60),
    st.lists(st.tuples(st.integers(0, 59), st.integers(0, 31), st.integers(1, 255)), max_size=20),
)
def test_differing_digests_are_the_positions_whose_digests_differ(digests, edits):
    # Given a digest column and a copy with some bytes changed (adjacent digests included,
    # so a run of changed bytes may cross from one digest into the next)
    changed = [bytearray(d) for d in digests]
    for at, byte, flip in edits:
        if at < len(changed):
            changed[at][byte] ^= flip
    base = "".join(d.hex() for d in digests)
    candidate = "".join(bytes(d).hex() for d in changed)
    # Then the positions found are exactly those a digest-by-digest comparison finds
    expected = [i for i, (a, b) in enumerate(zip(digests, changed, strict=True)) if a != b]
    assert differing_digests(base, candidate) == expected


def test_differing_digests_refuse_columns_of_different_lengths():
    with pytest.raises(ValueError, match="lengths"):
        differing_digests("00" * 32, "11" * 64)
