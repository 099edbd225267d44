"""Garbage collection: objects that no committed version references.

Registration writes packs, blobs and the manifest before its commit point (the version row). A
crash in between leaves objects nothing points at; `collect_garbage` finds them. An object is
collectable when no version row of its tenant (datasets and recipes, tombstoned ones included)
reaches it through its manifest, and it is older than the grace period, which spares the objects
of a registration still in flight.

The store is listed before the index is read, so a version committed while gc runs protects what
it references (it is in the index by the time the references are gathered). Tenants come from the
store as well as the index: a tenant whose first registration crashed has objects and no row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from caseshelf.domain import layout
from caseshelf.domain.errors import CaseshelfError, NotFound
from caseshelf.domain.keys import KIND_LETTER
from caseshelf.domain.manifest import FORMAT as MANIFEST_FORMAT
from caseshelf.domain.manifest import Manifest
from caseshelf.ports import BlobStore, Index, ObjectInfo

# The areas registration writes before its commit point.
AREAS = ("packs/", "blobs/", "manifests/")
TENANTS_ROOT = "t/"  # every tenant's keys are under t/<tenant>/ (`layout.root`)


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


def referenced_keys(store: BlobStore, index: Index, tenant: str) -> tuple[set[str], list[str]]:
    """Every object key a committed version of `tenant` reaches, and the problems that make the
    answer incomplete (a manifest that cannot be read)."""
    manifest_keys = {rec.manifest_key for rec in _version_rows(index, tenant) if rec.manifest_key}
    refs = set(manifest_keys)
    problems: list[str] = []
    for mkey in sorted(manifest_keys):
        try:
            data = store.get(mkey)
        except NotFound:
            problems.append(f"a committed version's manifest {mkey} is missing")
            continue
        try:
            head = orjson.loads(data)
        except orjson.JSONDecodeError:
            problems.append(f"manifest {mkey} is not JSON")
            continue
        if not isinstance(head, dict) or head.get("format") != MANIFEST_FORMAT:
            continue  # a document that references nothing further (a recipe's body)
        try:
            manifest = Manifest.from_bytes(data)
        except CaseshelfError as exc:
            problems.append(f"manifest {mkey}: {exc.detail}")
            continue
        refs.update(layout.pack_key(tenant, p) for p in manifest.packs)
        refs.update(layout.blob_key(tenant, c) for c in manifest.blob_containers)
    return refs, problems


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
) -> GcReport:
    """Find (and with `delete`, remove) unreferenced packs, blobs and manifests older than
    `grace_seconds` at `now` (POSIX seconds), for every tenant of the index.

    A tenant whose references cannot all be read (a missing or corrupt manifest) is reported and
    left untouched: gc never deletes on an incomplete picture.
    """
    report = GcReport(deleted=delete)
    in_store = objects_by_tenant(store)
    for tenant in sorted(set(index.list_tenants()) | set(in_store)):
        report.tenants.append(tenant)
        listed = in_store.get(tenant, [])
        refs, problems = referenced_keys(store, index, tenant)
        report.scanned_count += len(listed)
        if problems:
            report.problems.extend(f"tenant {tenant}: {p}; skipped" for p in problems)
            if on_tenant:
                on_tenant(tenant)
            continue
        found = []
        for obj in listed:
            if obj.key in refs:
                report.referenced_count += 1
                continue
            age = now - obj.last_modified
            if age < grace_seconds:
                report.fresh_count += 1
                continue
            found.append(Orphan(obj.key, obj.size, age))
        if delete:
            for orphan in found:
                store.delete(orphan.key)
        report.orphans.extend(found)
        if on_tenant:
            on_tenant(tenant)
    return report
