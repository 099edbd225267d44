"""The version manifest: content plus where each case and file body lives. Columnar.

Subset and diff read only manifests, so the manifest is parallel arrays (ids, digests, pack
index, offset, length, tag indices) rather than an object per case: at 100,000 cases it parses in
a tenth of the time. Pure: bytes in, bytes out.

`Manifest` is the whole manifest in memory. Versions are stored in format 3 (a root naming
content-addressed chunks, `caseshelf.domain.chunks`); this module reads and writes format 2, one
document per version, which versions registered before format 3 keep and every reader still
reads (`Manifest.from_bytes`). `superseded_*` are the copies of the base version's records a
version keeps (`with_superseded`): in format 2 a section of the one document, in format 3 an
object of their own that the root names.
"""

from __future__ import annotations

import base64
import binascii
import sys
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import orjson

from caseshelf.domain.errors import BadRequest

FORMAT = "caseshelf.manifest/2"
# A container name standing for a pack still being written: "?<pack number>".
PENDING_PACK = "?"


@dataclass(frozen=True)
class Location:
    """Where a record lives: the container's hex digest, and a byte range inside it."""

    container: str
    offset: int
    length: int


def _pack_ints(values: Sequence[int], code: str) -> str:
    if isinstance(values, IntColumn) and values.code == code:
        return values.text  # as read, never decoded
    arr = values if isinstance(values, array) and values.typecode == code else array(code, values)
    if sys.byteorder != "little":
        arr = array(code, arr)
        arr.byteswap()
    return base64.b64encode(arr.tobytes()).decode("ascii")


def _unpack_ints(text: str, code: str) -> array[int]:
    arr = array(code)
    arr.frombytes(base64.b64decode(text))
    if sys.byteorder != "little":
        arr.byteswap()
    return arr


class IntColumn(Sequence[int]):
    """An integer column as stored (base64 of a little-endian array), decoded on first use: a
    selection that never asks where cases live never pays for decoding where they do."""

    __slots__ = ("_array", "_len", "code", "text")

    def __init__(self, text: str, code: str) -> None:
        self.text = text
        self.code = code
        self._array: array[int] | None = None
        size = len(text) // 4 * 3 - text[-2:].count("=")
        if len(text) % 4 or size % array(code).itemsize:
            raise ValueError("integer column of the wrong length")
        self._len = size // array(code).itemsize

    @property
    def array(self) -> array[int]:
        if self._array is None:
            try:
                decoded = _unpack_ints(self.text, self.code)
            except ValueError as exc:  # binascii.Error, or bytes that are no whole array
                raise BadRequest(f"corrupt manifest: {exc}") from exc
            if len(decoded) != self._len:
                raise BadRequest("corrupt manifest: an integer column of the wrong length")
            self._array = decoded
        return self._array

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i: Any) -> Any:
        return self.array[i]

    def __iter__(self) -> Iterator[int]:
        return iter(self.array)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IntColumn):
            return self.array == other.array
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and list(self.array) == list(other)

    __hash__ = None  # type: ignore[assignment]


def column_array(column: Sequence[int]) -> Sequence[int]:
    """A column for a loop over many of its items: the decoded array, not the lazy wrapper."""
    return column.array if isinstance(column, IntColumn) else column


def _same_tags(tags: Sequence[Sequence[int]], other: object) -> bool:
    """Whether `other` lists the same tag numbers for each case as `tags` (however stored)."""
    if not isinstance(other, Sequence):
        return NotImplemented
    return len(tags) == len(other) and all(
        list(a) == list(b) for a, b in zip(tags, other, strict=True)
    )


class CaseTags(Sequence[Sequence[int]]):
    """Each case's tag indices, stored compressed (CSR): `values[starts[i]:starts[i + 1]]`."""

    def __init__(self, starts: Sequence[int], values: Sequence[int]) -> None:
        self.starts = starts  # arrays, or `IntColumn`s as read
        self.values = values

    def __len__(self) -> int:
        return len(self.starts) - 1

    def __getitem__(self, i: int) -> Sequence[int]:  # type: ignore[override]
        return self.values[self.starts[i] : self.starts[i + 1]]

    def __eq__(self, other: object) -> bool:
        return _same_tags(self, other)

    __hash__ = None  # type: ignore[assignment]


