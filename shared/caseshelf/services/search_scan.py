"""A text search of a version straight from its stored records, for a version with no search
index yet (`caseshelf.services.search_index`): the first search of a fresh version answers its
first page without the pass over every case that makes the index.

`RecordScan.find` answers what `SearchIndex.find` answers (the positions whose case
`text_matches` the search, in order, at most `limit`), so a page is the same whichever of the two
serves it (`tests/integration/test_search_scan.py` holds them equal). It reads the positions
forward a window at a time, each window as the few ranged reads of the packs that cover it, and
stops as soon as it holds `limit` matches:

- A window's bytes are searched case-insensitively in bulk: ASCII letters folded by
  `bytes.lower`, and each record holding any non-ASCII byte also as its case-folded text
  (`str.casefold`, which folds one character at a time). A case's string appears in its
  canonical record as written, except for `"`, `\\` and control characters, which JSON escapes;
  so for a search free of those, every case whose text holds it is found this way. A match
  that the next quote shows to lie in a key (`in_key`) is passed over; the rest are candidates
  only (the search may sit in the id, a tag, a number or a digest).
- Each candidate's record is checked against its digest (`Corrupt` otherwise), parsed and
  matched (`text_matches`): only true matches are answered. A search holding `"` or `\\` takes
  every record of the window as a candidate.

Records that are not candidates are not hashed: nothing read from them is answered.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

import orjson

from caseshelf.domain import layout
from caseshelf.domain.browse import text_matches
from caseshelf.domain.errors import Corrupt, NotFound
from caseshelf.domain.manifest import Manifest, column_array
from caseshelf.ports import BlobStore
from caseshelf.services.storage import check_record

# The first window of a scan is small (a common word fills a page from it); each next one is
# twice the one before, up to `MAX_WINDOW` cases.
FIRST_WINDOW = 512
MAX_WINDOW = 16_384
# Characters JSON writes escaped: a search holding one is not found in the records' bytes.
_ESCAPED = frozenset('"\\')


@dataclass
class _Extent:
    """One ranged read of a pack: the distinct records it covers, by offset, and the positions
    each record is stored for (two cases of equal content share a record)."""

    container: str
    start: int
    end: int
    offsets: list[int]  # each record's first byte, relative to `start`, ascending
    lengths: list[int]
    positions: list[list[int]]


class RecordScan:
    """The text search of one version over its stored records (module docstring)."""

    def __init__(self, store: BlobStore, tenant: str, manifest: Manifest, max_gap: int) -> None:
        """`max_gap`: the most unwanted bytes read between two records of a pack to save a read
        (the registry's `read_gap`)."""
        self._store = store
        self._tenant = tenant
        self._manifest = manifest
        self._max_gap = max_gap
        self._packs = column_array(manifest.pack_index)
        self._offsets = column_array(manifest.offsets)
        self._lengths = column_array(manifest.lengths)

    def __len__(self) -> int:
        return len(self._manifest)

    def find(self, needle: str, start: int, stop: int, limit: int) -> list[int]:
        """The positions in `[start, stop)` whose case's text holds `needle` (case-folded), at
        most `limit`, in order."""
        found: list[int] = []
        at, window = start, FIRST_WINDOW
        while at < stop and len(found) < limit:
            end = min(stop, at + window)
            for position, record in self._candidates(needle, at, end):
                if text_matches(orjson.loads(record), needle):
                    found.append(position)
                    if len(found) == limit:
                        break
            at, window = end, min(MAX_WINDOW, window * 2)
        return found

    def _candidates(self, needle: str, start: int, stop: int) -> Iterator[tuple[int, bytes]]:
        """The records of positions `[start, stop)` that may hold `needle`, each checked against
        its digest, in position order."""
        every = bool(_ESCAPED.intersection(needle))
        probe = needle.encode("utf-8")
        found: list[tuple[int, bytes]] = []
        for extent in self._extents(range(start, stop)):
            data = self._read(extent)
            indices = range(len(extent.offsets)) if every else _hits(data, extent, probe)
            for k in indices:
                at = extent.offsets[k]
                record = data[at : at + extent.lengths[k]]
                found.extend((position, record) for position in extent.positions[k])
        found.sort(key=lambda item: item[0])
        m = self._manifest
        for position, record in found:
            if hashlib.sha256(record).hexdigest() != m.digests[position]:
                loc = m.location(position)
                key = layout.pack_key(self._tenant, loc.container)
                check_record(record, m.digests[position], key, loc, f"case {m.ids[position]!r}")
            yield position, record

    def _extents(self, positions: range) -> list[_Extent]:
        """The ranged reads covering `positions`: per pack, its records in offset order, cut
        where the gap between two is over `max_gap`."""
        a, b = positions.start, positions.stop
        rows = sorted(
            zip(self._packs[a:b], self._offsets[a:b], self._lengths[a:b], positions, strict=True)
        )
        extents: list[_Extent] = []
        current = _Extent("", 0, 0, [], [], [])
        last = (-1, -1)
        for pack, offset, length, position in rows:
            if (pack, offset) == last:  # a record stored once for two cases
                current.positions[-1].append(position)
                continue
            if pack != last[0] or offset - current.end > self._max_gap:
                current = _Extent(self._manifest.packs[pack], offset, offset, [], [], [])
                extents.append(current)
            current.offsets.append(offset - current.start)
            current.lengths.append(length)
            current.positions.append([position])
            current.end = max(current.end, offset + length)
            last = (pack, offset)
        return extents

    def _read(self, extent: _Extent) -> bytes:
        key = layout.pack_key(self._tenant, extent.container)
        try:
            return self._store.get_range(key, extent.start, extent.end - extent.start)
        except NotFound:
            raise Corrupt(
                f"the stored object {key} is missing: the version cannot be read "
                "(run `caseshelf verify` on it)",
                key=key,
            ) from None


def _hits(data: bytes, extent: _Extent, probe: bytes) -> list[int]:
    """The records of `extent` (indices into its columns) that hold `probe` outside their keys,
    with ASCII letters folded (`bytes.lower`) or, for a record holding other characters, its
    whole text case-folded; in offset order."""
    starts, lengths = extent.offsets, extent.lengths
    out = set(_matches(data.lower(), starts, lengths, probe))
    if not data.isascii():
        for k, (first, n) in enumerate(zip(starts, lengths, strict=True)):
            record = data[first : first + n]
            if k not in out and not record.isascii():
                folded = record.decode("utf-8", "replace").casefold().encode("utf-8")
                if any(True for _ in _matches(folded, [0], [len(folded)], probe)):
                    out.add(k)
    return sorted(out)


def _matches(text: bytes, starts: list[int], lengths: list[int], probe: bytes) -> Iterator[int]:
    """The records (`starts`, ascending, and `lengths` within `text`) holding `probe` outside
    their keys, each once, in order."""
    at = 0
    while (hit := text.find(probe, at)) >= 0:
        k = bisect_right(starts, hit) - 1
        end = starts[k] + lengths[k] if k >= 0 else 0
        if hit + len(probe) > end or in_key(text, starts[k], hit + len(probe), end):
            at = hit + 1  # between two records, across the end of one, or in a key
        else:
            yield k
            at = end


def in_key(text: bytes, first: int, after: int, end: int) -> bool:
    """Whether a match of a search free of quotes and backslashes ending at `after` in the
    canonical JSON record `text[first:end]` lies outside its text: the next quote is followed by
    a colon and not escaped, and the record has no files (whose paths, keys of `files`, are
    text). That quote either closes a key, the match inside it, or opens a string, the match
    among the structure before it (between two quotes with none between, a value's string never
    lies open)."""
    q = text.find(b'"', after, end)
    if q < 0 or text[q + 1 : q + 2] != b":" or text[q - 1 : q] == b"\\":
        return False
    return text.find(b'"files":{', first, end) < 0
