"""Format 3 manifests, pure: content-defined cut points, self-contained chunks, root round trip,
the chunked diff plan against the whole-manifest plan."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caseshelf.domain import chunks
from caseshelf.domain.chunks import (
    MAX_CASES,
    MIN_CASES,
    Root,
    chunk_bytes,
    chunk_ends,
    chunk_from_bytes,
    join_chunks,
    split_manifest,
)
from caseshelf.domain.diff import ChunkPart, differing_chunks, plan_chunked_diff, plan_diff
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.manifest import Location, Manifest, ManifestBuilder

pytestmark = pytest.mark.unit


def hx(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


def build(cases: list[tuple[str, str]], *, tags_every: int = 7) -> Manifest:
    """A manifest of `(id, content)` cases: digest of both; tags, pack and offset follow from
    the id, as a case reused by a later version keeps its record's location."""
    b = ManifestBuilder(description="d", tags=["v"], shared_files=[])
    for case_id, content in cases:
        key = int(hx(case_id)[:8], 16)
        tags = ["seven"] if key % tags_every == 0 else []
        if case_id.endswith("3"):
            tags.append("three")
        b.add_case(case_id, hx(case_id + content), tags, hx(f"p{key % 3}"), key % 10**6, 9)
    b.add_blob(hx("body"), Location(hx("blobpack"), 0, 4))
    return b.build("sha256:" + hx(repr(cases)))


def ids(n: int, prefix: str = "c") -> list[tuple[str, str]]:
    return [(f"{prefix}{i:06d}", "x") for i in range(n)]


def test_chunk_ends_respect_the_bounds() -> None:
    digests = [hx(str(i)) for i in range(20_000)]
    ends = chunk_ends(digests)
    sizes = [b - a for a, b in zip([0, *ends], ends, strict=False)]
    assert ends[-1] == len(digests) and sum(sizes) == len(digests)
    assert all(MIN_CASES <= s <= MAX_CASES for s in sizes[:-1]) and 0 < sizes[-1] <= MAX_CASES
    assert 500 < sum(sizes) / len(sizes) < 2000  # about MIN_CASES + BOUNDARY_MODULUS
    assert chunk_ends([]) == [0]


def test_an_insertion_moves_only_the_chunks_around_it() -> None:
    # Given 20,000 cases, and the same with 5 cases inserted at one place
    base = ids(20_000)
    edited = base[:9_000] + [(f"new{i}", "y") for i in range(5)] + base[9_000:]
    r1, _, _, _ = split_manifest(build(base))
    r2, _, _, _ = split_manifest(build(edited))
    # Then all but a few chunks are the same keys
    assert len(set(r2.chunk_keys) - set(r1.chunk_keys)) <= 3
    assert len(set(r1.chunk_keys) & set(r2.chunk_keys)) >= len(r1.chunk_keys) - 3


def test_a_chunk_depends_only_on_its_cases_and_their_locations() -> None:
    # Given two manifests with other cases around the same run of cases
    run = ids(50, "r")
    a = build(ids(10, "a") + run, tags_every=1)
    b = build(ids(30, "b") + run, tags_every=1)
    # (same tags on the run's cases)
    ta = [a.tags_of(i) for i in range(10, 60)]
    tb = [b.tags_of(i) for i in range(30, 80)]
    assert ta == tb
    # Then the run's chunk is the same bytes on both
    assert chunk_bytes(a, 10, 60) == chunk_bytes(b, 30, 80)
    # And not once one location differs
    moved = Manifest(**{**b.__dict__, "packs": [hx("elsewhere"), *b.packs[1:]]})
    assert chunk_bytes(moved, 30, 80) != chunk_bytes(b, 30, 80)
    # And it reads back as those cases, at those locations, with those tags
    back = chunk_from_bytes(chunk_bytes(a, 10, 60))
    assert back.ids == [c for c, _ in run]
    assert [back.location(i) for i in range(50)] == [a.location(i) for i in range(10, 60)]
    assert [back.tags_of(i) for i in range(50)] == ta


