"""The pure subset selection over a manifest."""

from __future__ import annotations

import hashlib
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from caseshelf.domain import chunks
from caseshelf.domain.chunks import (
    Root,
    SampleColumn,
    join_sample_columns,
    sample_column_bytes,
    sample_column_from_bytes,
    split_manifest,
)
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.manifest import Manifest, ManifestBuilder
from caseshelf.domain.subset import (
    MAX_LISTED_IDS,
    Selection,
    SubsetRequest,
    columns_answer,
    columns_for_selection,
    sample_rank,
    select_from_columns,
    select_subset,
)

pytestmark = pytest.mark.unit

TAGS = ["easy", "hard", "math", "code"]


def manifest(cases: list[tuple[str, list[str]]]) -> Manifest:
    b = ManifestBuilder(description="", tags=[], shared_files=[])
    for cid, tags in cases:
        b.add_case(cid, hashlib.sha256(cid.encode()).hexdigest(), tags, "p" * 64, 0, 10)
    return b.build("sha256:" + "0" * 64)


def select(m: Manifest, **kw: Any):
    return select_subset(m, Selection(**kw), dataset_id="ds", version="1.0.0")


def ids_of(m: Manifest, sub) -> list[str]:
    return [m.ids[i] for i in sub.indices]


M = manifest(
    [
        ("a", ["easy", "math"]),
        ("b", ["hard"]),
        ("c", ["easy", "code"]),
        ("d", []),
        ("e", ["hard", "math"]),
    ]
)

dataset = st.lists(
    st.tuples(
        st.text(alphabet="abcdefghij", min_size=1, max_size=3),
        st.lists(st.sampled_from(TAGS), unique=True),
    ),
    min_size=1,
    max_size=30,
    unique_by=lambda c: c[0],
).map(manifest)


def test_no_selection_is_the_whole_version_without_a_stamp():
    sub = select(M)
    assert sub.indices == [0, 1, 2, 3, 4]
    assert sub.stamp is None


def test_ids_keep_dataset_order_not_request_order():
    sub = select(M, ids=("e", "a", "a"))
    assert ids_of(M, sub) == ["a", "e"]
    assert sub.stamp is not None
    assert sub.stamp.model_dump(exclude_none=True) == {
        "id": "ds",
        "version": "1.0.0",
        "content_digest": "sha256:" + "0" * 64,
        "total": 5,
        "selected": 2,
        "ids": ["e", "a"],
    }


def test_steps_run_ids_then_tags_then_limit():
    sub = select(M, ids=("a", "b", "c", "e"), tags=("easy", "hard"), limit=2)
    assert ids_of(M, sub) == ["a", "b"]
    assert sub.stamp and (sub.stamp.total, sub.stamp.selected, sub.stamp.limit) == (5, 2, 2)


def test_a_case_matches_when_it_has_any_of_the_tags():
    assert ids_of(M, select(M, tags=("math", "code"))) == ["a", "c", "e"]


def test_unknown_ids_are_all_named():
    with pytest.raises(BadRequest) as err:
        select(M, ids=("a", "zz", "yy"))
    assert err.value.fields["case_ids"] == ["zz", "yy"]
    assert "'zz'" in err.value.detail and "'yy'" in err.value.detail


def test_many_unknown_ids_list_the_first_fifty_and_a_count():
    wanted = tuple(f"x{i}" for i in range(120))
    with pytest.raises(BadRequest) as err:
        select(M, ids=wanted)
    assert err.value.fields["case_ids"] == list(wanted[:MAX_LISTED_IDS])
    assert err.value.fields["unknown_count"] == 120
    assert "and 70 more" in err.value.detail


def test_an_empty_result_says_to_check_tags_and_limit():
    with pytest.raises(BadRequest, match="check tags and limit"):
        select(M, tags=("nope",))


@pytest.mark.parametrize("kw", [{"limit": 0}, {"sample": 0}, {"limit": -3}, {"sample": -1}])
def test_limit_and_sample_below_one_are_refused(kw):
    with pytest.raises(BadRequest, match="at least 1"):
        select(M, **kw)


def test_seed_without_sample_is_refused():
    with pytest.raises(BadRequest, match="seed"):
        select(M, seed=3)


