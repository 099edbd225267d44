"""The cases of a window of a version, read from the packs in bulk: an export's windows and the
pages of the cases route.

An export reads every case of a version (or of a subset) once, in order, a window of thousands
at a time; a reader of `GET …/cases` reads pages of up to 1,000. `RegistryService.case_records`
reads any positions one record at a time (a `Location`, a slice, a digest check and a parse per
case, each a few Python calls); here a window is read as the few ranged reads that cover it, its
records' digests are computed over slices of those reads and compared with the chunk's digest
column in one comparison per read, and the records are parsed with one call per read. The checks
are the same: every record is hashed and compared with the digest the manifest chunk records for
it, and a record that does not match is refused (`Corrupt`, naming the case and the stored
object), as `services.storage.read_cases` refuses it.

An export, which reads most of a version's packs from end to end, passes `WholePacks`: a pack it
reads much of is read whole and checked once against its own address (a pack's key is the
sha256 of its bytes), and its records are then cut from it without a hash each; records lying
back to back (one newline apart, as a registration writes them) are handed on as one block of
lines, not cut at all (docs/decisions.md, "Whole packs for exports").
"""

from __future__ import annotations

import hashlib
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from caseshelf.domain import layout
from caseshelf.domain.errors import Corrupt, NotFound
from caseshelf.domain.export_formats import CaseWindow
from caseshelf.domain.manifest import Location, Manifest, column_array
from caseshelf.domain.versions import VersionRecord
from caseshelf.services.storage import PACK_TARGET_BYTES, check_record, unjoined

if TYPE_CHECKING:
    from caseshelf.ports import BlobStore

# A span: (pack number in the chunk, first byte, byte count, the chunk-local positions it holds,
# whether those records lie back to back, one newline apart)
_Span = tuple[int, int, int, list[int], bool]


class ChunkSource(Protocol):
    """What a window is read from: a store, its read plan, and a version's chunks (the
    registry, `caseshelf.services.registry.RegistryService`, which caches them)."""

    store: BlobStore
    read_gap: int
    read_workers: int

    def chunk(self, rec: VersionRecord, number: int) -> Manifest: ...


def _chunk_runs(
    starts: Sequence[int], indices: Sequence[int]
) -> Iterator[tuple[int, range | list[int]]]:
    """`indices` cut into runs that fall in one chunk each, in the order given: (chunk number,
    the positions local to the chunk). `starts`: each chunk's first position, the count last.
    A range of positions (a whole version's window) is cut by arithmetic alone."""
    count = starts[-1]
    if isinstance(indices, range) and indices.step == 1:
        if indices and not (indices.start >= 0 and indices.stop <= count):
            raise IndexError(f"case positions {indices.start}..{indices.stop - 1} out of range")
        at = indices.start
        while at < indices.stop:
            number = bisect_right(starts, at) - 1
            stop = min(indices.stop, starts[number + 1])
            yield number, range(at - starts[number], stop - starts[number])
            at = stop
        return
    number, lo, hi = -1, 0, 0
    run: list[int] = []
    for i in indices:
        if not lo <= i < hi:
            if not 0 <= i < count:
                raise IndexError(f"case position {i} out of range")
            if run:
                yield number, run
                run = []
            number = bisect_right(starts, i) - 1
            lo, hi = starts[number], starts[number + 1]
        run.append(i - lo)
    if run:
        yield number, run


def _one_span(chunk: Manifest, local: range, max_gap: int) -> _Span | None:
    """The one read covering consecutive records `local` when they lie in one pack, in order,
    at most `max_gap` bytes apart (what `_spans` finds for them), checked without a Python
    step per record; None otherwise."""
    a, b = local.start, local.stop
    packs = column_array(chunk.pack_index)[a:b]
    offsets = column_array(chunk.offsets)
    lengths = column_array(chunk.lengths)
    if packs.count(packs[0]) != len(packs):
        return None
    back_to_back = True
    if b - a > 1:
        gaps = [offsets[j + 1] - (offsets[j] + lengths[j]) for j in range(a, b - 1)]
        low, high = min(gaps), max(gaps)
        if low < 0 or high > max_gap:
            return None
        back_to_back = low == high == 1
    start = offsets[a]
    return packs[0], start, offsets[b - 1] + lengths[b - 1] - start, list(local), back_to_back