@settings(max_examples=15, deadline=None)
@given(n=st.integers(min_value=0, max_value=3000), every=st.integers(min_value=1, max_value=50))
def test_split_and_join_give_the_manifest_back(n: int, every: int) -> None:
    m = build(ids(n), tags_every=every)
    root, parts, _, _ = split_manifest(m)
    again = Root.from_doc(orjson.loads(root.to_bytes()))
    assert again == root and again.count == n and sum(root.chunk_counts) == n
    joined = join_chunks(again, [chunk_from_bytes(data) for _, data in parts])
    assert joined.ids == m.ids and list(joined.digest_list()) == list(m.digest_list())
    assert [joined.location(i) for i in range(n)] == [m.location(i) for i in range(n)]
    assert [joined.tags_of(i) for i in range(n)] == [m.tags_of(i) for i in range(n)]
    assert joined.blob_locations() == m.blob_locations()
    assert joined.content_digest == m.content_digest and joined.case_bytes() == m.case_bytes()
    assert all(hashlib.sha256(data).hexdigest() == key for key, data in parts)
    # every chunk lists the tags its cases carry
    for number, tags in enumerate(root.chunk_tags):
        held = {t for c in parts[number : number + 1] for t in chunk_from_bytes(c[1]).tag_names}
        assert {root.tag_names[t] for t in tags} == held


def test_a_damaged_chunk_or_root_is_refused() -> None:
    root, parts, _, _ = split_manifest(build(ids(600)))
    doc = orjson.loads(parts[0][1])
    doc["count"] += 1
    with pytest.raises(BadRequest, match="chunk"):
        chunk_from_bytes(orjson.dumps(doc))
    with pytest.raises(BadRequest, match="chunk"):
        chunk_from_bytes(b"[1]")
    bad = orjson.loads(root.to_bytes())
    bad["count"] += 1
    with pytest.raises(BadRequest, match="add up"):
        Root.from_doc(bad)
    with pytest.raises(BadRequest, match="missing"):
        join_chunks(root, [])


def parts_of(root: Root, parts: list[tuple[str, bytes]], numbers: list[int]) -> ChunkPart:
    starts = root.chunk_starts()
    chunks = [chunk_from_bytes(parts[n][1]) for n in numbers]
    part = ChunkPart.of(chunks, [starts[n] for n in numbers])
    assert all(
        part.location(i) == chunks[0].location(i) for i in range(len(chunks[0]) if chunks else 0)
    )
    return part


edits = st.lists(
    st.tuples(
        st.sampled_from(["change", "change", "remove", "insert", "move", "swap"]),
        st.integers(min_value=0, max_value=999),
    ),
    max_size=8,
)


@settings(max_examples=25, deadline=None)
@given(edits=edits)
def test_the_chunked_plan_is_the_whole_manifest_plan(edits) -> None:
    base = ids(1_000)
    cand = list(base)
    for kind, at in edits:
        at = at % max(len(cand), 1)
        if kind == "change" and cand:
            cand[at] = (cand[at][0], cand[at][1] + "!")
        elif kind == "remove" and cand:
            del cand[at]
        elif kind == "insert":
            cand.insert(at, (f"ins{at}-{len(cand)}", "z"))
        elif kind == "move" and cand:
            cand.append(cand.pop(at))
        elif kind == "swap" and len(cand) > 1:  # same ids, another order
            cand[at], cand[at - 1] = cand[at - 1], cand[at]
    mb, mc = build(base), build(cand)
    with pytest.MonkeyPatch.context() as mp:  # small chunks: edits meet their edges
        mp.setattr(chunks, "MIN_CASES", 4)
        mp.setattr(chunks, "BOUNDARY_MODULUS", 12)
        mp.setattr(chunks, "MAX_CASES", 40)
        rb, pb, _, _ = split_manifest(mb)
        rc, pc, _, _ = split_manifest(mc)
    only_b, only_c = differing_chunks(rb, rc)
    plan = plan_chunked_diff(rb, rc, parts_of(rb, pb, only_b), parts_of(rc, pc, only_c))
    assert plan == plan_diff(mb, mc)


