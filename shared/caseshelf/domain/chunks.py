"""Manifests of format 3 on: a small root naming content-addressed chunks of cases. Pure.

A version's cases are cut into chunks by content: a chunk ends after a case whose digest meets a
hash condition (`is_boundary`), once the chunk holds at least `MIN_CASES` cases, and at the
latest at `MAX_CASES`. The condition depends on the case alone (its digest covers its id and
content), so inserting, removing or changing a case moves only the boundaries of the chunk it is
in (and, rarely, the next one, until a boundary falls where it fell before): the chunks before
and after are the same cases as before, and a chunk of the same cases at the same locations is
the same bytes (`chunk_bytes` depends on nothing else), so the same key. Versions that share
cases share chunks, as lakeFS's commits share ranges; the root plays the part of its metarange.

A chunk (`caseshelf.chunk/1`) is self-contained: its cases' ids, digests, pack locations and tag
names, with its own small tables of pack names and tag names (first use order), encoded like the
format 2 columns (one string per column). Its key is `manifests/chunks/<sha256 of its bytes>`.
The copies of the base version's records a version keeps for diffs (`superseded`) are one more
object (`caseshelf.superseded/1`, `manifests/superseded/<sha256>`), named by the root and read by
a diff only.

A sample needs every case's digest prefix and id, and nothing else of a chunk: reading every
chunk for it costs a request per ~1,000 cases. So each group of consecutive chunks (cut by their
keys, `sample_group_ends`: ~7 chunks) has a sample column too (`manifests/sample/<sha256>`): the
ids of its cases and the first 8 bytes of each digest, ~23 bytes a case against a chunk's ~110,
and (`caseshelf.sample/2`, named by roots of format 5) each case's tags as the number of its set
in a table of the distinct sets of tags the column's cases carry (`tag_sets`, ~1.3 bytes a case
for a dataset's usual few combinations), so that a selection by tags reads the columns too. Like
chunks, a column is a function of its cases alone, so versions that share a stretch of chunks
share the columns inside it.

The root (`caseshelf.manifest/5`; format 4 is the same with sample columns of ids and digest
prefixes only, `caseshelf.sample/1`, and format 3 without sample columns) holds what every
reader needs first: the version's content (description, tags, shared files: the content digest is
over these and the cases, never the layout), the case count and bytes, every tag name with each
chunk's tags, each chunk's key, case count and first and last id, the packs the chunks name, where
file bodies live, and each sample column's key and the number of chunks it covers. A page of cases
reads the root and the chunks covering the page; a diff reads only the chunks whose keys differ; a
selection is decided from the sample columns covering it (by tags, those covering a chunk
that carries one); asked for the cases, it then reads the chunks holding the selected ones.
"""

from __future__ import annotations

import base64
import binascii
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate, chain, islice, pairwise, repeat
from operator import sub
from typing import Any

import orjson

from caseshelf.domain.canonical import sha256_hex
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.manifest import (
    CaseTags,
    DigestColumn,
    IntColumn,
    Location,
    Manifest,
    TagSetColumn,
    _pack_ints,
    _unpack_ints,
    blob_locations,
    column_array,
    set_number_code,
)

ROOT_FORMAT = "caseshelf.manifest/5"
# Every root format a reader takes (versions registered before keep theirs): 3 is 4 without
# sample columns, and 4 is 5 with sample columns that carry no tags (`SAMPLE_FORMAT`).
UNTAGGED_ROOT_FORMATS = ("caseshelf.manifest/3", "caseshelf.manifest/4")
ROOT_FORMATS = (*UNTAGGED_ROOT_FORMATS, ROOT_FORMAT)
CHUNK_FORMAT = "caseshelf.chunk/1"
SUPERSEDED_FORMAT = "caseshelf.superseded/1"
# Sample columns: ids and digest prefixes (format 4 roots name these), and the same with each
# case's tags (format 5 roots).
SAMPLE_FORMAT = "caseshelf.sample/1"
TAGGED_SAMPLE_FORMAT = "caseshelf.sample/2"
# Cases per chunk: at least MIN_CASES (bar the last), at most MAX_CASES; in between a chunk ends
# after a case whose digest's last 8 hex digits are 0 modulo BOUNDARY_MODULUS, so chunks average
# about MIN_CASES + BOUNDARY_MODULUS cases (~1,000: ~110 kB of chunk for GSM8K-sized ids).
MIN_CASES = 256
BOUNDARY_MODULUS = 768
MAX_CASES = 4096
# Chunks per sample column: a group ends after a chunk whose key's last 8 hex digits are 0
# modulo SAMPLE_MODULUS once it holds SAMPLE_MIN_CHUNKS, and after SAMPLE_MAX_CHUNKS at the
# latest (about 7 chunks, ~7,000 cases, ~160 kB at GSM8K's ids). Larger groups mean fewer
# requests for a sample and more bytes rewritten for a change (docs/decisions.md, sample columns).
SAMPLE_MIN_CHUNKS = 4
SAMPLE_MODULUS = 4
SAMPLE_MAX_CHUNKS = 16


def is_boundary(digest_hex: str) -> bool:
    """Whether a chunk may end after the case of this digest (a content-defined cut point):
    the digest's last 4 bytes, read as a little-endian integer, are 0 modulo
    `BOUNDARY_MODULUS`."""
    return int.from_bytes(bytes.fromhex(digest_hex[56:64]), "little") % BOUNDARY_MODULUS == 0