def _spans(chunk: Manifest, local: Sequence[int], max_gap: int) -> list[_Span]:
    """The ranged reads covering the records at `local`, in that order: consecutive records of
    one pack that lie at most `max_gap` bytes apart share a read."""
    if isinstance(local, range) and local:
        one = _one_span(chunk, local, max_gap)
        if one is not None:
            return [one]
    packs = column_array(chunk.pack_index)
    offsets = column_array(chunk.offsets)
    lengths = column_array(chunk.lengths)
    spans: list[_Span] = []
    pack, start, end, joined = -1, 0, 0, True
    group: list[int] = []
    for j in local:
        p, o = packs[j], offsets[j]
        if p != pack or not end <= o <= end + max_gap:
            if group:
                spans.append((pack, start, end - start, group, joined))
            pack, start, group, joined = p, o, [], True
        elif o != end + 1 or j != group[-1] + 1:
            joined = False
        group.append(j)
        end = o + lengths[j]
    if group:
        spans.append((pack, start, end - start, group, joined))
    return spans


def _digests(chunk: Manifest, group: list[int]) -> bytes:
    """The digests the chunk records for `group`, as raw bytes back to back."""
    first, last = group[0], group[-1]
    if last - first + 1 == len(group):  # consecutive positions: a slice of the stored column
        return bytes.fromhex(chunk.digest_text()[first * 64 : (last + 1) * 64])
    digests = chunk.digest_list()
    return bytes.fromhex("".join([digests[j] for j in group]))


def checked_records(
    data: bytes, start: int, chunk: Manifest, group: list[int], key: str
) -> list[bytes]:
    """The records at `group` in `data` (the bytes of a pack from `start`), each checked against
    its digest. What it buys over a check per record (`storage.read_cases`): the records are cut
    and hashed in two comprehensions over the chunk's columns and the hashes compared with the
    digest column in one comparison, with no `Location` or call per record: less than half the
    CPU of `case_records`, most of it the hashing itself. A record that does not match is named
    as `read_cases` names it."""
    offsets = column_array(chunk.offsets)
    lengths = column_array(chunk.lengths)
    records = [data[offsets[j] - start : offsets[j] - start + lengths[j]] for j in group]
    if b"".join([hashlib.sha256(r).digest() for r in records]) != _digests(chunk, group):
        digests = chunk.digest_list()
        for j, r in zip(group, records, strict=True):  # a short read hashes differently too
            loc = Location(chunk.packs[chunk.pack_index[j]], offsets[j], lengths[j])
            check_record(bytes(r), digests[j], key, loc, f"case {chunk.ids[j]!r}")
    return records


def _cut_records(data: bytes, start: int, chunk: Manifest, group: list[int]) -> list[bytes]:
    """The records at `group` in `data` (the bytes of a checked pack from `start`), unhashed."""
    offsets = column_array(chunk.offsets)
    lengths = column_array(chunk.lengths)
    return [data[offsets[j] - start : offsets[j] - start + lengths[j]] for j in group]


@dataclass
class _Read:
    """One ranged read of a pack, and the spans of records (of one or more chunks) it covers."""

    key: str
    digest: str  # the pack's sha256 (hex), its address
    start: int
    end: int
    parts: list[tuple[Manifest, list[int], bool]]  # (chunk, positions, back to back)


def _reads(
    registry: ChunkSource,
    rec: VersionRecord,
    starts: Sequence[int],
    indices: Sequence[int],
    chunk_of: Callable[[int], Manifest] | None = None,
) -> list[_Read]:
    """The ranged reads covering the records at `indices`, in order: the spans of each chunk
    (`_spans`), and consecutive spans of one pack at most `read_gap` bytes apart merged into
    one read, across chunks too (a window of a version registered in one go is a read or two)."""
    reads: list[_Read] = []
    gap = registry.read_gap
    for number, local in _chunk_runs(starts, indices):
        chunk = chunk_of(number) if chunk_of is not None else registry.chunk(rec, number)
        for pack, start, size, group, joined in _spans(chunk, local, gap):
            key = layout.pack_key(rec.tenant, chunk.packs[pack])
            last = reads[-1] if reads else None
            if last is not None and last.key == key and last.end <= start <= last.end + gap:
                last.end = start + size
                last.parts.append((chunk, group, joined))
            else:
                reads.append(
                    _Read(key, chunk.packs[pack], start, start + size, [(chunk, group, joined)])
                )
    return reads


# A read of at least this much of a pack reads the pack whole (`WholePacks`): an export reading
# that much of it will most likely read the rest in its next window.
WHOLE_PACK_MIN_BYTES = PACK_TARGET_BYTES // 8


