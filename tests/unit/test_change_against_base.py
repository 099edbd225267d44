"""A version's change against its base followed as its cases pass (`ChangeAgainstBase`): the
superseded positions and the stored delta are what the whole-manifest functions
(`superseded_indices`, `delta_bytes`) make of the whole version, byte for byte, however the
cases are cut into batches and whatever the change (edits, additions, removals, moves, cases of
the same content under other ids)."""

from __future__ import annotations

import hashlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caseshelf.domain.chunks import chunk_bytes, chunk_from_bytes
from caseshelf.domain.diff import (
    DELTA_MAX_CASES,
    ChangeAgainstBase,
    delta_bytes,
    delta_from_bytes,
)
from caseshelf.domain.manifest import PENDING_PACK, Manifest, ManifestBuilder, superseded_indices

pytestmark = pytest.mark.unit


def digest(case_id: str, content: str) -> str:
    return hashlib.sha256(f"{case_id}\n{content}".encode()).hexdigest()


def manifest(rows: list[tuple[str, str, str, int, int]], name: str = "v") -> Manifest:
    """A manifest of `(id, content, container, offset, length)` rows."""
    builder = ManifestBuilder(description="", tags=[], shared_files=[])
    for case_id, content, container, offset, length in rows:
        builder.add_case(case_id, digest(case_id, content), ["t"], container, offset, length)
    return builder.build("sha256:" + hashlib.sha256(name.encode()).hexdigest())


def base_rows(n: int) -> list[tuple[str, str, str, int, int]]:
    return [(f"q{i:05d}", f"c{i}", f"base{i // 40}", (i % 40) * 100, 90 + i % 7) for i in range(n)]


def candidate(
    base: list[tuple[str, str, str, int, int]], rnd: random.Random, *, changes: int
) -> tuple[list[tuple[str, str, str, int, int]], list[tuple[str, str, str, int, int]]]:
    """A new version of `base` with `changes` edits of each kind, as it is written (new records
    in pending packs) and as it ends up stored (the packs named)."""
    rows = list(base)
    for _ in range(changes):
        at = rnd.randrange(len(rows))
        case_id, content, *_ = rows[at]
        rows[at] = (case_id, content + "+", "", 0, 0)  # changed
    for _ in range(changes):
        del rows[rnd.randrange(len(rows))]  # removed
    for k in range(changes):
        # added: new ids, some with the content of a base case (another digest: the id differs)
        content = base[rnd.randrange(len(base))][1] if k % 2 else f"new{k}"
        rows.insert(rnd.randrange(len(rows) + 1), (f"n{k:04d}", content, "", 0, 0))
    if changes and len(rows) > 2:
        moved = rows.pop(rnd.randrange(len(rows)))
        rows.insert(rnd.randrange(len(rows) + 1), moved)  # a case moved
    written, stored = [], []
    offset = 0
    for case_id, content, container, at, length in rows:
        if container:
            written.append((case_id, content, container, at, length))
            stored.append((case_id, content, container, at, length))
            continue
        number = offset // 1000  # a pack of ten new records
        written.append((case_id, content, f"{PENDING_PACK}{number}", offset % 1000, 95))
        stored.append((case_id, content, f"new-pack-{number}", offset % 1000, 95))
        offset += 100
    return written, stored


def chunked(base: Manifest, rnd: random.Random) -> list[tuple[int, Manifest]]:
    """The base cut into chunks of random sizes, as a reader of its stored chunks sees it."""
    out, start = [], 0
    while start < len(base) or not out:
        stop = min(len(base), start + rnd.randint(1, 90))
        out.append((start, chunk_from_bytes(chunk_bytes(base, start, stop))))
        start = stop
    return out


def follow(
    base: Manifest, written: Manifest, cuts: list[int], *, seed: int = 0, **kw: int
) -> ChangeAgainstBase:
    wholes: list[Manifest] = []

    def whole() -> Manifest:
        wholes.append(base)
        return base

    chunks = chunked(base, random.Random(seed))
    change = ChangeAgainstBase(base.content_digest, len(base), iter(chunks), whole, **kw)
    change.wholes = wholes  # type: ignore[attr-defined]
    digests = written.digest_list()
    held = base.locations_by_digest()
    for start, stop in zip([0, *cuts], [*cuts, len(written)], strict=True):
        reused = change.match(written.ids[start:stop], digests[start:stop])
        # (what the base holds of the batch is where the base stores it)
        assert reused == {d: held[d] for d in digests[start:stop] if d in held}
        change.place(
            [written.location(i).container for i in range(start, stop)],
            [written.location(i).offset for i in range(start, stop)],
            [written.location(i).length for i in range(start, stop)],
        )
    change.resolve_pending(lambda number: f"new-pack-{number}")
    return change


