"""The columnar manifest: bytes round trip, builder interning, locations."""

from __future__ import annotations

import base64
import hashlib
import struct

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caseshelf.domain.errors import BadRequest
from caseshelf.domain.manifest import (
    PENDING_PACK,
    DigestColumn,
    IntColumn,
    Location,
    Manifest,
    ManifestBuilder,
)

pytestmark = pytest.mark.unit


def hx(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


rows = st.lists(
    st.tuples(
        # case id: never a control character (the envelope refuses them)
        st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=10),
        st.lists(st.sampled_from(["easy", "hard", "math", "é"]), unique=True, max_size=3),
        st.sampled_from(["p1", "p2", "p3"]),  # pack
        st.integers(min_value=0, max_value=2**40),
        st.integers(min_value=1, max_value=2**20),
    ),
    max_size=20,
)


def build(items, blobs=()) -> Manifest:
    b = ManifestBuilder(
        description="desc ü",
        tags=["t1", "t2"],
        shared_files=[{"dest": "a.txt", "digest": "sha256:" + hx("a")}],
    )
    for case_id, tags, pack, offset, length in items:
        b.add_case(case_id, hx(case_id), tags, hx(pack), offset, length)
    for digest, container, offset, length in blobs:
        b.add_blob(digest, Location(container, offset, length))
    return b.build("sha256:" + hx("content"))


@settings(max_examples=100, deadline=None)
@given(items=rows)
def test_manifest_bytes_round_trip(items):
    # Given a manifest built from any cases
    m = build(items, blobs=[(hx("b1"), hx("bp"), 0, 3), (hx("b2"), hx("b2"), 0, 9)])
    # When it is written and read back
    back = Manifest.from_bytes(m.to_bytes())
    # Then nothing is lost
    assert back == m
    assert len(back) == len(items)
    for i, (case_id, tags, pack, offset, length) in enumerate(items):
        assert back.ids[i] == case_id
        assert back.case_digest(i) == "sha256:" + hx(case_id)
        assert back.tags_of(i) == tags
        assert back.location(i) == Location(hx(pack), offset, length)
    assert back.case_bytes() == sum(it[4] for it in items)
    assert back.blob_locations() == {
        hx("b1"): Location(hx("bp"), 0, 3),
        hx("b2"): Location(hx("b2"), 0, 9),
    }


def test_the_manifest_is_columnar_and_interns_packs_and_tags():
    m = build(
        [
            ("a", ["hard"], "p1", 0, 10),
            ("b", ["hard", "math"], "p1", 11, 5),
            ("c", [], "p2", 0, 7),
        ]
    )
    doc = orjson.loads(m.to_bytes())
    assert doc["format"] == "caseshelf.manifest/2"
    cases = doc["cases"]
    # every column is one JSON string: ids joined by newlines, digests concatenated,
    # integers as base64 of little-endian arrays, tags as CSR arrays
    assert cases["count"] == 3
    assert cases["ids"] == "a\nb\nc"
    assert cases["digests"] == hx("a") + hx("b") + hx("c")
    assert doc["packs"] == [hx("p1"), hx("p2")]
    assert base64.b64decode(cases["pack"]) == struct.pack("<3I", 0, 0, 1)
    assert base64.b64decode(cases["offset"]) == struct.pack("<3Q", 0, 11, 0)
    assert doc["tag_names"] == ["hard", "math"]
    assert base64.b64decode(cases["tag_starts"]) == struct.pack("<4I", 0, 1, 3, 3)
    assert base64.b64decode(cases["tag_values"]) == struct.pack("<3I", 0, 0, 1)
    back = Manifest.from_bytes(m.to_bytes())
    assert [list(back.case_tags[i]) for i in range(3)] == [[0], [0, 1], []]


def test_a_manifest_with_columns_of_different_lengths_is_refused():
    doc = orjson.loads(build([("a", [], "p1", 0, 1), ("b", [], "p1", 2, 1)]).to_bytes())
    doc["cases"]["digests"] = doc["cases"]["digests"][:64]
    with pytest.raises(BadRequest, match="corrupt manifest"):
        Manifest.from_bytes(orjson.dumps(doc))


def test_pending_packs_are_named_once_flushed():
    b = ManifestBuilder(description="", tags=[], shared_files=[])
    b.add_case("a", hx("a"), [], PENDING_PACK + "0", 0, 3)
    b.add_case("b", hx("b"), [], PENDING_PACK + "1", 0, 3)
    b.add_case("c", hx("c"), [], hx("old"), 9, 3)
    b.resolve_pending(lambda n: hx(f"pack{n}"))
    m = b.build("sha256:" + hx("x"))
    assert [m.location(i).container for i in range(3)] == [hx("pack0"), hx("pack1"), hx("old")]