def _boundaries(digests: Sequence[str]) -> list[int]:
    """The positions of every case `is_boundary` holds for, ascending: the digests' last 4
    bytes read at once from their binary form (one pass in C), instead of a call per case."""
    tails = array("I", memoryview(bytes.fromhex("".join(digests))).cast("I")[7::8])
    if sys.byteorder == "big":
        tails.byteswap()
    modulus = BOUNDARY_MODULUS
    return [i for i, tail in enumerate(tails) if not tail % modulus]


def chunk_ends(digests: Sequence[str]) -> list[int]:
    """Where each chunk ends (exclusive positions; the last is `len(digests)`): after the first
    boundary case once a chunk holds `MIN_CASES`, or after `MAX_CASES` cases."""
    n = len(digests)
    candidates = _boundaries(digests)
    ends: list[int] = []
    start = 0
    while n - start > MIN_CASES:
        at = bisect_left(candidates, start + MIN_CASES - 1)
        end = candidates[at] + 1 if at < len(candidates) else n
        end = min(end, start + MAX_CASES, n)
        ends.append(end)
        start = end
    if start < n or not ends:
        ends.append(n)
    return ends


def _intern(names: Iterable[str]) -> tuple[list[str], dict[str, int]]:
    table: dict[str, int] = {}
    for name in names:
        table.setdefault(name, len(table))
    return list(table), table


def _renumber(column: Sequence[int]) -> tuple[list[int], array[int]]:
    """A column of numbers into a table renumbered by first use: `(the numbers used, in first
    use order; the column in the new numbers)`, both in C-level passes."""
    used = list(dict.fromkeys(column))
    local = {number: i for i, number in enumerate(used)}
    return used, array("I", map(local.__getitem__, column))


def chunk_bytes(m: Manifest, start: int, stop: int) -> bytes:
    """The chunk of `m`'s cases `start:stop`: a function of those cases and their locations
    only (ids, digests, packs, offsets, lengths, tag names), so equal inputs give equal bytes."""
    return _chunk(m, start, stop)[0]


def _chunk(m: Manifest, start: int, stop: int) -> tuple[bytes, list[str]]:
    """The chunk's bytes and the tag names its cases carry."""
    packs_used, pack_column = _renumber(column_array(m.pack_index)[start:stop])
    starts, values = array("I", [0] * (stop - start + 1)), array("I")
    tag_names: list[str] = []
    rows = m.case_tags
    if len(rows) == len(m.ids) and isinstance(rows, CaseTags):
        all_starts = column_array(rows.starts)
        lo, hi = all_starts[start], all_starts[stop]
        if hi > lo:  # cases with tags: renumber them by first use in this chunk
            tags_used, values = _renumber(column_array(rows.values)[lo:hi])
            tag_names = [m.tag_names[t] for t in tags_used]
            starts = array("I", [s - lo for s in all_starts[start : stop + 1]])
    elif len(rows):
        case_tag_names = [[m.tag_names[t] for t in rows[i]] for i in range(start, stop)]
        tag_names, tag_no = _intern(t for row in case_tag_names for t in row)
        starts = array("I", [0])
        for row in case_tag_names:
            values.extend(tag_no[t] for t in row)
            starts.append(len(values))
    doc = {
        "format": CHUNK_FORMAT,
        "count": stop - start,
        "ids": "\n".join(m.ids[start:stop]),
        "digests": "".join(m.digest_list()[start:stop]),
        "packs": [m.packs[p] for p in packs_used],
        "pack": _pack_ints(pack_column, "I"),
        "offset": _pack_ints(array("Q", column_array(m.offsets)[start:stop]), "Q"),
        "length": _pack_ints(array("I", column_array(m.lengths)[start:stop]), "I"),
        "tag_names": tag_names,
        "tag_starts": _pack_ints(starts, "I"),
        "tag_values": _pack_ints(values, "I"),
    }
    return orjson.dumps(doc), tag_names


def chunk_from_bytes(data: bytes) -> Manifest:
    """A chunk as a `Manifest` of its cases alone (positions local to the chunk; no content)."""
    try:
        doc: dict[str, Any] = orjson.loads(data)
        if doc.get("format") != CHUNK_FORMAT:
            raise ValueError(f"not a manifest chunk (format {doc.get('format')!r})")
        count = int(doc["count"])
        ids = doc["ids"].split("\n") if count else []
        tags = CaseTags(IntColumn(doc["tag_starts"], "I"), IntColumn(doc["tag_values"], "I"))
        chunk = Manifest(
            content_digest="",
            description="",
            tags=[],
            shared_files=[],
            ids=ids,
            digests=DigestColumn(doc["digests"]),
            packs=list(doc["packs"]),
            pack_index=IntColumn(doc["pack"], "I"),
            offsets=IntColumn(doc["offset"], "Q"),
            lengths=IntColumn(doc["length"], "I"),
            tag_names=list(doc["tag_names"]),
            case_tags=tags,
        )
        columns = (chunk.digests, chunk.pack_index, chunk.offsets, chunk.lengths)
        if len(ids) != count or any(len(c) != count for c in columns):
            raise ValueError("columns of different lengths")
        if len(tags) != count:
            raise ValueError("tag columns of the wrong length")
        if max(column_array(chunk.pack_index), default=-1) >= len(chunk.packs):
            raise ValueError("a pack number out of range")
        if max(column_array(tags.values), default=-1) >= len(chunk.tag_names):
            raise ValueError("a tag number out of range")
        return chunk
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise BadRequest(f"corrupt manifest chunk: {exc}") from exc