def test_sample_groups_respect_the_bounds_and_move_only_around_a_change() -> None:
    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(400)]
    ends = chunks.sample_group_ends(keys)
    sizes = [b - a for a, b in zip([0, *ends], ends, strict=False)]
    assert ends[-1] == len(keys) and sum(sizes) == len(keys)
    assert all(chunks.SAMPLE_MIN_CHUNKS <= s <= chunks.SAMPLE_MAX_CHUNKS for s in sizes[:-1])
    # A chunk replaced in the middle moves only the groups next to it
    edited = [*keys[:200], hashlib.sha256(b"new").hexdigest(), *keys[201:]]
    before = set(zip([0, *ends], ends, strict=False))
    after_ends = chunks.sample_group_ends(edited)
    after = set(zip([0, *after_ends], after_ends, strict=False))
    assert len(before - after) <= 3


def test_sample_columns_hold_every_id_and_digest_prefix_in_order() -> None:
    m = build(ids(3000))
    root, _, _, samples = split_manifest(m)
    assert [k for k, _ in samples] == root.sample_keys
    assert sum(root.sample_chunks) == len(root.chunk_keys)
    columns = [chunks.sample_column_from_bytes(data) for _, data in samples]
    joined = chunks.join_sample_columns(columns)
    assert joined.ids == m.ids
    assert joined.prefixes == b"".join(bytes.fromhex(d[:16]) for d in m.digest_list())
    assert root.sample_starts()[-1] == len(m)
    back = chunks.Root.from_doc(orjson.loads(root.to_bytes()))
    assert (back.sample_keys, back.sample_chunks) == (root.sample_keys, root.sample_chunks)
    with pytest.raises(BadRequest, match="sample column"):
        chunks.sample_column_from_bytes(samples[0][1].replace(b'"count":', b'"count":1', 1))


def tags_of_column(column: chunks.SampleColumn) -> list[set[str]]:
    assert column.tags is not None
    return [{column.tag_names[t] for t in column.tags[i]} for i in range(len(column))]


@settings(max_examples=15, deadline=None)
@given(n=st.integers(min_value=0, max_value=3000), every=st.integers(min_value=1, max_value=50))
def test_sample_columns_hold_every_cases_tags(n: int, every: int) -> None:
    # Given a version's sample columns (format 5 roots name columns with tags)
    m = build(ids(n), tags_every=every)
    root, _, _, samples = split_manifest(m)
    assert root.root_format == chunks.ROOT_FORMAT and (root.sample_tags or n == 0)
    columns = [chunks.sample_column_from_bytes(data) for _, data in samples]
    # Then each column, and all of them joined, carry every case's tags in order
    joined = chunks.join_sample_columns(columns)
    assert joined.ids == m.ids
    assert tags_of_column(joined) == [set(m.tags_of(i)) for i in range(n)]
    starts = root.sample_starts()
    for number, column in enumerate(columns):
        expected = [set(m.tags_of(i)) for i in range(starts[number], starts[number + 1])]
        assert tags_of_column(column) == expected
        # a table of the distinct sets of tags, one small number a case
        assert column.tags is not None
        assert len(column.tags.sets) <= 4 and column.tags.of_case.typecode == "B"


def test_a_sample_columns_tags_are_a_function_of_its_cases_tags() -> None:
    # Given the same cases, their tags held as compressed columns or as a list per case
    m = build(ids(500), tags_every=3)
    plain = Manifest(**{**m.__dict__, "case_tags": [list(m.case_tags[i]) for i in range(500)]})
    # Then their columns are the same bytes
    column = chunks.sample_column_bytes(m, 100, 400)
    assert chunks.sample_column_bytes(plain, 100, 400) == column
    # And a case's tags listed in another order, or twice, are the same set of its column
    listed = [list(m.case_tags[i])[::-1] * 2 for i in range(500)]
    again = chunks.sample_column_bytes(Manifest(**{**m.__dict__, "case_tags": listed}), 100, 400)
    assert tags_of_column(chunks.sample_column_from_bytes(again)) == tags_of_column(
        chunks.sample_column_from_bytes(column)
    )
    # And without tags the column is the format 4 one: ids and digest prefixes only
    untagged = chunks.sample_column_from_bytes(chunks.sample_column_bytes(m, 0, 10, tags=False))
    assert untagged.tags is None and untagged.ids == m.ids[:10]


