"""gc's sweep mark when the index loses an answer: the write lands, the call fails. gc finds its
own mark and goes on (no phantom sweep that refuses registrations and that gc itself takes for
another gc's); a mark gc cannot confirm is cleared; one it cannot clear either expires on its
own, after `sweep_seconds`. The fence's clock is injected: nothing here sleeps."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from caseshelf.adapters.localfs import LocalBlobStore
from caseshelf.adapters.sqlite import SqliteIndex
from caseshelf.domain.errors import BackendUnavailable, Conflict
from caseshelf.domain.identity import Identity
from caseshelf.services.fence import (
    FENCE_SK,
    LOST_ANSWER_ATTEMPTS,
    FenceBusy,
    Sweep,
    WriteFence,
    fence_pk,
)
from caseshelf.services.gc import collect_garbage
from caseshelf.services.registry import RegistryService, parse_dataset

pytestmark = pytest.mark.integration

ME = Identity("team-a", "alice")


class Clock:
    def __init__(self) -> None:
        self.now = time.time()  # the store's objects carry real times

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.05)


class LosingIndex(SqliteIndex):
    """An index that, while `lose` is above 0, applies each write that sets a sweep mark and
    then fails the call (`lost`: how), as a dropped answer does; the next `reads_fail` reads
    after such a loss fail too (the index is down for a while)."""

    lose = 0
    lost: type[Exception] = BackendUnavailable
    reads_fail = 0
    _failing = 0

    def get_item(self, pk: str, sk: str) -> dict[str, Any] | None:
        if self._failing > 0:
            self._failing -= 1
            raise BackendUnavailable(f"index row {pk}/{sk}: storage unavailable (503)")
        return super().get_item(pk, sk)

    def update_item(
        self, pk: str, sk: str, changes: dict[str, Any], *, expect: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        done = super().update_item(pk, sk, changes, expect=expect)
        if isinstance(changes.get("sweep"), dict) and self.lose > 0:
            self.lose -= 1
            self._failing = self.reads_fail
            if self.lost is Conflict:
                # what the client's own retry of a landed conditional write answers
                raise Conflict(f"item {pk}/{sk}: rev is {done['rev']}, expected {expect}")
            raise BackendUnavailable(f"index row {pk}/{sk}: storage unavailable (500)")
        return done

    def recover(self) -> None:
        self.lose = self._failing = 0


def sweep_of(index: SqliteIndex) -> Any:
    row = index.get_item(fence_pk(ME.tenant), FENCE_SK)
    return (row or {}).get("sweep")


@pytest.fixture
def index(tmp_path: Path) -> LosingIndex:
    return LosingIndex(tmp_path / "index.sqlite")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fence(index: LosingIndex, clock: Clock) -> WriteFence:
    return WriteFence(index, clock=clock, sleep=clock.sleep)


@pytest.mark.parametrize("lost", [BackendUnavailable, Conflict], ids=["error", "client-retry"])
def test_gc_recognises_its_own_sweep_after_a_lost_answer(
    index: LosingIndex, fence: WriteFence, clock: Clock, lost: type[Exception]
) -> None:
    # Given an index that applies the sweep mark and loses the answer
    index.lose, index.lost = 1, lost
    # When gc marks its sweep
    sweep = fence.begin_sweep(ME.tenant, clock.now)
    # Then it finds its own mark, rather than "another gc is sweeping it"
    assert isinstance(sweep, Sweep), sweep
    assert sweep_of(index)["id"] == sweep.id
    # And once it is done, a registration goes ahead at once
    fence.end_sweep(sweep)
    assert sweep_of(index) is None
    fence.leave(fence.enter(ME.tenant))


def test_a_sweep_mark_gc_cannot_confirm_is_cleared(
    index: LosingIndex, fence: WriteFence, clock: Clock
) -> None:
    # Given an index that lands the sweep mark, loses the answer, and then fails every read
    # gc makes to find out whether its mark is there
    index.lose, index.reads_fail = 1, LOST_ANSWER_ATTEMPTS - 1
    with pytest.raises(BackendUnavailable):
        fence.begin_sweep(ME.tenant, clock.now)
    # Then gc gave up and took its mark away: registrations are not held off
    assert sweep_of(index) is None
    fence.leave(fence.enter(ME.tenant))


def test_a_stale_sweep_mark_expires_on_its_own(
    index: LosingIndex, fence: WriteFence, clock: Clock
) -> None:
    # Given a mark that landed, whose answer was lost, and that could not be cleared either
    index.lose, index.reads_fail = 1, 99
    with pytest.raises(BackendUnavailable):
        fence.begin_sweep(ME.tenant, clock.now)
    index.recover()
    assert sweep_of(index) is not None
    # Then a registration waits for it, and is refused with a message saying when to retry
    with pytest.raises(FenceBusy, match="try again in a minute"):
        fence.enter(ME.tenant)
    # And once the mark's own time is up, registrations and gc go ahead
    clock.now = float(sweep_of(index)["until"])
    fence.leave(fence.enter(ME.tenant))
    assert isinstance(fence.begin_sweep(ME.tenant, clock.now), Sweep)


def test_gc_deletes_through_a_lost_answer_and_leaves_the_fence_open(
    tmp_path: Path, index: LosingIndex, fence: WriteFence, clock: Clock
) -> None:
    # Given an object no version references (a crashed registration's) and a committed version
    store = LocalBlobStore(tmp_path / "objects")
    registry = RegistryService(store, index)
    doc = {"id": "demo", "version": "1.0.0", "cases": [{"id": "a", "inputs": {"user": "q"}}]}
    registry.register(ME, parse_dataset(doc))
    orphan = f"t/{ME.tenant}/packs/{'0' * 64}"
    store.put_if_absent(orphan, b"left by a crash")
    # When gc sweeps while the index loses the answer to its sweep mark
    index.lose = 1
    report = collect_garbage(
        store, index, now=clock.now + 60, grace_seconds=0, delete=True, fence=fence
    )
    # Then it deleted the orphan, saw no phantom sweep, and the fence is open again
    assert report.problems == []
    assert report.keys == [orphan] and not store.exists(orphan)
    assert sweep_of(index) is None
    registry.register(ME, parse_dataset({**doc, "version": "1.0.1"}))