def digest_prefixes(text: str) -> bytes:
    """The first 8 bytes of every digest of a digest column (64 hex each), back to back: all
    the sample rule reads of a case (`caseshelf.domain.subset`)."""
    return memoryview(bytes.fromhex(text)).cast("Q")[::4].tobytes()


def sample_group_ends(chunk_keys: Sequence[str]) -> list[int]:
    """Where each group of chunks one sample column covers ends (exclusive chunk numbers; the
    last is `len(chunk_keys)`): after a chunk whose key's last 8 hex digits are 0 modulo
    `SAMPLE_MODULUS` once the group holds `SAMPLE_MIN_CHUNKS`, or after `SAMPLE_MAX_CHUNKS`
    chunks. A function of the keys alone, so a change moves only the groups around the chunks
    it rewrote."""
    ends: list[int] = []
    start = 0
    for n, key in enumerate(chunk_keys):
        held = n + 1 - start
        boundary = held >= SAMPLE_MIN_CHUNKS and int(key[56:64], 16) % SAMPLE_MODULUS == 0
        if boundary or held >= SAMPLE_MAX_CHUNKS:
            ends.append(n + 1)
            start = n + 1
    if start < len(chunk_keys) or not ends:
        ends.append(len(chunk_keys))
    return ends


@dataclass(frozen=True)
class SampleColumn:
    """What a selection without cases reads of some consecutive cases: their ids, the first 8
    bytes of each case digest (`digest_prefixes`) and, in a column of `TAGGED_SAMPLE_FORMAT`,
    the tags each case carries (numbers into `tag_names`), in dataset order. `tags` is None
    in a column of `SAMPLE_FORMAT`, which carries none."""

    ids: list[str]
    prefixes: bytes
    tag_names: list[str] = field(default_factory=list)
    tags: TagSetColumn | None = None

    def __len__(self) -> int:
        return len(self.ids)


def sample_column_bytes(m: Manifest, start: int, stop: int, *, tags: bool = True) -> bytes:
    """The sample column of `m`'s cases `start:stop`: a function of their ids, digests and
    (`tags`, `TAGGED_SAMPLE_FORMAT`) tags. Without `tags`, a column of `SAMPLE_FORMAT`, as
    the sample columns of format 4 roots are."""
    prefixes = digest_prefixes(m.digest_text()[64 * start : 64 * stop])
    doc: dict[str, Any] = {
        "format": TAGGED_SAMPLE_FORMAT if tags else SAMPLE_FORMAT,
        "count": stop - start,
        "ids": "\n".join(m.ids[start:stop]),
        "prefixes": base64.b64encode(prefixes).decode("ascii"),
    }
    if tags:
        names, sets, of_case = tag_sets(m, start, stop)
        doc["tag_names"] = names
        doc["tag_sets"] = sets
        doc["tag_set"] = _pack_ints(of_case, of_case.typecode)
    return orjson.dumps(doc)


def tag_sets(m: Manifest, start: int, stop: int) -> tuple[list[str], list[list[int]], array[int]]:
    """The tags of `m`'s cases `start:stop` as a sample column holds them: the tag names they
    carry (in order of first use), the distinct sets of them (tag numbers ascending, in order
    of first use) and each case's set number (`TagSetColumn`); no names and no sets when no
    case carries a tag. A function of the cases' tags alone, however `m` holds them."""
    rows = m.case_tags
    if len(rows) == len(m.ids) and isinstance(rows, CaseTags):
        all_starts, values = column_array(rows.starts), column_array(rows.values)
        lo, hi = all_starts[start], all_starts[stop]
        flat = array("I", values[lo:hi])
        bounds = [4 * (s - lo) for s in all_starts[start : stop + 1]]
    else:  # a manifest built with a list of tags per case
        flat, bounds = array("I"), [0]
        for i in range(start, stop):
            flat.extend(rows[i] if len(rows) else ())
            bounds.append(4 * len(flat))
    used = list(dict.fromkeys(flat))
    if not used:
        return [], [], array("B")
    # Each case's stretch of the tag column as bytes: a key for its set.
    raw = flat.tobytes()
    keys = [raw[start:stop] for start, stop in pairwise(bounds)]
    local = {number: i for i, number in enumerate(used)}
    table: dict[tuple[int, ...], int] = {}
    number_of = {
        key: table.setdefault(tuple(sorted({local[t] for t in array("I", key)})), len(table))
        for key in dict.fromkeys(keys)
    }
    of_case = array(set_number_code(len(table)), map(number_of.__getitem__, keys))
    return [m.tag_names[t] for t in used], [list(s) for s in table], of_case


