"""The dataset registry's front (`RegistryService`): register, validate, read, tag, tombstone,
download. Each operation lives in a module of its own (`caseshelf.services.registry`); this
class holds the registry's state and the public registration entry points."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from caseshelf.domain.identity import Identity
from caseshelf.domain.models import DatasetVersionInput
from caseshelf.domain.tags import TagBoard, TagMove
from caseshelf.domain.versions import VersionRecord
from caseshelf.ports import BlobStore, Index
from caseshelf.services.fence import WriteFence
from caseshelf.services.memo import DEFAULT_MEMORY_BYTES, ByteBoundedCache, cache_bytes_for
from caseshelf.services.registry.commit import RegistryCommit
from caseshelf.services.registry.documents import DatasetDocument, document_of
from caseshelf.services.registry.results import KIND, RegisterResult, ValidateResult
from caseshelf.services.registry.staging import (
    IdLog,
    SeenIds,
    VersionHead,
    _all_refs,
    _check_head,
    _content_digest,
    _digester,
    _has_in,
    _label,
    _located,
    _refuse_repeats,
    head_of,
    inherited,
)
from caseshelf.services.storage import MAX_GAP_BYTES
from caseshelf.services.versioned import Clock, VersionedStore, utc_now

if TYPE_CHECKING:  # the import path's type; the registry needs none of the mapping at run time
    from caseshelf.domain.mapping import RecordBatch


MAX_CASE_BYTES = 4 * 1024 * 1024


class RegistryService(RegistryCommit):
    """The dataset registry. Its operations are layered, each in its module: reads and caches
    (`caches`, `reads`), staging (`staging`), the writer (`writer`), the commit (`commit`)."""

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
        cache_bytes: int = cache_bytes_for(DEFAULT_MEMORY_BYTES),
    ) -> None:
        """`read_gap` and `read_workers`: how this store is read when many records are
        wanted at once (`caseshelf.services.storage.read_records`). `fence`: the write fence
        every registration holds against gc (`caseshelf.services.fence`). `cache_bytes`: the
        bound of the cache of manifests, roots and chunks."""
        self.store = store
        self.index = index
        self.fence = fence or WriteFence(index)
        self.versions = VersionedStore(index, KIND, noun="dataset", clock=clock)
        self.max_case_bytes = max_case_bytes
        self.presign_expiry = presign_expiry
        # A download is a presigned URL where the store is remote (AWS) and the document itself
        # where it is local (the embedded store, architecture §7).
        self.presign_downloads = presign_downloads
        self.read_gap = read_gap
        self.read_workers = read_workers
        # Manifests, roots and chunks are immutable, so a cache keyed by their keys is always
        # right; it is bounded in bytes (`cache_bytes`, against the process's memory), its least
        # recently used entries dropped first (`caseshelf.services.memo`).
        self.cache = ByteBoundedCache(cache_bytes)

    def validate(
        self, identity: Identity, body: DatasetDocument | DatasetVersionInput
    ) -> ValidateResult:
        tenant = identity.check_can_write()
        document = document_of(body)
        head = head_of(document.meta)
        batches = list(self._stage_document(document, head))
        records = self.index.list_versions(tenant, KIND, head.name)
        head = inherited(head, self._base_version(head, records))
        base = self._base_root(head, records)
        cdigest = _content_digest(head, batches)
        self._check_refs(
            tenant, _all_refs(batches), _has_in(base, batches), self._head_blob(tenant)
        )
        return self._validate_result(head, records, cdigest, sum(len(b.ids) for b in batches))

    def validate_stream(
        self, identity: Identity, head: VersionHead, cases: Iterable[Sequence[Any]]
    ) -> ValidateResult:
        """`validate` of a dataset streamed as batches of plain cases (`register_stream`)."""
        tenant = identity.check_can_write()
        _check_head(head)
        records = self.index.list_versions(tenant, KIND, head.name)
        head = inherited(head, self._base_version(head, records))
        base = self._base_root(head, records)
        known = base.blob_locations() if base is not None else {}
        digester = _digester(head)
        count = 0
        inline: set[str] = set()
        seen, log = SeenIds(), IdLog()
        for batch in self._stage_stream(head, cases):
            _refuse_repeats(seen, batch, log.case_id)
            log.add(batch.ids)
            digester.add(batch.pairs())
            count += len(batch.ids)
            inline.update(batch.bodies)
            self._check_refs(
                tenant, batch.refs, lambda h: h in inline or h in known, self._head_blob(tenant)
            )
        return self._validate_result(head, records, digester.digest(), count)

    def _validate_result(
        self, head: VersionHead, records: list[VersionRecord], cdigest: str, count: int
    ) -> ValidateResult:
        label = _label(head, records)
        current = next((r for r in records if r.version == label), None)
        return ValidateResult(
            content_digest=cdigest,
            case_count=count,
            would_conflict=current is not None and current.content_digest != cdigest,
            version=label,
        )

    def register(
        self, identity: Identity, body: DatasetDocument | DatasetVersionInput
    ) -> RegisterResult:
        """Register a dataset document (buffered: it is in memory already): one `parse_dataset`
        gave, or a body the HTTP resolver validated into models."""
        tenant = identity.check_can_write()
        document = document_of(body)
        head = head_of(document.meta)
        batches = list(self._stage_document(document, head))
        with self.fence.writing(tenant) as lease:
            return self._register(identity, tenant, lease, head, batches, buffered=True)

    def register_stream(
        self, identity: Identity, head: VersionHead, cases: Iterable[Sequence[Any]]
    ) -> RegisterResult:
        """Register a dataset whose cases come as batches of plain (not yet validated) cases,
        consumed once: a file or an upload read a window at a time
        (`caseshelf.services.loaders.stream_dataset`). Validation errors name the case id (or
        its index in the whole dataset) and the field. The same answers as `register`."""
        tenant = identity.check_can_write()
        _check_head(head)
        with self.fence.writing(tenant) as lease:
            return self._register(
                identity, tenant, lease, head, self._stage_stream(head, cases), buffered=False
            )

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
        src = self.manifest(parent)
        head = VersionHead(
            name=name,
            version=version,
            bump=bump,
            description=src.description,
            tags=tuple(src.tags),
            shared_files=tuple(src.shared_files),
            produced_by=produced_by,
        )
        _check_head(head)
        if parent.tenant == tenant:
            batches = [_located(src, indices)]
            known, known_blobs = src.locations_by_digest(), src.blob_locations()
        else:
            batches = [self._copied(parent, src, indices)]
            known, known_blobs = {}, {}
        with self.fence.writing(tenant) as lease:
            return self._register(
                identity,
                tenant,
                lease,
                head,
                batches,
                buffered=True,
                known=known,
                known_blobs=known_blobs,
                dedup=False,
            )

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
        the import path, whose mapper builds each case already validated in canonical form and
        hashes it. Two rows with the same case id are refused naming both rows. The same commit
        protocol, dedup against the latest live version, size limit, and 409 / idempotency
        rules as `register`. An error while consuming `records` leaves nothing registered."""
        tenant = identity.check_can_write()
        head = VersionHead(
            name=name,
            version=version,
            bump=bump,
            description=description,
            tags=tuple(sorted(set(tags))),
            produced_by=produced_by,
        )
        _check_head(head)
        with self.fence.writing(tenant) as lease:
            return self._register(
                identity, tenant, lease, head, self._stage_records(records), buffered=False
            )

    def set_version_tags(
        self, identity: Identity, name: str, version: str, tags: list[str]
    ) -> VersionRecord:
        return self.versions.set_tags(identity, name, version, tags)

    def move_tags(
        self, identity: Identity, name: str, version: str, tags: list[str]
    ) -> tuple[VersionRecord | None, list[TagMove]]:
        """Point `tags` at `version`, each moved from wherever it pointed."""
        return self.versions.move_tags(identity, name, version, add=tags)

    def remove_tags(self, identity: Identity, name: str, tags: list[str]) -> list[TagMove]:
        return self.versions.move_tags(identity, name, None, remove=tags)[1]

    def tags(self, identity: Identity, name: str) -> tuple[TagBoard, dict[str, str]]:
        """(the tag board with its history, where each tag points now)."""
        return self.versions.tags(identity, name)

    def delete_version(self, identity: Identity, name: str, version: str) -> VersionRecord:
        return self.versions.delete(identity, name, version)

    def revive_version(self, identity: Identity, name: str, version: str) -> VersionRecord:
        return self.versions.revive(identity, name, version)
