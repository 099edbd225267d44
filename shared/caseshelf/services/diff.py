"""Diff of two versions (of one dataset, or of two datasets the caller can read).

Manifests first, and of them only what differs: the two roots name their chunks by content
(`caseshelf.domain.chunks`), so a chunk both versions hold is skipped unread, and the pure plan
(`caseshelf.domain.diff.plan_chunked_diff`) matches by id and compares digests over the chunks
that differ. Then only the bodies the plan names are read, by ranged reads from their packs, and
compared field by field. Cost follows the size of the change, not the size of the versions.

A version registered against a base keeps copies of the base's records it superseded, back to
back (`RegistryService._keep_superseded`): the diff of the two then reads the changed cases'
earlier forms in one span instead of one request each, scattered through the base's packs.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from contextlib import suppress
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, cast

import orjson

from caseshelf.domain import layout
from caseshelf.domain.canonical import hex_of, sha256_hex
from caseshelf.domain.chunks import Root
from caseshelf.domain.diff import (
    Change,
    ChunkPart,
    Delta,
    DiffPlan,
    differing_chunks,
    field_changes,
    meta_changes,
    plan_chunked_diff,
    user_text,
)
from caseshelf.domain.diff_fields import FieldCounts, changes_under
from caseshelf.domain.errors import NotFound
from caseshelf.domain.identity import Identity
from caseshelf.domain.manifest import Location
from caseshelf.domain.paging import check_limit, decode_diff_position, encode_diff_position
from caseshelf.domain.versions import VersionRecord
from caseshelf.ports import BlobStore
from caseshelf.services.registry import RegistryService
from caseshelf.services.storage import (
    LOCAL_MAX_GAP_BYTES,
    check_record,
    read_delta,
    read_records,
)

# A diff's field paths are counted over at most this many more changed cases a request on
# Lambda (both forms of each are read: about 12 s for 50,000, within the routes' 29 s); the
# counts so far are kept and the next request counts on from there (`FieldCounts.counted`).
# The local server counts every changed case in one request.
FIELD_COUNT_MAX_CASES = 50_000
# Changed cases read at once while counting.
FIELD_READ_BATCH = 2_000


def fields_key(tenant: str, base_digest: str, candidate_digest: str) -> str:
    """Where the field counts of a diff are kept: under the caller's tenant, beside the
    version's numbers in the transient `exports/` area (recomputed when missing)."""
    pair = f"{hex_of(base_digest)}-{hex_of(candidate_digest)}"
    return f"{layout.root(tenant)}exports/diff-fields/{pair}.json"


@dataclass(frozen=True)
class CaseBrief:
    """An added or removed case: its id and its `inputs.user` (a JSON value, not yet text)."""

    id: str
    user: Any


@dataclass(frozen=True)
class CaseChanges:
    id: str
    changes: list[Change]


@dataclass(frozen=True)
class ReadStats:
    """Case-body reads a diff made (manifests are read, and cached, by the registry)."""

    objects_read: int = 0
    bytes_read: int = 0


@dataclass(frozen=True)
class DiffResult:
    base: VersionRecord
    candidate: VersionRecord
    plan: DiffPlan
    # None in summary mode: only counts and version metadata changes are computed.
    added: list[CaseBrief] | None
    removed: list[CaseBrief] | None
    changed: list[CaseChanges] | None
    stats: ReadStats
    # The cursor of the next page of entries; None on the last page and in summary mode.
    next_cursor: str | None = None
    # Where the page's first entry is in the whole diff's entries, and the positions (base,
    # candidate) of its changed cases, in the order of `changed`.
    start: int = 0
    changed_at: list[tuple[int, int]] = field(default_factory=list)
    # With `fields` or `path`: the field paths of every changed case (`FieldCounts`).
    fields: FieldCounts | None = None
    # With `path`: the filter, and how many changed cases have a change there (the pages then
    # hold only those, with only their changes at the path or under it).
    path: str | None = None
    path_matches: int | None = None

    @property
    def summary(self) -> dict[str, int]:
        p = self.plan
        return {
            "added": len(p.added),
            "removed": len(p.removed),
            "changed": len(p.changed),
            "unchanged": p.unchanged,
        }


