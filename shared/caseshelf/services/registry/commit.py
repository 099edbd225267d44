"""The commit (architecture §4): packs, blobs and the manifest are written first
(`caseshelf.services.registry.writer`); the conditional put of the version row is the commit.
A crash before it leaves only unreferenced objects (collected by `gc`), never a half-visible
version. `_register` runs the pipeline from staged batches to the commit."""

from __future__ import annotations

import random
import time
from collections.abc import Iterable
from itertools import chain

from caseshelf.domain.chunks import Root
from caseshelf.domain.errors import Conflict
from caseshelf.domain.identity import Identity
from caseshelf.domain.manifest import Location
from caseshelf.domain.versions import VersionRecord, ordered, resolve_ref
from caseshelf.services.fence import Lease
from caseshelf.services.registry.results import KIND, RegisterResult, WriteStats, unchanged_latest
from caseshelf.services.registry.staging import (
    IdLog,
    SeenIds,
    Staged,
    VersionHead,
    _all_refs,
    _content_digest,
    _digester,
    _has_in,
    _label,
    _refuse_repeats,
    inherited,
)
from caseshelf.services.registry.writer import RegistryWriter
from caseshelf.services.storage import ManifestWritten

# A bump loses a label only to a racing registration that committed it, so every lost attempt
# is another writer's success: the bound is generous (far above any real concurrency) and exists
# only so that a broken index cannot loop a request forever.
BUMP_ATTEMPTS = 1000


BUMP_BACKOFF_MAX = 0.05  # seconds: the longest pause between two attempts


def _bump_pause(attempt: int) -> None:
    """A short random pause before a bump's next attempt (full jitter, doubling up to
    BUMP_BACKOFF_MAX), so racing bumps spread out instead of colliding again at once."""
    time.sleep(random.uniform(0, min(BUMP_BACKOFF_MAX, 0.001 * 2 ** min(attempt, 6))))


class RegistryCommit(RegistryWriter):
    """The registration pipeline from staged batches, and the one commit loop."""

    def _register(
        self,
        identity: Identity,
        tenant: str,
        lease: Lease,
        head: VersionHead,
        batches: Iterable[Staged],
        *,
        buffered: bool,
        known: dict[str, Location] | None = None,
        known_blobs: dict[str, Location] | None = None,
        dedup: bool = True,
    ) -> RegisterResult:
        """The pipeline from staged batches on. `known` / `known_blobs`: records and bodies
        stored already that the plan may point at besides the base version's; `dedup=False`:
        no base version (a derived version points at its parent's records)."""
        records = self.index.list_versions(tenant, KIND, head.name)
        previous = self._base_version(head, records)
        head = inherited(head, previous)
        base = previous if dedup else None
        ahead: frozenset[str] = frozenset()
        if buffered:
            staged = list(batches)
            settled = self._settled(records, head, _content_digest(head, staged))
            if settled is not None:
                return settled
            self._check_refs(
                tenant,
                _all_refs(staged),
                _has_in(self.root(base) if base is not None else None, staged),
                self._head_blob(tenant),
            )
            batches = staged
            ahead = frozenset(chain.from_iterable(b.bodies for b in staged))
        elif head.version is not None and any(r.version == head.version for r in records):
            # The label is taken: whatever the content, this registration stores nothing (it is
            # the same content, or a conflict), so the stream is only validated and digested.
            digester = _digester(head)
            seen, log = SeenIds(), IdLog()
            for batch in batches:
                if batch.positions:
                    _refuse_repeats(seen, batch, log.case_id)
                    log.add(batch.ids)
                digester.add(batch.pairs())
            settled = self._settled(records, head, digester.digest())
            assert settled is not None
            return settled
        written, stats = self._write(
            tenant,
            head,
            batches,
            base=base,
            known=known,
            known_blobs=known_blobs,
            inline_ahead=ahead,
        )
        return self._commit(identity, head, written, stats, lease)

    def _settled(
        self, records: list[VersionRecord], head: VersionHead, cdigest: str
    ) -> RegisterResult | None:
        """The answer when this content needs no new version: a bump whose content the latest
        live version holds already, or a label that is taken (the same content: idempotent, a
        tombstone revived; other content: 409). None when a new version is to be committed."""
        if head.version is None:
            same = unchanged_latest(records, cdigest)
            if same is not None:
                return RegisterResult(same, created=False)
        label = _label(head, records)
        current = next((r for r in records if r.version == label), None)
        if current is None:
            return None
        return RegisterResult(self.versions.settle_existing(current, cdigest), created=False)

    def _base_version(
        self, head: VersionHead, records: list[VersionRecord]
    ) -> VersionRecord | None:
        """The version whose stored records and bodies a registration reuses: `base`, or the
        latest live version."""
        if head.base is not None:
            return resolve_ref(records, head.base, include_deleted=True, name=head.name)
        live = [r for r in records if r.live]
        return ordered(live)[-1] if live else None

    def _base_root(self, head: VersionHead, records: list[VersionRecord]) -> Root | None:
        """The root of `_base_version` (its file bodies, for a validation's references)."""
        rec = self._base_version(head, records)
        return self.root(rec) if rec is not None else None

    def _commit(
        self,
        identity: Identity,
        head: VersionHead,
        written: ManifestWritten,
        stats: WriteStats,
        lease: Lease,
    ) -> RegisterResult:
        """Commit a version whose manifest is stored: the label given, or the next one the bump
        gives (retried when a racing bump takes it), with the registry's idempotency rules."""
        root = written.root
        cdigest = root.content_digest
        for attempt in range(BUMP_ATTEMPTS):
            if attempt:
                _bump_pause(attempt)
            records = self.index.list_versions(identity.tenant, KIND, head.name)
            settled = self._settled(records, head, cdigest)
            if settled is not None:
                return settled
            label = _label(head, records)
            rec = self.versions.new_record(
                identity,
                name=head.name,
                version=label,
                content_digest=cdigest,
                manifest_key=written.key,
                case_count=root.count,
                bytes=root.case_bytes,
                description=head.description,
                tags=head.tags,
                produced_by=head.produced_by,
            )
            self.fence.check(lease)
            try:
                committed, created = self.versions.commit(rec)
            except Conflict:
                if head.bump is None:
                    raise
                continue  # a racing bump took this label with other content: take the next
            return RegisterResult(committed, created, stats)
        raise Conflict(
            f"could not find a free version label for {head.name} after {BUMP_ATTEMPTS} attempts"
        )
