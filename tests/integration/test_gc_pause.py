"""The scoped collector pause of the document entry points (`caseshelf.services.bulk`): the
collector is back as it was found once the last open pause ends, nested or across threads."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from caseshelf.services import bulk
from caseshelf.services.bulk import gc_paused

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_a_pause_restores_what_it_found() -> None:
    gc.enable()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause is still open
    assert gc.isenabled()
    # A collector that was off stays off, and nothing is frozen
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_an_error_inside_still_restores() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_overlapping_pauses_in_threads_restore_once_the_last_ends() -> None:
    gc.enable()
    inside, release = threading.Barrier(3), threading.Event()

    def worker() -> None:
        with gc_paused():
            inside.wait()
            release.wait()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    with gc_paused():
        inside.wait()
    assert not gc.isenabled()  # the workers' pauses are still open
    release.set()
    for t in threads:
        t.join()
    assert gc.isenabled()


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_what_a_pause_allocated_leaves_it_in_the_oldest_generation_unscanned() -> None:
    # Given objects made during a pause, one of them kept
    gc.enable()
    with gc_paused():
        made = [[i] for i in range(1000)]
        kept = made[0]
    del made
    # Then none of them waits in the youngest generation for the next allocation to scan them,
    # nothing is frozen, and the kept one is in the oldest generation
    young = gc.get_objects(generation=0)
    assert not any(obj is kept for obj in young)
    assert gc.get_freeze_count() == 0
    assert any(obj is kept for obj in gc.get_objects(generation=2))


def test_cyclic_garbage_made_during_a_pause_is_still_collected() -> None:
    # Given a reference cycle made and dropped during a pause
    gc.enable()
    with gc_paused():
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        ids = {id(a), id(b)}
        del a, b
    # When the collector next runs a full collection, it frees them
    gc.collect()
    assert not any(id(obj) in ids and type(obj) is _Node for obj in gc.get_objects())


def test_objects_frozen_by_someone_else_stay_frozen() -> None:
    # Given objects frozen before the pause (as a server does before it forks, before any
    # thread runs: here a thread left by another test may be ending a pause, so the freeze
    # takes the pauses' lock, as no pause can then be between its check and its thaw)
    with bulk._lock:
        gc.enable()
        gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with gc_paused():
            made = [[i] for i in range(100)]
        # Then the pause thawed none of them (a thaw would leave none frozen; a frozen object
        # that died since, on this thread or a thread of another test, leaves the count)
        assert gc.get_freeze_count() > frozen * 0.9
        del made
    finally:
        gc.unfreeze()