def test_a_blob_is_listed_once():
    b = ManifestBuilder(description="", tags=[], shared_files=[])
    b.add_blob(hx("x"), Location(hx("c"), 0, 1))
    b.add_blob(hx("x"), Location(hx("c"), 0, 1))
    assert b.build("sha256:" + hx("y")).blob_digests == [hx("x")]


def test_locations_by_digest_serve_dedup():
    m = build([("a", [], "p1", 0, 10), ("b", [], "p2", 4, 6)])
    assert m.locations_by_digest() == {
        hx("a"): Location(hx("p1"), 0, 10),
        hx("b"): Location(hx("p2"), 4, 6),
    }


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"{}",
        b'{"format": "other/9"}',
        orjson.dumps({"format": "caseshelf.manifest/1", "content_digest": "x"}),
    ],
)
def test_a_corrupt_manifest_is_a_typed_error(data):
    with pytest.raises(BadRequest, match="corrupt manifest"):
        Manifest.from_bytes(data)


def test_the_digest_column_is_cut_only_when_a_digest_is_asked_for():
    # Given a manifest read back from bytes
    b = ManifestBuilder(description="", tags=[], shared_files=[])
    for i in range(3):
        b.add_case(f"c{i}", hx(str(i)), [], "p", i * 10, 10)
    m = Manifest.from_bytes(b.build("sha256:" + hx("v")).to_bytes())
    # Then its digests are one stored string until one is asked for, and equal the list
    assert isinstance(m.digests, DigestColumn) and m.digests._cut is None
    assert Manifest.from_bytes(m.to_bytes()) == m and m.digests._cut is None
    assert m.digests[1] == hx("1") and list(m.digests) == [hx(str(i)) for i in range(3)]
    assert m.digests == [hx(str(i)) for i in range(3)] and len(m.digests) == 3
    with pytest.raises(ValueError, match="wrong length"):
        DigestColumn("ab")


def test_integer_columns_are_decoded_only_when_used():
    # Given a manifest read back from bytes
    m = Manifest.from_bytes(build([("a", ["x"], "p1", 0, 10), ("b", [], "p2", 4, 6)]).to_bytes())
    columns = (m.pack_index, m.offsets, m.lengths, m.case_tags.starts, m.case_tags.values)
    assert all(isinstance(c, IntColumn) and c._array is None for c in columns)
    # Then their lengths are known, and writing the manifest again decodes none of them
    assert len(m) == 2 and len(m.case_tags) == 2 and len(m.offsets) == 2
    assert Manifest.from_bytes(m.to_bytes()).to_bytes() == m.to_bytes()
    assert all(c._array is None for c in columns)
    # And the first use decodes a column, which then reads like the array it stores
    assert m.case_bytes() == 16 and m.lengths == [10, 6] and m.lengths[-1:].tolist() == [6]
    assert m.location(1) == Location(hx("p2"), 4, 6)
    assert list(m.offsets) == [0, 4] and not isinstance(m.offsets, IntColumn)  # decoded for good
    assert m.tags_of(0) == ["x"] and m.tags_of(1) == []


def test_a_corrupt_integer_column_is_a_typed_error_when_it_is_read():
    doc = orjson.loads(build([("a", [], "p1", 0, 1), ("b", [], "p1", 2, 1)]).to_bytes())
    doc["cases"]["offset"] = "!!!!" + doc["cases"]["offset"][4:]  # the right length, not base64
    m = Manifest.from_bytes(orjson.dumps(doc))
    with pytest.raises(BadRequest, match="corrupt manifest"):
        m.location(0)
    doc["cases"]["length"] = doc["cases"]["length"][:-4]  # a case short
    with pytest.raises(BadRequest, match="corrupt manifest"):
        Manifest.from_bytes(orjson.dumps(doc))
    with pytest.raises(ValueError, match="wrong length"):
        IntColumn("abc", "Q")


def test_one_digest_of_a_stored_column_is_read_without_cutting_the_column() -> None:
    digests = [f"{i:064x}" for i in range(5)]
    column = DigestColumn("".join(digests))
    # A digest asked for by position is its slice of the text: the column is not cut
    assert [column[i] for i in range(5)] == digests and column[-1] == digests[-1]
    assert column._cut is None
    with pytest.raises(IndexError):
        column[5]
    # And a slice, or a loop, cuts it once
    assert column[1:3] == digests[1:3] and column._cut == digests
    assert column[2] == digests[2]