def sample_column_from_bytes(data: bytes) -> SampleColumn:
    try:
        doc: dict[str, Any] = orjson.loads(data)
        if doc.get("format") not in (SAMPLE_FORMAT, TAGGED_SAMPLE_FORMAT):
            raise ValueError(f"not a sample column (format {doc.get('format')!r})")
        count = int(doc["count"])
        ids = doc["ids"].split("\n") if count else []
        prefixes = base64.b64decode(doc["prefixes"], validate=True)
        if len(ids) != count or len(prefixes) != 8 * count:
            raise ValueError("columns of different lengths")
        if doc["format"] == SAMPLE_FORMAT:
            return SampleColumn(ids, prefixes)
        names, sets = doc["tag_names"], doc["tag_sets"]
        if not all(isinstance(name, str) for name in names):
            raise ValueError("a tag name that is no string")
        if not all(
            isinstance(tags, list) and all(type(t) is int and 0 <= t < len(names) for t in tags)
            for tags in sets
        ):
            raise ValueError("a tag set that is no list of tag numbers")
        of_case = _unpack_ints(doc["tag_set"], set_number_code(len(sets)))
        if len(of_case) != (count if sets else 0) or max(of_case, default=-1) >= len(sets):
            raise ValueError("a tag set column that does not match")
        return SampleColumn(ids, prefixes, names, TagSetColumn(sets, of_case, count))
    except (KeyError, ValueError, TypeError, AttributeError, binascii.Error) as exc:
        raise BadRequest(f"corrupt sample column: {exc}") from exc


def join_sample_columns(columns: Iterable[SampleColumn], *, tags: bool = True) -> SampleColumn:
    """Columns of consecutive cases as one; with `tags`, their tags (when every one carries
    them) with one table of names and one of sets. Without, the joined column carries none:
    renumbering them costs ~10 ms per 100,000 cases, which a selection without tags (a sample
    reads every column) need not pay."""
    parts = list(columns)
    ids = list(chain.from_iterable(c.ids for c in parts))
    prefixes = b"".join(c.prefixes for c in parts)
    if not tags or any(c.tags is None for c in parts):
        return SampleColumn(ids, prefixes)
    names: list[str] = []
    name_no: dict[str, int] = {}
    table: dict[tuple[int, ...], int] = {}
    numbers: list[Iterable[int]] = []
    for c in parts:
        assert c.tags is not None
        local = [_number(name_no, names, name) for name in c.tag_names]
        if not c.tags.sets:  # no case of this column carries a tag
            numbers.append(repeat(table.setdefault((), len(table)), len(c)))
            continue
        renumbered = [
            table.setdefault(tuple(sorted(local[t] for t in tags)), len(table))
            for tags in c.tags.sets
        ]
        numbers.append(map(renumbered.__getitem__, c.tags.of_case))
    if not names:
        return SampleColumn(ids, prefixes, [], TagSetColumn([], array("B"), len(ids)))
    of_case = array(set_number_code(len(table)), chain.from_iterable(numbers))
    return SampleColumn(ids, prefixes, names, TagSetColumn(list(table), of_case, len(ids)))


