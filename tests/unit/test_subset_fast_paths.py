"""The fast paths of subset selection give exactly what the documented rules give."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from caseshelf.domain.errors import BadRequest
from caseshelf.domain.manifest import CaseTags, Manifest, ManifestBuilder
from caseshelf.domain.subset import (
    Selection,
    _column_lanes,
    _column_ranks,
    _nth_smallest,
    count_tagged,
    digest_prefixes,
    sample_key,
    sample_positions,
    sample_rank,
    select_subset,
)

pytestmark = pytest.mark.unit

TAGS = ["easy", "hard", "math", "code", "long"]


def reference_sample(
    candidates: list[int], digests: list[str], n: int, seed: int | str
) -> list[int]:
    """The rule as documented: smallest ranks first, dataset position breaking ties."""
    ranked = sorted(candidates, key=lambda i: (sample_rank(seed, digests[i]), i))
    return sorted(ranked[:n])


digest_pool = st.lists(
    st.binary(min_size=4, max_size=4).map(lambda b: hashlib.sha256(b).hexdigest()),
    min_size=1,
    max_size=6,
)


@given(
    pool=digest_pool,
    picks=st.lists(st.integers(0, 5), min_size=1, max_size=60),
    n=st.integers(1, 70),
    seed=st.one_of(st.integers(0, 10**6), st.text(min_size=1, max_size=5)),
    every=st.integers(1, 3),
)
def test_sample_positions_follow_the_documented_rule_even_with_equal_digests(
    pool, picks, n, seed, every
):
    # Given digests drawn from a small pool (so equal digests, and equal ranks, are common)
    digests = [pool[p % len(pool)] for p in picks]
    candidates = range(0, len(digests), every) if every < 3 else list(range(0, len(digests), 2))
    # When sampled, Then the answer is the reference rule's
    got = sample_positions(candidates, digests, n, seed)
    assert got == reference_sample(candidates, digests, n, seed)
    assert len(got) == min(n, len(candidates))


@pytest.mark.parametrize("every", [0, 1, 3, 7, 9, 50])
def test_sample_of_a_large_version_matches_the_reference(every):
    # Given 5,000 distinct digests, and candidates among them: all (the whole column's top
    # bytes are scanned), dense (the whole column is ranked) or sparse (each is ranked)
    digests = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(5000)]
    candidates = range(5000) if every == 0 else list(range(0, 5000, every))
    # When a tenth is sampled, Then it is the reference rule's choice, from a list or the column
    for seed in (0, 2026, "x"):
        expected = reference_sample(candidates, digests, len(candidates) // 10, seed)
        assert sample_positions(candidates, digests, len(candidates) // 10, seed) == expected
        got = sample_positions(candidates, "".join(digests), len(candidates) // 10, seed)
        assert got == expected


@given(
    st.lists(st.binary(min_size=32, max_size=32).map(bytes.hex), min_size=1, max_size=300),
    st.one_of(st.integers(0, 10**9), st.text(min_size=1, max_size=8)),
)
def test_whole_column_ranks_are_each_cases_rank(digests, seed):
    a, b = sample_key(seed)
    lanes = _column_lanes(digest_prefixes("".join(digests)), a, b)
    assert _column_ranks(lanes) == [sample_rank(seed, d) for d in digests]


def test_the_sample_rank_is_pinned_for_other_implementations():
    # The worked example of docs/subset-and-diff.md: any implementation of the rule gives these.
    key = hashlib.sha256(b"caseshelf-sample:2026").digest()
    a = int.from_bytes(key[:8], "big") | 1
    b = int.from_bytes(key[8:16], "big")
    digest = hashlib.sha256(b"example").hexdigest()
    assert sample_key(2026) == sample_key("2026") == (a, b)
    assert sample_rank(2026, digest) == (a * int(digest[:16], 16) + b) % 2**64
    assert sample_rank(2026, digest) == 4402466521189338576


@given(st.lists(st.integers(0, 2**64 - 1), min_size=2, max_size=200), st.data())
def test_nth_smallest_is_the_sorted_nth(ranks, data):
    n = data.draw(st.integers(1, len(ranks) - 1))
    assert _nth_smallest(ranks, n) == sorted(ranks)[n - 1]


def test_nth_smallest_widens_its_bound_when_ranks_are_not_uniform():
    # Given ranks all in the top of the range (the first filter keeps none of them)
    ranks = [2**64 - 1 - i for i in range(100)]
    # Then the bound widens until the answer is found
    assert _nth_smallest(ranks, 7) == sorted(ranks)[6]


def build(cases: list[list[str]]) -> Manifest:
    b = ManifestBuilder(description="", tags=[], shared_files=[])
    for i, tags in enumerate(cases):
        cid = f"c{i:03d}"
        b.add_case(cid, hashlib.sha256(cid.encode()).hexdigest(), tags, "p" * 64, 0, 10)
    return b.build("sha256:" + "0" * 64)


@given(
    cases=st.lists(st.lists(st.sampled_from(TAGS), unique=True), min_size=1, max_size=40),
    wanted=st.lists(st.sampled_from([*TAGS, "absent"]), min_size=1, max_size=3),
    limit=st.one_of(st.none(), st.integers(1, 50)),
)
def test_the_tag_scan_selects_what_a_case_by_case_check_selects(cases, wanted, limit):
    # Given a manifest with compressed tag columns, and the same with a plain list per case
    m = build(cases)
    assert isinstance(m.case_tags, CaseTags)
    plain = replace(m, case_tags=[list(t) for t in m.case_tags])
    expected = [i for i, tags in enumerate(cases) if set(tags) & set(wanted)][:limit]
    # When selected by tags (and limit)
    for man in (m, plain):
        sel = Selection(tags=tuple(wanted), limit=limit)
        try:
            got = select_subset(man, sel, dataset_id="ds", version="1.0.0").indices
        except BadRequest:  # nothing matched
            got = []
        # Then both give the cases carrying any of the tags, in dataset order
        assert got == expected


@given(
    st.lists(st.lists(st.integers(0, 5), max_size=4, unique=True), max_size=80),
    st.sets(st.integers(0, 6), max_size=3),
)
def test_count_tagged_counts_the_cases_carrying_a_wanted_tag(rows, wanted):
    starts, values = [0], []
    for row in rows:
        values.extend(row)
        starts.append(len(values))
    expected = sum(1 for row in rows if not wanted.isdisjoint(row))
    assert count_tagged(CaseTags(starts, values), wanted) == expected
    assert count_tagged(rows, wanted) == expected