def set_number_code(sets: int) -> str:
    """The array typecode of a column of numbers into a table of `sets` entries: one byte a
    number while the table fits in one, then two, then four."""
    return "B" if sets <= 1 << 8 else "H" if sets <= 1 << 16 else "I"


class TagSetColumn(Sequence[Sequence[int]]):
    """Each case's tags as a number into a table of the distinct sets of tags its cases carry
    (`sets[of_case[i]]`, tag numbers ascending): cases of a dataset mostly repeat a few
    combinations of tags, so a case costs one small number instead of its list of tags. An
    empty table stands for cases that carry no tag at all (`of_case` is then empty too)."""

    def __init__(self, sets: Sequence[Sequence[int]], of_case: Sequence[int], cases: int) -> None:
        self.sets = sets
        self.of_case = of_case
        self.cases = cases

    def __len__(self) -> int:
        return self.cases

    def __getitem__(self, i: int) -> Sequence[int]:  # type: ignore[override]
        if not self.sets:
            if not -self.cases <= i < self.cases:
                raise IndexError("case position out of range")
            return ()
        return self.sets[self.of_case[i]]

    def tagged(self, wanted: set[int]) -> Iterator[int]:
        """Positions of the cases carrying any of the `wanted` tag numbers, ascending: each
        case's set looked up in a table of which sets match."""
        matching = [not wanted.isdisjoint(tags) for tags in self.sets]
        if not any(matching):
            return iter(())
        return (i for i, number in enumerate(self.of_case) if matching[number])

    def __eq__(self, other: object) -> bool:
        return _same_tags(self, other)

    __hash__ = None  # type: ignore[assignment]


class DigestColumn(Sequence[str]):
    """The case digests (64 hex each) as stored: one string, cut into a list only when a digest
    is first asked for. Selection by ids, tags or limit never asks, so it never pays the cut."""

    def __init__(self, text: str) -> None:
        if len(text) % 64:
            raise ValueError("digest column of the wrong length")
        self.text = text
        self._cut: list[str] | None = None

    def as_list(self) -> list[str]:
        """The digests as a list (cut once, then kept): for loops over many of them."""
        if self._cut is None:
            text = self.text
            self._cut = [text[i : i + 64] for i in range(0, len(text), 64)]
        return self._cut

    def __len__(self) -> int:
        return len(self.text) // 64

    def __getitem__(self, i: Any) -> Any:
        if self._cut is None and isinstance(i, int):
            # One digest of a column not cut yet: its slice of the text, so that a reader of a
            # few digests (the superseded records of a re-import: 10,000 of 1,000,000) does not
            # cut a list of them all (~113 MB at 1,000,000).
            n = len(self)
            at = i + n if i < 0 else i
            if not 0 <= at < n:
                raise IndexError("digest position out of range")
            return self.text[64 * at : 64 * at + 64]
        return self.as_list()[i]

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DigestColumn):
            return self.text == other.text
        if not isinstance(other, Sequence):
            return NotImplemented
        return self.as_list() == list(other)

    __hash__ = None  # type: ignore[assignment]


class HasBlobs(Protocol):
    """What holds a version's file bodies' places: a `Manifest`, or a format 3 root."""

    blob_containers: list[str]
    blob_digests: list[str]
    blob_container_index: Sequence[int]
    blob_offsets: Sequence[int]
    blob_lengths: Sequence[int]


def blob_locations(holder: HasBlobs) -> dict[str, Location]:
    """Where each file body lives, by digest hex."""
    return {
        d: Location(holder.blob_containers[c], o, n)
        for d, c, o, n in zip(
            holder.blob_digests,
            holder.blob_container_index,
            holder.blob_offsets,
            holder.blob_lengths,
            strict=True,
        )
    }


