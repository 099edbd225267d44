"""Garbage collection: objects that no committed version references.

Registration writes packs, blobs, manifest chunks and the manifest root before its commit point
(the version row). A crash in between leaves objects nothing points at; `collect_garbage` finds
them. An object is collectable when no version row of its tenant (datasets and recipes,
tombstoned ones included) reaches it through its manifest (the root, the chunks it names, the
packs they name), and it is older than the grace period, which spares the objects of a
registration still in flight. A chunk is never collected while a root of a committed version
names it, whichever version wrote it first.

The store is listed before the index is read, so a version committed while gc runs protects what
it references (it is in the index by the time the references are gathered). Tenants come from the
store as well as the index: a tenant whose first registration crashed has objects and no row.

Age alone does not make an object garbage: a registration that finds an object already present
(put-if-absent) reuses it, whoever wrote it, and may commit a version referencing it at any time.
Deletions therefore run inside the tenant's write fence (`caseshelf.services.fence`), which no
registration holds at the same time, and re-read the references inside it. gc also checks that
every referenced object exists, and deletes nothing of a tenant where one does not.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from caseshelf.domain import layout
from caseshelf.domain.chunks import ROOT_FORMATS, chunk_from_bytes, superseded_from_bytes
from caseshelf.domain.errors import CaseshelfError, NotFound
from caseshelf.domain.keys import KIND_LETTER
from caseshelf.domain.manifest import FORMAT as LEGACY_FORMAT
from caseshelf.domain.manifest import Manifest
from caseshelf.ports import BlobStore, Index, ObjectInfo
from caseshelf.services.fence import WriteFence
from caseshelf.services.storage import manifest_format, parse_root

# The areas registration writes before its commit point.
AREAS = ("packs/", "blobs/", "manifests/")
TENANTS_ROOT = "t/"  # every tenant's keys are under t/<tenant>/ (`layout.root`)
# Objects deleted per sweep of the write fence (registrations of the tenant wait meanwhile).
SWEEP_BATCH = 500


@dataclass(frozen=True)
class Orphan:
    key: str
    bytes: int
    age_seconds: float


@dataclass
class GcReport:
    tenants: list[str] = field(default_factory=list)
    scanned_count: int = 0
    referenced_count: int = 0
    fresh_count: int = 0  # unreferenced, but younger than the grace period
    orphans: list[Orphan] = field(default_factory=list)
    deleted: bool = False
    problems: list[str] = field(default_factory=list)
    # referenced objects the store does not hold: {"key", "referenced_by"}
    missing: list[dict[str, str]] = field(default_factory=list)
    reused_count: int = 0  # unreferenced when listed, referenced by the time of the sweep

    @property
    def orphan_count(self) -> int:
        return len(self.orphans)

    @property
    def orphan_bytes(self) -> int:
        return sum(o.bytes for o in self.orphans)

    @property
    def keys(self) -> list[str]:
        return [o.key for o in self.orphans]

    def to_dict(self) -> dict[str, Any]:
        return {
            "tenant_count": len(self.tenants),
            "tenants": self.tenants,
            "scanned_count": self.scanned_count,
            "referenced_count": self.referenced_count,
            "fresh_count": self.fresh_count,
            "orphan_count": self.orphan_count,
            "orphan_bytes": self.orphan_bytes,
            "orphans": [
                {"key": o.key, "bytes": o.bytes, "age_seconds": round(o.age_seconds, 3)}
                for o in self.orphans
            ],
            "deleted": self.deleted,
            "reused_count": self.reused_count,
            "missing": self.missing,
            "problems": self.problems,
        }


def _version_rows(index: Index, tenant: str) -> Iterable[Any]:
    for kind in KIND_LETTER:
        cursor: str | None = None
        while True:
            page = index.list_datasets(tenant, kind, cursor=cursor, limit=1000)
            for entry in page.items:
                yield from index.list_versions(tenant, kind, entry.name)
            cursor = page.next_cursor
            if not cursor:
                break


@dataclass
class References:
    """What the committed versions of one tenant reach: each object key with the first version
    naming it (`kind name@version`), and the problems that make the answer incomplete.
    `manifests` keeps, for each manifest read, the keys it reaches (None: it reaches nothing
    further, or could not be read), and `chunks` the pack keys of each chunk read: both never
    change, so a later pass reads only what is new."""

    owner: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    manifests: dict[str, list[str] | None] = field(default_factory=dict)
    chunks: dict[str, list[str] | None] = field(default_factory=dict)

    @property
    def keys(self) -> set[str]:
        return set(self.owner)


def references(
    store: BlobStore, index: Index, tenant: str, *, known: References | None = None
) -> References:
    """Every object key a committed version of `tenant` reaches (tombstoned versions too): its
    manifest (a format 3 root), the chunks the root names, the packs the chunks name and the
    blob containers. Manifests and chunks already read in `known` are not read again (they
    never change)."""
    out = References()
    if known is not None:
        out.chunks = dict(known.chunks)
    for rec in _version_rows(index, tenant):
        mkey = rec.manifest_key
        if not mkey:
            continue
        who = f"{rec.kind} {rec.name}@{rec.version}"
        out.owner.setdefault(mkey, who)
        if known is not None and mkey in known.manifests:
            reached = known.manifests[mkey]
        else:
            reached = _reached_by(store, tenant, mkey, who, out)
        out.manifests[mkey] = reached
        for key in reached or ():
            out.owner.setdefault(key, who)
    return out


def _reached_by(
    store: BlobStore, tenant: str, mkey: str, who: str, out: References
) -> list[str] | None:
    """The keys a stored manifest reaches; None (with a problem where it is one) when it
    cannot be read or is a document that references nothing further (a recipe's body)."""
    try:
        data = store.get(mkey)
    except NotFound:
        out.problems.append(f"the manifest {mkey} of {who} is missing")
        return None
    if manifest_format(data) is None:
        try:
            head = orjson.loads(data)
        except orjson.JSONDecodeError:
            out.problems.append(f"the manifest {mkey} of {who} is not JSON")
            return None
        if not isinstance(head, dict) or head.get("format") not in (*ROOT_FORMATS, LEGACY_FORMAT):
            return None  # a document that references nothing further (a recipe's body)
    try:
        stored = parse_root(data)
    except CaseshelfError as exc:
        out.problems.append(f"the manifest {mkey} of {who}: {exc.detail}")
        return None
    keys = [layout.blob_key(tenant, c) for c in stored.blob_containers]
    if isinstance(stored, Manifest):  # format 2: one document names every pack
        return keys + [layout.pack_key(tenant, p) for p in stored.packs]
    for hex_digest in stored.chunk_keys:
        ckey = layout.chunk_key(tenant, hex_digest)
        keys.append(ckey)
        if hex_digest not in out.chunks:
            out.chunks[hex_digest] = _packs_of_chunk(store, tenant, ckey, who, out.problems)
        keys.extend(out.chunks[hex_digest] or ())
    keys.extend(layout.sample_key(tenant, hex_digest) for hex_digest in stored.sample_keys)
    if stored.delta_key:
        keys.append(layout.delta_key(tenant, stored.delta_key))
    if stored.superseded_key:
        skey = layout.superseded_key(tenant, stored.superseded_key)
        keys.append(skey)
        keys.extend(_packs_of_copies(store, tenant, skey, who, out.problems))
    # The root's own list of packs too: a chunk that cannot be read still keeps what its
    # version's root names (and the problem keeps gc from deleting anything of the tenant).
    return keys + [layout.pack_key(tenant, p) for p in stored.packs]


def _packs_of_copies(
    store: BlobStore, tenant: str, skey: str, who: str, problems: list[str]
) -> list[str]:
    try:
        copies = superseded_from_bytes(store.get(skey))
    except NotFound:
        problems.append(f"the superseded copies {skey} of {who} are missing")
        return []
    except CaseshelfError as exc:
        problems.append(f"the superseded copies {skey} of {who}: {exc.detail}")
        return []
    return [layout.pack_key(tenant, p) for p in {loc.container for loc in copies.values()}]


def _packs_of_chunk(
    store: BlobStore, tenant: str, ckey: str, who: str, problems: list[str]
) -> list[str] | None:
    try:
        data = store.get(ckey)
    except NotFound:
        problems.append(f"the manifest chunk {ckey} of {who} is missing")
        return None
    try:
        chunk = chunk_from_bytes(data)
    except CaseshelfError as exc:
        problems.append(f"the manifest chunk {ckey} of {who}: {exc.detail}")
        return None
    return [layout.pack_key(tenant, p) for p in chunk.packs]


def referenced_keys(store: BlobStore, index: Index, tenant: str) -> tuple[set[str], list[str]]:
    """Every object key a committed version of `tenant` reaches, and the problems that make the
    answer incomplete (a manifest that cannot be read)."""
    refs = references(store, index, tenant)
    return refs.keys, refs.problems


def objects_by_tenant(store: BlobStore) -> dict[str, list[ObjectInfo]]:
    """The objects of the areas gc looks at, by tenant, from one listing of the whole store."""
    found: dict[str, list[ObjectInfo]] = {}
    for obj in store.list(TENANTS_ROOT):
        parts = obj.key.split("/", 3)
        if len(parts) < 4 or parts[2] + "/" not in AREAS:
            continue
        try:
            tenant = layout.check_tenant(parts[1])
        except CaseshelfError:
            continue  # not a key this store writes
        found.setdefault(tenant, []).append(obj)
    return found


def collect_garbage(
    store: BlobStore,
    index: Index,
    *,
    now: float,
    grace_seconds: float,
    delete: bool,
    on_tenant: Callable[[str], None] | None = None,
    fence: WriteFence | None = None,
    batch_size: int = SWEEP_BATCH,
) -> GcReport:
    """Find (and with `delete`, remove) unreferenced packs, blobs and manifests older than
    `grace_seconds` at `now` (POSIX seconds), for every tenant of the index.

    A tenant whose references cannot all be read (a missing or corrupt manifest), or that
    references an object the store does not hold, is reported and left untouched: gc never
    deletes on an incomplete picture. Deletions happen in sweeps of `batch_size` objects, each
    under the tenant's write fence (`caseshelf.services.fence`): never while a registration of
    that tenant is in flight, and with the references read again inside the sweep, so an object
    a registration has just reused is kept.
    """
    fence = fence or WriteFence(index)
    started = time.monotonic()
    report = GcReport(deleted=delete)
    in_store = objects_by_tenant(store)
    for tenant in sorted(set(index.list_tenants()) | set(in_store)):
        report.tenants.append(tenant)
        listed = in_store.get(tenant, [])
        refs = references(store, index, tenant)
        report.scanned_count += len(listed)
        present = {o.key for o in listed}
        missing = sorted(k for k in refs.owner if k not in present and not store.exists(k))
        for key in missing:
            report.missing.append({"key": key, "referenced_by": refs.owner[key]})
        problems = refs.problems + [
            f"{refs.owner[k]} references {k}, which the store does not hold" for k in missing
        ]
        if problems:
            report.problems.extend(f"tenant {tenant}: {p}; nothing deleted" for p in problems)
            if on_tenant:
                on_tenant(tenant)
            continue
        found = []
        for obj in listed:
            if obj.key in refs.owner:
                report.referenced_count += 1
                continue
            age = now - obj.last_modified
            if age < grace_seconds:
                report.fresh_count += 1
                continue
            found.append(Orphan(obj.key, obj.size, age))
        if delete and found:
            found = _sweep(
                store, index, fence, tenant, found, refs, report, now, started, batch_size
            )
        report.orphans.extend(found)
        if on_tenant:
            on_tenant(tenant)
    return report


def _sweep(
    store: BlobStore,
    index: Index,
    fence: WriteFence,
    tenant: str,
    found: list[Orphan],
    refs: References,
    report: GcReport,
    now: float,
    started: float,
    batch_size: int,
) -> list[Orphan]:
    """Delete `found` in batches, each inside a sweep of the fence; answers what was deleted."""
    deleted: list[Orphan] = []
    for at in range(0, len(found), batch_size):
        sweep = fence.begin_sweep(tenant, now + time.monotonic() - started)
        if isinstance(sweep, str):
            left = len(found) - at
            report.problems.append(
                f"tenant {tenant}: {left} unreferenced objects not deleted: {sweep}; "
                "run gc again later"
            )
            break
        try:
            # Inside the sweep no registration is in flight: what the index holds now is all
            # that can reference anything. Read it again (new manifests only).
            refs = references(store, index, tenant, known=refs)
            if refs.problems:
                report.problems.extend(f"tenant {tenant}: {p}; stopped" for p in refs.problems)
                break
            for orphan in found[at : at + batch_size]:
                if orphan.key in refs.owner:
                    report.reused_count += 1  # a registration reused it since the listing
                    continue
                if not fence.sweep_alive(sweep, now + time.monotonic() - started):
                    report.problems.append(
                        f"tenant {tenant}: the sweep ran out of time; run gc again"
                    )
                    return deleted
                store.delete(orphan.key)
                deleted.append(orphan)
        finally:
            fence.end_sweep(sweep)
    return deleted
