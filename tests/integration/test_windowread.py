"""The bulk window reader an export uses: packs read whole and checked once against their
address, records back to back handed on as one block of lines, and every other record checked
against its digest as before."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from caseshelf.domain import layout
from caseshelf.domain.errors import Corrupt
from caseshelf.domain.export_formats import CaseWindow
from caseshelf.domain.manifest import Manifest
from caseshelf.services import windowread
from caseshelf.services.windowread import WholePacks, read_ahead, window_cases

pytestmark = pytest.mark.integration

TENANT = "acme"


class CountingStore:
    """Objects in a dict; counts whole and ranged reads."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.gets = 0
        self.ranges = 0

    def get(self, key: str) -> bytes:
        self.gets += 1
        return self.objects[key]

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        self.ranges += 1
        return self.objects[key][offset : offset + length]


@dataclass
class FakeRegistry:
    store: CountingStore
    chunks: list[Manifest]
    read_gap: int = 16 * 1024
    read_workers: int = 1

    def chunk(self, rec: Any, number: int) -> Manifest:
        return self.chunks[number]


@dataclass
class Rec:
    tenant: str = TENANT


def records(n: int) -> list[bytes]:
    return [orjson.dumps({"id": f"c{i}", "inputs": {"user": f"q{i}"}}) for i in range(n)]


def stored(recs: list[bytes], sep: bytes = b"\n", per_chunk: int = 4) -> FakeRegistry:
    """One pack holding `recs`, each followed by `sep`, addressed by its sha256; chunks of
    `per_chunk` cases."""
    store = CountingStore()
    pack = b"".join(r + sep for r in recs)
    digest = hashlib.sha256(pack).hexdigest()
    store.objects[layout.pack_key(TENANT, digest)] = pack
    offsets, at = [], 0
    for r in recs:
        offsets.append(at)
        at += len(r) + len(sep)
    chunks = []
    for lo in range(0, len(recs), per_chunk):
        part = range(lo, min(lo + per_chunk, len(recs)))
        chunks.append(
            Manifest(
                content_digest="sha256:" + "0" * 64,
                description="",
                tags=[],
                shared_files=[],
                ids=[f"c{i}" for i in part],
                digests=[hashlib.sha256(recs[i]).hexdigest() for i in part],
                packs=[digest],
                pack_index=[0] * len(part),
                offsets=[offsets[i] for i in part],
                lengths=[len(recs[i]) for i in part],
            )
        )
    return FakeRegistry(store, chunks)


def starts(reg: FakeRegistry) -> list[int]:
    out = [0]
    for c in reg.chunks:
        out.append(out[-1] + len(c.ids))
    return out


@pytest.fixture
def whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(windowread, "WHOLE_PACK_MIN_BYTES", 0)


def test_a_window_from_a_whole_pack_is_its_records_as_one_block(whole: None) -> None:
    recs = records(10)
    reg = stored(recs)
    packs = WholePacks(reg.store)
    first = window_cases(reg, Rec(), starts(reg), range(0, 6), packs)
    second = window_cases(reg, Rec(), starts(reg), range(6, 10), packs)
    assert first.records == recs[:6] and second.records == recs[6:]
    assert first.joined() == b"\n".join(recs[:6])
    assert [c["id"] for c in second] == ["c6", "c7", "c8", "c9"]
    # one read of the pack for both windows, none ranged
    assert (reg.store.gets, reg.store.ranges) == (1, 0)


def test_without_whole_packs_the_records_are_read_by_range_and_checked() -> None:
    recs = records(10)
    reg = stored(recs)
    window = window_cases(reg, Rec(), starts(reg), range(0, 10), WholePacks(reg.store))
    assert window.records == recs
    assert reg.store.gets == 0 and reg.store.ranges >= 1  # below WHOLE_PACK_MIN_BYTES


def test_records_of_a_checked_pack_not_one_newline_apart_are_cut_one_by_one(whole: None) -> None:
    recs = records(6)
    reg = stored(recs, sep=b" ")  # addressed by its hash, but no newline between records
    window = window_cases(reg, Rec(), starts(reg), range(0, 6), WholePacks(reg.store))
    assert window.records == recs and window.joined() == b"\n".join(recs)


def test_scattered_positions_from_a_whole_pack_keep_their_order(whole: None) -> None:
    recs = records(10)
    reg = stored(recs)
    window = window_cases(reg, Rec(), starts(reg), [9, 0, 5, 4, 1], WholePacks(reg.store))
    assert window.records == [recs[i] for i in (9, 0, 5, 4, 1)]


def test_a_pack_that_does_not_hash_to_its_address_has_each_record_checked(whole: None) -> None:
    recs = records(6)
    reg = stored(recs)
    (key,) = reg.store.objects
    damaged = bytearray(reg.store.objects[key])
    damaged[damaged.index(b"q3")] = ord("Q")
    reg.store.objects[key] = bytes(damaged)
    with pytest.raises(Corrupt, match=rf"case 'c3'.*{key}"):
        window_cases(reg, Rec(), starts(reg), range(0, 6), WholePacks(reg.store))
    # the records before it are served, from the unkept pack, checked one by one
    packs = WholePacks(reg.store)
    assert window_cases(reg, Rec(), starts(reg), range(0, 3), packs).records == recs[:3]
    window_cases(reg, Rec(), starts(reg), range(0, 3), packs)
    assert reg.store.gets == 3  # never kept: read again


def test_at_most_keep_packs_are_held() -> None:
    store = CountingStore()
    held = WholePacks(store, keep=2)
    for name in ("a", "b", "c"):
        data = name.encode() * 10
        digest = hashlib.sha256(data).hexdigest()
        store.objects[name] = data
        read = windowread._Read(name, digest, 0, len(data), [])
        assert held.get(read) == (data, True)
    assert list(held._held) == ["b", "c"]


def test_a_case_window_mixes_blocks_and_records() -> None:
    recs = records(5)
    window = CaseWindow(recs[:1])
    window.add_lines(b"\n".join(recs[1:4]), 3)
    window.add(recs[4:])
    assert len(window) == 5
    assert window.records == recs
    assert window.joined() == b"\n".join(recs)
    assert window[3]["id"] == "c3"
    assert len(CaseWindow()) == 0 and CaseWindow().joined() == b""


def test_read_ahead_yields_every_window_in_order_and_raises_what_a_read_raises() -> None:
    assert [len(w) for w in read_ahead(lambda n: CaseWindow(records(n)), 4)] == [0, 1, 2, 3]
    assert list(read_ahead(lambda n: CaseWindow(), 0)) == []

    def failing(n: int) -> CaseWindow:
        if n == 2:
            raise Corrupt("damaged")
        return CaseWindow(records(1))

    got = read_ahead(failing, 4)
    assert len(next(got)) == 1 and len(next(got)) == 1
    with pytest.raises(Corrupt, match="damaged"):
        next(got)
