"""Writing and reading packs: the I/O shell around the pure manifest.

Cases are appended to packs of several MB (S3 and moto pay per request, so never one object per
case); a pack's key is the sha256 of its bytes, so a pack is written once and never changes.
Small file bodies are packed the same way under `blobs/`; large ones stand alone.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import orjson

from caseshelf.domain import layout
from caseshelf.domain.canonical import sha256_hex
from caseshelf.domain.chunks import (
    ROOT_FORMATS,
    ManifestCutter,
    Root,
    SampleColumn,
    chunk_from_bytes,
    sample_column_from_bytes,
    superseded_bytes,
    superseded_from_bytes,
)
from caseshelf.domain.diff import Delta, delta_bytes, delta_from_bytes
from caseshelf.domain.errors import BadRequest, Corrupt, NotFound
from caseshelf.domain.manifest import FORMAT as LEGACY_FORMAT
from caseshelf.domain.manifest import Location, Manifest, column_array
from caseshelf.ports import BlobStore

PACK_TARGET_BYTES = 8 * 1024 * 1024
SMALL_BLOB_BYTES = 256 * 1024
# The most unwanted bytes read between two wanted records to save a request. Against S3 a
# request costs tens of milliseconds of waiting plus about a millisecond of client CPU (which no
# number of threads overlaps), while bytes in the region cost nothing: read spans, several at
# once (`REMOTE_READ_WORKERS`). On local files a request costs microseconds: read little more
# than the records wanted (`LOCAL_MAX_GAP_BYTES`). `bench/bench_diff.py` measures the trade.
MAX_GAP_BYTES = 256 * 1024
LOCAL_MAX_GAP_BYTES = 16 * 1024
# Ranged GETs in flight at once against a remote store (S3): a request there mostly waits on the
# network. The embedded store reads sequentially (`workers=1`): a local read is a few
# microseconds, less than handing it to a thread.
REMOTE_READ_WORKERS = 16

_T = TypeVar("_T")


class PackWriter:
    """Appends records and stores each pack with put-if-absent once it reaches the target.

    `append` answers `(pack number, offset)`; a pack's digest (and so its key) is known only once
    it is stored, and `digest_of_pack(number)` names it after `flush()`. Full packs are hashed and
    stored by one background thread while the caller goes on appending (hashing and writing
    release the GIL), at most `IN_FLIGHT` packs at a time; `flush()` stores the rest, waits for
    all of them and re-raises any failure.
    """

    IN_FLIGHT = 2

    def __init__(
        self,
        store: BlobStore,
        key_for: Callable[[str], str],
        target: int = PACK_TARGET_BYTES,
    ) -> None:
        self._store = store
        self._key_for = key_for
        self._target = target
        # The pack being filled: the pieces appended (records, their newlines, runs of records),
        # joined into one object only when the pack is stored.
        self._pieces: list[bytes | bytearray | memoryview] = []
        self._size = 0
        self._submitted: list[Future[tuple[str, bool, int]]] = []
        self._digests: list[str] = []
        self._executor: ThreadPoolExecutor | None = None
        self.bytes_written = 0
        self.objects_written = 0

    def append(self, record: bytes | memoryview) -> tuple[int, int]:
        """Append one record (its newline is added). The record's buffer must not change
        until the pack is stored."""
        where = (len(self._submitted), self._size)
        self._pieces += (record, b"\n")
        self._size += len(record) + 1
        if self._size >= self._target:
            self._submit()
        return where

    def append_run(
        self, data: bytes | bytearray | memoryview, stops: Sequence[int]
    ) -> list[tuple[int, int, int]]:
        """Append records lying back to back in `data`, each already ending with its newline;
        `stops[i]` is where record i ends (newline included), relative to `data`. The packs are
        the ones `append` would make record by record, without a call per record.

        Answers `(first record, pack number, shift)` for each pack the run went into: record i
        from `first` on (up to the next entry's `first`) is in that pack at offset
        `start of record i in data + shift`. `data` must not change until the packs are
        stored (pass a memoryview: it is sliced, not copied)."""
        segments: list[tuple[int, int, int]] = []
        first, pos, count = 0, 0, len(stops)
        while first < count:
            base = self._size
            segments.append((first, len(self._submitted), base - pos))
            # The pack is full after the first record that takes it to the target.
            cut = bisect_left(stops, pos + self._target - base, first)
            end = stops[-1] if cut >= count else stops[cut]
            self._pieces.append(data[pos:end])
            self._size += end - pos
            if cut >= count:
                break
            self._submit()
            first, pos = cut + 1, end
        return segments

    def cut(self) -> None:
        """Store the pack being filled now, whatever its size, and wait until every pack is
        stored (`stored()` then counts them all); the records appended after it go into the
        next pack. Nothing is stored when the pack being filled is empty."""
        if self._pieces:
            self._submit()
            self._collect(len(self._submitted))

    def _store_pack(self, data: bytes) -> tuple[str, bool, int]:
        hex_digest = sha256_hex(data)
        return hex_digest, self._store.put_if_absent(self._key_for(hex_digest), data), len(data)

    def _submit(self) -> None:
        data = b"".join(self._pieces)
        self._pieces, self._size = [], 0
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="caseshelf-pack")
        self._submitted.append(self._executor.submit(self._store_pack, data))
        # Bound memory: wait for the oldest packs beyond IN_FLIGHT.
        self._collect(len(self._submitted) - self.IN_FLIGHT)

    def _collect(self, upto: int) -> None:
        while len(self._digests) < upto:
            hex_digest, wrote, size = self._submitted[len(self._digests)].result()
            if wrote:
                self.bytes_written += size
                self.objects_written += 1
            self._digests.append(hex_digest)

    def stored(self) -> int:
        """How many packs, from the first, are stored and named (`digest_of_pack`), without
        waiting for those still being written."""
        submitted, digests = self._submitted, self._digests
        while len(digests) < len(submitted) and submitted[len(digests)].done():
            self._collect(len(digests) + 1)
        return len(digests)

    def flush(self) -> None:
        """Store what is buffered and wait until every pack is stored."""
        if self._pieces:
            self._submit()
        try:
            self._collect(len(self._submitted))
        finally:
            if self._executor is not None and len(self._digests) == len(self._submitted):
                self._executor.shutdown()
                self._executor = None

    def digest_of_pack(self, number: int) -> str:
        return self._digests[number]

    def location(self, where: tuple[int, int], length: int) -> Location:
        return Location(self._digests[where[0]], where[1], length)


@dataclass(frozen=True)
class ManifestWritten:
    """What `write_manifest` stored: the root's key, and the new bytes and objects it wrote
    (chunks already present are shared, not written again)."""

    key: str
    bytes_written: int
    objects_written: int
    chunks: int
    root: Root


def write_manifest(
    store: BlobStore,
    tenant: str,
    manifest: Manifest,
    *,
    workers: int = 1,
    base: Manifest | None = None,
) -> ManifestWritten:
    """Store a whole `manifest` as a format 4 root and its chunks: `ManifestWriter` fed every
    case (what a registration does as its cases come)."""
    writer = ManifestWriter(store, tenant, workers=workers)
    digests = manifest.digest_list()
    packs, pack_index = manifest.packs, column_array(manifest.pack_index)
    offsets, lengths = column_array(manifest.offsets), column_array(manifest.lengths)
    for at in range(0, len(manifest), MANIFEST_FEED_CASES):
        part = range(at, min(at + MANIFEST_FEED_CASES, len(manifest)))
        writer.add(
            manifest.ids[at : part.stop],
            digests[at : part.stop],
            [manifest.tags_of(i) for i in part],
            [packs[pack_index[i]] for i in part],
            offsets[at : part.stop],
            lengths[at : part.stop],
        )
    if base is None:
        return writer.finish(manifest)
    return writer.finish(
        manifest, delta=delta_bytes(base, manifest), delta_base=base.content_digest
    )


MANIFEST_FEED_CASES = 4096  # cases handed to a ManifestWriter at a time by write_manifest


class ManifestWriter:
    """A version's manifest stored as its cases come: cut into chunks and sample columns by
    `ManifestCutter` (the objects `split_manifest` makes of the whole manifest), each put
    under the sha256 of its bytes as soon as it is cut, so that memory holds a chunk's worth of
    cases instead of the whole manifest's columns and every chunk's bytes (at 1,000,000 cases,
    ~300 MB of peak RSS, and the quadratic joins of `split_manifest`'s sample columns).

    Every object is put-if-absent (one another version stored is reused, never overwritten);
    the root comes last, in `finish`, put-if-absent at the version's manifest key. A crash in
    between leaves only objects no root names, which `gc` collects. With `workers` above one
    (a remote store) the puts run on that many threads while the caller goes on: a PUT waits on
    the network, and ~100 chunks of a 100,000-case version one at a time against S3 would add
    ~100 round trips. With one (the embedded store's setting) each put runs in the caller's
    thread: on local disk an object is a file made, written, synced and linked, a dozen short
    system calls, and a thread making them waits for the GIL after each one while the caller
    maps rows, and the caller then waits for the thread (an import took 0.92-0.98 of the wall
    time it took with the thread, at 100,000 to 1,000,000 rows)."""

    def __init__(self, store: BlobStore, tenant: str, *, workers: int = 1) -> None:
        self._store = store
        self._tenant = tenant
        self._workers = max(1, workers)
        self._cutter = ManifestCutter()
        self._pool: ThreadPoolExecutor | None = None
        self._in_flight: deque[Future[tuple[bool, int]]] = deque()
        self.bytes_written = 0
        self.objects_written = 0

    def add(
        self,
        ids: Sequence[str],
        digests: Sequence[str],
        tags: Sequence[Sequence[str]],
        containers: Sequence[str],
        offsets: Iterable[int],
        lengths: Iterable[int],
    ) -> None:
        """Add cases in dataset order (`ManifestCutter.add`: each record stored where
        `containers` says, by pack name), storing the chunks they complete."""
        for kind, hex_digest, data in self._cutter.add(
            ids, digests, tags, containers, offsets, lengths
        ):
            self._put(self._key(kind, hex_digest), data)

    def __len__(self) -> int:
        return len(self._cutter)

    def case_id(self, position: int) -> str:
        """The id of the case added at `position`: held, or read back from its chunk (stored
        already, not yet named by any root): a check that rarely needs one (a repeated id)."""
        where = self._cutter.where(position)
        if isinstance(where, str):
            return where
        while self._in_flight:
            self._count(*self._in_flight.popleft().result())
        key, local = where
        return read_chunk(self._store, self._tenant, key).ids[local]

    def _key(self, kind: str, hex_digest: str) -> str:
        if kind == "chunk":
            return layout.chunk_key(self._tenant, hex_digest)
        return layout.sample_key(self._tenant, hex_digest)

    def _put(self, key: str, data: bytes) -> None:
        if self._workers == 1:
            self._count(*self._put_counted(key, data))
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="caseshelf-chunk")
        self._in_flight.append(self._pool.submit(self._put_counted, key, data))
        while len(self._in_flight) > 2 * self._workers:
            self._count(*self._in_flight.popleft().result())

    def _put_counted(self, key: str, data: bytes) -> tuple[bool, int]:
        return self._store.put_if_absent(key, data), len(data)

    def _count(self, wrote: bool, size: int) -> None:
        if wrote:
            self.bytes_written += size
            self.objects_written += 1

    def _drain(self) -> None:
        try:
            while self._in_flight:
                self._count(*self._in_flight.popleft().result())
        finally:
            if self._pool is not None:
                self._pool.shutdown(cancel_futures=True)
                self._pool = None

    def close(self) -> None:
        """Stop any puts in flight (a registration that failed half way)."""
        for future in self._in_flight:
            future.cancel()
        self._in_flight.clear()
        self._drain()

    def finish(
        self, manifest: Manifest, *, delta: bytes | None = None, delta_base: str = ""
    ) -> ManifestWritten:
        """Store the last chunks, the object of the superseded copies and the root, whose
        content, file bodies and superseded copies are `manifest`'s; its cases are the ones
        added (`manifest` need not hold them). `delta`: the version's change against the base
        it was registered against (`delta_bytes`, or `ChangeAgainstBase.delta` as the cases
        came), whose content digest is `delta_base`, kept for a diff of the two."""
        try:
            root, rest = self._cutter.finish(manifest)
            for kind, hex_digest, data in rest:
                self._put(self._key(kind, hex_digest), data)
            if delta is not None:
                root.delta_key, root.delta_base = sha256_hex(delta), delta_base
                self._put(layout.delta_key(self._tenant, root.delta_key), delta)
            copies = superseded_bytes(manifest)
            if copies is not None:
                self._put(layout.superseded_key(self._tenant, root.superseded_key), copies)
        finally:
            self._drain()
        key = layout.manifest_key(self._tenant, manifest.content_digest)
        data = root.to_bytes()
        self._count(self._store.put_if_absent(key, data), len(data))
        return ManifestWritten(
            key, self.bytes_written, self.objects_written, len(root.chunk_keys), root
        )


def manifest_format(data: bytes) -> str | None:
    """The `format` of a stored manifest document (its first key), without parsing it whole."""
    for name in (*ROOT_FORMATS, LEGACY_FORMAT):
        if data.startswith(b'{"format":"' + name.encode() + b'"'):
            return name
    return None


def parse_root(data: bytes) -> Root | Manifest:
    """A stored manifest: a format 3 or 4 `Root` (chunks still to read), or a whole format 2
    `Manifest` (read as it always was). `BadRequest` when it is neither."""
    if manifest_format(data) == LEGACY_FORMAT:
        return Manifest.from_bytes(data)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"corrupt manifest: {exc}") from None
    if not isinstance(doc, dict):
        raise BadRequest("corrupt manifest: not a JSON object")
    return Root.from_doc(doc)


def read_delta(store: BlobStore, tenant: str, root: Root) -> Delta:
    """The change against its base a root names; `Corrupt` naming the key when the object is
    missing, damaged or unreadable."""
    key = layout.delta_key(tenant, root.delta_key)
    return _read_addressed(store, key, root.delta_key, "the delta", delta_from_bytes)


def read_superseded(store: BlobStore, tenant: str, root: Root) -> dict[str, Location]:
    """Where the superseded copies a root names are, by digest hex ({} when it names none);
    `Corrupt` naming the key when the object is missing, damaged or unreadable."""
    if not root.superseded_key:
        return {}
    key = layout.superseded_key(tenant, root.superseded_key)
    return _read_addressed(
        store, key, root.superseded_key, "the superseded copies object", superseded_from_bytes
    )


def _read_addressed(
    store: BlobStore, key: str, hex_digest: str, what: str, parse: Callable[[bytes], _T]
) -> _T:
    """The manifest object at `key` (a chunk, a sample column, a delta, superseded copies),
    checked against its content address `hex_digest` and parsed: `Corrupt` naming the key when
    it is missing, does not hash to its address, or does not parse."""
    try:
        data = store.get(key)
    except NotFound:
        raise Corrupt(
            f"{what} {key} is missing: the version cannot be read (run `caseshelf verify` on it)",
            key=key,
        ) from None
    if sha256_hex(data) != hex_digest:
        raise Corrupt(
            f"{what} {key} does not match its digest: the stored object is damaged; not served "
            "(run `caseshelf verify` on the version)",
            key=key,
        )
    try:
        return parse(data)
    except BadRequest as exc:
        raise Corrupt(f"{what} {key}: {exc.detail}", key=key) from None


def read_chunks(
    store: BlobStore, tenant: str, keys: Iterable[str], *, workers: int = 1
) -> Iterator[Manifest]:
    """`read_chunk` of every key, in order. With `workers` above 1 (a remote store, where a GET
    waits on the network) up to that many reads are in flight, and at most twice as many chunks
    wait to be taken: the whole manifest of a 1,000,000-case version is ~1,000 chunks, which
    one at a time against S3 would cost ~1,000 round trips end to end."""
    return _read_each(partial(read_chunk, store, tenant), keys, workers)


def read_sample_columns(
    store: BlobStore, tenant: str, keys: Iterable[str], *, workers: int = 1
) -> Iterator[SampleColumn]:
    """`read_sample_column` of every key, in order, with up to `workers` reads in flight."""
    return _read_each(partial(read_sample_column, store, tenant), keys, workers)


def _read_each(read: Callable[[str], _T], keys: Iterable[str], workers: int) -> Iterator[_T]:
    """`read` of every key, in order, lazily; above one worker, up to `workers` reads in flight
    and at most twice as many answers waiting to be taken."""
    if workers <= 1:
        yield from map(read, keys)
        return
    keys = list(keys)
    if len(keys) <= 1:
        yield from map(read, keys)
        return
    with unjoined(started_pool(min(workers, len(keys)), "caseshelf-chunk")) as pool:
        pending: deque[Future[_T]] = deque()
        try:
            for key in keys:
                pending.append(pool.submit(read, key))
                if len(pending) >= 2 * workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()


@contextmanager
def unjoined(pool: ThreadPoolExecutor) -> Iterator[ThreadPoolExecutor]:
    """`pool`, shut down on leaving without waiting for its threads: the pool of a generator.
    A generator left unfinished is closed wherever the garbage collector happens to find it,
    which can be inside `threading`'s own bookkeeping in a thread that is starting, holding the
    lock that joining a thread takes: a join there never returns. The threads end on their own
    once the work in flight is done; work not yet begun is cancelled."""
    try:
        yield pool
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def started_pool(workers: int, name: str) -> ThreadPoolExecutor:
    """A thread pool whose `workers` threads have all started before any work is handed to it.
    A pool starts a thread at a submit that finds none idle, and the start waits until the new
    thread runs: while the reads already handed out hold the GIL, each start waits 5-15 ms,
    so 40 reads on moto took twice as long started at submits."""
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
    everyone = threading.Barrier(workers + 1)
    for _ in range(workers):  # each holds its thread until all have started
        pool.submit(everyone.wait)
    everyone.wait()
    return pool


def read_sample_column(store: BlobStore, tenant: str, hex_digest: str) -> SampleColumn:
    """One sample column, checked against its key (`Corrupt` naming the key when it does not
    hash to it, is missing or does not parse)."""
    key = layout.sample_key(tenant, hex_digest)
    return _read_addressed(store, key, hex_digest, "the sample column", sample_column_from_bytes)


def read_chunk(store: BlobStore, tenant: str, hex_digest: str) -> Manifest:
    """One chunk, checked against its key (`Corrupt` naming the key when it does not hash to
    it, is missing or does not parse)."""
    key = layout.chunk_key(tenant, hex_digest)
    return _read_addressed(store, key, hex_digest, "the manifest chunk", chunk_from_bytes)


class BlobWriter:
    """File bodies: small ones packed under `blobs/<pack sha>`, large ones at `blobs/<sha>`."""

    def __init__(self, store: BlobStore, tenant: str, known: dict[str, Location]) -> None:
        self._store = store
        self._tenant = tenant
        self._known = dict(known)
        self._packs = PackWriter(store, lambda h: layout.blob_key(tenant, h))
        self._slots: dict[str, tuple[tuple[int, int], int]] = {}
        self.bytes_written = 0

    def add(self, digest_hex: str, body: bytes) -> None:
        if digest_hex in self._known or digest_hex in self._slots:
            return
        if len(body) > SMALL_BLOB_BYTES:
            if self._store.put_if_absent(layout.blob_key(self._tenant, digest_hex), body):
                self.bytes_written += len(body)
            self._known[digest_hex] = Location(digest_hex, 0, len(body))
        else:
            self._slots[digest_hex] = (self._packs.append(body), len(body))

    def has(self, digest_hex: str) -> bool:
        return digest_hex in self._known or digest_hex in self._slots

    def locate_standalone(self, digest_hex: str) -> Location | None:
        """A body stored alone by an earlier registration of this tenant."""
        head = self._store.head(layout.blob_key(self._tenant, digest_hex))
        if head is None:
            return None
        loc = Location(digest_hex, 0, head.size)
        self._known[digest_hex] = loc
        return loc

    def finish(self) -> dict[str, Location]:
        self._packs.flush()
        self.bytes_written += self._packs.bytes_written
        out = dict(self._known)
        for digest_hex, (where, length) in self._slots.items():
            out[digest_hex] = self._packs.location(where, length)
        return out


def _spans(
    wanted: Sequence[tuple[int, Location]], max_gap: int = MAX_GAP_BYTES
) -> Iterator[tuple[str, int, int, list[tuple[int, Location]]]]:
    """Group wanted records by container into contiguous read spans."""
    by_container: dict[str, list[tuple[int, Location]]] = defaultdict(list)
    for item in wanted:
        by_container[item[1].container].append(item)
    for container, items in by_container.items():
        items.sort(key=lambda it: it[1].offset)
        start = items[0][1].offset
        end = start
        group: list[tuple[int, Location]] = []
        for it in items:
            loc = it[1]
            if group and loc.offset - end > max_gap:
                yield container, start, end - start, group
                start, group = loc.offset, []
            group.append(it)
            end = max(end, loc.offset + loc.length)
        yield container, start, end - start, group


def read_records(
    store: BlobStore,
    key_for: Callable[[str], str],
    wanted: Sequence[tuple[int, Location]],
    *,
    max_gap: int = MAX_GAP_BYTES,
    workers: int = 1,
) -> dict[int, bytes]:
    """Read records by ranged GETs, one per span of nearby records; keyed by the caller's tag.

    `max_gap` is the most unwanted bytes read to save a request. `workers` above 1 issues the
    spans' GETs through a pool of that many threads (for a remote store, where a request waits
    on the network; the store must be thread-safe); the answer, its order included, is the same
    either way."""
    spans = list(_spans(wanted, max_gap))

    def fetch(span: tuple[str, int, int, list[tuple[int, Location]]]) -> bytes:
        return store.get_range(key_for(span[0]), span[1], span[2])

    datas: Iterable[bytes]
    if workers > 1 and len(spans) > 1:
        datas = _fetch_concurrently(fetch, spans, min(workers, len(spans)))
    else:
        datas = map(fetch, spans)
    out: dict[int, bytes] = {}
    for (_, start, _, group), data in zip(spans, datas, strict=True):
        for tag, loc in group:
            rel = loc.offset - start
            out[tag] = data[rel : rel + loc.length]
    return out


def _fetch_concurrently(
    fetch: Callable[[_T], bytes], items: Sequence[_T], workers: int
) -> Iterator[bytes]:
    """`fetch` of every item on a thread pool, answered in the items' order. The first error
    cancels what has not started and is raised."""
    with unjoined(started_pool(workers, "caseshelf-read")) as pool:
        futures: deque[Future[bytes]] = deque(pool.submit(fetch, item) for item in items)
        try:
            while futures:
                # Let go of each answer once handed over: memory holds what is in flight.
                yield futures.popleft().result()
        finally:
            for future in futures:
                future.cancel()


def _read_present(
    store: BlobStore,
    key_for: Callable[[str], str],
    wanted: Sequence[tuple[int, Location]],
    **kwargs: Any,
) -> dict[int, bytes]:
    """`read_records` for objects a committed version references: one that is not there is a
    damaged store (`Corrupt`), not a version that does not exist."""
    try:
        return read_records(store, key_for, wanted, **kwargs)
    except NotFound as exc:
        key = exc.fields.get("key", "")
        raise Corrupt(
            f"the stored object {key} is missing: the version cannot be read "
            "(run `caseshelf verify` on it)",
            key=key,
        ) from None


def check_record(data: bytes, hex_digest: str, key: str, loc: Location, what: str) -> None:
    """Refuse bytes read from `key` at `loc` that do not hash to `hex_digest` (`Corrupt`)."""
    if len(data) != loc.length or sha256_hex(data) != hex_digest:
        raise Corrupt(
            f"{what} sha256:{hex_digest} read from {key} (bytes {loc.offset}+{loc.length}) does "
            "not match its digest: the stored object is damaged; not served "
            "(run `caseshelf verify` on the version)",
            key=key,
            digests=[f"sha256:{hex_digest}"],
        )


def read_cases(
    store: BlobStore,
    tenant: str,
    manifest: Manifest,
    indices: Iterable[int],
    *,
    max_gap: int = MAX_GAP_BYTES,
    workers: int = 1,
) -> dict[int, bytes]:
    """Canonical bytes of the manifest's cases at `indices`, each checked against the digest
    the manifest records for it (`Corrupt` when one does not match)."""
    wanted = [(i, manifest.location(i)) for i in indices]
    got = _read_present(
        store, lambda h: layout.pack_key(tenant, h), wanted, max_gap=max_gap, workers=workers
    )
    digests = manifest.digests
    for i, loc in wanted:
        data = got[i]
        hex_digest = digests[i]
        if len(data) != loc.length or sha256_hex(data) != hex_digest:
            check_record(
                data,
                hex_digest,
                layout.pack_key(tenant, loc.container),
                loc,
                f"case {manifest.ids[i]!r}",
            )
    return got


def read_blobs(
    store: BlobStore, tenant: str, locations: dict[str, Location], *, workers: int = 1
) -> dict[str, bytes]:
    """File bodies by digest hex, each checked against its digest (`Corrupt` otherwise)."""
    keys = list(locations)
    wanted = [(i, locations[d]) for i, d in enumerate(keys)]
    got = _read_present(store, lambda h: layout.blob_key(tenant, h), wanted, workers=workers)
    out = {}
    for i, body in got.items():
        loc = locations[keys[i]]
        check_record(body, keys[i], layout.blob_key(tenant, loc.container), loc, "file body")
        out[keys[i]] = body
    return out
