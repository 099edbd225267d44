"""The verified local cache (`caseshelf.client.cache`): written whole, verified before it is
served, bounded with least-recently-used eviction, and never in the way of a load it cannot
help. Real files in a temporary directory."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from caseshelf.client.cache import Cache, CacheWarning, parse_size
from caseshelf.domain.cached import VersionContent, content_of_document, verify_records
from caseshelf.domain.canonical import canonical_json, digest_of, hex_of

pytestmark = pytest.mark.integration


def content(n: int, word: str = "q") -> tuple[str, VersionContent]:
    doc = {
        "description": f"{n} cases",
        "tags": ["t"],
        "cases": [{"id": f"c{i}", "inputs": {"user": f"{word} {i}"}} for i in range(n)],
        "shared_files": [{"dest": "README", "text": "read me"}],
    }
    c = content_of_document(doc)
    return verify_records(c.records, **c.meta()).content_digest, c


def test_a_cached_version_comes_back_verified(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    digest, c = content(3)
    assert cache.get(digest) is None
    assert cache.put(digest, c)
    got = cache.get(digest)
    assert got is not None and got.content_digest == digest
    assert [x["id"] for x in got.cases] == ["c0", "c1", "c2"]
    # the shared file's body is kept by its digest, and nothing half-written stays behind
    (hex_digest,) = c.files
    assert cache.file(hex_digest, digest) == b"read me"
    assert [p.name for p in cache.versions.iterdir()] == [digest[7:]]


def test_a_downloaded_case_with_files_is_cached_as_the_registry_stores_it() -> None:
    doc = {"cases": [{"id": "a", "files": {"x.txt": {"text": "hi"}, "b.bin": {"base64": "AAE="}}}]}
    c = content_of_document(doc)
    stored = {
        "x.txt": {"digest": digest_of(b"hi"), "size": 2},
        "b.bin": {"digest": digest_of(b"\x00\x01"), "size": 2},
    }
    assert c.records == [canonical_json({"id": "a", "files": stored})]
    assert c.files == {hex_of(digest_of(b"hi")): b"hi", hex_of(digest_of(b"\x00\x01")): b"\x00\x01"}


def test_an_entry_that_does_not_verify_is_removed_never_served(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    digest, c = content(3)
    cache.put(digest, c)
    cases = cache.path_of(digest) / "cases.jsonl"
    cases.write_bytes(cases.read_bytes().replace(b"q 1", b"q 9"))
    with pytest.warns(CacheWarning, match="did not verify"):
        assert cache.get(digest) is None
    assert not cache.path_of(digest).exists()


def test_the_least_recently_used_versions_go_first_past_the_bound(tmp_path: Path) -> None:
    one, c1 = content(50, "a")
    two, c2 = content(50, "b")
    three, c3 = content(50, "c")
    probe = Cache(tmp_path / "probe")
    probe.put(one, c1)
    size = probe.entries()[0].bytes
    cache = Cache(tmp_path / "cache", max_bytes=2 * size + size // 2)
    cache.put(one, c1)
    cache.put(two, c2)
    # one is used after two: two is now the least recently used
    os.utime(cache.path_of(one) / "meta.json", (1, 1))
    os.utime(cache.path_of(two) / "meta.json", (0, 0))
    assert cache.get(one) is not None
    cache.put(three, c3)
    assert {e.digest for e in cache.entries()} == {one, three}
    assert cache.evict(max_bytes=0, keep={three[7:]}) == [one]
    assert cache.clear() == [three]


def test_a_cache_that_cannot_be_written_warns_once_and_keeps_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = Cache(blocker / "cache")
    digest, c = content(2)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert cache.put(digest, c) is False
        assert cache.put(digest, c) is False
    assert len(seen) == 1 and issubclass(seen[0].category, CacheWarning)
    assert "could not be written" in str(seen[0].message)
    with pytest.raises(OSError, match="CASESHELF_CACHE"):
        cache.put(digest, c, strict=True)


def test_a_version_over_the_bound_is_not_kept(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache", max_bytes=10)
    digest, c = content(5)
    with pytest.warns(CacheWarning, match="over the cache's bound"):
        assert cache.put(digest, c) is False
    assert cache.entries() == []


def test_sizes_read_as_people_write_them() -> None:
    assert parse_size("1024") == 1024
    assert parse_size("500M") == 500 << 20
    assert parse_size("2GiB") == 2 << 30
    with pytest.raises(Exception, match="10G"):
        parse_size("lots")
