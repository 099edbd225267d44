"""The dataset registry: register, validate, read, tag, tombstone, download.

Registration order is the commit protocol of DESIGN §4: packs, blobs and the manifest are written
first; the conditional put of the version row is the commit. A crash before it leaves only
unreferenced objects (collected by `gc`), never a half-visible version.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import random
import time
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate, islice, repeat
from operator import add, methodcaller, sub
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import ValidationError

from caseshelf.domain import layout
from caseshelf.domain.canonical import (
    ContentDigester,
    canonical_json,
    content_digest,
    digest_of,
    hex_of,
    inline_body,
)
from caseshelf.domain.chunks import Root, join_chunks, root_of_legacy
from caseshelf.domain.envelope import canonical_into, validation_problem
from caseshelf.domain.errors import BadRequest, Conflict, Corrupt, NotFound, TooLarge
from caseshelf.domain.identity import Identity
from caseshelf.domain.manifest import (
    PENDING_PACK,
    Location,
    Manifest,
    ManifestBuilder,
    column_array,
    superseded_indices,
)
from caseshelf.domain.models import (
    Case,
    DatasetVersionInput,
    InlineBase64,
    InlineText,
    StoredFile,
)
from caseshelf.domain.paging import check_limit, decode_position, encode_position
from caseshelf.domain.versions import (
    VersionRecord,
    check_dataset_id,
    check_label,
    next_version,
    ordered,
    resolve_ref,
)
from caseshelf.ports import BlobStore, Index, Page
from caseshelf.services.bulk import gc_paused
from caseshelf.services.fence import Lease, WriteFence
from caseshelf.services.storage import (
    MAX_GAP_BYTES,
    BlobWriter,
    PackWriter,
    parse_root,
    read_blobs,
    read_cases,
    read_chunk,
    read_chunks,
    read_superseded,
    write_manifest,
)
from caseshelf.services.versioned import Clock, VersionedStore, utc_now

if TYPE_CHECKING:  # the import path's type; the registry needs none of the mapping at run time
    from caseshelf.domain.mapping import RecordBatch

KIND = "dataset"
MAX_CASE_BYTES = 4 * 1024 * 1024
# A bump loses a label only to a racing registration that committed it, so every lost attempt
# is another writer's success: the bound is generous (far above any real concurrency) and exists
# only so that a broken index cannot loop a request forever.
BUMP_ATTEMPTS = 1000
BUMP_BACKOFF_MAX = 0.05  # seconds: the longest pause between two attempts


def _bump_pause(attempt: int) -> None:
    """A short random pause before a bump's next attempt (full jitter, doubling up to
    BUMP_BACKOFF_MAX), so racing bumps spread out instead of colliding again at once."""
    time.sleep(random.uniform(0, min(BUMP_BACKOFF_MAX, 0.001 * 2 ** min(attempt, 6))))


_DIGEST_PREFIX = "sha256:"
_hexdigest = methodcaller("hexdigest")
_plus_one = (1).__add__


@dataclass(frozen=True)
class WriteStats:
    case_bytes_written: int = 0  # the version's new records, and copies of superseded ones
    pack_objects_written: int = 0
    blob_bytes_written: int = 0
    cases_reused: int = 0
    superseded_copied: int = 0  # records of the base version copied (`_keep_superseded`)


@dataclass(frozen=True)
class _Copied:
    records: int = 0
    bytes_written: int = 0
    objects_written: int = 0


# Copies of superseded records (`RegistryService._keep_superseded`) are kept for changes up to
# this size: a pack's worth.
SUPERSEDED_MAX_RECORDS = 20_000
SUPERSEDED_MAX_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class RegisterResult:
    record: VersionRecord
    created: bool
    stats: WriteStats = field(default_factory=WriteStats)


@dataclass(frozen=True)
class ValidateResult:
    content_digest: str
    case_count: int
    would_conflict: bool
    version: str


@dataclass(frozen=True)
class DatasetSummary:
    id: str
    tenant: str
    latest: VersionRecord | None
    version_count: int
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class Download:
    """Either a presigned URL (AWS) or the document's bytes (embedded store)."""

    filename: str
    url: str | None = None
    body: bytes | None = None


@dataclass
class _Prepared:
    name: str
    cases: list[Case]
    # Canonical bytes of every case, each followed by a newline (as packs hold them); case i is
    # records[ends[i-1]:ends[i] - 1]. One buffer, not a bytes object per case: each
    # serialisation leaves a heap hole behind, and 100,000 of those cost ten times the bytes
    # themselves.
    records: bytearray
    ends: list[int]  # where each case ends in `records`, its newline included
    digests: list[str]
    case_tags: list[list[str]]  # sorted, unique tags of each case
    bodies: dict[str, bytes]  # file bodies sent inline, by digest hex
    refs: dict[str, tuple[str, str, int]]  # digest hex -> (case id, path, size) stored by ref
    shared_files: list[dict[str, str]]
    content_digest: str