class WholePacks:
    """The packs an export has read whole, each checked once against its address, kept for its
    next windows (the last `keep` of them). What it buys: instead of hashing each record apart
    with the interpreter lock held and cutting each out of its read, an export hashes a few
    whole packs with the lock released and hands on the window's records as the blocks of lines
    they already are (`bench/bench_export.py`, `export-parquet`).

    A pack whose bytes do not hash to its address is not kept: its records are then checked one
    by one as without it, so a damaged record is named (`Corrupt`) and an intact one served."""

    def __init__(self, store: BlobStore, keep: int = 2) -> None:
        self._store = store
        self._keep = keep
        self._held: dict[str, bytes] = {}  # oldest first
        self._lock = threading.Lock()  # reads of a remote store run on several threads

    def wants(self, read: _Read) -> bool:
        return read.key in self._held or read.end - read.start >= WHOLE_PACK_MIN_BYTES

    def get(self, read: _Read) -> tuple[bytes, bool]:
        """(the whole pack, whether it hashes to its address)."""
        with self._lock:
            data = self._held.get(read.key)
        if data is not None:
            return data, True
        data = self._store.get(read.key)
        if hashlib.sha256(data).hexdigest() != read.digest:
            return data, False
        with self._lock:
            self._held[read.key] = data
            while len(self._held) > self._keep:
                del self._held[next(iter(self._held))]
        return data, True


def window_cases(
    registry: ChunkSource,
    rec: VersionRecord,
    starts: Sequence[int],
    indices: Sequence[int],
    packs: WholePacks | None = None,
    chunk_of: Callable[[int], Manifest] | None = None,
) -> CaseWindow:
    """The cases at `indices` of a version, in that order, each record checked against its
    digest (`Corrupt` naming the case otherwise), or read from a pack checked whole (`packs`).
    `starts`: the root's `chunk_starts()`. `chunk_of(n)`: chunk `n` as the caller holds it
    (default: the registry's, which caches it)."""
    store = registry.store
    reads = _reads(registry, rec, starts, indices, chunk_of)

    def fetch(read: _Read) -> tuple[bytes, int, bool]:
        """(bytes from the read's start or the whole pack's, where they start, checked whole)"""
        try:
            if packs is not None and packs.wants(read):
                data, checked = packs.get(read)
                return data, 0, checked
            return store.get_range(read.key, read.start, read.end - read.start), read.start, False
        except NotFound:
            raise Corrupt(
                f"the stored object {read.key} is missing: the version cannot be read "
                "(run `caseshelf verify` on it)",
                key=read.key,
            ) from None

    datas: Iterable[tuple[bytes, int, bool]]
    if registry.read_workers > 1 and len(reads) > 1:
        with ThreadPoolExecutor(max_workers=min(registry.read_workers, len(reads))) as pool:
            datas = list(pool.map(fetch, reads))
    else:
        datas = map(fetch, reads)
    window = CaseWindow()
    for read, (data, at, checked) in zip(reads, datas, strict=True):
        for chunk, group, joined in read.parts:
            lines = _lines(data, at, chunk, group) if checked and joined else b""
            if lines and lines.count(b"\n") == len(group) - 1:  # one newline between records
                window.add_lines(lines, len(group))
            elif checked:
                window.add(_cut_records(data, at, chunk, group))
            else:
                window.add(checked_records(data, at, chunk, group, read.key))
    return window


def read_ahead(read: Callable[[int], CaseWindow], count: int) -> Iterator[CaseWindow]:
    """`read(0)` … `read(count - 1)`, each read on a thread of its own while the caller works
    on the one before. What it buys: reading a window mostly waits on files or the network and
    hashes packs and chunks with the interpreter lock released, so it overlaps the planning of
    the window before (and the building and writing of those before it). With `WholePacks`, it
    keeps a parquet export within 3 times `write_table` (`bench/bench_export.py`,
    `export-parquet`). At most one window is read ahead."""
    if not count:
        return
    with unjoined(ThreadPoolExecutor(max_workers=1, thread_name_prefix="caseshelf-read")) as pool:
        pending = pool.submit(read, 0)
        for number in range(count):
            window = pending.result()
            if number + 1 < count:
                pending = pool.submit(read, number + 1)
            yield window


def _lines(data: bytes, start: int, chunk: Manifest, group: list[int]) -> bytes:
    """The records at `group` (consecutive, back to back) as the one block of lines they are."""
    first, last = group[0], group[-1]
    offsets = column_array(chunk.offsets)
    return data[offsets[first] - start : offsets[last] + chunk.lengths[last] - start]