def test_sample_columns_of_cases_without_tags_and_of_many_tag_sets() -> None:
    # Given cases that carry no tag, and cases that each carry a set of their own
    bare = build(ids(300), tags_every=10**9)
    bare = Manifest(**{**bare.__dict__, "case_tags": []})
    b = ManifestBuilder(description="", tags=[], shared_files=[])
    for i in range(700):
        b.add_case(f"c{i}", hx(f"c{i}"), [f"t{i}", "all"], hx("p"), i, 1)
    many = b.build("sha256:" + hx("many"))
    # Then a column without tags has empty tables, and many sets take two bytes a case
    column = chunks.sample_column_from_bytes(chunks.sample_column_bytes(bare, 0, 300))
    assert column.tag_names == [] and column.tags is not None and column.tags.sets == []
    assert tags_of_column(column) == [set()] * 300
    data = chunks.sample_column_bytes(many, 0, 700)
    wide = chunks.sample_column_from_bytes(data)
    assert wide.tags is not None and wide.tags.of_case.typecode == "H"
    assert tags_of_column(wide) == [{f"t{i}", "all"} for i in range(700)]
    # And joined, each keeps its cases' tags
    joined = chunks.join_sample_columns([column, wide, column])
    assert tags_of_column(joined) == [set()] * 300 + tags_of_column(wide) + [set()] * 300
    # And a column of the earlier format joined with these carries no tags
    old = chunks.sample_column_from_bytes(chunks.sample_column_bytes(bare, 0, 300, tags=False))
    assert chunks.join_sample_columns([wide, old]).tags is None


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(tag_set=d["tag_set"][:-4]),  # a case without its set number
        lambda d: d.update(tag_sets=[[0, 9]]),  # a tag number out of range
        lambda d: d.update(tag_sets=[["a"]]),  # a set of names, not numbers
        lambda d: d.update(tag_names=[1, 2]),  # a tag name that is no string
        lambda d: d.update(tag_sets=d["tag_sets"][:1]),  # set numbers beyond the table
        lambda d: d.pop("tag_set"),
    ],
)
def test_a_damaged_tag_column_is_refused(change: Any) -> None:
    m = build(ids(600), tags_every=2)
    doc = orjson.loads(chunks.sample_column_bytes(m, 0, 600))
    assert len(doc["tag_sets"]) > 1
    change(doc)
    with pytest.raises(BadRequest, match="sample column"):
        chunks.sample_column_from_bytes(orjson.dumps(doc))


def test_roots_keep_the_format_they_were_stored_in() -> None:
    root, _, _, _ = split_manifest(build(ids(600)))
    doc = orjson.loads(root.to_bytes())
    assert doc["format"] == "caseshelf.manifest/5"
    for older in ("caseshelf.manifest/4", "caseshelf.manifest/3"):
        doc["format"] = older
        if older.endswith("3"):
            del doc["sample"]
        back = Root.from_doc(doc)
        assert back.root_format == older and not back.sample_tags
        assert orjson.loads(back.to_bytes())["format"] == older


def cut_streaming(m: Manifest, batch_sizes: list[int]) -> tuple[Root, list[tuple[str, bytes]]]:
    """`m`'s cases through a `ManifestCutter`, in batches of the sizes given (cycled): the
    root and every object it cut, chunks and sample columns, in the order cut."""
    cutter = chunks.ManifestCutter()
    objects: list[tuple[str, bytes]] = []
    digests, n, k = m.digest_list(), len(m), 0
    at = 0
    while at < n:
        stop = min(n, at + batch_sizes[k % len(batch_sizes)])
        k += 1
        part = range(at, stop)
        objects += [
            (kind + ":" + key, data)
            for kind, key, data in cutter.add(
                m.ids[at:stop],
                digests[at:stop],
                [m.tags_of(i) for i in part],
                [m.location(i).container for i in part],
                [m.location(i).offset for i in part],
                [m.location(i).length for i in part],
            )
        ]
        at = stop
    root, rest = cutter.finish(m)
    objects += [(kind + ":" + key, data) for kind, key, data in rest]
    return root, objects