def test_the_sample_rule_is_the_documented_ranking():
    # Given the rule: K = sha256("caseshelf-sample:<seed>"), A = K[0:8] | 1, B = K[8:16],
    # rank = (A * first 16 hex digits of the case digest + B) mod 2**64; the smallest are taken.
    key = hashlib.sha256(b"caseshelf-sample:s1").digest()
    a, b = int.from_bytes(key[:8], "big") | 1, int.from_bytes(key[8:16], "big")
    sub = select(M, sample=2, seed="s1")
    ranks = sorted(range(5), key=lambda i: (a * int(M.digests[i][:16], 16) + b) % 2**64)
    assert sub.indices == sorted(ranks[:2])
    assert sample_rank("s1", M.digests[ranks[0]]) < sample_rank("s1", M.digests[ranks[1]])
    # The seed defaults to 0 and the stamp says so.
    default = select(M, sample=2)
    assert default.stamp and default.stamp.seed == 0
    assert default.indices == select(M, sample=2, seed=0).indices


def test_a_sample_larger_than_the_candidates_takes_them_all():
    assert select(M, tags=("hard",), sample=10).indices == [1, 4]


def test_request_model_refuses_unknown_keys_and_half_register_as():
    with pytest.raises(ValueError):
        SubsetRequest.model_validate({"tag": ["x"]})
    with pytest.raises(ValueError, match="version or a bump"):
        SubsetRequest.model_validate({"register_as": {"id": "x"}})
    req = SubsetRequest.model_validate({"tags": ["x"], "sample": 3, "seed": "abc"})
    assert req.selection() == Selection(tags=("x",), sample=3, seed="abc")


# -- properties --------------------------------------------------------------------------

selections = st.fixed_dictionaries(
    {},
    optional={
        "tags": st.lists(st.sampled_from(TAGS), min_size=1, unique=True).map(tuple),
        "limit": st.integers(1, 40),
        "sample": st.integers(1, 40),
        "seed": st.integers(0, 5) | st.text(min_size=1, max_size=3),
    },
)


def _maybe_select(m: Manifest, kw: dict[str, Any]):
    if "seed" in kw and "sample" not in kw:
        kw = {k: v for k, v in kw.items() if k != "seed"}
    try:
        return select(m, **kw)
    except BadRequest:
        return None


@given(dataset, selections)
def test_subset_is_idempotent_and_its_stamp_counts_are_exact(m, kw):
    first = _maybe_select(m, kw)
    if first is None:
        return
    assert first.indices == sorted(set(first.indices))
    if first.stamp is not None:
        assert first.stamp.total == len(m)
        assert first.stamp.selected == len(first.indices)
    # Selecting again, from the selection, keeps exactly the same cases.
    picked = manifest([(m.ids[i], m.tags_of(i)) for i in first.indices])
    again = select(
        picked, **{k: v for k, v in kw.items() if not (k == "seed" and "sample" not in kw)}
    )
    assert ids_of(picked, again) == ids_of(m, first)


@given(dataset, st.integers(1, 10), st.integers(0, 1000), st.randoms(use_true_random=False))
def test_samples_are_stable_and_independent_of_how_the_manifest_was_built(m, n, seed, rnd):
    once = select(m, sample=n, seed=seed)
    assert select(m, sample=n, seed=seed).indices == once.indices
    # The same cases interned in another order (tag names, packs) give the same sample.
    cases = [(m.ids[i], m.tags_of(i)) for i in range(len(m))]
    shuffled_tags = [(cid, rnd.sample(tags, len(tags))) for cid, tags in cases]
    rebuilt = manifest(shuffled_tags)
    assert ids_of(rebuilt, select(rebuilt, sample=n, seed=seed)) == ids_of(m, once)
    assert once.stamp and once.stamp.selected == min(n, len(m))


def reference_subset(m: Manifest, kw: dict[str, Any]) -> list[str]:
    """The documented rule written plainly: ids -> tags -> limit -> sample, dataset order."""
    rows = [(m.ids[i], m.digests[i], set(m.tags_of(i))) for i in range(len(m))]
    if "ids" in kw:
        rows = [r for r in rows if r[0] in kw["ids"]]
    if "tags" in kw:
        rows = [r for r in rows if r[2] & set(kw["tags"])]
    if "limit" in kw:
        rows = rows[: kw["limit"]]
    if "sample" in kw:
        key = hashlib.sha256(f"caseshelf-sample:{kw.get('seed', 0)}".encode()).digest()
        a, b = int.from_bytes(key[:8], "big") | 1, int.from_bytes(key[8:16], "big")
        rank = lambda r: (a * int(r[1][:16], 16) + b) % 2**64  # noqa: E731
        chosen = {r[0] for r in sorted(rows, key=rank)[: kw["sample"]]}
        rows = [r for r in rows if r[0] in chosen]
    return [r[0] for r in rows]


