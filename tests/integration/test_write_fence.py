"""The write fence on its own (SQLite index): leases hold gc off, a sweep holds registrations
off for a bounded wait, and whatever a crash leaves behind expires."""

from __future__ import annotations

from pathlib import Path

import pytest

from caseshelf.adapters.sqlite import SqliteIndex
from caseshelf.services.fence import FenceBusy, Lease, Sweep, WriteFence

pytestmark = pytest.mark.integration


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.05)


@pytest.fixture
def fence(tmp_path: Path) -> tuple[WriteFence, Clock]:
    clock = Clock()
    return (
        WriteFence(SqliteIndex(tmp_path / "i.sqlite"), clock=clock, sleep=clock.sleep),
        clock,
    )


def test_a_live_lease_holds_gc_off_until_it_is_left(fence: tuple[WriteFence, Clock]) -> None:
    f, clock = fence
    lease = f.enter("t")
    assert "in flight" in str(f.begin_sweep("t", clock.now))
    assert isinstance(f.begin_sweep("other", clock.now), Sweep)  # other tenants are not held
    f.leave(lease)
    assert isinstance(f.begin_sweep("t", clock.now), Sweep)


def test_a_crashed_registrations_lease_expires(fence: tuple[WriteFence, Clock]) -> None:
    f, clock = fence
    f.enter("t")  # never left: the process died
    assert isinstance(f.begin_sweep("t", clock.now), str)
    assert isinstance(f.begin_sweep("t", clock.now + f.lease_seconds + 1), Sweep)


def test_a_sweep_holds_registrations_off_for_a_bounded_wait(
    fence: tuple[WriteFence, Clock],
) -> None:
    f, clock = fence
    sweep = f.begin_sweep("t", clock.now)
    assert isinstance(sweep, Sweep)
    with pytest.raises(FenceBusy, match="gc is collecting"):
        f.enter("t")
    assert isinstance(f.begin_sweep("t", clock.now), str)  # and one sweep at a time
    f.end_sweep(sweep)
    f.leave(f.enter("t"))


def test_a_registration_past_its_lease_does_not_commit(fence: tuple[WriteFence, Clock]) -> None:
    f, clock = fence
    lease = f.enter("t")
    f.check(lease)
    clock.now = lease.expires
    with pytest.raises(FenceBusy, match="lease"):
        f.check(lease)


def test_many_leases_of_one_tenant_coexist(fence: tuple[WriteFence, Clock]) -> None:
    f, clock = fence
    leases: list[Lease] = [f.enter("t") for _ in range(5)]
    for lease in leases[:-1]:
        f.leave(lease)
    assert "1 registration" in str(f.begin_sweep("t", clock.now))
    f.leave(leases[-1])
    assert isinstance(f.begin_sweep("t", clock.now), Sweep)