class _CountingReads:
    """The part of a BlobStore that reading cases uses, counting requests and bytes (reads may
    run on several threads at once)."""

    def __init__(self, inner: BlobStore) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.objects = 0
        self.bytes = 0

    def _count(self, data: bytes) -> bytes:
        with self._lock:
            self.objects += 1
            self.bytes += len(data)
        return data

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        return self._count(self._inner.get_range(key, offset, length))

    def get(self, key: str) -> bytes:
        return self._count(self._inner.get(key))


class DiffService:
    def __init__(
        self,
        registry: RegistryService,
        *,
        max_gap_bytes: int = LOCAL_MAX_GAP_BYTES,
        read_workers: int = 1,
        read_copies: bool = True,
        keep_last_plan: bool = True,
        use_deltas: bool = True,
        field_count_cases: int | None = FIELD_COUNT_MAX_CASES,
    ) -> None:
        """`max_gap_bytes`: the most unwanted bytes read between two wanted cases to save a
        request (the trade between bytes read and requests made). `read_workers`: ranged reads
        in flight at once (1 for the embedded store; more for S3, whose client is thread-safe).
        `read_copies`: read the earlier form of changed cases from the copies a version keeps
        of the records it superseded (False: every record from its own pack, as a diff of two
        versions without such copies does). `keep_last_plan`: keep the last paged diff's plan
        for the next page of the same two versions (`_LastPlan`). `use_deltas`: plan a diff of
        a version against its registration base from the change it keeps (`_delta`; False:
        from the chunks that differ, as for any other pair). `field_count_cases`: the most
        changed cases whose field paths one request counts (None: every one;
        `FIELD_COUNT_MAX_CASES`)."""
        self.use_deltas = use_deltas
        self.field_count_cases = field_count_cases
        self.registry = registry
        self._last_plan: _LastPlan | None = _LastPlan() if keep_last_plan else None
        self.max_gap_bytes = max_gap_bytes
        self.read_workers = read_workers
        self.read_copies = read_copies

    def diff_versions(
        self,
        identity: Identity,
        name: str,
        base_ref: str,
        candidate_ref: str,
        *,
        candidate_name: str | None = None,
        summary_only: bool = False,
        include_deleted: bool = False,
        cursor: str | None = None,
        limit: int | None = None,
        fields: bool = False,
        path: str | None = None,
    ) -> DiffResult:
        """Diff `name@base_ref` against `candidate_name@candidate_ref` (`candidate_name`
        defaults to `name`). Tombstoned versions take part only with `include_deleted`.

        Paged (`limit` or `cursor` given): the entries are the changed cases, then the added
        ones (both in candidate order), then the removed ones (in base order), and a page holds
        `limit` of them (default 100, at most 1000) with the summary of the whole diff; only
        the page's cases are read and compared. A cursor pins both versions by content digest:
        with one, the versions are the ones it names, not what the refs name now. Without
        `limit` and `cursor`, every entry is in one answer (for small diffs and the library).

        `fields`: also the field paths of every changed case, counted (`FieldCounts`; read once
        per pair of versions and kept). `path`: only the changed cases with a change at that
        field path or under it, each with only those changes (no added or removed case); the
        positions of the pages (and their cursors) are then among those cases."""
        reg = self.registry
        start = 0
        if cursor:
            base_ref, candidate_ref, start = decode_diff_position(cursor)
        base = reg.get_version(identity, name, base_ref, include_deleted=include_deleted)
        candidate = reg.get_version(
            identity, candidate_name or name, candidate_ref, include_deleted=include_deleted
        )
        paged = bool(cursor) or limit is not None
        planned = self._planned(base, candidate, keep=paged)
        plan, base_part, cand_part = planned
        counts = None
        if fields or path is not None:
            counts = self._field_counts(identity.tenant, base, candidate, planned)
        if summary_only:
            empty = DiffResult(base, candidate, plan, None, None, None, ReadStats(), fields=counts)
            if path is not None and counts is not None:
                return replace(empty, path=path, path_matches=len(counts.matching(path)))
            return empty
        shown = _shown(plan, counts, path)
        changed_pos, added_pos, removed_pos = shown.changed, shown.added, shown.removed
        next_cursor = None
        if paged:
            changed_pos, added_pos, removed_pos, next_cursor = _paged(
                shown, (base, candidate), start, limit
            )
        counter = _CountingReads(reg.store)
        added, removed, changed = self._entries(
            cast(BlobStore, counter),
            (base, candidate),
            (base_part, cand_part),
            (changed_pos, added_pos, removed_pos),
        )
        if path is not None:
            changed = [CaseChanges(c.id, changes_under(c.changes, path)) for c in changed]
        return DiffResult(
            base,
            candidate,
            plan,
            added,
            removed,
            changed,
            ReadStats(objects_read=counter.objects, bytes_read=counter.bytes),
            next_cursor,
            start,
            list(changed_pos),
            fields=counts,
            path=path,
            path_matches=len(shown.changed) if path is not None else None,
        )

    def _planned(
        self, base: VersionRecord, candidate: VersionRecord, *, keep: bool
    ) -> tuple[DiffPlan, ChunkPart, ChunkPart]:
        """The plan of the diff of two versions, the kept one when it is theirs (`keep`: keep
        a new one for the next page)."""
        key = (base.tenant, base.manifest_key, candidate.tenant, candidate.manifest_key)
        kept = self._last_plan.get(key) if self._last_plan is not None else None
        if kept is not None:
            return kept
        planned = self._plan(base, candidate)
        if keep and self._last_plan is not None:
            self._last_plan.put(key, planned)
        return planned

    def _entries(
        self,
        store: BlobStore,
        versions: tuple[VersionRecord, VersionRecord],
        parts: tuple[ChunkPart, ChunkPart],
        positions: tuple[list[tuple[int, int]], list[int], list[int]],
    ) -> tuple[list[CaseBrief], list[CaseBrief], list[CaseChanges]]:
        """The added, removed and changed cases at `positions` (changed, added, removed), read
        and compared."""
        base, candidate = versions
        base_m, cand_m = parts
        changed_pos, added_pos, removed_pos = positions
        base_at = partial(_index_in, base_m.positions)
        cand_at = partial(_index_in, cand_m.positions)
        base_want = [base_at(i) for i in removed_pos] + [base_at(i) for i, _ in changed_pos]
        cand_want = [cand_at(j) for j in added_pos] + [cand_at(j) for _, j in changed_pos]
        # Either version may keep copies of the other's records (the later one registered
        # against the earlier): the changed cases' earlier forms, back to back.
        reg = self.registry
        copies = {**reg.superseded(base), **reg.superseded(candidate)} if self.read_copies else {}
        base_bodies = self._read(store, base, base_m, base_want, copies)
        cand_bodies = self._read(store, candidate, cand_m, cand_want, copies)
        added = [
            CaseBrief(cand_m.ids[cand_at(j)], user_text(cand_bodies[cand_at(j)])) for j in added_pos
        ]
        removed = [
            CaseBrief(base_m.ids[base_at(i)], user_text(base_bodies[base_at(i)]))
            for i in removed_pos
        ]
        changed = [
            CaseChanges(
                cand_m.ids[cand_at(j)],
                field_changes(base_bodies[base_at(i)], cand_bodies[cand_at(j)]),
            )
            for i, j in changed_pos
        ]
        return added, removed, changed

    def _field_counts(
        self,
        tenant: str,
        base: VersionRecord,
        candidate: VersionRecord,
        planned: _Planned,
    ) -> FieldCounts:
        """The field paths of the diff's changed cases, kept in the caller's tenant by the two
        content digests. Counted on from the kept counts, at most `field_count_cases` more
        (every one left when None), so the counts of a large diff are complete after a few
        requests (`FieldCounts.counted` says how far they are)."""
        plan, base_part, cand_part = planned
        store = self.registry.store
        key = fields_key(tenant, base.content_digest, candidate.content_digest)
        kept: FieldCounts | None = None
        # not kept yet, kept in another format, or not this diff's: counted again below
        with suppress(NotFound, ValueError, KeyError, TypeError):
            kept = FieldCounts.from_json(store.get(key))
        if kept is not None and kept.counted > len(plan.changed):
            kept = None
        start = kept.counted if kept is not None else 0
        if kept is not None and start == len(plan.changed):
            return kept
        step = self.field_count_cases
        wanted = plan.changed[start : None if step is None else start + step]
        per_case: list[list[Change]] = []
        for at in range(0, len(wanted), FIELD_READ_BATCH):
            batch = wanted[at : at + FIELD_READ_BATCH]
            _, _, changed = self._entries(
                store, (base, candidate), (base_part, cand_part), (batch, [], [])
            )
            per_case += [c.changes for c in changed]
        counts = kept.extended(per_case) if kept is not None else FieldCounts.of(per_case)
        store.put(key, counts.to_json(), content_type="application/json")
        return counts

    def _plan(
        self, base: VersionRecord, candidate: VersionRecord
    ) -> tuple[DiffPlan, ChunkPart, ChunkPart]:
        """The plan of a diff, and the parts of each side it was made from (where the cases
        the plan names are)."""
        reg = self.registry
        base_root, cand_root = reg.root(base), reg.root(candidate)
        delta = self._delta(base, candidate, base_root, cand_root)
        if delta is not None:
            plan = replace(delta.plan, meta=meta_changes(base_root, cand_root))
            return plan, delta.base_part, delta.cand_part
        base_only, cand_only = differing_chunks(base_root, cand_root)
        if base_root.content_digest == cand_root.content_digest:
            base_only, cand_only = [], []  # nothing differs: no chunk is read
        base_part = self._part(base, base_root, base_only)
        cand_part = self._part(candidate, cand_root, cand_only)
        return plan_chunked_diff(base_root, cand_root, base_part, cand_part), base_part, cand_part

    def _delta(
        self, base: VersionRecord, candidate: VersionRecord, base_root: Root, cand_root: Root
    ) -> Delta | None:
        """The change one of the two versions keeps against the other, its registration base
        (`caseshelf.domain.diff.Delta`), seen from this diff's side; None when neither keeps
        one (any other pair: the chunks that differ are read). With every 100th of 100,000
        cases changed, every chunk of both versions differs: the plan from the delta is 1 read
        instead of ~200 chunks, about a tenth of the time on moto (`bench/bench_diff.py`)."""
        if not self.use_deltas or base.tenant != candidate.tenant:
            return None
        store, tenant = self.registry.store, candidate.tenant
        if cand_root.delta_key and cand_root.delta_base == base_root.content_digest:
            return read_delta(store, tenant, cand_root)
        if base_root.delta_key and base_root.delta_base == cand_root.content_digest:
            return read_delta(store, tenant, base_root).mirrored()
        return None

    def _part(self, rec: VersionRecord, root: Root, numbers: list[int]) -> ChunkPart:
        """The chunks `numbers` of a version, read with the store's reads in flight."""
        starts = root.chunk_starts()
        chunks = list(self.registry.read_chunks(rec, numbers))
        return ChunkPart.of(chunks, [starts[n] for n in numbers])

    def _read(
        self,
        store: BlobStore,
        rec: VersionRecord,
        part: ChunkPart,
        indices: list[int],
        copies: dict[str, Location],
    ) -> dict[int, dict[str, Any]]:
        """The cases at `indices`, each read from a copy of its record where one of the two
        versions keeps one (`RegistryService.superseded`: records back to back, so the
        earlier form of every changed case is one span away) and from its own pack otherwise.
        A copy is used only when its bytes hash to the case's digest; else the case's own
        record is read instead."""
        if not indices:
            return {}
        digests = {i: part.digest(i) for i in indices}
        wanted = [(i, copies.get(digests[i]) or part.location(i)) for i in indices]
        pack_key = partial(layout.pack_key, rec.tenant)
        read = partial(
            read_records, store, pack_key, max_gap=self.max_gap_bytes, workers=self.read_workers
        )
        raw = read(wanted)
        wrong = [
            (i, part.location(i))
            for i, loc in wanted
            if loc is copies.get(digests[i]) and sha256_hex(raw[i]) != digests[i]
        ]
        if wrong:
            raw.update(read(wrong))
        own = [(i, loc) for i, loc in wanted if loc is not copies.get(digests[i])]
        for i, loc in own + wrong:  # read from the case's own pack: checked like every read
            what = f"case {part.ids[i]!r}"
            check_record(raw[i], digests[i], pack_key(loc.container), loc, what)
        return {i: orjson.loads(data) for i, data in raw.items()}