@dataclass
class Root:
    """A root of format 3, 4 or 5 (`chunk_keys[n]` is the sha256 hex of chunk n's bytes)."""

    content_digest: str
    description: str
    tags: list[str]
    shared_files: list[dict[str, str]]
    count: int
    case_bytes: int
    tag_names: list[str]
    packs: list[str]
    chunk_keys: list[str]
    chunk_counts: list[int]
    first_ids: list[str]
    last_ids: list[str]
    chunk_tags: list[list[int]]  # per chunk: indices into `tag_names` its cases carry
    blob_containers: list[str] = field(default_factory=list)
    blob_digests: list[str] = field(default_factory=list)
    blob_container_index: Sequence[int] = field(default_factory=list)
    blob_offsets: Sequence[int] = field(default_factory=list)
    blob_lengths: Sequence[int] = field(default_factory=list)
    # The copies of the base version's records this version keeps (`Manifest.with_superseded`):
    # an object of their own (`superseded_bytes`), read by a diff only; "" when there are none.
    superseded_key: str = ""
    superseded_count: int = 0
    # Each sample column's key (`sample_column_bytes`) and how many chunks it covers, in
    # order; none in a format 3 root (a sample then reads the chunks).
    sample_keys: list[str] = field(default_factory=list)
    sample_chunks: list[int] = field(default_factory=list)
    # The version's change against the base it was registered against
    # (`caseshelf.domain.diff.Delta`): an object of its own, read by a diff of the two only;
    # "" when it keeps none. `delta_base` is the base's content digest.
    delta_key: str = ""
    delta_base: str = ""
    # The format the root is stored in (`ROOT_FORMATS`): from format 5 on, its sample columns
    # carry each case's tags (`TAGGED_SAMPLE_FORMAT`).
    root_format: str = ROOT_FORMAT

    def __len__(self) -> int:
        return self.count

    @property
    def sample_tags(self) -> bool:
        """Whether the root's sample columns carry its cases' tags: a selection without cases
        then reads them and no chunk (`caseshelf.domain.subset.columns_answer`)."""
        return bool(self.sample_keys) and self.root_format not in UNTAGGED_ROOT_FORMATS

    def sample_starts(self) -> list[int]:
        """The position of each sample column's first case, and the case count last."""
        starts = self.chunk_starts()
        return [starts[n] for n in accumulate(self.sample_chunks, initial=0)]

    def chunk_starts(self) -> list[int]:
        """The position of each chunk's first case, and the case count last."""
        return list(accumulate(self.chunk_counts, initial=0))

    def blob_locations(self) -> dict[str, Location]:
        """Where each file body of the version lives, by digest hex (the root carries them,
        so a reader of files needs no chunk)."""
        return blob_locations(self)

    def to_bytes(self) -> bytes:
        doc = {
            "format": self.root_format,
            "content_digest": self.content_digest,
            "description": self.description,
            "tags": self.tags,
            "shared_files": self.shared_files,
            "count": self.count,
            "case_bytes": self.case_bytes,
            "tag_names": self.tag_names,
            "packs": self.packs,
            "chunks": {
                "keys": "".join(self.chunk_keys),
                "counts": _pack_ints(array("I", self.chunk_counts), "I"),
                "first_ids": self.first_ids,
                "last_ids": self.last_ids,
                "tags": self.chunk_tags,
            },
            "blobs": {
                "containers": self.blob_containers,
                "digests": "".join(self.blob_digests),
                "container": _pack_ints(self.blob_container_index, "I"),
                "offset": _pack_ints(self.blob_offsets, "Q"),
                "length": _pack_ints(self.blob_lengths, "Q"),
            },
        }
        if self.superseded_key:  # (absent otherwise)
            doc["superseded"] = {"key": self.superseded_key, "count": self.superseded_count}
        if self.delta_key:
            doc["delta"] = {"key": self.delta_key, "base": self.delta_base}
        if self.sample_keys:
            doc["sample"] = {
                "keys": "".join(self.sample_keys),
                "chunks": _pack_ints(array("I", self.sample_chunks), "I"),
            }
        return orjson.dumps(doc)

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Root:
        try:
            if doc.get("format") not in ROOT_FORMATS:
                raise ValueError(f"unknown manifest format {doc.get('format')!r}")
            chunks, blobs = doc["chunks"], doc["blobs"]
            keys_text, blob_text = chunks["keys"], blobs["digests"]
            if len(keys_text) % 64 or len(blob_text) % 64:
                raise ValueError("digest column of the wrong length")
            root = cls(
                content_digest=doc["content_digest"],
                description=doc["description"],
                tags=list(doc["tags"]),
                shared_files=list(doc["shared_files"]),
                count=int(doc["count"]),
                case_bytes=int(doc["case_bytes"]),
                tag_names=list(doc["tag_names"]),
                packs=list(doc["packs"]),
                chunk_keys=[keys_text[i : i + 64] for i in range(0, len(keys_text), 64)],
                chunk_counts=list(_unpack_ints(chunks["counts"], "I")),
                first_ids=list(chunks["first_ids"]),
                last_ids=list(chunks["last_ids"]),
                chunk_tags=[list(map(int, row)) for row in chunks["tags"]],
                blob_containers=list(blobs["containers"]),
                blob_digests=[blob_text[i : i + 64] for i in range(0, len(blob_text), 64)],
                blob_container_index=_unpack_ints(blobs["container"], "I"),
                blob_offsets=_unpack_ints(blobs["offset"], "Q"),
                blob_lengths=_unpack_ints(blobs["length"], "Q"),
                root_format=doc["format"],
            )
            superseded = doc.get("superseded")
            if superseded is not None:
                root.superseded_key = str(superseded["key"])
                root.superseded_count = int(superseded["count"])
                if len(root.superseded_key) != 64:
                    raise ValueError("a superseded key that is no sha256")
            delta = doc.get("delta")
            if delta is not None:
                root.delta_key, root.delta_base = str(delta["key"]), str(delta["base"])
                if len(root.delta_key) != 64:
                    raise ValueError("a delta key that is no sha256")
            sample = doc.get("sample")
            if sample is not None:
                text = sample["keys"]
                if len(text) % 64:
                    raise ValueError("sample keys of the wrong length")
                root.sample_keys = [text[i : i + 64] for i in range(0, len(text), 64)]
                root.sample_chunks = list(_unpack_ints(sample["chunks"], "I"))
                if len(root.sample_chunks) != len(root.sample_keys):
                    raise ValueError("sample columns of different lengths")
                if sum(root.sample_chunks) != len(root.chunk_keys):
                    raise ValueError("sample columns that do not cover the chunks")
            n = len(root.chunk_keys)
            per_chunk = (root.chunk_counts, root.first_ids, root.last_ids, root.chunk_tags)
            if any(len(c) != n for c in per_chunk):
                raise ValueError("chunk columns of different lengths")
            if sum(root.chunk_counts) != root.count:
                raise ValueError("chunk counts that do not add up to the case count")
            if any(t >= len(root.tag_names) for row in root.chunk_tags for t in row):
                raise ValueError("a tag number out of range")
            blob_cols = (root.blob_container_index, root.blob_offsets, root.blob_lengths)
            if any(len(c) != len(root.blob_digests) for c in blob_cols):
                raise ValueError("blob columns of different lengths")
            return root
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise BadRequest(f"corrupt manifest: {exc}") from exc


