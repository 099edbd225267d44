"""gc on the embedded store: a crashed registration's objects are found, fresh ones are spared by
the grace period, and objects a committed version references (tombstoned too) never are."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from caseshelf.adapters.localfs import LocalBlobStore
from caseshelf.adapters.sqlite import SqliteIndex
from caseshelf.domain.identity import Identity
from caseshelf.domain.versions import VersionRecord
from caseshelf.services.gc import collect_garbage
from caseshelf.services.registry import RegistryService, parse_dataset

pytestmark = pytest.mark.integration

ME = Identity("team-a", "alice")
HOUR = 3600.0


class Crash(RuntimeError):
    pass


class CrashingIndex(SqliteIndex):
    """An index whose commit point fails once armed: packs and manifest are already written."""

    armed = False

    def put_version(self, rec: VersionRecord) -> None:
        if self.armed:
            raise Crash("power cut before the commit")
        super().put_version(rec)


def dataset(version: str, *cases: dict[str, Any]) -> Any:
    return parse_dataset({"id": "demo", "version": version, "cases": list(cases)})


def case(cid: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"id": cid, "inputs": {"user": text}, **extra}


World = tuple[LocalBlobStore, CrashingIndex, RegistryService]


@pytest.fixture
def world(tmp_path: Path) -> World:
    store = LocalBlobStore(tmp_path / "objects")
    index = CrashingIndex(tmp_path / "index.sqlite")
    return store, index, RegistryService(store, index)


def keys_under(store: LocalBlobStore, area: str) -> set[str]:
    return {o.key for o in store.list(f"t/team-a/{area}/")}


def test_crashed_registration_leaves_collectable_orphans(world: World) -> None:
    # Given a committed v1, then a v2 whose registration crashes at the commit point
    store, index, registry = world
    registry.register(ME, dataset("1.0.0", case("a", "one")))
    committed = keys_under(store, "packs") | keys_under(store, "manifests")
    index.armed = True
    with pytest.raises(Crash):
        registry.register(
            ME,
            dataset(
                "2.0.0",
                case("a", "one"),
                case("b", "two", files={"notes.md": {"text": "only in v2"}}),
            ),
        )
    orphaned = (
        keys_under(store, "packs") | keys_under(store, "manifests") | keys_under(store, "blobs")
    ) - committed
    # the new case pack, the blob pack, and the v2 manifest: its one chunk, its one sample
    # column, its change against v1 and its root
    assert len(orphaned) == 6
    assert sum("/manifests/chunks/" in k for k in orphaned) == 1
    assert sum("/manifests/sample/" in k for k in orphaned) == 1

    # When gc runs after the grace period
    report = collect_garbage(
        store, index, now=time.time() + 2 * HOUR, grace_seconds=HOUR, delete=False
    )

    # Then exactly the crashed registration's objects are found, and nothing is removed yet
    assert set(report.keys) == orphaned
    assert report.orphan_bytes == sum(o.size for o in store.list("t/") if o.key in orphaned)
    assert report.referenced_count == len(committed)
    assert report.tenants == ["team-a"]
    assert all(store.exists(k) for k in orphaned)


def test_fresh_orphans_are_spared_by_the_grace_period(world: World) -> None:
    # Given a crashed registration a moment ago
    store, index, registry = world
    registry.register(ME, dataset("1.0.0", case("a", "one")))
    index.armed = True
    with pytest.raises(Crash):
        registry.register(ME, dataset("2.0.0", case("b", "two")))

    # When gc runs now with a one-hour grace period, even with delete
    report = collect_garbage(store, index, now=time.time(), grace_seconds=HOUR, delete=True)

    # Then nothing is collected: the objects may belong to a registration still in flight
    assert report.orphans == []
    # the pack of v2, and its manifest: one chunk, one sample column, the copy of v1's case it
    # superseded, its change against v1, the root
    assert report.fresh_count == 6


def test_delete_removes_orphans_and_never_referenced_objects(world: World) -> None:
    # Given v1 (later tombstoned), a live v2, and a crashed v3
    store, index, registry = world
    registry.register(ME, dataset("1.0.0", case("a", "one", files={"f.txt": {"text": "x"}})))
    registry.register(ME, dataset("2.0.0", case("b", "two")))
    registry.delete_version(ME, "demo", "1.0.0")
    index.armed = True
    with pytest.raises(Crash):
        registry.register(ME, dataset("3.0.0", case("c", "three")))
    index.armed = False
    before = {o.key for o in store.list("t/")}

    # When gc deletes everything unreferenced, long after
    later = time.time() + 1000 * HOUR
    report = collect_garbage(store, index, now=later, grace_seconds=HOUR, delete=True)

    # Then only v3's objects are gone; the tombstoned v1 and the live v2 read as before
    # a pack, a chunk, a sample column, the copies, the change against v2, a root
    assert report.deleted and report.orphan_count == 6
    after = {o.key for o in store.list("t/")}
    assert before - after == set(report.keys)
    got = registry.list_cases(ME, "demo", "1.0.0", include_deleted=True)
    assert [c["id"] for c in got.items] == ["a"]
    rec = registry.get_version(ME, "demo", "1.0.0", include_deleted=True)
    assert registry.file_body(rec, got.items[0]["files"]["f.txt"]["digest"]) == b"x"
    assert [c["id"] for c in registry.list_cases(ME, "demo", "2.0.0").items] == ["b"]

    # And a second run finds nothing, and the retried v3 registers and reads back
    again = collect_garbage(store, index, now=later, grace_seconds=HOUR, delete=True)
    assert again.orphans == [] and again.problems == []
    assert registry.register(ME, dataset("3.0.0", case("c", "three"))).created
    assert [c["id"] for c in registry.list_cases(ME, "demo", "3.0.0").items] == ["c"]


def test_tenant_with_an_unreadable_manifest_is_left_alone(world: World) -> None:
    # Given a committed version whose manifest went missing, and an orphan in the same tenant
    store, index, registry = world
    rec = registry.register(ME, dataset("1.0.0", case("a", "one"))).record
    index.armed = True
    with pytest.raises(Crash):
        registry.register(ME, dataset("2.0.0", case("b", "two")))
    store.delete(rec.manifest_key)

    # When gc runs with delete
    report = collect_garbage(
        store, index, now=time.time() + 2 * HOUR, grace_seconds=HOUR, delete=True
    )

    # Then it refuses to delete on an incomplete picture, and says why
    assert report.orphans == []
    assert report.problems and rec.manifest_key in report.problems[0]
    assert keys_under(store, "packs")  # nothing removed


def test_a_crashed_first_registration_of_a_new_tenant_is_collected(world: World) -> None:
    # Given a tenant whose very first registration crashes at the commit point: the index has
    # no row of that tenant at all, only the store holds its packs and manifest
    store, index, registry = world
    index.armed = True
    with pytest.raises(Crash):
        registry.register(ME, dataset("1.0.0", case("a", "one")))
    index.armed = False
    orphaned = {o.key for o in store.list("t/team-a/")}
    assert orphaned and index.list_tenants() == []

    # When gc deletes what is unreferenced, after the grace period
    later = time.time() + 2 * HOUR
    report = collect_garbage(store, index, now=later, grace_seconds=HOUR, delete=True)

    # Then the tenant is scanned from the store and its objects are gone
    assert report.tenants == ["team-a"]
    assert set(report.keys) == orphaned
    assert list(store.list("t/team-a/")) == []
    # And the retry registers from scratch and reads back
    assert registry.register(ME, dataset("1.0.0", case("a", "one"))).created
    assert [c["id"] for c in registry.list_cases(ME, "demo", "latest").items] == ["a"]