def unchanged_latest(records: list[VersionRecord], content_digest: str) -> VersionRecord | None:
    """The latest live version when it already holds this content: a bump then registers
    nothing (re-running the same import or bumped registration is idempotent)."""
    live = [r for r in records if r.live]
    if live:
        latest = ordered(live)[-1]
        if latest.content_digest == content_digest:
            return latest
    return None


def parse_dataset(raw: Any) -> DatasetVersionInput:
    """Validate a dataset document; errors name the case id (or index) and the field."""
    if not isinstance(raw, dict):
        raise BadRequest("a dataset version is a JSON object")
    try:
        with gc_paused():
            return DatasetVersionInput.model_validate(raw)
    except ValidationError as exc:
        raise dataset_error(exc, raw) from None


def dataset_error(exc: ValidationError, raw: Any) -> BadRequest:
    loc, msg = validation_problem(exc)
    first = exc.errors(include_url=False)[0]["loc"]
    case_id = None
    index = None
    if len(first) >= 2 and first[0] == "cases" and isinstance(first[1], int):
        index = first[1]
        try:
            cid = raw["cases"][index].get("id")
            case_id = cid if isinstance(cid, str) else None
        except (KeyError, IndexError, TypeError, AttributeError):
            case_id = None
        where = f"case {case_id!r}" if case_id else f"case at index {index}"
        field_path = ".".join(str(p) for p in first[2:]) or "case"
        return BadRequest(
            f"{where}: {field_path}: {msg}", case_id=case_id, index=index, field=field_path
        )
    return BadRequest(f"{loc}: {msg}", field=loc)