def split_manifest(
    m: Manifest,
) -> tuple[Root, list[tuple[str, bytes]], tuple[str, bytes] | None, list[tuple[str, bytes]]]:
    """`m` as a root, its chunks (`(sha256 hex, bytes)`, in order), the object of its
    superseded copies (None when it keeps none) and its sample columns (in order): what
    `ManifestCutter` makes of its cases given all at once."""
    cutter = ManifestCutter()
    pack_index = column_array(m.pack_index)
    objects = cutter.add(
        m.ids,
        m.digest_list(),
        [m.tags_of(i) for i in range(len(m.ids))],
        [m.packs[p] for p in pack_index],
        column_array(m.offsets),
        column_array(m.lengths),
    )
    root, rest = cutter.finish(m)
    objects += rest
    copies = superseded_bytes(m)
    extra = (root.superseded_key, copies) if copies is not None else None
    chunks = [(key, data) for kind, key, data in objects if kind == "chunk"]
    samples = [(key, data) for kind, key, data in objects if kind == "sample"]
    return root, chunks, extra, samples


class ManifestCutter:
    """A manifest cut into chunks and sample columns as its cases come, in dataset order: the
    same objects, and at `finish` the same root, as `split_manifest` of the whole manifest
    (the cut points depend on the cases alone, `chunk_ends` and `sample_group_ends`; tests
    hold the two equal). It holds only the cases not yet in a chunk (fewer than `MAX_CASES`
    once `add` returns), the ids and digests of the sample group being filled, and one row of
    the root per chunk: memory that does not grow with the cases.

    `add` answers the objects its cases completed, `finish` the rest and the root; each object
    is `(kind, sha256 hex, bytes)`, kind `"chunk"` or `"sample"`. Every case must be stored
    where `containers` says (pack names, not placeholders): a chunk names its packs."""

    def __init__(self) -> None:
        self._ids: list[str] = []
        self._digests: list[str] = []
        self._tags: list[Sequence[str]] = []
        self._containers: list[str] = []
        self._offsets = array("Q")
        self._lengths = array("I")
        self._start = 0  # the position of the first case held
        self._count = 0  # the cases added
        self._candidates: list[int] = []  # positions of held cases `is_boundary` holds for
        self.case_bytes = 0
        self.tag_names: list[str] = []
        self._tag_no: dict[str, int] = {}
        self.packs: list[str] = []
        self._pack_no: dict[str, int] = {}
        self.chunk_keys: list[str] = []
        self._counts: list[int] = []
        self._firsts: list[str] = []
        self._lasts: list[str] = []
        self._chunk_tags: list[list[int]] = []
        self._group: list[Manifest] = []  # the chunks of the sample group being filled
        self.sample_keys: list[str] = []
        self._sample_chunks: list[int] = []

    def __len__(self) -> int:
        return self._count

    def where(self, position: int) -> tuple[str, int] | str:
        """Where the case added at `position` is: the id itself while it is held, else its
        chunk's key and its place in that chunk."""
        if not 0 <= position < self._count:
            raise IndexError(f"case position {position} out of range")
        if position >= self._start:
            return self._ids[position - self._start]
        starts = list(accumulate(self._counts, initial=0))
        n = bisect_right(starts, position) - 1
        return self.chunk_keys[n], position - starts[n]

    def add(
        self,
        ids: Sequence[str],
        digests: Sequence[str],
        tags: Sequence[Sequence[str]],
        containers: Sequence[str],
        offsets: Iterable[int],
        lengths: Iterable[int],
    ) -> list[tuple[str, str, bytes]]:
        """Add cases (columns of equal length: ids, digests hex, sorted tag names, and where
        each record is stored); answers the chunks and sample columns they completed."""
        if len(digests) != len(ids) or len(tags) != len(ids) or len(containers) != len(ids):
            raise ValueError("columns of different lengths")
        first = self._count
        self._candidates += [first + i for i in _boundaries(digests)] if digests else []
        for name in dict.fromkeys(containers):
            self._pack_no.setdefault(name, len(self._pack_no))
        if len(self._pack_no) > len(self.packs):
            self.packs = list(self._pack_no)
        for name in dict.fromkeys(chain.from_iterable(tags)):
            self._tag_no.setdefault(name, len(self._tag_no))
        if len(self._tag_no) > len(self.tag_names):
            self.tag_names = list(self._tag_no)
        self._ids += ids
        self._digests += digests
        self._tags += tags
        self._containers += containers
        self._offsets.extend(offsets)
        before = len(self._lengths)
        self._lengths.extend(lengths)
        if len(self._lengths) - before != len(ids) or len(self._offsets) != len(self._lengths):
            raise ValueError("columns of different lengths")
        self.case_bytes += sum(self._lengths[before:])
        self._count += len(ids)
        out: list[tuple[str, str, bytes]] = []
        while (end := self._next_end()) is not None:
            out += self._cut(end)
        return out

    def _next_end(self) -> int | None:
        """Where the chunk being filled ends, once enough cases are held to know (as
        `chunk_ends` cuts it): after the first boundary case once it holds `MIN_CASES`, or
        after `MAX_CASES`."""
        start, candidates = self._start, self._candidates
        at = bisect_left(candidates, start + MIN_CASES - 1)
        end = start + MAX_CASES
        if at < len(candidates):
            end = min(candidates[at] + 1, end)
        return end if end <= self._count else None

    def _cut(self, end: int) -> list[tuple[str, str, bytes]]:
        """The chunk of the held cases up to position `end`, and the sample column it
        completes, if it does."""
        n = end - self._start
        window = cases_manifest(
            self._ids[:n],
            self._digests[:n],
            self._tags[:n],
            self._containers[:n],
            self._offsets[:n],
            self._lengths[:n],
        )
        data, names = _chunk(window, 0, n)
        key = sha256_hex(data)
        self.chunk_keys.append(key)
        self._counts.append(n)
        self._firsts.append(window.ids[0] if n else "")
        self._lasts.append(window.ids[-1] if n else "")
        self._chunk_tags.append(sorted(self._tag_no[name] for name in names))
        self._group.append(window)
        for column in (self._ids, self._digests, self._tags, self._containers):
            del column[:n]
        del self._offsets[:n], self._lengths[:n]
        self._candidates = self._candidates[bisect_left(self._candidates, end) :]
        self._start = end
        out = [("chunk", key, data)]
        held = len(self._group)
        if (held >= SAMPLE_MIN_CHUNKS and int(key[56:64], 16) % SAMPLE_MODULUS == 0) or (
            held >= SAMPLE_MAX_CHUNKS
        ):
            out.append(self._cut_group())
        return out

    def _cut_group(self) -> tuple[str, str, bytes]:
        group = concat_chunks(self._group, locations=False)
        data = sample_column_bytes(group, 0, len(group.ids))
        key = sha256_hex(data)
        self.sample_keys.append(key)
        self._sample_chunks.append(len(self._group))
        self._group = []
        return ("sample", key, data)

    def finish(self, m: Manifest) -> tuple[Root, list[tuple[str, str, bytes]]]:
        """The last chunk and sample column, and the root, whose content, file bodies and
        superseded copies are `m`'s (its cases are not read: those are the ones added). The
        object of the superseded copies is `superseded_bytes(m)`, named by the root."""
        out: list[tuple[str, str, bytes]] = []
        if self._count > self._start or not self.chunk_keys:
            out += self._cut(self._count)
        if self._group:
            out.append(self._cut_group())
        used = list(self.packs)
        if m.superseded_digests:  # the copies' packs are the version's too (as split_manifest)
            used += [m.packs[p] for p in dict.fromkeys(m.superseded_pack) if m.packs[p] not in used]
        root = Root(
            content_digest=m.content_digest,
            description=m.description,
            tags=list(m.tags),
            shared_files=list(m.shared_files),
            count=self._count,
            case_bytes=self.case_bytes,
            tag_names=list(self.tag_names),
            packs=used,
            chunk_keys=list(self.chunk_keys),
            chunk_counts=list(self._counts),
            first_ids=list(self._firsts),
            last_ids=list(self._lasts),
            chunk_tags=list(self._chunk_tags),
            blob_containers=list(m.blob_containers),
            blob_digests=list(m.blob_digests),
            blob_container_index=array("I", m.blob_container_index),
            blob_offsets=array("Q", m.blob_offsets),
            blob_lengths=array("Q", m.blob_lengths),
            sample_keys=list(self.sample_keys),
            sample_chunks=list(self._sample_chunks),
        )
        copies = superseded_bytes(m)
        if copies is not None:
            root.superseded_key, root.superseded_count = (
                sha256_hex(copies),
                len(m.superseded_digests),
            )
        return root, out


