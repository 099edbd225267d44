"""The versioned store: the invariants every versioned entity shares (datasets and recipes).

Immutable versions, idempotent re-registration, 409 naming both digests, version tags,
tombstones with creator-or-admin, owner-first reads with the `_shared` fallback, and tenant
isolation (another tenant's entity is simply not found). One implementation, configured by `kind`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from caseshelf.domain.errors import BadRequest, Conflict, Forbidden, NotFound
from caseshelf.domain.identity import Identity
from caseshelf.domain.keys import version_pk
from caseshelf.domain.paging import check_limit, decode_position, encode_position
from caseshelf.domain.tags import (
    BOARD_SK,
    TagBoard,
    TagMove,
    effective_pointers,
    plan_moves,
    row_tags,
)
from caseshelf.domain.versions import (
    VersionRecord,
    check_dataset_id,
    check_label,
    check_tags,
    is_tag_ref,
    ordered,
    resolve_ref,
)
from caseshelf.ports import Index, Page

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def _said(moves: Sequence[TagMove]) -> str:
    return ", ".join(
        f"{m.tag}: {m.from_version or '(none)'} -> {m.to_version or '(removed)'}" for m in moves
    )


def iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class EntitySummary:
    """One entity of a listing: its owning tenant and its live versions, oldest first."""

    name: str
    tenant: str
    live: list[VersionRecord]
    created_at: str
    updated_at: str

    @property
    def latest(self) -> VersionRecord | None:
        return self.live[-1] if self.live else None


class VersionedStore:
    def __init__(self, index: Index, kind: str, *, noun: str, clock: Clock = utc_now) -> None:
        self.index = index
        self.kind = kind
        self.noun = noun
        self.clock = clock

    # -- reading ---------------------------------------------------------------------------

    def find(self, identity: Identity, name: str) -> tuple[str, list[VersionRecord]]:
        """(owning tenant, versions) owner-first, then `_shared`. Another tenant's entity and a
        missing one look the same: NotFound."""
        check_dataset_id(name)
        for tenant in identity.read_tenants():
            records = self.index.list_versions(tenant, self.kind, name)
            if records:
                return tenant, records
        raise NotFound(f"no {self.noun} {name!r}", id=name)

    def resolve(
        self, identity: Identity, name: str, ref: str, *, include_deleted: bool = False
    ) -> VersionRecord:
        tenant, records = self.find(identity, name)
        pointers = None
        if is_tag_ref(records, ref):
            pointers = effective_pointers(self.board(tenant, name), records)
        return resolve_ref(
            records, ref, include_deleted=include_deleted, name=name, pointers=pointers
        )

    def board(self, tenant: str, name: str) -> TagBoard:
        """The tag board of one entity (empty where no tag ever moved)."""
        return TagBoard.from_doc(self.index.get_item(version_pk(tenant, self.kind, name), BOARD_SK))

    def tags(self, identity: Identity, name: str) -> tuple[TagBoard, dict[str, str]]:
        """(the board, where each tag points now)."""
        tenant, records = self.find(identity, name)
        board = self.board(tenant, name)
        return board, effective_pointers(board, records)

    def versions(
        self,
        identity: Identity,
        name: str,
        *,
        include_deleted: bool = False,
        cursor: str | None = None,
        limit: int = 100,
    ) -> Page:
        """Newest first, cursor-paginated by position."""
        _, records = self.find(identity, name)
        pool = [r for r in ordered(records) if include_deleted or r.live]
        pool.reverse()
        start, limit = decode_position(cursor), check_limit(limit)
        items = pool[start : start + limit]
        nxt = start + limit
        return Page(items, encode_position(nxt) if nxt < len(pool) else None)

    def list_entities(
        self,
        identity: Identity,
        *,
        shared: bool = False,
        cursor: str | None = None,
        limit: int = 50,
    ) -> Page:
        tenant = "_shared" if shared else identity.tenant
        return self.index.list_datasets(tenant, self.kind, cursor=cursor, limit=check_limit(limit))

    def summaries(
        self,
        identity: Identity,
        *,
        shared: bool = False,
        cursor: str | None = None,
        limit: int = 50,
    ) -> Page:
        """`EntitySummary` items of one tenant's entities (the caller's, or `_shared`), in name
        order."""
        page = self.list_entities(identity, shared=shared, cursor=cursor, limit=limit)
        out = []
        for entry in page.items:
            records = self.index.list_versions(entry.tenant, self.kind, entry.name)
            live = ordered(r for r in records if r.live)
            out.append(
                EntitySummary(entry.name, entry.tenant, live, entry.created_at, entry.updated_at)
            )
        return Page(out, page.next_cursor)

    # -- writing ---------------------------------------------------------------------------

    def existing(self, tenant: str, name: str, version: str) -> VersionRecord | None:
        return self.index.get_version(tenant, self.kind, name, version)

    def commit(self, rec: VersionRecord) -> tuple[VersionRecord, bool]:
        """The commit point. Returns (record, created); same content under the label is
        idempotent and revives a tombstone; other content is 409 naming both digests."""
        check_label(rec.version)
        try:
            self.index.put_version(rec)
            return rec, True
        except Conflict:
            current = self.existing(rec.tenant, rec.name, rec.version)
            if current is None:  # the winner vanished: not possible with immutable rows
                raise
            return self.settle_existing(current, rec.content_digest), False

    def settle_existing(self, current: VersionRecord, content_digest: str) -> VersionRecord:
        if current.content_digest != content_digest:
            raise Conflict(
                f"{self.noun} {current.name}@{current.version} is already registered with "
                f"{current.content_digest}; this content is {content_digest}. A version never "
                "changes: register this as the next one (`--bump minor`, or `bump: minor` in "
                "the request) or under another label",
                digests=[current.content_digest, content_digest],
                id=current.name,
                version=current.version,
            )
        if not current.live:
            return self.index.update_version(
                current.tenant,
                self.kind,
                current.name,
                current.version,
                {"deleted_at": None, "deleted_by": None},
            )
        return current

    def _own(self, identity: Identity, name: str, version: str) -> VersionRecord:
        """A version in the caller's own tenant (writes never reach `_shared` for others)."""
        tenant = identity.check_can_write()
        check_dataset_id(name)
        check_label(version)
        rec = self.index.get_version(tenant, self.kind, name, version)
        if rec is None:
            raise NotFound(f"no {self.noun} version {name}@{version}", id=name, version=version)
        return rec

    def set_tags(
        self, identity: Identity, name: str, version: str, tags: list[str]
    ) -> VersionRecord:
        """Replace a version's tags: each tag named moves here from wherever it pointed; each
        tag the version had and the list leaves out is removed."""
        rec = self._live_own(identity, name, version)
        clean = check_tags(tags)
        gone = [t for t in rec.version_tags if t not in clean]
        row, _ = self.move_tags(identity, name, version, add=clean, remove=gone)
        assert row is not None  # the version was just read live
        return row

    def move_tags(
        self,
        identity: Identity,
        name: str,
        version: str | None,
        *,
        add: Sequence[str] = (),
        remove: Sequence[str] = (),
    ) -> tuple[VersionRecord | None, list[TagMove]]:
        """Point each tag of `add` at `version` (moving it from wherever it pointed) and remove
        each tag of `remove`; (the version's row after, the moves made). The board is written
        only if no other move came first (409 naming both otherwise); then the version rows'
        copies are brought in line."""
        tenant = identity.check_can_write()
        check_dataset_id(name)
        check_tags(list(add))
        check_tags(list(remove))
        if version is not None:
            self._live_own(identity, name, version)
        records = self.index.list_versions(tenant, self.kind, name)
        if not records:
            raise NotFound(f"no {self.noun} {name!r}", id=name)
        clash = sorted({t for t in add for r in records if r.version == t})
        if clash:
            raise BadRequest(
                f"{', '.join(clash)} is a version label of {name}: a ref of that name means the "
                "version, so it cannot be a tag; choose another tag name",
                id=name,
                tags=clash,
            )
        board = self.board(tenant, name)
        after, moves = plan_moves(
            board,
            records,
            version or "",
            add=add,
            remove=remove,
            by=identity.principal,
            at=iso(self.clock()),
        )
        if moves:
            self._write_board(tenant, name, board, after, moves)
        self._mend_rows(tenant, name, records, after.pointers)
        row = self.index.get_version(tenant, self.kind, name, version) if version else None
        return row, moves

    def _write_board(
        self, tenant: str, name: str, before: TagBoard, after: TagBoard, moves: list[TagMove]
    ) -> None:
        pk = version_pk(tenant, self.kind, name)
        try:
            if before.seq == 0 and not before.history:
                self.index.put_item(pk, BOARD_SK, after.to_doc(), if_absent=True)
            else:
                self.index.update_item(pk, BOARD_SK, after.to_doc(), expect={"seq": before.seq})
        except Conflict:
            now = self.board(tenant, name)
            theirs = [m for m in now.history if m.seq > before.seq]
            raise Conflict(
                f"the tags of {self.noun} {name} were moved by another request at the same time "
                f"({_said(theirs)}); this one ({_said(moves)}) was not made: read the tags again "
                "and retry",
                id=name,
                tags=sorted({m.tag for m in (*theirs, *moves)}),
            ) from None

    def _mend_rows(
        self, tenant: str, name: str, records: Sequence[VersionRecord], pointers: Mapping[str, str]
    ) -> None:
        for label, tags in row_tags(pointers, records).items():
            self.index.update_version(tenant, self.kind, name, label, {"version_tags": list(tags)})

    def _live_own(self, identity: Identity, name: str, version: str) -> VersionRecord:
        rec = self._own(identity, name, version)
        if not rec.live:
            raise NotFound(
                f"{self.noun} version {name}@{version} is deleted; revive it first",
                id=name,
                version=version,
            )
        return rec

    def _check_owner(self, identity: Identity, rec: VersionRecord, action: str) -> None:
        if rec.created_by != identity.principal and not identity.is_admin:
            raise Forbidden(
                f"only the creator ({rec.created_by}) or an admin may {action} "
                f"{rec.name}@{rec.version}",
                id=rec.name,
                version=rec.version,
            )

    def delete(self, identity: Identity, name: str, version: str) -> VersionRecord:
        rec = self._own(identity, name, version)
        self._check_owner(identity, rec, "delete")
        if not rec.live:
            return rec
        return self.index.update_version(
            rec.tenant,
            self.kind,
            name,
            version,
            {"deleted_at": iso(self.clock()), "deleted_by": identity.principal},
        )

    def revive(self, identity: Identity, name: str, version: str) -> VersionRecord:
        rec = self._own(identity, name, version)
        self._check_owner(identity, rec, "revive")
        if rec.live:
            return rec
        return self.index.update_version(
            rec.tenant, self.kind, name, version, {"deleted_at": None, "deleted_by": None}
        )

    def new_record(self, identity: Identity, **fields: object) -> VersionRecord:
        now = self.clock()
        base = VersionRecord(
            tenant=identity.tenant,
            kind=self.kind,
            created_at=iso(now),
            created_by=identity.principal,
            seq=int(now.timestamp() * 1_000_000),
            name="",
            version="",
            content_digest="",
            manifest_key="",
            case_count=0,
            bytes=0,
        )
        return replace(base, **fields)  # type: ignore[arg-type]