def expected_cases(base: Manifest, at: list[int]) -> list[tuple[str, str, object]]:
    return [(base.ids[i], base.digests[i], base.location(i)) for i in at]


def cases_of(m: Manifest | None) -> list[tuple[str, str, object]]:
    assert m is not None
    return [(m.ids[k], m.digests[k], m.location(k)) for k in range(len(m))]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 400),
    changes=st.integers(0, 12),
    seed=st.integers(0, 10_000),
    batches=st.integers(1, 9),
)
def test_the_change_followed_batch_by_batch_is_the_whole_manifests(
    n: int, changes: int, seed: int, batches: int
) -> None:
    rnd = random.Random(seed)
    rows = base_rows(n)
    base = manifest(rows, "base")
    written, stored = candidate(rows, rnd, changes=min(changes, n // 2))
    new = manifest(stored, "new")
    cuts = sorted(rnd.sample(range(len(written) + 1), min(batches - 1, len(written) + 1)))
    change = follow(base, manifest(written, "new"), cuts, seed=seed)
    dropped = superseded_indices(base, new)
    assert change.superseded() == dropped
    if len(dropped) <= DELTA_MAX_CASES:
        assert cases_of(change.superseded_cases()) == expected_cases(base, dropped)
    assert change.delta() == delta_bytes(base, new)


def test_a_version_with_changes_additions_removals_and_a_move_keeps_the_same_delta() -> None:
    rows = base_rows(500)
    base = manifest(rows, "base")
    written, stored = candidate(rows, random.Random(7), changes=9)
    new = manifest(stored, "new")
    change = follow(base, manifest(written, "new"), [100, 250, 251, 400])
    expected = delta_bytes(base, new)
    assert expected is not None and change.delta() == expected
    got = delta_from_bytes(expected).plan
    assert len(got.changed) >= 8 and len(got.added) == 9 and len(got.removed) >= 8
    assert got.order_changed
    assert change.superseded() == superseded_indices(base, new)


def test_an_edited_bump_lines_up_with_its_base_and_builds_no_id_index() -> None:
    rows = base_rows(300)
    base = manifest(rows, "base")
    stored = [
        (cid, content + ("+" if i % 50 == 3 else ""), container, at, length)
        for i, (cid, content, container, at, length) in enumerate(rows)
    ]
    new = manifest(stored, "new")
    change = follow(base, new, [64, 128, 200])
    assert change.superseded() == superseded_indices(base, new) == [3, 53, 103, 153, 203, 253]
    assert cases_of(change.superseded_cases()) == expected_cases(base, change.superseded())
    assert change.delta() == delta_bytes(base, new)
    # (every batch compared with the base's chunks as they came: never loaded whole)
    assert change.wholes == []  # type: ignore[attr-defined]


def test_a_version_that_ends_early_reads_the_rest_of_the_base_for_its_removed_tail() -> None:
    rows = base_rows(700)
    base = manifest(rows, "base")
    stored = rows[:450]
    stored[10] = (*stored[10][:1], "edited", *stored[10][2:])
    new = manifest(stored, "new")
    change = follow(base, new, [100, 300], seed=5)
    dropped = superseded_indices(base, new)
    assert change.superseded() == dropped == [10, *range(450, 700)]
    assert cases_of(change.superseded_cases()) == expected_cases(base, dropped)
    assert change.delta() == delta_bytes(base, new)
    assert change.wholes == []  # type: ignore[attr-defined]


def test_no_delta_beyond_the_limit_or_without_a_change_and_the_superseded_still_follow() -> None:
    rows = base_rows(200)
    base = manifest(rows, "base")
    same = follow(base, base, [50])
    assert same.delta() is None and same.superseded() == []
    written, stored = candidate(rows, random.Random(3), changes=10)
    new = manifest(stored, "new")
    small = follow(base, manifest(written, "new"), [30], limit=5)
    assert small.delta() is None
    assert small.superseded() == superseded_indices(base, new)
    # The limit counts every case named, removed ones too, as `delta_bytes` counts them
    plan = delta_from_bytes(delta_bytes(base, new) or b"").plan
    named = len(plan.added) + len(plan.removed) + len(plan.changed)
    assert follow(base, manifest(written, "new"), [], limit=named).delta() is not None
    assert follow(base, manifest(written, "new"), [], limit=named - 1).delta() is None
