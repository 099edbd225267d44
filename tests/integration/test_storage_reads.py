"""Ranged reads of scattered records: sequential on the embedded store, concurrent for a remote
one, with the same answer either way."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from caseshelf.bootstrap import build, build_adapters, load_settings
from caseshelf.domain.errors import NotFound
from caseshelf.domain.identity import Identity
from caseshelf.domain.manifest import Location
from caseshelf.ports import ObjectInfo
from caseshelf.services.diff import DiffService
from caseshelf.services.objectio import READ_BYTES, open_object
from caseshelf.services.registry import parse_dataset
from caseshelf.services.storage import REMOTE_READ_WORKERS, read_records

pytestmark = pytest.mark.integration

ME = Identity("acme", "alice")


class MemoryStore:
    """Objects in a dict; remembers each ranged read and the thread that made it."""

    def __init__(self, objects: dict[str, bytes], barrier: threading.Barrier | None = None):
        self.objects = objects
        self.barrier = barrier
        self.reads: list[tuple[str, int, int]] = []
        self.threads: set[int] = set()
        self._lock = threading.Lock()

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        with self._lock:
            self.reads.append((key, offset, length))
            self.threads.add(threading.get_ident())
            first_two = len(self.reads) <= 2
        if self.barrier is not None and first_two:
            # Passes only when two reads are in flight at once.
            self.barrier.wait()
        if key not in self.objects:
            raise NotFound(f"no object {key}", key=key)
        return self.objects[key][offset : offset + length]

    def head(self, key: str) -> ObjectInfo | None:
        data = self.objects.get(key)
        return None if data is None else ObjectInfo(key, len(data), 0.0)


def scattered() -> tuple[dict[str, bytes], list[tuple[int, Location]]]:
    """Two packs of 100-byte records; every tenth record of each wanted, in a shuffled order."""
    objects = {
        name: b"".join(f"{name}{i:04d}".encode().ljust(100, b".") for i in range(200))
        for name in ("aa", "bb")
    }
    wanted = [
        (tag, Location(name, i * 100, 100))
        for tag, (name, i) in enumerate(
            (name, i) for i in range(0, 200, 10) for name in ("bb", "aa")
        )
    ]
    wanted.reverse()
    return objects, wanted


def test_concurrent_reads_answer_exactly_what_sequential_reads_answer():
    # Given 40 scattered records in two packs
    objects, wanted = scattered()
    # When read one span at a time, and with 8 reads in flight
    one = MemoryStore(objects)
    alone = read_records(one, lambda h: h, wanted, max_gap=0, workers=1)
    many = MemoryStore(objects, threading.Barrier(2, timeout=10))
    together = read_records(many, lambda h: h, wanted, max_gap=0, workers=8)
    # Then the answers are equal, order included, and each is the record asked for
    assert list(together.items()) == list(alone.items())
    for tag, loc in wanted:
        assert together[tag] == f"{loc.container}{loc.offset // 100:04d}".encode().ljust(100, b".")
    # And the same requests were made, the concurrent ones from several threads
    assert sorted(many.reads) == sorted(one.reads) and len(one.reads) == 40
    assert len(one.threads) == 1 and len(many.threads) > 1


def test_a_single_span_is_read_without_a_pool():
    # Given records close enough to share one span
    objects, _ = scattered()
    wanted = [(i, Location("aa", i * 100, 100)) for i in range(5)]
    store = MemoryStore(objects)
    # When read with workers
    got = read_records(store, lambda h: h, wanted, workers=8)
    # Then one request, on the caller's thread
    assert len(store.reads) == 1 and store.threads == {threading.get_ident()}
    assert got[4] == objects["aa"][400:500]


def test_a_failed_concurrent_read_raises_its_error():
    # Given wanted records in a pack that is missing
    objects, wanted = scattered()
    del objects["bb"]
    # When read concurrently, Then the store's error comes through
    with pytest.raises(NotFound, match="bb"):
        read_records(MemoryStore(objects), lambda h: h, wanted, max_gap=0, workers=4)


def test_diff_with_concurrent_reads_is_the_same_diff_with_the_same_counts(tmp_path):
    # Given two versions with every fifth of 60 cases changed
    settings = load_settings({}, home=str(tmp_path / "home"))
    svc = build(settings)

    def cases(truth: str) -> list[dict[str, Any]]:
        return [
            {
                "id": f"c{i:03d}",
                "inputs": {"user": f"question {i} " + "x" * 300},
                "expectations": {"ground_truth": truth if i % 5 == 0 else "same"},
            }
            for i in range(60)
        ]

    for version, truth in (("1.0.0", "old"), ("1.1.0", "new")):
        body = {"id": "qa", "version": version, "cases": cases(truth)}
        svc.registry.register(ME, parse_dataset(body))
    # When diffed with one read at a time, and with 8 in flight, reading only changed cases
    one = DiffService(svc.registry, max_gap_bytes=0, read_workers=1)
    many = DiffService(svc.registry, max_gap_bytes=0, read_workers=8)
    a = one.diff_versions(ME, "qa", "1.0.0", "1.1.0")
    b = many.diff_versions(ME, "qa", "1.0.0", "1.1.0")
    # Then the answers and the reported reads are the same
    assert a.summary == b.summary == {"added": 0, "removed": 0, "changed": 12, "unchanged": 48}
    assert a.changed == b.changed
    assert [c.changes[0].path for c in b.changed or []] == [("expectations", "ground_truth")] * 12
    # And every base case is its own request (the new cases sit together in one pack)
    assert a.stats == b.stats and b.stats.objects_read > 12
    assert b.stats.bytes_read < svc.registry.get_version(ME, "qa", "1.0.0").bytes


def test_the_aws_backend_pools_a_connection_per_concurrent_read():
    # Given the AWS settings
    settings = load_settings({}, backend="aws", bucket="b", table="t", region="us-east-1")
    # When the adapters and the diff are built
    store, index = build_adapters(settings)
    svc = build(settings, store=store, index=index)
    # Then the S3 client keeps as many connections as reads are put in flight
    assert store.client.meta.config.max_pool_connections == REMOTE_READ_WORKERS
    assert svc.diff.read_workers == REMOTE_READ_WORKERS > 1


def test_the_embedded_store_reads_one_span_at_a_time(tmp_path):
    svc = build(load_settings({}, home=str(tmp_path / "home")))
    assert svc.diff.read_workers == 1


def test_an_object_read_whole_takes_a_ranged_read_per_buffer_not_per_8_kib() -> None:
    # Given an upload of two and a half reading buffers
    body = bytes(range(256)) * (READ_BYTES * 5 // 2 // 256)
    store = MemoryStore({"up": body})
    # When it is read as a file, whole (as a dataset document is)
    with open_object(store, "up") as fh:
        got = fh.read()
    # Then it is read exactly, in three ranged reads
    assert got == body
    assert [length for _, _, length in store.reads] == [READ_BYTES, READ_BYTES, READ_BYTES // 2]
