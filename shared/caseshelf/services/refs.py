"""Many refs resolved in one request: what `caseshelf check` of a lock file asks, one round trip
for all its pins however many there are.

For each query the answer is what `ID@REF` resolves to now (or the error it gets), the last move
of the tag when REF is a tag (who moved it where, when), and, when the query names the version it
was pinned to, that version as the registry holds it, tombstoned ones included (or the error).
Each dataset's versions and tag board are read once, whatever number of queries name it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from caseshelf.domain.errors import CaseshelfError, NotFound, TooLarge
from caseshelf.domain.identity import Identity
from caseshelf.domain.tags import TagBoard, TagMove, effective_pointers
from caseshelf.domain.versions import VersionRecord, is_tag_ref, resolve_ref
from caseshelf.services.versioned import VersionedStore

# Queries one request may carry; a client sends more as several requests.
MAX_REFS = 500


@dataclass(frozen=True)
class RefQuery:
    """`name@ref`, and optionally the version it was pinned to (label and content digest)."""

    name: str
    ref: str
    version: str | None = None
    digest: str | None = None


@dataclass(frozen=True)
class RefAnswer:
    query: RefQuery
    record: VersionRecord | None = None
    error: CaseshelfError | None = None
    move: TagMove | None = None
    pinned: VersionRecord | None = None
    pinned_error: CaseshelfError | None = None


@dataclass(frozen=True)
class _Dataset:
    records: list[VersionRecord]
    board: TagBoard


class RefService:
    def __init__(self, versions: VersionedStore) -> None:
        self.versions = versions

    def resolve_many(self, identity: Identity, queries: Sequence[RefQuery]) -> list[RefAnswer]:
        """One answer per query, in order; an error of one query is its answer's, not the
        request's."""
        if len(queries) > MAX_REFS:
            raise TooLarge(
                f"{len(queries)} refs in one request; at most {MAX_REFS}: send them in batches "
                f"of {MAX_REFS} (the Python client and the CLI do)",
                limit=MAX_REFS,
                size=len(queries),
                field="refs",
            )
        seen: dict[str, _Dataset | CaseshelfError] = {}
        out = []
        for q in queries:
            if q.name not in seen:
                seen[q.name] = self._dataset(identity, q.name)
            found = seen[q.name]
            if isinstance(found, CaseshelfError):
                pinned = found if q.version is not None or q.digest is not None else None
                out.append(RefAnswer(q, error=found, pinned_error=pinned))
            else:
                out.append(self._answer(q, found))
        return out

    def _dataset(self, identity: Identity, name: str) -> _Dataset | CaseshelfError:
        try:
            tenant, records = self.versions.find(identity, name)
        except CaseshelfError as exc:
            return exc
        return _Dataset(records, self.versions.board(tenant, name))

    def _answer(self, q: RefQuery, ds: _Dataset) -> RefAnswer:
        record: VersionRecord | None = None
        error: CaseshelfError | None = None
        move: TagMove | None = None
        tag = is_tag_ref(ds.records, q.ref)
        pointers = effective_pointers(ds.board, ds.records) if tag else None
        try:
            record = resolve_ref(ds.records, q.ref, name=q.name, pointers=pointers)
        except CaseshelfError as exc:
            error = exc
        if tag:
            move = next((m for m in reversed(ds.board.history) if m.tag == q.ref), None)
        pinned, pinned_error = self._pinned(q, ds.records)
        return RefAnswer(q, record, error, move, pinned, pinned_error)

    @staticmethod
    def _pinned(
        q: RefQuery, records: Sequence[VersionRecord]
    ) -> tuple[VersionRecord | None, CaseshelfError | None]:
        """The version a pin names: its label's row when the registry has it (whatever content
        that label holds, so a mismatch shows), else any version with its content digest."""
        if q.version is None and q.digest is None:
            return None, None
        by_label = [r for r in records if r.version == q.version]
        if by_label:
            return by_label[0], None
        if q.digest is not None:
            try:
                return resolve_ref(records, q.digest, include_deleted=True, name=q.name), None
            except CaseshelfError as exc:
                return None, exc
        return None, NotFound(f"no version {q.name}@{q.version}", id=q.name, version=q.version)


__all__ = ["MAX_REFS", "RefAnswer", "RefQuery", "RefService"]
