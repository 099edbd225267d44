"""The registry's cache of manifests, roots and chunks is bounded in bytes against the process's
memory (`caseshelf.services.memo`), least recently used first out."""

from __future__ import annotations

from pathlib import Path

import pytest

from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.identity import Identity
from caseshelf.services.memo import ByteBoundedCache, approx_bytes, cache_bytes_for
from caseshelf.services.registry import parse_dataset

pytestmark = pytest.mark.integration

ME = Identity("acme", "alice", frozenset())


def test_the_cache_keeps_its_bytes_under_the_bound_and_drops_the_least_recent() -> None:
    cache = ByteBoundedCache(100, size_of=len)
    loads: list[str] = []

    def value(key: str, size: int) -> str:
        return cache.get(key, lambda: loads.append(key) or "x" * size)

    value("a", 40)
    value("b", 40)
    value("a", 40)  # a hit: `a` is now the most recent
    value("c", 40)  # over the bound: `b`, the least recent, goes
    assert loads == ["a", "b", "c"]
    assert "a" in cache and "c" in cache and "b" not in cache
    assert cache.used == 80 <= cache.limit and cache.evictions == 1
    # A value larger than the whole bound is handed back, not kept
    assert value("huge", 500) == "x" * 500
    assert "huge" not in cache and cache.used == 80


def test_reading_many_versions_keeps_the_registry_cache_within_its_bound(tmp_path: Path) -> None:
    # Given 12 versions of 300 cases each, and a cache bound of about three of their manifests
    services = build(load_settings({}, home=str(tmp_path / "home")))
    reg = services.registry
    records = []
    for v in range(12):
        cases = [{"id": f"v{v}-c{i}", "inputs": {"user": f"q {v} {i}"}} for i in range(300)]
        doc = {"id": "qa", "version": f"{v}.0.0", "cases": cases}
        records.append(reg.register(ME, parse_dataset(doc)).record)
    one = approx_bytes(reg.manifest(records[0]))
    reg.cache = ByteBoundedCache(3 * one + one // 2)
    # When every version's whole manifest is read, in turn
    for rec in records:
        reg.manifest(rec)
        # Then the accounted bytes never exceed the bound
        assert reg.cache.used <= reg.cache.limit
    # And the oldest versions were evicted, the latest kept (a hit reads nothing)
    assert reg.cache.evictions > 0
    assert ("manifest", records[0].manifest_key) not in reg.cache
    assert ("manifest", records[-1].manifest_key) in reg.cache
    # And re-reading the first makes it the most recent again, within the bound
    reg.manifest(records[0])
    assert ("manifest", records[0].manifest_key) in reg.cache
    assert reg.cache.used <= reg.cache.limit


def test_a_manifest_is_accounted_as_if_its_columns_were_decoded(tmp_path: Path) -> None:
    services = build(load_settings({}, home=str(tmp_path / "home")))
    cases = [{"id": f"c{i}", "inputs": {"user": "q"}} for i in range(2000)]
    rec = services.registry.register(ME, parse_dataset({"id": "d", "version": "1", "cases": cases}))
    manifest = services.registry.manifest(rec.record)
    before = approx_bytes(manifest)
    manifest.digest_list()  # decodes the lazy columns
    _ = [manifest.location(i) for i in range(3)]
    assert approx_bytes(manifest) <= before


def test_the_bound_follows_the_function_memory(tmp_path: Path) -> None:
    env = {"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512"}
    services = build(load_settings(env, home=str(tmp_path / "home")))
    assert services.registry.cache.limit == cache_bytes_for(512 * 1024 * 1024)
    default = build(load_settings({}, home=str(tmp_path / "other")))
    assert default.registry.cache.limit == cache_bytes_for(1024 * 1024 * 1024)
    fixed = {"CASESHELF_MANIFEST_CACHE_BYTES": "12345"}
    assert build(load_settings(fixed, home=str(tmp_path / "x"))).registry.cache.limit == 12345


def test_a_version_s_numbers_leave_the_cache_holding_only_its_root(tmp_path: Path) -> None:
    # Given versions of several chunks each
    services = build(load_settings({}, home=str(tmp_path / "home")))
    reg = services.registry
    records = []
    for v in range(3):
        cases = [
            {"id": f"c{i:05d}", "inputs": {"user": f"v{v} q {i}"}, "tags": [f"t{i % 3}"]}
            for i in range(3000)
        ]
        doc = {"id": "qa", "version": f"{v}.0.0", "cases": cases}
        records.append(reg.register(ME, parse_dataset(doc)).record)
    reg.cache.clear()
    for rec in records:
        chunk_keys = reg.root(rec).chunk_keys
        assert len(chunk_keys) > 1
        # When its numbers are made (one pass over every record, which also makes its index)
        _, stats = services.browse.stats(ME, "qa", rec.version)
        assert stats.case_count == 3000
        assert dict(stats.tags) == {"t0": 1000, "t1": 1000, "t2": 1000}
        # Then neither its whole manifest nor any of its chunks stayed in the cache
        assert ("manifest", rec.manifest_key) not in reg.cache
        assert not [k for k in chunk_keys if ("chunk", rec.tenant, k) in reg.cache]
        assert ("root", rec.manifest_key) in reg.cache
    # And the index the pass made answers a text search of the whole version
    page = services.browse.search_cases(ME, "qa", records[-1].version, "v2 q 2999", by="text")
    assert [c["id"] for c in page.items] == ["c02999"]