def cases_manifest(
    ids: list[str],
    digests: list[str],
    tags: Sequence[Sequence[str]],
    containers: Sequence[str],
    offsets: Sequence[int],
    lengths: Sequence[int],
) -> Manifest:
    """Some cases as a manifest of their own (no content), from their columns, for `_chunk`
    (a chunk renumbers its packs and tags by first use, so the tables here need no particular
    order) and for the cases a delta names."""
    packs = list(dict.fromkeys(containers))
    pack_no = {name: n for n, name in enumerate(packs)}
    tag_names = list(dict.fromkeys(chain.from_iterable(tags)))
    tag_no = {name: n for n, name in enumerate(tag_names)}
    return Manifest(
        content_digest="",
        description="",
        tags=[],
        shared_files=[],
        ids=ids,
        digests=digests,
        packs=packs,
        pack_index=array("I", map(pack_no.__getitem__, containers)),
        offsets=array("Q", offsets),
        lengths=array("I", lengths),
        tag_names=tag_names,
        case_tags=CaseTags(
            array("I", accumulate(map(len, tags), initial=0)),
            array("I", map(tag_no.__getitem__, chain.from_iterable(tags))),
        ),
    )


def superseded_bytes(m: Manifest) -> bytes | None:
    """The superseded copies of `m` as an object of their own (None when there are none):
    digests, and where each copy is (pack names of its own, offset, length)."""
    if not m.superseded_digests:
        return None
    used, column = _renumber(m.superseded_pack)
    doc = {
        "format": SUPERSEDED_FORMAT,
        "digests": "".join(m.superseded_digests),
        "packs": [m.packs[p] for p in used],
        "pack": _pack_ints(column, "I"),
        "offset": _pack_ints(array("Q", m.superseded_offsets), "Q"),
        "length": _pack_ints(array("Q", m.superseded_lengths), "Q"),
    }
    return orjson.dumps(doc)


def superseded_from_bytes(data: bytes) -> dict[str, Location]:
    """Where each superseded copy is, by digest hex."""
    try:
        doc: dict[str, Any] = orjson.loads(data)
        if doc.get("format") != SUPERSEDED_FORMAT:
            raise ValueError(f"not a superseded object (format {doc.get('format')!r})")
        text, packs = doc["digests"], list(doc["packs"])
        pack = _unpack_ints(doc["pack"], "I")
        offset, length = _unpack_ints(doc["offset"], "Q"), _unpack_ints(doc["length"], "Q")
        count = len(text) // 64
        if len(text) % 64 or any(len(c) != count for c in (pack, offset, length)):
            raise ValueError("columns of different lengths")
        if max(pack, default=-1) >= len(packs):
            raise ValueError("a pack number out of range")
        return {
            text[64 * i : 64 * i + 64]: Location(packs[pack[i]], offset[i], length[i])
            for i in range(count)
        }
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise BadRequest(f"corrupt superseded copies: {exc}") from exc