@settings(max_examples=25, deadline=None)
@given(
    n=st.sampled_from([0, 1, MIN_CASES, MIN_CASES + 1, 3_000, 9_000, 21_000]),
    every=st.sampled_from([1, 7, 10**9]),
    sizes=st.lists(st.integers(1, 5_000), min_size=1, max_size=4),
)
def test_cutting_as_cases_come_gives_what_split_manifest_gives(
    n: int, every: int, sizes: list[int]
) -> None:
    """Given a manifest, when its cases are cut into chunks as they come, in batches of any
    sizes, then the chunks, sample columns and root are byte for byte those of
    `split_manifest` over the whole manifest."""
    m = build(ids(n), tags_every=every)
    root, parts, _, samples = split_manifest(m)
    streamed_root, objects = cut_streaming(m, sizes)
    assert streamed_root.to_bytes() == root.to_bytes()
    assert sorted(objects) == sorted(
        [("chunk:" + k, d) for k, d in parts] + [("sample:" + k, d) for k, d in samples]
    )
    assert [o for o in objects if o[0].startswith("chunk:")] == [
        ("chunk:" + k, d) for k, d in parts
    ]


def test_cutting_as_cases_come_holds_a_window_and_names_superseded_copies() -> None:
    """Given 30,000 cases added 1,000 at a time, then the cutter never holds a whole chunk's
    worth beyond `MAX_CASES`; and a manifest with superseded copies gets the root
    `split_manifest` gives it (the copies' packs and object named)."""
    m = build(ids(30_000))
    cutter = chunks.ManifestCutter()
    digests = m.digest_list()
    for at in range(0, len(m), 1_000):
        part = range(at, at + 1_000)
        cutter.add(
            m.ids[at : at + 1_000],
            digests[at : at + 1_000],
            [m.tags_of(i) for i in part],
            [m.location(i).container for i in part],
            [m.location(i).offset for i in part],
            [m.location(i).length for i in part],
        )
        assert len(cutter._ids) < MAX_CASES
    copied = m.with_superseded([(hx("old"), Location(hx("copies"), 0, 9))])
    root, _, extra, _ = split_manifest(copied)
    streamed, _ = cut_streaming(copied, [777])
    assert extra is not None and streamed.superseded_key == extra[0]
    assert streamed.to_bytes() == root.to_bytes()


@pytest.mark.parametrize("sizes", [[1], [100, 7], [5_000]])
def test_cutting_as_cases_come_cuts_at_the_edges_as_chunk_ends(sizes: list[int]) -> None:
    """Given cases whose digests put boundaries at the edges of the rules (a chunk's
    `MIN_CASES`th case, one before it, none for more than `MAX_CASES`, the very last case),
    when they are cut as they come, then the chunks are those of `split_manifest`."""
    boundary_at = {MIN_CASES - 2, MIN_CASES - 1, 2 * MIN_CASES - 1, 2 * MIN_CASES}
    boundary_at |= {3 * MIN_CASES + MAX_CASES + 5, 9_999}
    b = ManifestBuilder(description="", tags=[], shared_files=[])
    for i in range(10_000):
        tail = "00000000" if i in boundary_at else "01000000"
        b.add_case(f"e{i}", hx(f"e{i}")[:56] + tail, [], hx("p"), 10 * i, 9)
    m = b.build("sha256:" + hx("edges"))
    root, parts, _, _ = split_manifest(m)
    streamed, objects = cut_streaming(m, sizes)
    assert streamed.chunk_counts == root.chunk_counts
    assert streamed.to_bytes() == root.to_bytes()
    assert [o for o in objects if o[0].startswith("chunk:")] == [
        ("chunk:" + k, d) for k, d in parts
    ]
