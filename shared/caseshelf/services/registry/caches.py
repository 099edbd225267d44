"""The stored form of a committed version, read and kept: its root, its manifest chunks and its
whole manifest, each read once into the registry's bounded cache (they are immutable, so a
cache keyed by their keys is always right), and its records read by position."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence

from caseshelf.domain.chunks import Root, join_chunks, root_of_legacy
from caseshelf.domain.errors import BadRequest, Corrupt, NotFound
from caseshelf.domain.manifest import Location, Manifest
from caseshelf.domain.versions import VersionRecord
from caseshelf.ports import BlobStore, Index
from caseshelf.services.fence import WriteFence
from caseshelf.services.memo import ByteBoundedCache
from caseshelf.services.storage import (
    parse_root,
    read_cases,
    read_chunk,
    read_chunks,
    read_superseded,
)
from caseshelf.services.versioned import VersionedStore

# Records read at once by a pass over every record of a version (`iter_records`).
RECORD_BATCH = 1_000


class RegistryCaches:
    """The registry's state (set by `RegistryService.__init__`) and its reads of stored
    versions, which every later stage uses."""

    store: BlobStore
    index: Index
    fence: WriteFence
    versions: VersionedStore
    max_case_bytes: int
    presign_expiry: int
    presign_downloads: bool
    read_gap: int
    read_workers: int
    cache: ByteBoundedCache

    def _load_root(self, key: str) -> Root | Manifest:
        """A committed version's stored manifest document: a format 3 root, or a whole format 2
        manifest. Missing or unreadable is a damaged store."""
        try:
            return parse_root(self.store.get(key))
        except NotFound:
            raise Corrupt(
                f"the manifest {key} of a committed version is missing (run `caseshelf verify`)",
                key=key,
            ) from None
        except BadRequest as exc:
            raise Corrupt(f"the manifest {key}: {exc.detail}", key=key) from None

    def _roots(self, key: str) -> Root | Manifest:
        return self.cache.get(("root", key), lambda: self._load_root(key))

    def _manifest(self, tenant: str, key: str) -> Manifest:
        return self.cache.get(("manifest", key), lambda: self._load_manifest(tenant, key))

    def _chunks(self, tenant: str, hex_digest: str) -> Manifest:
        return self.cache.get(
            ("chunk", tenant, hex_digest), lambda: self._read_chunk(tenant, hex_digest)
        )

    def _load_manifest(self, tenant: str, key: str) -> Manifest:
        """The whole manifest: a format 2 one as stored, a format 3 root joined with all of
        its chunks (and its superseded copies)."""
        stored = self._roots(key)
        if isinstance(stored, Manifest):
            return stored
        chunks = list(self._stream_chunks(tenant, stored.chunk_keys))
        try:
            whole = join_chunks(stored, chunks)
        except BadRequest as exc:
            raise Corrupt(f"the manifest {key}: {exc.detail}", key=key) from None
        copies = read_superseded(self.store, tenant, stored)
        return whole.with_superseded(list(copies.items())) if copies else whole

    def _read_chunk(self, tenant: str, hex_digest: str) -> Manifest:
        return read_chunk(self.store, tenant, hex_digest)

    def _stream_chunks(self, tenant: str, keys: Iterable[str]) -> Iterator[Manifest]:
        """Chunks by key, in order, with this store's reads in flight (`read_workers`)."""
        return read_chunks(self.store, tenant, keys, workers=self.read_workers)

    def manifest(self, rec: VersionRecord) -> Manifest:
        """The whole manifest of a version (every chunk read). Manifests are immutable, so a
        small cache keyed by their key is always right. Readers that need only part of a
        version use `root`, `chunk` and `iter_chunks` instead."""
        return self._manifest(rec.tenant, rec.manifest_key)

    def root(self, rec: VersionRecord) -> Root:
        """The version's root: its content, case count, and each chunk's key, case count,
        first and last id and tags. A format 2 manifest is seen as a root of one chunk."""
        stored = self._roots(rec.manifest_key)
        if isinstance(stored, Manifest):
            return root_of_legacy(stored)
        return stored

    def superseded(self, rec: VersionRecord) -> dict[str, Location]:
        """Where the copies of its base's records a version keeps are, by digest hex ({} when
        it keeps none)."""
        stored = self._roots(rec.manifest_key)
        if isinstance(stored, Manifest):
            return stored.superseded_locations()
        return read_superseded(self.store, rec.tenant, stored)

    def chunk(self, rec: VersionRecord, number: int) -> Manifest:
        """Chunk `number` of a version as a manifest of its cases alone (positions local to the
        chunk), checked against its key; a format 2 manifest's one chunk is itself."""
        stored = self._roots(rec.manifest_key)
        if isinstance(stored, Manifest):
            return stored
        return self._chunks(rec.tenant, stored.chunk_keys[number])

    def iter_chunks(self, rec: VersionRecord) -> Iterator[tuple[int, Manifest]]:
        """Every chunk of a version in order, as `(position of its first case, chunk)`, read
        one at a time and not kept: a pass over all cases holds one chunk's columns at once."""
        stored = self._roots(rec.manifest_key)
        if isinstance(stored, Manifest):
            yield 0, stored
            return
        chunks = self._stream_chunks(rec.tenant, stored.chunk_keys)
        yield from zip(stored.chunk_starts(), chunks, strict=False)

    def iter_records(self, rec: VersionRecord) -> Iterator[tuple[int, bytes]]:
        """Every stored record of a version in order, as `(position, canonical bytes)`, each
        checked against its digest: the chunks are read one at a time and not kept, so a pass
        over a whole version holds one chunk's records at once and leaves the cache as it was
        (a pass that kept them would push every other version out for chunks read once)."""
        for first, chunk in self.iter_chunks(rec):
            for start in range(0, len(chunk), RECORD_BATCH):
                local = range(start, min(len(chunk), start + RECORD_BATCH))
                got = read_cases(self.store, rec.tenant, chunk, local)
                for j in local:
                    yield first + j, got[j]

    def read_chunks(self, rec: VersionRecord, numbers: Sequence[int]) -> Iterator[Manifest]:
        """The chunks `numbers` of a version, in that order, read as they are iterated (not
        kept: a diff of two large versions reads many chunks once each)."""
        stored = self._roots(rec.manifest_key)
        if isinstance(stored, Manifest):
            yield from (stored for _ in numbers)
            return
        yield from self._stream_chunks(rec.tenant, (stored.chunk_keys[n] for n in numbers))

    def _chunk_runs(
        self, rec: VersionRecord, indices: Sequence[int]
    ) -> Iterator[tuple[Manifest, list[int], list[int]]]:
        """`indices` cut into runs that fall in one chunk each, in the order given: `(chunk,
        positions, the same positions local to the chunk)`. A whole manifest already loaded is
        one chunk."""
        stored = self._roots(rec.manifest_key)
        if isinstance(stored, Manifest):
            yield stored, list(indices), list(indices)
            return
        starts = stored.chunk_starts()
        run: list[int] = []
        current = -1
        for i in indices:
            if not 0 <= i < stored.count:
                raise IndexError(f"case position {i} out of range")
            n = bisect_right(starts, i) - 1
            if n != current and run:
                yield self.chunk(rec, current), run, [j - starts[current] for j in run]
                run = []
            current = n
            run.append(i)
        if run:
            yield self.chunk(rec, current), run, [j - starts[current] for j in run]

    def read_records(
        self, rec: VersionRecord, indices: Sequence[int]
    ) -> Iterator[tuple[int, bytes]]:
        """The stored canonical records at `indices` of a version, in the order asked, each
        checked against its digest; only the chunks covering them are read."""
        for chunk, positions, local in self._chunk_runs(rec, indices):
            got = read_cases(self.store, rec.tenant, chunk, local)
            for i, j in zip(positions, local, strict=True):
                yield i, got[j]