def _decode_inline(entry: InlineText | InlineBase64, where: str) -> bytes:
    if isinstance(entry, InlineText):
        return entry.text.encode("utf-8")
    try:
        return base64.b64decode(entry.base64, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{where}: base64 body is not valid base64", field=where) from None


def _repeated_id(ids: list[str]) -> BadRequest:
    """The error for the first id of `ids` given twice, naming both positions: the case's row
    for an import, each row making one case."""
    first: dict[str, int] = {}
    for i, case_id in enumerate(ids):
        j = first.setdefault(case_id, i)
        if j != i:
            return BadRequest(
                f"rows {j} and {i} both map to case id {case_id!r}", case_ids=[case_id], rows=[j, i]
            )
    raise ValueError("no id is repeated")


class RegistryService:
    def __init__(
        self,
        store: BlobStore,
        index: Index,
        *,
        clock: Clock = utc_now,
        max_case_bytes: int = MAX_CASE_BYTES,
        presign_expiry: int = 900,
        presign_downloads: bool = True,
        read_gap: int = MAX_GAP_BYTES,
        read_workers: int = 1,
        fence: WriteFence | None = None,
    ) -> None:
        """`read_gap` and `read_workers`: how this store is read when many records are
        wanted at once (`caseshelf.services.storage.read_records`). `fence`: the write fence
        every registration holds against gc (`caseshelf.services.fence`)."""
        self.store = store
        self.index = index
        self.fence = fence or WriteFence(index)
        self.versions = VersionedStore(index, KIND, noun="dataset", clock=clock)
        self.max_case_bytes = max_case_bytes
        self.presign_expiry = presign_expiry
        # A download is a presigned URL where the store is remote (AWS) and the document itself
        # where it is local (the embedded store, DESIGN §7).
        self.presign_downloads = presign_downloads
        self.read_gap = read_gap
        self.read_workers = read_workers
        # Manifests, roots and chunks are immutable, so caches keyed by their keys are always
        # right: a few whole manifests, more roots, and the chunks pages were read from.
        self._manifest = lru_cache(maxsize=32)(self._load_manifest)
        self._roots = lru_cache(maxsize=64)(self._load_root)
        self._chunks = lru_cache(maxsize=64)(self._read_chunk)

    # -- registration ----------------------------------------------------------------------

    def _prepare(self, body: DatasetVersionInput) -> _Prepared:
        ids = [c.id for c in body.cases]
        if len(set(ids)) != len(ids):
            dups = sorted(cid for cid, n in Counter(ids).items() if n > 1)
            raise BadRequest(f"duplicate case ids: {', '.join(dups[:50])}", case_ids=dups)
        bodies: dict[str, bytes] = {}
        refs: dict[str, tuple[str, str, int]] = {}
        cases: list[Case] = []
        for case in body.cases:
            if case.files:
                files: dict[str, Any] = {}
                for path, entry in case.files.items():
                    if isinstance(entry, StoredFile):
                        refs.setdefault(hex_of(entry.digest), (case.id, path, entry.size))
                        files[path] = entry
                        continue
                    data = _decode_inline(entry, f"case {case.id!r}: files.{path}")
                    digest = digest_of(data)
                    bodies[hex_of(digest)] = data
                    files[path] = StoredFile(digest=digest, size=len(data))
                case = case.model_copy(update={"files": files})
            cases.append(case)
        shared: list[dict[str, str]] = []
        for sf in body.shared_files:
            if sf.digest is not None:
                refs.setdefault(hex_of(sf.digest), ("", f"shared_files.{sf.dest}", -1))
                shared.append({"dest": sf.dest, "digest": sf.digest})
            else:
                entry = (
                    InlineText(text=sf.text)
                    if sf.text is not None
                    else InlineBase64(base64=sf.base64 or "")
                )
                data = _decode_inline(entry, f"shared_files.{sf.dest}")
                digest = digest_of(data)
                bodies[hex_of(digest)] = data
                shared.append({"dest": sf.dest, "digest": digest})
        dests = Counter(s["dest"] for s in shared)
        clash = sorted(d for d, n in dests.items() if n > 1)
        if clash:
            raise BadRequest(
                f"shared files with the same dest: {', '.join(clash)}", field="shared_files"
            )
        records = bytearray()
        ends, digests, case_tags = canonical_into(cases, records)
        limit = self.max_case_bytes
        if ends and max(map(sub, ends, [0, *ends[:-1]])) > limit + 1:  # + 1: the newline
            size, at = next(
                (end - start - 1, i)
                for i, (start, end) in enumerate(zip([0, *ends[:-1]], ends, strict=True))
                if end - start - 1 > limit
            )
            case_id = cases[at].id
            raise TooLarge(
                f"case {case_id!r} is {size} bytes; the limit is {limit}", case_id=case_id
            )
        cdigest = content_digest(
            description=body.description,
            tags=sorted(set(body.tags)),
            shared_files=shared,
            case_digests=zip((c.id for c in cases), digests, strict=True),
        )
        return _Prepared(
            body.id, cases, records, ends, digests, case_tags, bodies, refs, shared, cdigest
        )

    def _label(self, body: DatasetVersionInput, records: list[VersionRecord]) -> str:
        if body.version is not None:
            return body.version
        assert body.bump is not None
        return next_version(records, body.bump)

    def validate(self, identity: Identity, body: DatasetVersionInput) -> ValidateResult:
        tenant = identity.check_can_write()
        with gc_paused():
            prep = self._prepare(body)
        records = self.index.list_versions(tenant, KIND, body.id)
        label = self._label(body, records)
        base = self._base_manifest(tenant, body, records)
        self._check_refs(tenant, prep, base)
        current = next((r for r in records if r.version == label), None)
        return ValidateResult(
            content_digest=prep.content_digest,
            case_count=len(prep.cases),
            would_conflict=current is not None and current.content_digest != prep.content_digest,
            version=label,
        )

    def register(self, identity: Identity, body: DatasetVersionInput) -> RegisterResult:
        with gc_paused():
            return self._register(identity, body)

    def _register(self, identity: Identity, body: DatasetVersionInput) -> RegisterResult:
        tenant = identity.check_can_write()
        prep = self._prepare(body)
        with self.fence.writing(tenant) as lease:
            return self._register_prepared(identity, tenant, body, prep, lease)

    def _register_prepared(
        self,
        identity: Identity,
        tenant: str,
        body: DatasetVersionInput,
        prep: _Prepared,
        lease: Lease,
    ) -> RegisterResult:
        for attempt in range(BUMP_ATTEMPTS):
            if attempt:
                _bump_pause(attempt)
            records = self.index.list_versions(tenant, KIND, body.id)
            if body.version is None:
                same = unchanged_latest(records, prep.content_digest)
                if same is not None:
                    return RegisterResult(same, created=False)
            label = self._label(body, records)
            current = next((r for r in records if r.version == label), None)
            if current is not None:
                settled = self.versions.settle_existing(current, prep.content_digest)
                return RegisterResult(settled, created=False)
            try:
                return self._write(identity, tenant, body, prep, label, records, lease)
            except Conflict:
                if body.bump is None:
                    raise
                # A racing bump took this label with other content: take the next one.
        raise Conflict(
            f"could not find a free version label for {body.id} after {BUMP_ATTEMPTS} attempts"
        )

    def _base_manifest(
        self, tenant: str, body: DatasetVersionInput, records: list[VersionRecord]
    ) -> Manifest | None:
        if body.base is not None:
            rec = resolve_ref(records, body.base, include_deleted=True, name=body.id)
            return self.manifest(rec)
        live = [r for r in records if r.live]
        if not live:
            return None
        return self.manifest(ordered(live)[-1])

    def _check_refs(
        self, tenant: str, prep: _Prepared, base: Manifest | None
    ) -> dict[str, Location]:
        """Check that every body sent by reference is stored (in the base version, or alone
        by an earlier registration of this tenant) with the size given. Writes nothing: a
        validation, and a registration refused here, leave the store as it was. Answers where
        the bodies stored alone are."""
        known = base.blob_locations() if base else {}
        found: dict[str, Location] = {}
        for hex_digest, (case_id, path, size) in prep.refs.items():
            if hex_digest in prep.bodies or hex_digest in known:
                continue
            head = self.store.head(layout.blob_key(tenant, hex_digest))
            where = f"case {case_id!r}: files.{path}" if case_id else path
            if head is None:
                raise BadRequest(
                    f"{where}: no stored body for sha256:{hex_digest}; send it inline "
                    "({text} or {base64}) or reference a body stored in the base version",
                    case_id=case_id or None,
                    field=path,
                    digests=[f"sha256:{hex_digest}"],
                )
            if size >= 0 and head.size != size:
                raise BadRequest(
                    f"{where}: size {size} does not match the stored body ({head.size} bytes)",
                    case_id=case_id or None,
                    field=path,
                )
            found[hex_digest] = Location(hex_digest, 0, head.size)
        return found

    def _blob_writer(
        self, tenant: str, prep: _Prepared, base: Manifest | None, alone: dict[str, Location]
    ) -> BlobWriter:
        """The writer of this registration's file bodies (the inline ones are written here)."""
        known = {**(base.blob_locations() if base else {}), **alone}
        writer = BlobWriter(self.store, tenant, known)
        for hex_digest, data in prep.bodies.items():
            writer.add(hex_digest, data)
        return writer

    def _write(
        self,
        identity: Identity,
        tenant: str,
        body: DatasetVersionInput,
        prep: _Prepared,
        label: str,
        records: list[VersionRecord],
        lease: Lease,
    ) -> RegisterResult:
        base = self._base_manifest(tenant, body, records)
        alone = self._check_refs(tenant, prep, base)  # every refusal before the first write
        blob_writer = self._blob_writer(tenant, prep, base, alone)
        known = base.locations_by_digest() if base else {}
        packs = PackWriter(self.store, lambda h: layout.pack_key(tenant, h))
        builder = ManifestBuilder(
            description=body.description,
            tags=sorted(set(body.tags)),
            shared_files=prep.shared_files,
        )
        # Columns of the manifest, filled in bulk: a call per case costs more than the rest.
        stops = prep.ends
        count = len(stops)
        starts = [0, *stops[:-1]] if count else []
        hexes = [d[7:] for d in prep.digests]
        lengths = [stop - start - 1 for start, stop in zip(starts, stops, strict=True)]
        containers = [""] * count
        offsets = [0] * count
        runs: list[tuple[int, int]] = []  # [first, last + 1) of each run of cases to write
        if known:
            run_start = -1
            for i, loc in enumerate(map(known.get, hexes)):
                if loc is None:
                    if run_start < 0:
                        run_start = i
                    continue
                if run_start >= 0:
                    runs.append((run_start, i))
                    run_start = -1
                containers[i], offsets[i], lengths[i] = loc.container, loc.offset, loc.length
            if run_start >= 0:
                runs.append((run_start, count))
        elif count:
            runs.append((0, count))
        reused = count - sum(last - first for first, last in runs)
        pending: list[str] = []  # the placeholder name of each pack number
        view = memoryview(prep.records)
        for first, last in runs:
            at = starts[first]
            run_stops = stops[first:last] if at == 0 else [e - at for e in stops[first:last]]
            segments = packs.append_run(view[at : stops[last - 1]], run_stops)
            for n, (seg_first, number, shift) in enumerate(segments):
                seg_last = segments[n + 1][0] if n + 1 < len(segments) else last - first
                while len(pending) <= number:
                    pending.append(PENDING_PACK + str(len(pending)))
                a, b = first + seg_first, first + seg_last
                containers[a:b] = repeat(pending[number], b - a)
                offsets[a:b] = map((shift - at).__add__, starts[a:b])
        view.release()
        builder.add_cases(
            [c.id for c in prep.cases], hexes, prep.case_tags, containers, offsets, lengths
        )
        packs.flush()
        builder.resolve_pending(packs.digest_of_pack)
        blob_locs = blob_writer.finish()
        if prep.bodies or prep.refs:  # every file entry is in one or the other
            for case in prep.cases:
                for entry in case.files.values():
                    assert isinstance(entry, StoredFile)
                    builder.add_blob(entry.digest[7:], blob_locs[entry.digest[7:]])
        for sf in prep.shared_files:
            builder.add_blob(sf["digest"][7:], blob_locs[sf["digest"][7:]])
        manifest = builder.build(prep.content_digest)
        manifest, copied = self._keep_superseded(tenant, base, manifest)
        mkey = write_manifest(self.store, tenant, manifest, workers=self.read_workers).key

        rec = self.versions.new_record(
            identity,
            name=body.id,
            version=label,
            content_digest=prep.content_digest,
            manifest_key=mkey,
            case_count=len(prep.cases),
            bytes=manifest.case_bytes(),
            description=body.description,
            tags=tuple(sorted(set(body.tags))),
            produced_by=body.produced_by,
        )
        self.fence.check(lease)
        committed, created = self.versions.commit(rec)
        stats = WriteStats(
            case_bytes_written=packs.bytes_written + copied.bytes_written,
            pack_objects_written=packs.objects_written + copied.objects_written,
            blob_bytes_written=blob_writer.bytes_written,
            cases_reused=reused,
            superseded_copied=copied.records,
        )
        return RegisterResult(committed, created, stats)

    def _keep_superseded(
        self, tenant: str, base: Manifest | None, manifest: Manifest
    ) -> tuple[Manifest, _Copied]:
        """`manifest` with copies of the base version's records it no longer holds (its changed
        and removed cases), written back to back: a diff of the two then reads them in one span
        instead of one request each, scattered through the base's packs. Registration pays
        those reads once, with this store's read plan (`read_gap`, `read_workers`). Skipped beyond
        `SUPERSEDED_MAX_RECORDS` or `SUPERSEDED_MAX_BYTES` (a large change costs a diff more
        reads in any case)."""
        if base is None:
            return manifest, _Copied()
        dropped = superseded_indices(base, manifest)
        lengths = column_array(base.lengths)
        if (
            not dropped
            or len(dropped) > SUPERSEDED_MAX_RECORDS
            or sum(map(lengths.__getitem__, dropped)) > SUPERSEDED_MAX_BYTES
        ):
            return manifest, _Copied()
        records = read_cases(
            self.store,
            tenant,
            base,
            dropped,
            max_gap=self.read_gap,
            workers=self.read_workers,
        )
        packs = PackWriter(self.store, lambda h: layout.pack_key(tenant, h))
        digests = base.digest_list()
        placed = [(digests[i], packs.append(records[i]), len(records[i])) for i in dropped]
        packs.flush()
        copies = [(d, packs.location(where, size)) for d, where, size in placed]
        copied = _Copied(len(copies), packs.bytes_written, packs.objects_written)
        return manifest.with_superseded(copies), copied

    # -- derived versions ------------------------------------------------------------------

    def register_derived(
        self,
        identity: Identity,
        *,
        name: str,
        version: str | None,
        bump: str | None,
        parent: VersionRecord,
        indices: Sequence[int],
        produced_by: dict[str, Any],
    ) -> RegisterResult:
        """Register the cases of `parent` at `indices` as a version of `name`. No case bytes are
        copied: the new manifest points at the parent's packs and blobs. Keys never cross
        tenants, so a parent read from `_shared` has its records copied into the writer's."""
        tenant = identity.check_can_write()
        check_dataset_id(name)
        if (version is None) == (bump is None):
            raise BadRequest("give either a version or a bump (major|minor|patch)", field="version")
        if version is not None:
            check_label(version)
        with self.fence.writing(tenant) as lease:
            return self._register_derived(
                identity, tenant, lease, name, version, bump, parent, indices, produced_by
            )

    def _register_derived(
        self,
        identity: Identity,
        tenant: str,
        lease: Lease,
        name: str,
        version: str | None,
        bump: str | None,
        parent: VersionRecord,
        indices: Sequence[int],
        produced_by: dict[str, Any],
    ) -> RegisterResult:
        src = self.manifest(parent)
        builder = ManifestBuilder(
            description=src.description, tags=src.tags, shared_files=src.shared_files
        )
        stats = WriteStats()
        if parent.tenant == tenant:
            for i in indices:
                loc = src.location(i)
                builder.add_case(
                    src.ids[i],
                    src.digests[i],
                    src.tags_of(i),
                    loc.container,
                    loc.offset,
                    loc.length,
                )
            for digest_hex, loc in src.blob_locations().items():
                builder.add_blob(digest_hex, loc)
        else:
            stats = self._copy_records(tenant, parent, src, indices, builder)
        cdigest = content_digest(
            description=src.description,
            tags=src.tags,
            shared_files=src.shared_files,
            case_digests=((src.ids[i], src.case_digest(i)) for i in indices),
        )
        manifest = builder.build(cdigest)
        mkey = write_manifest(self.store, tenant, manifest, workers=self.read_workers).key
        return self._commit_manifest(
            identity,
            name,
            version,
            bump,
            manifest,
            mkey,
            description=src.description,
            tags=tuple(src.tags),
            produced_by=produced_by,
            stats=stats,
            lease=lease,
        )

    def _copy_records(
        self,
        tenant: str,
        parent: VersionRecord,
        src: Manifest,
        indices: Sequence[int],
        builder: ManifestBuilder,
    ) -> WriteStats:
        got = read_cases(self.store, parent.tenant, src, indices)
        packs = PackWriter(self.store, lambda h: layout.pack_key(tenant, h))
        for i in indices:
            number, offset = packs.append(got[i])
            builder.add_case(
                src.ids[i],
                src.digests[i],
                src.tags_of(i),
                PENDING_PACK + str(number),
                offset,
                len(got[i]),
            )
        packs.flush()
        builder.resolve_pending(packs.digest_of_pack)
        blobs = BlobWriter(self.store, tenant, {})
        for digest_hex, body in read_blobs(self.store, parent.tenant, src.blob_locations()).items():
            blobs.add(digest_hex, body)
        for digest_hex, loc in blobs.finish().items():
            builder.add_blob(digest_hex, loc)
        return WriteStats(
            case_bytes_written=packs.bytes_written,
            pack_objects_written=packs.objects_written,
            blob_bytes_written=blobs.bytes_written,
        )

    # -- streamed registration (imports) ---------------------------------------------------

    def register_records(
        self,
        identity: Identity,
        *,
        name: str,
        version: str | None,
        bump: str | None,
        description: str,
        tags: Sequence[str],
        produced_by: dict[str, Any] | None,
        records: Iterable[RecordBatch],
    ) -> RegisterResult:
        """Register cases streamed as batches of canonical records
        (`caseshelf.domain.mapping.record_batches`), consumed once and never all held at once:
        the import path, whose mapper builds each case already validated in canonical form. The
        registry hashes every record itself. The same commit protocol, dedup against the latest
        live version, size limit, and 409 / idempotency rules as `register`. An error while
        consuming `records` leaves nothing registered."""
        tenant = identity.check_can_write()
        check_dataset_id(name)
        if (version is None) == (bump is None):
            raise BadRequest("give either a version or a bump (major|minor|patch)", field="version")
        if version is not None:
            check_label(version)
        with self.fence.writing(tenant) as lease:
            return self._register_records(
                identity,
                tenant,
                lease,
                name=name,
                version=version,
                bump=bump,
                description=description,
                tags=tags,
                produced_by=produced_by,
                records=records,
            )

    def _register_records(
        self,
        identity: Identity,
        tenant: str,
        lease: Lease,
        *,
        name: str,
        version: str | None,
        bump: str | None,
        description: str,
        tags: Sequence[str],
        produced_by: dict[str, Any] | None,
        records: Iterable[RecordBatch],
    ) -> RegisterResult:
        tag_list = sorted(set(tags))
        live = [r for r in self.index.list_versions(tenant, KIND, name) if r.live]
        base = self.manifest(ordered(live)[-1]) if live else None
        known = base.locations_by_digest() if base is not None else {}
        packs = PackWriter(self.store, lambda h: layout.pack_key(tenant, h))
        builder = ManifestBuilder(description=description, tags=tag_list, shared_files=[])
        seen: set[str] = set()
        digester = ContentDigester(description=description, tags=tag_list, shared_files=[])
        reused = 0
        limit = self.max_case_bytes
        add_case, append, find, sha256 = builder.add_case, packs.append, known.get, hashlib.sha256
        pending: list[str] = []  # the placeholder name of each pack number

        def pack_name(number: int) -> str:
            if number == len(pending):
                pending.append(PENDING_PACK + str(number))
            return pending[number]

        # Everything that builds per-case objects runs with the collector paused, the content
        # digest and the manifest too: they make 100,000s of small objects that all stay alive.
        with gc_paused():
            for ids, lengths, data, case_tags in records:
                if not ids:
                    continue
                if max(lengths) > limit:
                    i = next(i for i, n in enumerate(lengths) if n > limit)
                    raise TooLarge(
                        f"case {ids[i]!r} is {lengths[i]} bytes; the limit is {limit}",
                        case_id=ids[i],
                    )
                before = len(seen)
                seen.update(ids)
                if len(seen) != before + len(ids):
                    raise _repeated_id([*builder.case_ids, *ids])
                view = memoryview(data)
                # Each record's offset in the batch (records are "\n"-terminated), then every
                # record hashed: iterators chained in C, no Python-level loop per case.
                starts = list(accumulate(map(_plus_one, lengths), initial=0))
                if len(lengths) != len(ids) or starts[-1] != len(data):
                    raise ValueError("a record batch whose lengths do not match its records")
                spans = map(slice, starts, map(add, starts, lengths))
                digests = list(map(_hexdigest, map(sha256, map(view.__getitem__, spans))))
                digester.add(list(zip(ids, map(_DIGEST_PREFIX.__add__, digests), strict=True)))
                tags_of = case_tags if case_tags is not None else [()] * len(ids)
                if not known or not any(map(known.__contains__, digests)):
                    # The whole batch into one pack: its records already end in "\n".
                    number, offset = append(view[:-1])
                    builder.add_cases(
                        ids,
                        digests,
                        tags_of,
                        [pack_name(number)] * len(ids),
                        map(offset.__add__, islice(starts, len(ids))),
                        lengths,
                    )
                    continue
                for case_id, hex_digest, size, t, start in zip(
                    ids, digests, lengths, tags_of, starts[:-1], strict=True
                ):
                    loc = find(hex_digest)
                    if loc is not None:
                        add_case(case_id, hex_digest, t, loc.container, loc.offset, loc.length)
                        reused += 1
                    else:
                        number, offset = append(view[start : start + size])
                        add_case(case_id, hex_digest, t, pack_name(number), offset, size)
            cdigest = digester.digest()
            packs.flush()
            builder.resolve_pending(packs.digest_of_pack)
            manifest = builder.build(cdigest)
            manifest, copied = self._keep_superseded(tenant, base, manifest)
            mkey = write_manifest(self.store, tenant, manifest, workers=self.read_workers).key
        stats = WriteStats(
            case_bytes_written=packs.bytes_written + copied.bytes_written,
            pack_objects_written=packs.objects_written + copied.objects_written,
            cases_reused=reused,
            superseded_copied=copied.records,
        )
        return self._commit_manifest(
            identity,
            name,
            version,
            bump,
            manifest,
            mkey,
            description=description,
            tags=tuple(tag_list),
            produced_by=produced_by,
            stats=stats,
            lease=lease,
        )

    def _commit_manifest(
        self,
        identity: Identity,
        name: str,
        version: str | None,
        bump: str | None,
        manifest: Manifest,
        mkey: str,
        *,
        description: str,
        tags: tuple[str, ...],
        produced_by: dict[str, Any] | None,
        stats: WriteStats,
        lease: Lease,
    ) -> RegisterResult:
        """Commit a version whose manifest is stored: the label given, or the next one `bump`
        gives (retried when a racing bump takes it), with the registry's idempotency rules."""
        tenant = identity.tenant
        cdigest = manifest.content_digest
        for attempt in range(BUMP_ATTEMPTS):
            if attempt:
                _bump_pause(attempt)
            records = self.index.list_versions(tenant, KIND, name)
            if version is None:
                same = unchanged_latest(records, cdigest)
                if same is not None:
                    return RegisterResult(same, created=False)
            label = version if version is not None else next_version(records, bump or "")
            current = next((r for r in records if r.version == label), None)
            if current is not None:
                return RegisterResult(self.versions.settle_existing(current, cdigest), False)
            rec = self.versions.new_record(
                identity,
                name=name,
                version=label,
                content_digest=cdigest,
                manifest_key=mkey,
                case_count=len(manifest),
                bytes=manifest.case_bytes(),
                description=description,
                tags=tags,
                produced_by=produced_by,
            )
            self.fence.check(lease)
            try:
                committed, created = self.versions.commit(rec)
            except Conflict:
                if bump is None:
                    raise
                continue  # a racing bump took this label with other content: take the next
            return RegisterResult(committed, created, stats)
        raise Conflict(
            f"could not find a free version label for {name} after {BUMP_ATTEMPTS} attempts"
        )

    # -- reading ---------------------------------------------------------------------------

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

    def get_version(
        self, identity: Identity, name: str, ref: str, *, include_deleted: bool = False
    ) -> VersionRecord:
        return self.versions.resolve(identity, name, ref, include_deleted=include_deleted)

    def list_versions(
        self,
        identity: Identity,
        name: str,
        *,
        include_deleted: bool = False,
        cursor: str | None = None,
        limit: int = 100,
    ) -> Page:
        return self.versions.versions(
            identity,
            name,
            include_deleted=include_deleted,
            cursor=cursor,
            limit=check_limit(limit),
        )

    def summary(self, identity: Identity, name: str) -> DatasetSummary:
        tenant, records = self.versions.find(identity, name)
        live = [r for r in records if r.live]
        latest = ordered(live)[-1] if live else None
        return DatasetSummary(
            id=name,
            tenant=tenant,
            latest=latest,
            version_count=len(live),
            created_at=min(r.created_at for r in records),
            updated_at=max(r.created_at for r in records),
        )

    def list_datasets(
        self,
        identity: Identity,
        *,
        shared: bool = False,
        cursor: str | None = None,
        limit: int = 50,
    ) -> Page:
        """Summaries of one tenant's datasets (the caller's, or `_shared`), in name order."""
        page = self.versions.list_entities(
            identity, shared=shared, cursor=cursor, limit=check_limit(limit)
        )
        out = []
        for entry in page.items:
            records = self.index.list_versions(entry.tenant, KIND, entry.name)
            live = [r for r in records if r.live]
            out.append(
                DatasetSummary(
                    id=entry.name,
                    tenant=entry.tenant,
                    latest=ordered(live)[-1] if live else None,
                    version_count=len(live),
                    created_at=entry.created_at,
                    updated_at=entry.updated_at,
                )
            )
        return Page(out, page.next_cursor)

    def case_records(
        self, rec: VersionRecord, indices: list[int]
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """Plain canonical cases at `indices` of a version, in the order asked."""
        for i, data in self.read_records(rec, indices):
            yield i, orjson.loads(data)

    def list_cases(
        self,
        identity: Identity,
        name: str,
        ref: str,
        *,
        cursor: str | None = None,
        limit: int = 100,
        include_deleted: bool = False,
    ) -> Page:
        rec = self.get_version(identity, name, ref, include_deleted=include_deleted)
        count = len(self.root(rec))
        start = decode_position(cursor)
        stop = min(start + check_limit(limit), count)
        items = [case for _, case in self.case_records(rec, list(range(start, stop)))]
        return Page(items, encode_position(stop) if stop < count else None)

    def case_page_json(
        self,
        identity: Identity,
        name: str,
        ref: str,
        *,
        cursor: str | None = None,
        limit: int = 100,
        include_deleted: bool = False,
    ) -> tuple[bytes, str | None]:
        """The page `list_cases` answers, as the JSON of `{items, next_cursor}` spliced from
        the stored canonical records without parsing them, and its `next_cursor`.

        A stored record is the canonical JSON of its case, so the page is the same JSON value
        as `list_cases`' items dumped; what this buys is the parse and the dump of every case
        (most of the server's time on a page, `bench/bench_client.py`). Only the root and the
        chunks covering the page are read."""
        rec = self.get_version(identity, name, ref, include_deleted=include_deleted)
        count = len(self.root(rec))
        start = decode_position(cursor)
        stop = min(start + check_limit(limit), count)
        records = [data for _, data in self.read_records(rec, range(start, stop))]
        nxt = encode_position(stop) if stop < count else None
        body = b"".join(
            (
                b'{"items":[',
                b",".join(records),
                b'],"next_cursor":',
                orjson.dumps(nxt),
                b"}",
            )
        )
        return body, nxt

    def download(
        self, identity: Identity, name: str, ref: str, *, include_deleted: bool = False
    ) -> Download:
        """The whole version as one dataset JSON document that `register` accepts as it is:
        file bodies inline, so registering it anywhere gives the same content digest."""
        rec = self.get_version(identity, name, ref, include_deleted=include_deleted)
        key = layout.download_key(rec.tenant, rec.content_digest)
        filename = f"{rec.name}-{rec.version}.json"
        if self.store.head(key) is None:
            self.store.put(key, self.render_version(rec), content_type="application/json")
        url = (
            self.store.presign_get(key, expires=self.presign_expiry)
            if (self.presign_downloads)
            else None
        )
        if url is not None:
            return Download(filename=filename, url=url)
        return Download(filename=filename, body=self.store.get(key))

    def render_version(self, rec: VersionRecord) -> bytes:
        manifest = self.manifest(rec)
        bodies = read_blobs(self.store, rec.tenant, manifest.blob_locations())

        def inline(digest: str) -> dict[str, str]:
            return inline_body(bodies[digest[7:]])

        cases = []
        for _, case in self.case_records(rec, list(range(len(manifest)))):
            if "files" in case:
                case["files"] = {p: inline(f["digest"]) for p, f in case["files"].items()}
            cases.append(case)
        shared = [{"dest": s["dest"], **inline(s["digest"])} for s in manifest.shared_files]
        doc: dict[str, Any] = {
            "id": rec.name,
            "version": rec.version,
            "description": manifest.description,
            "tags": manifest.tags,
            "cases": cases,
            "shared_files": shared,
        }
        if rec.produced_by is not None:
            doc["produced_by"] = rec.produced_by
        return canonical_json(doc, checked=True)

    def file_body(self, rec: VersionRecord, digest: str) -> bytes:
        manifest = self.manifest(rec)
        loc = manifest.blob_locations().get(hex_of(digest))
        if loc is None:
            raise NotFound(f"no file {digest} in {rec.name}@{rec.version}", digests=[digest])
        return read_blobs(self.store, rec.tenant, {hex_of(digest): loc})[hex_of(digest)]

    # -- mutable metadata ------------------------------------------------------------------

    def set_version_tags(
        self, identity: Identity, name: str, version: str, tags: list[str]
    ) -> VersionRecord:
        return self.versions.set_tags(identity, name, version, tags)

    def delete_version(self, identity: Identity, name: str, version: str) -> VersionRecord:
        return self.versions.delete(identity, name, version)

    def revive_version(self, identity: Identity, name: str, version: str) -> VersionRecord:
        return self.versions.revive(identity, name, version)
