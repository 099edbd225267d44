"""A version registered against a base keeps copies of the base's records it superseded, and a
diff of the two reads them there: the same answer as reading every record from its own pack, in
a handful of reads. The same on every backend."""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace
from typing import Any

import pytest

from caseshelf.domain import layout
from caseshelf.domain.chunks import split_manifest
from caseshelf.domain.diff import delta_bytes
from caseshelf.domain.identity import Identity
from caseshelf.domain.manifest import Location, superseded_indices
from caseshelf.services.diff import DiffService
from caseshelf.services.gc import collect_garbage
from caseshelf.services.registry import RegistryService, parse_dataset, parse_head
from caseshelf.services.registry import writer as registry_writer
from caseshelf.services.storage import read_cases
from tests.conftest import Backend

pytestmark = [pytest.mark.contract, pytest.mark.services]

ME = Identity("acme", "alice")


def cases(
    n: int, *, changed: frozenset[int] | set[int] = frozenset(), removed: set[int] | None = None
) -> list[dict[str, Any]]:
    removed = removed or set()
    return [
        {
            "id": f"q{i:04d}",
            "inputs": {"user": f"How many apples are {i} and {i}?"},
            "expectations": {"ground_truth": str(2 * i + (1 if i in changed else 0))},
        }
        for i in range(n)
        if i not in removed
    ]


def register(reg: RegistryService, version: str, docs: list[dict[str, Any]], **extra: Any) -> Any:
    return reg.register(ME, parse_dataset({"id": "ds", "version": version, "cases": docs, **extra}))


def diff_of(svc: Any, a: str, b: str, **kw: Any) -> dict[str, Any]:
    res = svc.diff_versions(ME, "ds", a, b, **kw)
    return {
        "summary": res.summary,
        "added": [(c.id, c.user) for c in res.added],
        "removed": [(c.id, c.user) for c in res.removed],
        "changed": [(c.id, c.changes) for c in res.changed],
        "reads": res.stats.objects_read,
    }


def test_a_version_keeps_copies_of_the_base_records_it_superseded(backend: Backend) -> None:
    reg = backend.services.registry
    # Given v1 of 300 cases, and v2 with every 30th case changed and two removed
    v1 = register(reg, "1", cases(300))
    assert v1.stats.superseded_copied == 0  # (no base: nothing superseded)
    changed, removed = set(range(0, 300, 30)), {7, 8}
    v2 = register(reg, "2", cases(300, changed=changed, removed=removed))
    # Then v2 keeps a copy of exactly the base records it no longer holds, byte for byte
    base_m, new_m = reg.manifest(v1.record), reg.manifest(v2.record)
    assert v2.stats.superseded_copied == len(changed) + len(removed)
    wanted = sorted(changed | removed)
    originals = read_cases(reg.store, "acme", base_m, wanted)
    copies = new_m.superseded_locations()
    assert copies == reg.superseded(v2.record)  # (an object of their own, named by the root)
    assert set(copies) == {base_m.digests[i] for i in wanted}
    for i in wanted:
        loc = copies[base_m.digests[i]]
        key = f"t/acme/packs/{loc.container}"
        assert reg.store.get_range(key, loc.offset, loc.length) == originals[i]
        assert hashlib.sha256(originals[i]).hexdigest() == base_m.digests[i]
    # And the copies are counted among the bytes written (about 2x the change, well under v1)
    assert v2.stats.case_bytes_written < v1.stats.case_bytes_written * 0.15
    # And they are storage only: the content digest is what v2's cases make it
    again = register(reg, "2", cases(300, changed=changed, removed=removed))
    assert again.record.content_digest == v2.record.content_digest and not again.created


def test_a_diff_reads_the_copies_and_answers_as_without_them(backend: Backend) -> None:
    reg = backend.services.registry
    register(reg, "1", cases(400))
    register(reg, "2", cases(400, changed=set(range(3, 400, 40)), removed={5}))
    with_copies = backend.services.diff
    without = DiffService(
        reg,
        max_gap_bytes=with_copies.max_gap_bytes,
        read_workers=with_copies.read_workers,
        read_copies=False,
    )
    for a, b in (("1", "2"), ("2", "1")):  # the copies serve either direction
        got, plain = diff_of(with_copies, a, b), diff_of(without, a, b)
        assert {k: v for k, v in got.items() if k != "reads"} == {
            k: v for k, v in plain.items() if k != "reads"
        }
        assert got["summary"]["changed"] == 10 and len(got["removed" if a == "1" else "added"]) == 1
        assert got["reads"] <= 3  # the copies in one span, the new records in another
    # Without the copies, the narrow plan reads the changed cases one by one
    narrow = DiffService(reg, max_gap_bytes=0, read_copies=False)
    assert diff_of(narrow, "1", "2")["reads"] > 10