@given(dataset, selections, st.data())
def test_steps_run_in_the_documented_order_ids_tags_limit_sample(m, kw, data):
    # Given any selection (ids drawn from the version itself)
    kw = dict(kw)
    if data.draw(st.booleans()):
        kw["ids"] = tuple(data.draw(st.lists(st.sampled_from(list(m.ids)), min_size=1)))
    if "seed" in kw and "sample" not in kw:
        del kw["seed"]
    expected = reference_subset(m, kw)
    # When selected, Then it is exactly the plain rule (a swapped step gives other cases)
    if not expected:
        with pytest.raises(BadRequest, match="check tags and limit"):
            select(m, **kw)
        return
    assert ids_of(m, select(m, **kw)) == expected


def test_tags_filter_before_limit_and_limit_before_sample():
    # tags then limit: the first hard case, not the first case filtered by tag (none)
    assert ids_of(M, select(M, tags=("hard",), limit=1)) == ["b"]
    # limit then sample: the sample is drawn from the first two cases only
    for seed in range(20):
        assert set(ids_of(M, select(M, limit=2, sample=1, seed=seed))) <= {"a", "b"}


def _columns_of(m: Manifest, tags: bool) -> tuple[Root, list[SampleColumn]]:
    """`m` cut into chunks of 2 to 4 cases and sample columns of 1 to 3 chunks."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in (
            ("MIN_CASES", 2),
            ("BOUNDARY_MODULUS", 2),
            ("MAX_CASES", 4),
            ("SAMPLE_MIN_CHUNKS", 1),
            ("SAMPLE_MODULUS", 2),
            ("SAMPLE_MAX_CHUNKS", 3),
        ):
            mp.setattr(chunks, name, value)
        root, _, _, _ = split_manifest(m)
    starts = root.sample_starts()
    columns = [
        sample_column_from_bytes(sample_column_bytes(m, a, b, tags=tags))
        for a, b in pairwise(starts)
    ]
    return root, columns


@given(dataset, selections, st.booleans(), st.data())
def test_the_sample_columns_answer_what_the_whole_manifest_does(m, kw, tags, data):
    # Given a version's sample columns (with tags, or without as format 4 roots have them)
    kw = dict(kw)
    if data.draw(st.booleans()):
        kw["ids"] = tuple(data.draw(st.lists(st.sampled_from(list(m.ids)), min_size=1)))
    if "seed" in kw and "sample" not in kw:
        del kw["seed"]
    sel = Selection(**kw)
    if not columns_answer(sel, tags=tags):
        assert sel.empty or (sel.tags is not None and not tags)
        return
    root, columns = _columns_of(m, tags)
    # When a selection reads the columns it names (tags and a limit: the first ones holding
    # `limit` cases carrying a tag, as the service reads them)
    numbers = columns_for_selection(root, sel)
    if sel.tags is not None and sel.limit is not None and sel.ids is None:
        found, kept = 0, []
        for g in numbers:
            if found >= sel.limit:
                break
            kept.append(g)
            c = columns[g]
            assert c.tags is not None
            wanted = {t for t, name in enumerate(c.tag_names) if name in sel.tags}
            found += sum(1 for i in range(len(c)) if not wanted.isdisjoint(c.tags[i]))
        numbers = kept
    starts = root.sample_starts()
    positions = [p for g in numbers for p in range(starts[g], starts[g + 1])]
    joined = join_sample_columns([columns[g] for g in numbers])

    def answer(f: Any) -> Any:
        try:
            return f()
        except BadRequest as exc:
            return exc.detail

    got = answer(
        lambda: select_from_columns(
            joined,
            sel,
            dataset_id="ds",
            version="1.0.0",
            content_digest=m.content_digest,
            total=len(m),
            positions=positions,
        )
    )
    # Then it answers what the whole manifest answers, an error included
    assert got == answer(lambda: select(m, **kw))


def test_columns_without_tags_refuse_a_selection_by_tags() -> None:
    _, columns = _columns_of(M, tags=False)
    with pytest.raises(ValueError, match="select_from_columns"):
        select_from_columns(
            join_sample_columns(columns),
            Selection(tags=("hard",)),
            dataset_id="ds",
            version="1.0.0",
            content_digest=M.content_digest,
            total=len(M),
        )