@dataclass
class Manifest:
    """In memory: lists of ids and digests, compact integer arrays for the rest.

    On disk (format 2), every column is one JSON string so that parsing 100,000 cases costs a
    handful of large strings instead of hundreds of thousands of small JSON values: ids joined by
    newlines (a case id never holds a control character), digests concatenated (64 hex each),
    integer columns as base64 of little-endian arrays, per-case tags as CSR arrays. An optional
    `superseded` section (same shapes: digests, pack index, offset, length) locates copies of
    the base version's records this version no longer holds; absent when there are none, so a
    manifest without copies is written exactly as before the section existed. Read back, the
    digest and integer columns stay as stored until first used (`DigestColumn`, `IntColumn`).
    """

    content_digest: str
    description: str
    tags: list[str]
    shared_files: list[dict[str, str]]
    ids: list[str]
    digests: Sequence[str]  # hex, without the sha256: prefix (a DigestColumn when read)
    packs: list[str]
    pack_index: Sequence[int]
    offsets: Sequence[int]
    lengths: Sequence[int]
    tag_names: list[str] = field(default_factory=list)
    case_tags: Sequence[Sequence[int]] = field(default_factory=list)
    # file bodies (companion and shared): digest hex -> container, offset, length
    blob_containers: list[str] = field(default_factory=list)
    blob_digests: list[str] = field(default_factory=list)
    blob_container_index: Sequence[int] = field(default_factory=list)
    blob_offsets: Sequence[int] = field(default_factory=list)
    blob_lengths: Sequence[int] = field(default_factory=list)
    # Copies of the base version's records that this version no longer holds (changed or
    # removed cases), written back to back at registration so that a diff against the base
    # reads them in one span: digest hex -> a pack (an index into `packs`), offset, length.
    # Storage only, like the rest: not part of the content digest.
    superseded_digests: list[str] = field(default_factory=list)
    superseded_pack: Sequence[int] = field(default_factory=list)
    superseded_offsets: Sequence[int] = field(default_factory=list)
    superseded_lengths: Sequence[int] = field(default_factory=list)

    # -- reading ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.ids)

    def digest_list(self) -> Sequence[str]:
        """The digests for a loop over many of them: a plain list, without a Python-level call
        per item."""
        return self.digests.as_list() if isinstance(self.digests, DigestColumn) else self.digests

    def digest_text(self) -> str:
        """Every digest back to back (64 hex each), as the column is stored."""
        digests = self.digests
        return digests.text if isinstance(digests, DigestColumn) else "".join(digests)

    def location(self, i: int) -> Location:
        offsets = self.offsets
        if isinstance(offsets, IntColumn):  # the first location asked for: decode them all
            self.pack_index = column_array(self.pack_index)
            self.offsets = offsets = offsets.array
            self.lengths = column_array(self.lengths)
        return Location(self.packs[self.pack_index[i]], offsets[i], self.lengths[i])

    def case_digest(self, i: int) -> str:
        return "sha256:" + self.digests[i]

    def tags_of(self, i: int) -> list[str]:
        return [self.tag_names[t] for t in self.case_tags[i]] if len(self.case_tags) else []

    def case_bytes(self) -> int:
        return sum(column_array(self.lengths))

    def locations_by_digest(self) -> dict[str, Location]:
        packs = self.packs
        return {
            d: Location(packs[p], o, n)
            for d, p, o, n in zip(
                self.digest_list(),
                column_array(self.pack_index),
                column_array(self.offsets),
                column_array(self.lengths),
                strict=True,
            )
        }

    def blob_locations(self) -> dict[str, Location]:
        return blob_locations(self)

    def superseded_locations(self) -> dict[str, Location]:
        """Where the copies of the base version's superseded records are, by digest hex."""
        packs = self.packs
        return {
            d: Location(packs[p], o, n)
            for d, p, o, n in zip(
                self.superseded_digests,
                self.superseded_pack,
                self.superseded_offsets,
                self.superseded_lengths,
                strict=True,
            )
        }

    def with_superseded(self, copies: Sequence[tuple[str, Location]]) -> Manifest:
        """This manifest listing `copies` (digest hex, where the copy is) as its superseded
        records; their packs join `packs`, so whatever keeps the manifest's packs keeps them."""
        packs = list(self.packs)
        number = {p: i for i, p in enumerate(packs)}
        index = array("I")
        for _, loc in copies:
            if loc.container not in number:
                number[loc.container] = len(packs)
                packs.append(loc.container)
            index.append(number[loc.container])
        return replace(
            self,
            packs=packs,
            superseded_digests=[d for d, _ in copies],
            superseded_pack=index,
            superseded_offsets=array("Q", [loc.offset for _, loc in copies]),
            superseded_lengths=array("Q", [loc.length for _, loc in copies]),
        )

    def iter_cases(self) -> Iterator[tuple[int, str, str]]:
        """(index, id, digest hex) in dataset order."""
        yield from zip(range(len(self.ids)), self.ids, self.digests, strict=True)

    # -- bytes -----------------------------------------------------------------------------

    def _tag_columns(self) -> tuple[Sequence[int], Sequence[int]]:
        if isinstance(self.case_tags, CaseTags):
            return self.case_tags.starts, self.case_tags.values
        starts, values = array("I", [0]), array("I")
        for row in self.case_tags:
            values.extend(row)
            starts.append(len(values))
        if not self.case_tags:
            starts = array("I", [0] * (len(self.ids) + 1))
        return starts, values

    def to_bytes(self) -> bytes:
        starts, values = self._tag_columns()
        doc: dict[str, Any] = {
            "format": FORMAT,
            "content_digest": self.content_digest,
            "description": self.description,
            "tags": self.tags,
            "shared_files": self.shared_files,
            "cases": {
                "count": len(self.ids),
                "ids": "\n".join(self.ids),
                "digests": self.digests.text
                if isinstance(self.digests, DigestColumn)
                else "".join(self.digests),
                "pack": _pack_ints(self.pack_index, "I"),
                "offset": _pack_ints(self.offsets, "Q"),
                "length": _pack_ints(self.lengths, "I"),
                "tag_starts": _pack_ints(starts, "I"),
                "tag_values": _pack_ints(values, "I"),
            },
            "packs": self.packs,
            "tag_names": self.tag_names,
            "blobs": {
                "containers": self.blob_containers,
                "digests": "".join(self.blob_digests),
                "container": _pack_ints(self.blob_container_index, "I"),
                "offset": _pack_ints(self.blob_offsets, "Q"),
                "length": _pack_ints(self.blob_lengths, "Q"),
            },
        }
        if self.superseded_digests:  # (absent otherwise: such manifests are as they always were)
            doc["superseded"] = {
                "digests": "".join(self.superseded_digests),
                "pack": _pack_ints(self.superseded_pack, "I"),
                "offset": _pack_ints(self.superseded_offsets, "Q"),
                "length": _pack_ints(self.superseded_lengths, "Q"),
            }
        return orjson.dumps(doc)

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        try:
            doc: dict[str, Any] = orjson.loads(data)
            if doc.get("format") != FORMAT:
                raise ValueError(f"unknown manifest format {doc.get('format')!r}")
            cases = doc["cases"]
            blobs = doc["blobs"]
            count = int(cases["count"])
            ids = cases["ids"].split("\n") if count else []
            digests_text = cases["digests"]
            blob_text = blobs["digests"]
            if len(digests_text) != 64 * count or len(blob_text) % 64:
                raise ValueError("digest column of the wrong length")
            manifest = cls(
                content_digest=doc["content_digest"],
                description=doc["description"],
                tags=doc["tags"],
                shared_files=doc["shared_files"],
                ids=ids,
                digests=DigestColumn(digests_text),
                packs=doc["packs"],
                pack_index=IntColumn(cases["pack"], "I"),
                offsets=IntColumn(cases["offset"], "Q"),
                lengths=IntColumn(cases["length"], "I"),
                tag_names=doc["tag_names"],
                case_tags=CaseTags(
                    IntColumn(cases["tag_starts"], "I"), IntColumn(cases["tag_values"], "I")
                ),
                blob_containers=blobs["containers"],
                blob_digests=[blob_text[i : i + 64] for i in range(0, len(blob_text), 64)],
                blob_container_index=_unpack_ints(blobs["container"], "I"),
                blob_offsets=_unpack_ints(blobs["offset"], "Q"),
                blob_lengths=_unpack_ints(blobs["length"], "Q"),
            )
            superseded = doc.get("superseded")
            if superseded is not None:
                text = superseded["digests"]
                manifest.superseded_digests = [text[i : i + 64] for i in range(0, len(text), 64)]
                manifest.superseded_pack = _unpack_ints(superseded["pack"], "I")
                manifest.superseded_offsets = _unpack_ints(superseded["offset"], "Q")
                manifest.superseded_lengths = _unpack_ints(superseded["length"], "Q")
                copies = len(manifest.superseded_digests)
                parts = (
                    manifest.superseded_pack,
                    manifest.superseded_offsets,
                    manifest.superseded_lengths,
                )
                if (
                    len(text) % 64
                    or any(len(c) != copies for c in parts)
                    or any(p >= len(manifest.packs) for p in manifest.superseded_pack)
                ):
                    raise ValueError("superseded columns that do not match")
            columns = (manifest.digests, manifest.pack_index, manifest.offsets, manifest.lengths)
            if (
                len(ids) != count
                or any(len(c) != count for c in columns)
                or len(manifest.case_tags) != count
            ):
                raise ValueError("columns of different lengths")
            return manifest
        except (KeyError, ValueError, TypeError, AttributeError, binascii.Error) as exc:
            raise BadRequest(f"corrupt manifest: {exc}") from exc