def test_a_copy_that_does_not_match_its_digest_is_not_used(backend: Backend, monkeypatch) -> None:
    reg = backend.services.registry
    register(reg, "1", cases(50))
    v2 = register(reg, "2", cases(50, changed={10, 20}))
    expected = diff_of(DiffService(reg, read_copies=False), "1", "2")
    # Given v2's copies pointing at the wrong bytes (another record of the same pack)
    wrong = {d: replace(loc, offset=0) for d, loc in reg.superseded(v2.record).items()}
    assert len(wrong) == 2
    real = reg.superseded
    monkeypatch.setattr(reg, "superseded", lambda rec: wrong if rec == v2.record else real(rec))
    # Then the diff notices and reads each case's own record instead
    got = diff_of(backend.services.diff, "1", "2")
    assert {k: v for k, v in got.items() if k != "reads"} == {
        k: v for k, v in expected.items() if k != "reads"
    }


def test_large_changes_are_not_copied(backend: Backend, monkeypatch) -> None:
    reg = backend.services.registry
    register(reg, "1", cases(100))
    monkeypatch.setattr(registry_writer, "SUPERSEDED_MAX_RECORDS", 5)
    v2 = register(reg, "2", cases(100, changed=set(range(0, 100, 10))))
    assert v2.stats.superseded_copied == 0 and not reg.manifest(v2.record).superseded_digests
    monkeypatch.setattr(registry_writer, "SUPERSEDED_MAX_RECORDS", 1000)
    monkeypatch.setattr(registry_writer, "SUPERSEDED_MAX_BYTES", 100)
    v3 = register(reg, "3", cases(100, changed=set(range(0, 100, 9))))
    assert v3.stats.superseded_copied == 0
    # (and the diff reads every record from its own pack, with the same answer as ever)
    assert diff_of(backend.services.diff, "2", "3")["summary"]["changed"] > 0


def test_gc_keeps_the_copies_of_a_live_version(backend: Backend) -> None:
    reg = backend.services.registry
    register(reg, "1", cases(120))
    v2 = register(reg, "2", cases(120, changed={1, 60, 119}))
    copies = reg.manifest(v2.record).superseded_locations()
    later = time.time() + 1000 * 3600
    report = collect_garbage(reg.store, reg.index, now=later, grace_seconds=3600, delete=True)
    assert report.problems == []
    for loc in copies.values():
        assert reg.store.exists(f"t/acme/packs/{loc.container}")
    got = diff_of(backend.services.diff, "1", "2")
    assert got["summary"]["changed"] == 3


def test_an_import_keeps_copies_too(backend: Backend) -> None:
    # Given a recipe import, then the same import with two rows changed
    recipe = {
        "id": "mini",
        "version": "1.0.0",
        "category": "qa",
        "source": {"kind": "jsonl"},
        "mapping": {"task_field": "q", "answer_field": "a"},
    }
    from caseshelf.services.imports import parse_import

    rows = [f'{{"q": "q{i}", "a": "{i}"}}' for i in range(200)]
    first = "\n".join(rows) + "\n"
    rows[3], rows[150] = '{"q": "q3", "a": "three"}', '{"q": "q150", "a": "x"}'
    second = "\n".join(rows) + "\n"
    imports = backend.services.imports
    imports.run(ME, parse_import({"recipe": recipe, "source": {"kind": "jsonl", "text": first}}))
    done = imports.run(
        ME, parse_import({"recipe": recipe, "source": {"kind": "jsonl", "text": second}})
    )
    # Then the new version keeps copies of the two records it superseded
    assert done.result.stats.superseded_copied == 2
    res = backend.services.diff.diff_versions(ME, "mini", "1.0.0", "1.1.0")
    assert [c.id for c in res.changed] == ["mini-3", "mini-150"]
    assert res.stats.objects_read <= 2


def test_a_manifest_without_copies_is_written_as_before(backend: Backend) -> None:
    reg = backend.services.registry
    v1 = register(reg, "1", cases(10))
    raw = reg.store.get(v1.record.manifest_key)
    assert b'"superseded"' not in raw
    m = reg.manifest(v1.record)
    assert m.superseded_locations() == {}
    with_one = m.with_superseded([(m.digests[0], Location(m.packs[0], 0, 5))])
    assert with_one.packs == m.packs  # the pack was already listed
    assert with_one.superseded_locations() == {m.digests[0]: Location(m.packs[0], 0, 5)}


def reshaped(n: int) -> list[dict[str, Any]]:
    """v2 of `cases(n)` with cases changed, removed, added (two of them with the content of a
    base case under a new id), one moved: its batches stop lining up with the base."""
    docs = cases(n, changed={5, 700, n - 1}, removed={11, 1500})
    docs.insert(40, {**docs[900], "id": "again-900"})
    docs.insert(2000, {"id": "new-1", "inputs": {"user": "new"}})
    docs.append({**docs[3], "id": "again-3"})
    docs.insert(100, docs.pop(2500))
    return docs


