"""Format 3 manifests on every backend: versions that share cases share chunks (written
put-if-absent, never overwritten), readers read only the chunks they need, a crash between the
chunk writes and the root leaves only what gc collects, gc never deletes a chunk a live root
names, verify names a broken chunk by its key, and format 2 manifests read as they always did."""

from __future__ import annotations

import hashlib
import time
from bisect import bisect_right
from typing import Any

import orjson
import pytest

from caseshelf.domain import chunks as chunks_module
from caseshelf.domain.canonical import content_digest
from caseshelf.domain.diff import plan_diff
from caseshelf.domain.errors import BadRequest, Corrupt
from caseshelf.domain.identity import Identity
from caseshelf.domain.subset import SubsetRequest, select_subset
from caseshelf.services.diff import DiffService
from caseshelf.services.gc import collect_garbage
from caseshelf.services.registry import RegistryService, parse_dataset
from caseshelf.services.verify import verify_versions
from tests.conftest import Backend

pytestmark = [pytest.mark.contract, pytest.mark.services]

ME = Identity("acme", "alice")
HOUR = 3600.0


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 8 to 64 cases (about 24 on average), so a few hundred cases make many."""
    monkeypatch.setattr(chunks_module, "MIN_CASES", 8)
    monkeypatch.setattr(chunks_module, "BOUNDARY_MODULUS", 16)
    monkeypatch.setattr(chunks_module, "MAX_CASES", 64)


def cases(n: int, *, changed: set[int] | range = frozenset(), skip: set[int] = frozenset()) -> list:  # type: ignore[assignment]
    return [
        {
            "id": f"q{i:04d}",
            "inputs": {"user": f"How many apples are {i} and {i}?"},
            "expectations": {"ground_truth": str(2 * i + (1 if i in changed else 0))},
            "tags": ["even" if i % 2 == 0 else "odd"] + (["rare"] if i == 321 else []),
        }
        for i in range(n)
        if i not in skip
    ]


def register(reg: RegistryService, version: str, docs: list[dict[str, Any]]) -> Any:
    return reg.register(ME, parse_dataset({"id": "ds", "version": version, "cases": docs}))


class CountingStore:
    """Counts reads of manifest chunks, sample columns and roots; can refuse the root writes (a
    crash)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.chunk_reads: list[str] = []
        self.sample_reads: list[str] = []
        self.root_reads = 0
        self.fail_roots = False

    def get(self, key: str) -> bytes:
        if "/manifests/chunks/" in key:
            self.chunk_reads.append(key)
        elif "/manifests/sample/" in key:
            self.sample_reads.append(key)
        elif "/manifests/" in key:
            self.root_reads += 1
        return self.inner.get(key)

    def put_if_absent(self, key: str, data: bytes, **kw: Any) -> bool:
        if self.fail_roots and "/manifests/" in key and "/chunks/" not in key:
            raise RuntimeError("crash before the root")
        return self.inner.put_if_absent(key, data, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def gc_long_after(backend: Backend, *, delete: bool) -> Any:
    """`gc` run long after every write (past its grace period): what it keeps and collects."""
    return collect_garbage(
        backend.store,
        backend.index,
        now=time.time() + 1000 * HOUR,
        grace_seconds=HOUR,
        delete=delete,
    )


def chunk_keys(backend: Backend) -> set[str]:
    return {o.key for o in backend.store.list("t/acme/manifests/chunks/")}


def test_versions_that_share_cases_share_chunks(backend: Backend) -> None:
    reg = backend.services.registry
    # Given v1 of 600 cases, and v2 with a run of 20 cases changed and 3 removed
    v1 = register(reg, "1", cases(600))
    first = chunk_keys(backend)
    before = {k: backend.store.get(k) for k in first}
    v2 = register(reg, "2", cases(600, changed=range(300, 320), skip={100, 101, 102}))
    r1, r2 = reg.root(v1.record), reg.root(v2.record)
    # Then v1 is many chunks, and v2 names most of them again
    assert len(r1.chunk_keys) >= 10
    new = set(r2.chunk_keys) - set(r1.chunk_keys)
    assert 1 <= len(new) <= 6 and len(new) < len(r2.chunk_keys) // 2
    assert chunk_keys(backend) == first | {f"t/acme/manifests/chunks/{k}" for k in new}
    # And no chunk v1 wrote was written over
    assert all(backend.store.get(k) == data for k, data in before.items())
    # And the content digest is over the cases, never the layout
    m2 = reg.manifest(v2.record)
    assert v2.record.content_digest == content_digest(
        description="",
        tags=[],
        shared_files=[],
        case_digests=((cid, "sha256:" + d) for _, cid, d in m2.iter_cases()),
    )
    again = register(reg, "2", cases(600, changed=range(300, 320), skip={100, 101, 102}))
    assert not again.created and again.record.content_digest == v2.record.content_digest


def test_a_page_reads_the_root_and_the_chunks_it_covers(backend: Backend) -> None:
    counting = CountingStore(backend.store)
    services = backend.rebuild(store=counting)  # type: ignore[arg-type]
    reg = services.registry
    register(reg, "1", cases(600))
    fresh = backend.rebuild(store=counting).registry  # type: ignore[arg-type]
    rec = fresh.get_version(ME, "ds", "1")
    root = fresh.root(rec)
    counting.chunk_reads.clear()
    body, nxt = fresh.case_page_json(ME, "ds", "1", cursor=None, limit=10)
    page = orjson.loads(body)
    assert [c["id"] for c in page["items"]] == [f"q{i:04d}" for i in range(10)]
    assert counting.chunk_reads == [f"t/acme/manifests/chunks/{root.chunk_keys[0]}"]
    # A page further on, across a chunk boundary: the two chunks it covers, no more
    start = root.chunk_starts()[3] - 2
    counting.chunk_reads.clear()
    got = fresh.list_cases(ME, "ds", "1", cursor=_cursor(fresh, start), limit=5)
    assert [c["id"] for c in got.items] == [f"q{i:04d}" for i in range(start, start + 5)]
    assert {k.rsplit("/", 1)[1] for k in counting.chunk_reads} == set(root.chunk_keys[2:4])
    # And every case, chunk by chunk, is the whole manifest's
    whole = fresh.manifest(rec)
    ids = [cid for _, chunk in fresh.iter_chunks(rec) for cid in chunk.ids]
    assert ids == whole.ids and nxt is not None


def _cursor(reg: RegistryService, position: int) -> str:
    from caseshelf.domain.paging import encode_position

    return encode_position(position)


def test_a_diff_reads_only_the_chunks_that_differ(backend: Backend) -> None:
    counting = CountingStore(backend.store)
    reg = backend.rebuild(store=counting).registry  # type: ignore[arg-type]
    v1 = register(reg, "1", cases(600))
    v2 = register(reg, "2", cases(620, changed=range(300, 310), skip={50}))
    r1, r2 = reg.root(v1.record), reg.root(v2.record)
    differing = set(r1.chunk_keys) ^ set(r2.chunk_keys)
    fresh = backend.rebuild(store=counting)  # type: ignore[arg-type]
    # (the diff of a pair whose one side keeps no change against the other)
    by_chunks = DiffService(fresh.registry, use_deltas=False)
    counting.chunk_reads.clear()
    res = by_chunks.diff_versions(ME, "ds", "1", "2")
    read = {k.rsplit("/", 1)[1] for k in counting.chunk_reads}
    assert read == differing and len(read) < (len(r1.chunk_keys) + len(r2.chunk_keys)) // 3
    # And the answer is the one of the whole manifests
    plan = plan_diff(reg.manifest(v1.record), reg.manifest(v2.record))
    assert res.plan == plan
    assert res.summary == {"added": 20, "removed": 1, "changed": 10, "unchanged": 589}
    assert [c.id for c in res.changed] == [f"q{i:04d}" for i in range(300, 310)]
    assert [c.id for c in res.removed] == ["q0050"]
    # Either direction; and a version against itself reads no chunk
    back = by_chunks.diff_versions(ME, "ds", "2", "1")
    assert back.summary == {"added": 1, "removed": 20, "changed": 10, "unchanged": 589}
    counting.chunk_reads.clear()
    assert by_chunks.diff_versions(ME, "ds", "2", "2").summary["unchanged"] == 619
    assert counting.chunk_reads == []


def test_a_diff_against_the_registration_base_reads_the_kept_change(backend: Backend) -> None:
    counting = CountingStore(backend.store)
    reg = backend.rebuild(store=counting).registry  # type: ignore[arg-type]
    v1 = register(reg, "1", cases(600))
    v2 = register(reg, "2", cases(620, changed=range(300, 310), skip={50}))
    r2 = reg.root(v2.record)
    assert r2.delta_key and r2.delta_base == v1.record.content_digest
    m1, m2 = reg.manifest(v1.record), reg.manifest(v2.record)
    by_chunks = DiffService(backend.rebuild().registry, use_deltas=False)
    for base, candidate, whole in (("1", "2", plan_diff(m1, m2)), ("2", "1", plan_diff(m2, m1))):
        # When a fresh service diffs v2 and the base it was registered against, either way
        fresh = backend.rebuild(store=counting)  # type: ignore[arg-type]
        counting.chunk_reads.clear()
        got = fresh.diff.diff_versions(ME, "ds", base, candidate)
        # Then it reads no chunk, and answers what the whole manifests and the chunks do
        assert counting.chunk_reads == []
        assert got.plan == whole
        expected = by_chunks.diff_versions(ME, "ds", base, candidate)
        assert got.added == expected.added and got.removed == expected.removed
        assert got.changed == expected.changed
    # And verify checks the kept change; a damaged one is named, and refused by a diff
    assert verify_versions(backend.store, [v1.record, v2.record]).ok
    key = f"t/acme/manifests/delta/{r2.delta_key}"
    data = backend.store.get(key)
    backend.store.delete(key)
    backend.store.put(key, data.replace(b"q03", b"x03", 1))
    report = verify_versions(backend.store, [v2.record])
    assert {(p.kind, p.key) for p in report.problems} == {("corrupt", key)}
    with pytest.raises(Corrupt) as err:
        backend.rebuild().diff.diff_versions(ME, "ds", "1", "2")
    assert err.value.fields["key"] == key


def test_a_diff_sees_shared_chunks_move(backend: Backend) -> None:
    reg = backend.services.registry
    docs = cases(300)
    register(reg, "1", docs)
    register(reg, "2", docs[150:] + docs[:150])  # the same cases, halves swapped
    res = backend.services.diff.diff_versions(ME, "ds", "1", "2")
    assert res.summary == {"added": 0, "removed": 0, "changed": 0, "unchanged": 300}
    assert res.plan.order_changed


def test_a_selection_by_tag_reads_only_the_sample_column_that_carries_it(
    backend: Backend,
) -> None:
    counting = CountingStore(backend.store)
    services = backend.rebuild(store=counting)  # type: ignore[arg-type]
    v1 = register(services.registry, "1", cases(600))
    root = services.registry.root(v1.record)
    assert root.root_format == chunks_module.ROOT_FORMAT and root.sample_tags
    fresh = backend.rebuild(store=counting)  # type: ignore[arg-type]
    # When a fresh service selects the one case carrying a tag
    counting.chunk_reads.clear()
    got = fresh.selection.select_subset(ME, "ds", "1", SubsetRequest(tags=["rare"]))
    # Then it read the one sample column covering it, and no chunk
    assert got.case_ids == ["q0321"]
    assert got.subset.stamp is not None
    assert (got.subset.stamp.selected, got.subset.stamp.total) == (1, 600)
    assert got.subset.indices == [321]
    assert counting.chunk_reads == [] and len(counting.sample_reads) == 1
    # And tags + limit reads the first columns only, a sample the column covering its limit
    counting.sample_reads.clear()
    odd = fresh.selection.select_subset(ME, "ds", "1", SubsetRequest(tags=["odd"], limit=5))
    assert odd.case_ids == ["q0001", "q0003", "q0005", "q0007", "q0009"]
    assert counting.chunk_reads == [] and len(counting.sample_reads) == 1
    counting.sample_reads.clear()
    first = fresh.selection.select_subset(ME, "ds", "1", SubsetRequest(limit=5, sample=2))
    assert first.subset.stamp is not None and first.subset.stamp.selected == 2
    assert counting.chunk_reads == [] and len(counting.sample_reads) == 1
    # And with the cases asked for, the chunks holding the selected cases are read once each
    # (they say where the cases are), and no other
    counting.sample_reads.clear()
    with_cases = fresh.selection.select_subset(
        ME, "ds", "1", SubsetRequest(tags=["rare"]), with_cases=True
    )
    assert with_cases.cases is not None and [c["id"] for c in with_cases.cases] == ["q0321"]
    assert len(counting.sample_reads) == 1 and len(counting.chunk_reads) == 1
    counting.chunk_reads.clear()
    again = backend.rebuild(store=counting)  # type: ignore[arg-type]
    picked = again.selection.select_subset(
        ME, "ds", "1", SubsetRequest(tags=["odd"], limit=100, sample=30), with_cases=True
    )
    assert picked.cases is not None and [c["id"] for c in picked.cases] == picked.case_ids
    starts = root.chunk_starts()
    holding = {bisect_right(starts, i) - 1 for i in picked.subset.indices}
    assert sorted(counting.chunk_reads) == sorted(
        {f"t/acme/manifests/chunks/{root.chunk_keys[n]}" for n in holding}
    )
    # And every selection answers what it answers over the whole manifest
    whole = fresh.registry.manifest(v1.record)
    for request in (
        SubsetRequest(tags=["odd"], sample=7),
        SubsetRequest(tags=["odd", "rare"], limit=40, sample=9, seed="s"),
        SubsetRequest(tags=["even"], limit=250),
        SubsetRequest(tags=["absent", "rare"]),
        SubsetRequest(ids=["q0599", "q0321", "q0002"], tags=["rare", "even"]),
        SubsetRequest(ids=["q0599", "q0000"], limit=1),
        SubsetRequest(limit=70),
        SubsetRequest(sample=50, seed="x"),
        SubsetRequest(limit=400, sample=9),
    ):
        part = fresh.selection.select_subset(ME, "ds", "1", request)
        expected = select_subset(whole, request.selection(), dataset_id="ds", version="1")
        assert part.subset == expected, request
        assert part.case_ids == [whole.ids[i] for i in expected.indices]
    # And a tag no case carries reads nothing more and matches nothing
    counting.sample_reads.clear()
    counting.chunk_reads.clear()
    with pytest.raises(BadRequest, match="matches no case"):
        fresh.selection.select_subset(ME, "ds", "1", SubsetRequest(tags=["absent"]))
    assert counting.sample_reads == [] and counting.chunk_reads == []
    # And the whole version's ids come from the columns too
    counting.chunk_reads.clear()
    everything = fresh.selection.select_subset(ME, "ds", "1", SubsetRequest())
    assert everything.case_ids == whole.ids and counting.chunk_reads == []


def as_format_4(backend: Backend, rec: Any) -> list[str]:
    """Store `rec`'s root as format 4 (sample columns without tags), as versions registered
    before format 5 are: its format 4 columns written beside the format 5 ones. Answers the
    keys of the format 5 columns, which the root no longer names."""
    reg = backend.rebuild().registry
    root, whole = reg.root(rec), reg.manifest(rec)
    starts = root.sample_starts()
    old = [f"t/acme/manifests/sample/{k}" for k in root.sample_keys]
    keys = []
    for n in range(len(root.sample_keys)):
        data = chunks_module.sample_column_bytes(whole, starts[n], starts[n + 1], tags=False)
        key = hashlib.sha256(data).hexdigest()
        backend.store.put_if_absent(f"t/acme/manifests/sample/{key}", data)
        keys.append(key)
    doc = orjson.loads(backend.store.get(rec.manifest_key))
    doc["format"] = "caseshelf.manifest/4"
    doc["sample"]["keys"] = "".join(keys)
    backend.store.delete(rec.manifest_key)
    backend.store.put(rec.manifest_key, orjson.dumps(doc))
    return old


def test_a_format_4_root_selects_by_tags_from_its_chunks(backend: Backend) -> None:
    reg = backend.services.registry
    v1 = register(reg, "1", cases(600))
    # Given v1's root stored as format 4: sample columns of ids and digest prefixes only
    unnamed = as_format_4(backend, v1.record)
    counting = CountingStore(backend.store)
    fresh = backend.rebuild(store=counting)  # type: ignore[arg-type]
    root = fresh.registry.root(v1.record)
    assert root.root_format == "caseshelf.manifest/4" and not root.sample_tags
    # When it is selected by tags
    got = fresh.selection.select_subset(ME, "ds", "1", SubsetRequest(tags=["rare"]))
    # Then the chunk carrying the tag is read, and no sample column
    assert got.case_ids == ["q0321"]
    assert counting.sample_reads == [] and len(counting.chunk_reads) == 1
    # And a sample still reads the columns, ids and a limit too, with the same answers
    whole = fresh.registry.manifest(v1.record)
    for request in (
        SubsetRequest(sample=30, seed=3),
        SubsetRequest(limit=100, sample=4),
        SubsetRequest(ids=["q0004", "q0001"]),
        SubsetRequest(tags=["odd"], limit=300),
    ):
        counting.chunk_reads.clear()
        counting.sample_reads.clear()
        part = fresh.selection.select_subset(ME, "ds", "1", request)
        expected = select_subset(whole, request.selection(), dataset_id="ds", version="1")
        assert part.subset == expected, request
        assert part.case_ids == [whole.ids[i] for i in expected.indices]
        assert bool(counting.sample_reads) != (request.tags is not None)
    # And verify takes the root and its columns; gc keeps them and collects the others
    assert verify_versions(backend.store, [v1.record]).ok
    report = gc_long_after(backend, delete=False)
    assert report.problems == [] and {o.key for o in report.orphans} == set(unnamed)


def test_a_format_5_root_naming_columns_without_tags_is_refused(backend: Backend) -> None:
    reg = backend.services.registry
    v1 = register(reg, "1", cases(300))
    # Given a format 5 root whose sample columns were swapped for ones without tags
    as_format_4(backend, v1.record)
    key = v1.record.manifest_key
    doc = orjson.loads(backend.store.get(key))
    doc["format"] = chunks_module.ROOT_FORMAT
    backend.store.delete(key)
    backend.store.put(key, orjson.dumps(doc))
    # Then a selection by tags refuses it, naming the root, and verify names every column
    with pytest.raises(Corrupt, match="carry no tags") as err:
        backend.rebuild().selection.select_subset(ME, "ds", "1", SubsetRequest(tags=["odd"]))
    assert err.value.fields["key"] == key
    problems = verify_versions(backend.store, [v1.record]).problems
    named = backend.rebuild().registry.root(v1.record).sample_keys
    names = {f"t/acme/manifests/sample/{k}" for k in named}
    assert {p.key for p in problems} == names and all(p.kind == "corrupt" for p in problems)


def test_verify_names_a_sample_column_whose_tags_are_not_its_cases(backend: Backend) -> None:
    reg = backend.services.registry
    v1 = register(reg, "1", cases(300))
    # Given a root naming a sample column (stored under its own digest) whose tags were changed
    key = v1.record.manifest_key
    doc = orjson.loads(backend.store.get(key))
    first = doc["sample"]["keys"][:64]
    data = backend.store.get(f"t/acme/manifests/sample/{first}")
    wrong = data.replace(b'"odd"', b'"rare"', 1)
    assert wrong != data
    forged = hashlib.sha256(wrong).hexdigest()
    backend.store.put_if_absent(f"t/acme/manifests/sample/{forged}", wrong)
    doc["sample"]["keys"] = forged + doc["sample"]["keys"][64:]
    backend.store.delete(key)
    backend.store.put(key, orjson.dumps(doc))
    # Then verify names it
    problems = verify_versions(backend.store, [v1.record]).problems
    assert [(p.kind, p.key) for p in problems] == [("corrupt", f"t/acme/manifests/sample/{forged}")]
    assert "tags" in problems[0].detail


def test_a_crash_before_the_root_leaves_only_what_gc_collects(backend: Backend) -> None:
    counting = CountingStore(backend.store)
    reg = backend.rebuild(store=counting).registry  # type: ignore[arg-type]
    v1 = register(reg, "1", cases(600))
    shared = chunk_keys(backend)
    # Given a registration of v2 that crashes after its chunks, before its root
    counting.fail_roots = True
    with pytest.raises(RuntimeError):
        register(reg, "2", cases(600, changed=range(10, 20)))
    counting.fail_roots = False
    orphans = chunk_keys(backend) - shared
    assert orphans  # its new chunks are there, named by no root
    assert [r.version for r in backend.index.list_versions("acme", "dataset", "ds")] == ["1"]
    # When gc runs, long after
    later = time.time() + 1000 * HOUR
    report = collect_garbage(
        backend.store, backend.index, now=later, grace_seconds=HOUR, delete=True
    )
    # Then the crashed chunks (and pack) are gone, and v1's chunks stay
    assert report.problems == [] and orphans <= set(report.keys)
    assert chunk_keys(backend) == shared
    assert verify_versions(backend.store, [v1.record]).ok


def test_gc_keeps_a_chunk_a_crashed_registration_wrote_and_a_live_root_reuses(
    backend: Backend,
) -> None:
    counting = CountingStore(backend.store)
    reg = backend.rebuild(store=counting).registry  # type: ignore[arg-type]
    register(reg, "1", cases(200))
    counting.fail_roots = True
    with pytest.raises(RuntimeError):
        register(reg, "2", cases(200, changed={5}))
    counting.fail_roots = False
    # Given the same v2 registered again: its chunks are already there (put-if-absent)
    v2 = register(reg, "2", cases(200, changed={5}))
    # When gc deletes everything unreferenced older than no time at all
    report = collect_garbage(
        backend.store, backend.index, now=time.time() + 10, grace_seconds=0, delete=True
    )
    # Then every chunk v2's root names is kept, and v2 reads whole
    assert report.problems == []
    names = {f"t/acme/manifests/chunks/{k}" for k in reg.root(v2.record).chunk_keys}
    assert names <= chunk_keys(backend) and not names & set(report.keys)
    assert verify_versions(backend.store, [v2.record]).ok


def test_verify_names_a_broken_chunk_by_its_key(backend: Backend) -> None:
    reg = backend.services.registry
    v1 = register(reg, "1", cases(300))
    keys = [f"t/acme/manifests/chunks/{k}" for k in reg.root(v1.record).chunk_keys]
    damaged, gone = keys[1], keys[2]
    data = backend.store.get(damaged)
    backend.store.delete(damaged)
    backend.store.put(damaged, data.replace(b"q0", b"x0", 1))
    backend.store.delete(gone)
    report = verify_versions(backend.store, [v1.record])
    assert {(p.kind, p.key) for p in report.problems} == {("corrupt", damaged), ("missing", gone)}
    # And a read of a page in the damaged chunk refuses it, naming the key
    fresh = backend.rebuild().registry
    start = fresh.root(v1.record).chunk_starts()[1]
    with pytest.raises(Corrupt) as err:
        fresh.list_cases(ME, "ds", "1", cursor=_cursor(fresh, start), limit=1)
    assert err.value.fields["key"] == damaged


def test_a_format_2_manifest_reads_as_it_always_did(backend: Backend) -> None:
    reg = backend.services.registry
    v1 = register(reg, "1", cases(300))
    v2 = register(reg, "2", cases(300, changed={3, 200}))
    # Given v1's manifest stored as format 2 (one document), as before format 3
    whole = reg.manifest(v1.record)
    key = v1.record.manifest_key
    backend.store.delete(key)
    backend.store.put(key, whole.to_bytes())
    fresh = backend.rebuild()
    # Then every reader reads it: pages, the whole manifest, diff, selection, verify, gc
    assert fresh.registry.manifest(v1.record).ids == whole.ids
    page = fresh.registry.list_cases(ME, "ds", "1", cursor=_cursor(fresh.registry, 290), limit=20)
    assert [c["id"] for c in page.items] == [f"q{i:04d}" for i in range(290, 300)]
    res = fresh.diff.diff_versions(ME, "ds", "1", "2")
    assert [c.id for c in res.changed] == ["q0003", "q0200"]
    odd = fresh.selection.select_subset(ME, "ds", "1", SubsetRequest(tags=["odd"], limit=3))
    assert odd.case_ids == ["q0001", "q0003", "q0005"]
    assert verify_versions(backend.store, [v1.record, v2.record]).ok
    report = gc_long_after(backend, delete=True)
    assert report.problems == []
    assert fresh.diff.diff_versions(ME, "ds", "2", "1").summary["changed"] == 2


def test_superseded_copies_are_an_object_the_root_names(backend: Backend) -> None:
    reg = backend.services.registry
    register(reg, "1", cases(300))
    v2 = register(reg, "2", cases(300, changed={10, 250}))
    root = reg.root(v2.record)
    key = f"t/acme/manifests/superseded/{root.superseded_key}"
    assert root.superseded_count == 2 and backend.store.exists(key)
    # gc keeps it (and the pack of the copies) with the version
    report = gc_long_after(backend, delete=True)
    assert report.problems == [] and backend.store.exists(key)
    assert verify_versions(backend.store, [v2.record]).ok
    # verify names it when it is damaged
    data = backend.store.get(key)
    backend.store.delete(key)
    backend.store.put(key, data[:-2] + b"}}")
    problems = verify_versions(backend.store, [v2.record]).problems
    assert [(p.kind, p.key) for p in problems] == [("corrupt", key)]


def sample_keys(backend: Backend) -> set[str]:
    return {o.key for o in backend.store.list("t/acme/manifests/sample/")}


def test_a_sample_reads_the_sample_columns_which_versions_share(backend: Backend) -> None:
    counting = CountingStore(backend.store)
    reg = backend.rebuild(store=counting).registry  # type: ignore[arg-type]
    # Given v1 of 600 cases (many chunks, a sample column per few of them), and v2 with a run
    # of 20 cases changed
    v1 = register(reg, "1", cases(600))
    first = sample_keys(backend)
    v2 = register(reg, "2", cases(600, changed=range(300, 320)))
    r1, r2 = reg.root(v1.record), reg.root(v2.record)
    assert 3 <= len(r1.sample_keys) < len(r1.chunk_keys)
    # Then v2 names most of v1's sample columns again, and wrote only those around its change
    new = set(r2.sample_keys) - set(r1.sample_keys)
    assert 1 <= len(new) <= 2 and len(new) < len(r2.sample_keys) // 2
    assert sample_keys(backend) == first | {f"t/acme/manifests/sample/{k}" for k in new}
    # When a fresh service samples v2
    fresh = backend.rebuild(store=counting)  # type: ignore[arg-type]
    counting.chunk_reads.clear()
    got = fresh.selection.select_subset(ME, "ds", "2", SubsetRequest(sample=40, seed=7))
    # Then it read every sample column and no chunk, and answers what the whole manifest does
    assert counting.chunk_reads == [] and len(counting.sample_reads) == len(r2.sample_keys)
    whole = fresh.registry.manifest(v2.record)
    expected = select_subset(
        whole, SubsetRequest(sample=40, seed=7).selection(), dataset_id="ds", version="2"
    )
    assert got.subset == expected
    assert got.case_ids == [whole.ids[i] for i in expected.indices]
    # And with the cases asked for, the chunks are read (they say where the cases are)
    with_cases = fresh.selection.select_subset(
        ME, "ds", "2", SubsetRequest(sample=3, seed=7), with_cases=True
    )
    assert with_cases.cases is not None
    assert [c["id"] for c in with_cases.cases] == with_cases.case_ids


def test_a_format_3_root_samples_from_its_chunks(backend: Backend) -> None:
    reg = backend.services.registry
    v1 = register(reg, "1", cases(300))
    # Given v1's root stored as format 3 (no sample columns), as before format 4
    key = v1.record.manifest_key
    doc = orjson.loads(backend.store.get(key))
    del doc["sample"]
    doc["format"] = "caseshelf.manifest/3"
    backend.store.delete(key)
    backend.store.put(key, orjson.dumps(doc))
    counting = CountingStore(backend.store)
    fresh = backend.rebuild(store=counting)  # type: ignore[arg-type]
    # Then a sample reads the chunks and answers as before; verify and gc take the root
    got = fresh.selection.select_subset(ME, "ds", "1", SubsetRequest(sample=10))
    assert counting.sample_reads == [] and counting.chunk_reads
    whole = fresh.registry.manifest(v1.record)
    assert got.subset == select_subset(
        whole, SubsetRequest(sample=10).selection(), dataset_id="ds", version="1"
    )
    assert verify_versions(backend.store, [v1.record]).ok
    report = gc_long_after(backend, delete=False)
    # (the sample columns the format 4 root named are named by nothing now)
    assert report.problems == [] and {o.key for o in report.orphans} == sample_keys(backend)


def test_verify_names_a_broken_or_wrong_sample_column_and_a_sample_refuses_it(
    backend: Backend,
) -> None:
    reg = backend.services.registry
    v1 = register(reg, "1", cases(600))
    keys = [f"t/acme/manifests/sample/{k}" for k in reg.root(v1.record).sample_keys]
    damaged, gone = keys[0], keys[1]
    data = backend.store.get(damaged)
    backend.store.delete(damaged)
    backend.store.put(damaged, data.replace(b"q0", b"x0", 1))
    backend.store.delete(gone)
    report = verify_versions(backend.store, [v1.record])
    assert {(p.kind, p.key) for p in report.problems} == {("corrupt", damaged), ("missing", gone)}
    with pytest.raises(Corrupt) as err:
        backend.rebuild().selection.select_subset(ME, "ds", "1", SubsetRequest(sample=5))
    assert err.value.fields["key"] == damaged
