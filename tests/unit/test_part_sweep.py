"""Which parts of a running job the sweep sends again (`stalled_parts`), and when a part has been
sent too often (`exhausted`): times as the job item keeps them, ISO-8601 UTC strings."""

from __future__ import annotations

import pytest

from caseshelf.domain.export_parts import FINISH, MAX_SENDS, exhausted, stalled_parts

pytestmark = pytest.mark.unit

NOW = "2025-01-01T00:10:00.000Z"
STALE = "2025-01-01T00:09:15.000Z"  # a lease (45 s) before NOW
LIVE = "2025-01-01T00:10:30.000Z"
GONE = "2025-01-01T00:09:59.000Z"
QUIET = "2025-01-01T00:09:00.000Z"  # the job has not changed since before STALE
BUSY = "2025-01-01T00:09:50.000Z"


def test_a_part_whose_lease_ran_out_is_due_and_a_live_or_done_one_is_not() -> None:
    leases = {"0": LIVE, "2": GONE, "3": GONE}
    assert stalled_parts(4, [3], leases, BUSY, NOW, STALE) == ["2"]


def test_parts_never_started_wait_while_anything_of_the_job_is_alive() -> None:
    assert stalled_parts(4, [0], {"1": LIVE}, QUIET, NOW, STALE) == []
    assert stalled_parts(4, [0], {}, BUSY, NOW, STALE) == []


def test_an_idle_job_gets_every_part_not_done_sent_again() -> None:
    assert stalled_parts(4, [1], {"2": GONE}, QUIET, NOW, STALE) == ["0", "2", "3"]
    assert stalled_parts(3, [], {}, QUIET, NOW, STALE) == ["0", "1", "2"]


def test_a_job_with_every_part_done_gets_its_finish_sent_again_once_idle() -> None:
    assert stalled_parts(2, [0, 1], {FINISH: LIVE}, QUIET, NOW, STALE) == []
    assert stalled_parts(2, [0, 1], {FINISH: GONE}, BUSY, NOW, STALE) == []
    assert stalled_parts(2, [1, 0], {FINISH: GONE}, QUIET, NOW, STALE) == [FINISH]


def test_a_part_sent_as_often_as_the_queue_delivers_is_exhausted() -> None:
    assert MAX_SENDS == 3
    assert exhausted(["1", "2"], {"1": 1, "2": 0}) is None
    assert exhausted(["1", "2"], {"1": 1, "2": 2}) == "2"
    assert exhausted([FINISH], {FINISH: 2}) == FINISH
    assert exhausted([], {"1": 9}) is None