_Planned = tuple[DiffPlan, ChunkPart, ChunkPart]


class _LastPlan:
    """The last paged diff's plan and parts, by its two versions' tenants and manifest keys (a
    manifest key names its content, so a kept plan is never stale). One is kept: the next page
    of a series a client reads in order (the CLI, `Client.diff_pages`, the UI's "more") skips
    the plan, which is most of a page's cost when the versions differ in many chunks
    (`bench/bench_diff_pages.py`, two versions sharing nothing: a page with the plan kept takes
    about a fifth of one planned afresh). What it costs: the plan's memory stays after the
    answer, as large as while the page was made. Access is checked on every request before this
    is read (`get_version`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[str, ...] | None = None
        self._value: _Planned | None = None

    def get(self, key: tuple[str, ...]) -> _Planned | None:
        """The kept plan of `key`; on a miss the kept one is dropped, so that a new plan is
        never made while an old one is still held (one plan's memory at a time)."""
        with self._lock:
            if key != self._key:
                self._key, self._value = None, None
            return self._value

    def put(self, key: tuple[str, ...], value: _Planned) -> None:
        with self._lock:
            self._key, self._value = key, value


def _index_in(positions: list[int], position: int) -> int:
    """Where the case at `position` of the version is in a part (`ChunkPart.positions` is
    ascending): a search instead of a dict over every case of the part."""
    return bisect_left(positions, position)


def _shown(plan: DiffPlan, counts: FieldCounts | None, path: str | None) -> DiffPlan:
    """The plan whose entries a diff shows: with `path`, only the changed cases with a change
    at that field path or under it."""
    if path is None or counts is None:
        return plan
    chosen = [plan.changed[n] for n in counts.matching(path)]
    return DiffPlan([], [], chosen, plan.unchanged, plan.order_changed, plan.meta)


def _paged(
    shown: DiffPlan,
    pair: tuple[VersionRecord, VersionRecord],
    start: int,
    limit: int | None,
) -> tuple[list[tuple[int, int]], list[int], list[int], str | None]:
    """The positions of the page from `start` (changed, added, removed) and the cursor of the
    next page (pinning both versions by content digest), None on the last."""
    stop = start + check_limit(limit)
    changed_pos, added_pos, removed_pos, more = _page_of(shown, start, stop)
    base, candidate = pair
    nxt = (
        encode_diff_position(base.content_digest, candidate.content_digest, stop) if more else None
    )
    return changed_pos, added_pos, removed_pos, nxt


def _page_of(
    plan: DiffPlan, start: int, stop: int
) -> tuple[list[tuple[int, int]], list[int], list[int], bool]:
    """The entries `start` to `stop` of a diff, in its page order (changed, added, removed),
    and whether more follow."""
    c, a = len(plan.changed), len(plan.added)
    total = c + a + len(plan.removed)

    def part(items: list[Any], offset: int) -> list[Any]:
        return items[max(start - offset, 0) : max(stop - offset, 0)]

    return part(plan.changed, 0), part(plan.added, c), part(plan.removed, c + a), stop < total