def edited(n: int) -> list[dict[str, Any]]:
    """v2 of `cases(n)` with every 97th case changed and the last 300 removed: every batch lines
    up with the base (read a chunk at a time), the removed tail read after the last case."""
    return cases(n - 300, changed=set(range(3, n, 97)))


@pytest.mark.parametrize("v2_of", [reshaped, edited])
def test_a_version_against_a_base_stores_what_its_whole_manifest_makes(
    backend: Backend, v2_of: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registered against a base, a version's cases are not held to the end (its change against
    the base is followed as they pass): what it stores is what the whole-manifest functions make
    of its whole manifest, byte for byte, and its content digest is its cases'."""
    reg = backend.services.registry
    # Given v1, and v2 streamed in windows of 700 cases
    v1 = register(reg, "1", cases(3000))
    docs = v2_of(3000)
    head = parse_head({"id": "ds", "version": "2"})
    whole = reg.manifest
    loaded: list[Any] = []
    monkeypatch.setattr(reg, "manifest", lambda rec: loaded.append(rec) or whole(rec))
    v2 = reg.register_stream(ME, head, [docs[i : i + 700] for i in range(0, len(docs), 700)])
    # (the base is loaded whole only where the batches stop lining up with it)
    assert len(loaded) == (1 if v2_of is reshaped else 0)
    monkeypatch.undo()
    base_m, new_m = reg.manifest(v1.record), reg.manifest(v2.record)
    # Then the root, every chunk, the superseded copies and the delta are split_manifest's and
    # delta_bytes' of the whole manifest
    root, chunks, copies, samples = split_manifest(new_m)
    delta = delta_bytes(base_m, new_m)
    assert delta is not None
    root.delta_key, root.delta_base = hashlib.sha256(delta).hexdigest(), base_m.content_digest
    stored = reg.root(v2.record)
    assert reg.store.get(v2.record.manifest_key) == root.to_bytes()
    assert reg.store.get(layout.delta_key("acme", stored.delta_key)) == delta
    assert copies is not None
    assert reg.store.get(layout.superseded_key("acme", stored.superseded_key)) == copies[1]
    for key, data in chunks:
        assert reg.store.get(layout.chunk_key("acme", key)) == data
    for key, data in samples:
        assert reg.store.get(layout.sample_key("acme", key)) == data
    # And the copies are of exactly the records superseded_indices names
    dropped = superseded_indices(base_m, new_m)
    assert set(new_m.superseded_locations()) == {base_m.digests[i] for i in dropped}
    assert v2.stats.superseded_copied == len(dropped) == (5 if v2_of is reshaped else 328)
    # And the content digest is what the same cases make without a base
    fresh = reg.register(ME, parse_dataset({"id": "fresh", "version": "1", "cases": docs}))
    assert fresh.record.content_digest == v2.record.content_digest


def test_cases_waiting_on_a_slowly_filled_pack_are_bounded(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version that reuses most of its base fills its pack of new records slowly: past
    `HELD_MAX_CASES` cases waiting on it, the pack is stored as it is, and the version is the
    same (its cases, content digest, and objects the whole manifest makes)."""
    reg = backend.services.registry
    monkeypatch.setattr(registry_writer, "HELD_MAX_CASES", 100)
    held: list[int] = []
    release = registry_writer._HeldCases.release

    def watched(self: Any, *args: Any) -> None:
        held.append(len(self))
        release(self, *args)

    monkeypatch.setattr(registry_writer._HeldCases, "release", watched)
    register(reg, "1", cases(1000))
    held.clear()
    # When v2 changes one case in 100, streamed in windows of 25
    docs = cases(1000, changed=set(range(0, 1000, 100)))
    head = parse_head({"id": "ds", "version": "2"})
    v2 = reg.register_stream(ME, head, [docs[i : i + 25] for i in range(0, 1000, 25)])
    # Then no more than the bound and a window waited, and the new records went into packs
    # of their own as they came
    assert max(held) <= 100 + 25
    assert v2.stats.pack_objects_written > 2  # (the copies of the superseded records: one)
    got = reg.list_cases(ME, "ds", "2", limit=1000).items
    assert [c["expectations"]["ground_truth"] for c in got] == [
        c["expectations"]["ground_truth"] for c in docs
    ]
    whole = reg.manifest(v2.record)
    root, chunks, _, _ = split_manifest(whole)
    assert reg.root(v2.record).chunk_keys == root.chunk_keys == [key for key, _ in chunks]
    fresh = reg.register(ME, parse_dataset({"id": "fresh", "version": "1", "cases": docs}))
    assert fresh.record.content_digest == v2.record.content_digest