def join_chunks(root: Root, chunks: Sequence[Manifest]) -> Manifest:
    """The whole manifest of a root and its chunks (in order): what format 2 held in one
    document, with the root's tag names and packs."""
    if len(chunks) != len(root.chunk_keys):
        raise BadRequest("corrupt manifest: a chunk is missing")
    for n, chunk in enumerate(chunks):
        if len(chunk) != root.chunk_counts[n]:
            raise BadRequest(f"corrupt manifest: chunk {root.chunk_keys[n]} holds the wrong count")
    joined = concat_chunks(chunks, tag_names=root.tag_names, packs=root.packs)
    if joined.tag_names != root.tag_names:
        raise BadRequest("corrupt manifest: a chunk carries a tag the root does not name")
    return replace(
        joined,
        content_digest=root.content_digest,
        description=root.description,
        tags=root.tags,
        shared_files=root.shared_files,
        blob_containers=root.blob_containers,
        blob_digests=root.blob_digests,
        blob_container_index=root.blob_container_index,
        blob_offsets=root.blob_offsets,
        blob_lengths=root.blob_lengths,
    )


def concat_chunks(
    chunks: Iterable[Manifest],
    *,
    tag_names: Sequence[str] = (),
    packs: Sequence[str] = (),
    locations: bool = True,
    tags: bool = True,
) -> Manifest:
    """The cases of `chunks` back to back, as one manifest without content (positions run on
    from chunk to chunk). Pack and tag numbers are renumbered into one table each, starting
    from `packs` and `tag_names`, growing with any name they do not hold.

    `locations=False` leaves out where the cases are (packs and offsets: lengths stay), and
    `tags=False` their tags: what a selection that never asks for them reads is then the ids,
    digests and lengths alone."""
    pack_table, pack_no = _intern(packs)
    tag_table, tag_no = _intern(tag_names)
    ids: list[str] = []
    digest_parts: list[str] = []
    pack_index, offsets, lengths = array("I"), array("Q"), array("I")
    tag_counts: list[Iterable[int]] = []  # how many tags each case has, chunk by chunk
    tag_values = array("I")
    for chunk in chunks:
        ids.extend(chunk.ids)
        digest_parts.append(chunk.digest_text())
        lengths.extend(column_array(chunk.lengths))
        if locations:
            local_packs = [_number(pack_no, pack_table, name) for name in chunk.packs]
            pack_index.extend(map(local_packs.__getitem__, column_array(chunk.pack_index)))
            offsets.extend(column_array(chunk.offsets))
        local_tags = [_number(tag_no, tag_table, name) for name in chunk.tag_names]
        rows = chunk.case_tags
        if not tags:
            tag_counts.append(repeat(0, len(chunk.ids)))
        elif isinstance(rows, CaseTags):
            starts = column_array(rows.starts)
            tag_counts.append(map(sub, islice(starts, 1, None), starts))
            tag_values.extend(map(local_tags.__getitem__, column_array(rows.values)))
        else:
            filled = rows or [()] * len(chunk.ids)
            tag_counts.append([len(row) for row in filled])
            for row in filled:
                tag_values.extend(local_tags[t] for t in row)
    tag_starts = array("I", accumulate(chain.from_iterable(tag_counts), initial=0))
    return Manifest(
        content_digest="",
        description="",
        tags=[],
        shared_files=[],
        ids=ids,
        digests=DigestColumn("".join(digest_parts)),
        packs=pack_table,
        pack_index=pack_index,
        offsets=offsets,
        lengths=lengths,
        tag_names=tag_table,
        case_tags=CaseTags(tag_starts, tag_values),
    )


def _number(table: dict[str, int], names: list[str], name: str) -> int:
    number = table.get(name)
    if number is None:
        number = table[name] = len(names)
        names.append(name)
    return number


def root_of_legacy(m: Manifest) -> Root:
    """A format 2 manifest seen as a root of one chunk (the whole manifest), whose key stands
    for its cases: two legacy manifests of one content digest hold the same ids and digests."""
    present = sorted({t for i in range(len(m.case_tags)) for t in m.case_tags[i]})
    return Root(
        content_digest=m.content_digest,
        description=m.description,
        tags=m.tags,
        shared_files=m.shared_files,
        count=len(m),
        case_bytes=m.case_bytes(),
        tag_names=m.tag_names,
        packs=m.packs,
        chunk_keys=["legacy-" + m.content_digest.removeprefix("sha256:")],
        chunk_counts=[len(m)],
        first_ids=[m.ids[0] if len(m) else ""],
        last_ids=[m.ids[-1] if len(m) else ""],
        chunk_tags=[present],
        blob_containers=m.blob_containers,
        blob_digests=m.blob_digests,
        blob_container_index=m.blob_container_index,
        blob_offsets=m.blob_offsets,
        blob_lengths=m.blob_lengths,
    )