def superseded_indices(base: Manifest, new: Manifest) -> list[int]:
    """Positions of the base version's cases whose record the new version does not hold: its
    removed cases and the earlier form of its changed ones (a digest covers the id too). These
    are what a diff of the two reads from the base. (A registration follows the same as its
    cases pass, `caseshelf.domain.diff.ChangeAgainstBase.superseded`.)"""
    held = set(new.digest_list())
    return [i for i, digest in enumerate(base.digest_list()) if digest not in held]


class ManifestBuilder:
    """Collects cases in dataset order and interns packs, tags and blob containers."""

    def __init__(
        self, *, description: str, tags: Sequence[str], shared_files: list[dict[str, str]]
    ) -> None:
        self._description = description
        self._tags_of_version = list(tags)
        self._shared_files = shared_files
        self._ids: list[str] = []
        self._digests: list[str] = []
        self._packs: list[str] = []
        self._pack_no: dict[str, int] = {}
        self._pack_index = array("I")
        self._offsets = array("Q")
        self._lengths = array("I")
        self._tag_names: list[str] = []
        self._tag_no: dict[str, int] = {}
        self._tag_starts = array("I", [0])
        self._tag_values = array("I")
        self._containers: list[str] = []
        self._container_no: dict[str, int] = {}
        self._blob_digests: list[str] = []
        self._blob_container = array("I")
        self._blob_offsets = array("Q")
        self._blob_lengths = array("Q")
        self._blobs: set[str] = set()

    @property
    def case_ids(self) -> Sequence[str]:
        """The ids added so far, in order."""
        return self._ids

    def add_case(
        self,
        case_id: str,
        digest_hex: str,
        tags: Sequence[str],
        container: str,
        offset: int,
        length: int,
    ) -> None:
        pi = self._pack_no.get(container)
        if pi is None:
            pi = self._pack_no[container] = len(self._packs)
            self._packs.append(container)
        for t in tags:
            ti = self._tag_no.get(t)
            if ti is None:
                ti = self._tag_no[t] = len(self._tag_names)
                self._tag_names.append(t)
            self._tag_values.append(ti)
        self._tag_starts.append(len(self._tag_values))
        self._ids.append(case_id)
        self._digests.append(digest_hex)
        self._pack_index.append(pi)
        self._offsets.append(offset)
        self._lengths.append(length)

    def resolve_pending(self, digest_of_pack: Callable[[int], str]) -> None:
        """Name the packs that were still being written when their cases were added."""
        self._packs = [
            digest_of_pack(int(p[len(PENDING_PACK) :])) if p.startswith(PENDING_PACK) else p
            for p in self._packs
        ]

    def add_blob(self, digest_hex: str, loc: Location) -> None:
        if digest_hex in self._blobs:
            return
        self._blobs.add(digest_hex)
        ci = self._container_no.get(loc.container)
        if ci is None:
            ci = self._container_no[loc.container] = len(self._containers)
            self._containers.append(loc.container)
        self._blob_digests.append(digest_hex)
        self._blob_container.append(ci)
        self._blob_offsets.append(loc.offset)
        self._blob_lengths.append(loc.length)

    def build(self, content_digest: str) -> Manifest:
        return Manifest(
            content_digest=content_digest,
            description=self._description,
            tags=self._tags_of_version,
            shared_files=self._shared_files,
            ids=self._ids,
            digests=self._digests,
            packs=self._packs,
            pack_index=self._pack_index,
            offsets=self._offsets,
            lengths=self._lengths,
            tag_names=self._tag_names,
            case_tags=CaseTags(self._tag_starts, self._tag_values),
            blob_containers=self._containers,
            blob_digests=self._blob_digests,
            blob_container_index=self._blob_container,
            blob_offsets=self._blob_offsets,
            blob_lengths=self._blob_lengths,
        )
