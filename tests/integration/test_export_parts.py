"""The fan-out plan of an export job (`caseshelf.domain.export_parts`), pure: the parts cover
the cases once each, and by the plan's own arithmetic every part and the finish stay within 80%
of the worker's Timeout and memory, with nothing staged in /tmp, up to 1,000,000 cases."""

from __future__ import annotations

import itertools

import pytest

from caseshelf.domain.export_parts import (
    MAX_PART_CASES,
    MAX_PARTS,
    PUT_SECONDS,
    WORKER_TIMEOUT_SECONDS,
    check_bounds,
    plan_parts,
)
from caseshelf.services.export_stream import window_size

pytestmark = pytest.mark.integration

FORMATS = ("case-dirs", "harbor", "inspect", "jsonl", "parquet")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("bundle", [False, True])
@pytest.mark.parametrize(
    ("cases", "file_bodies", "case_bytes", "file_bytes"),
    [
        (1_000_000, 0, 2048, 512),  # question/answer rows
        (1_000_000, 1_000_000, 8192, 4096),  # a companion file a case, 8 KiB cases
        (100_000, 2_000_000, 16384, 2048),  # task directories of 20 files each
    ],
)
def test_every_part_and_the_finish_stay_within_the_workers_bounds(
    fmt, bundle, cases, file_bodies, case_bytes, file_bytes
):
    plan = plan_parts(fmt, cases, file_bodies=file_bodies, shared_files=1)
    bounds = check_bounds(
        plan,
        fmt,
        case_bytes=case_bytes,
        file_bytes=file_bytes,
        bundle=bundle,
        window=window_size(fmt),
    )
    assert bounds.within(0.8), bounds
    assert bounds.tmp_bytes == 0
    assert plan.part_count <= MAX_PARTS


def test_the_parts_cover_every_case_once_in_order():
    plan = plan_parts("case-dirs", 1_000_000, file_bodies=0, shared_files=0)
    ranges = [plan.part(n) for n in range(plan.part_count)]
    assert ranges[0][0] == 0 and ranges[-1][1] == 1_000_000
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert all(lo < hi for lo, hi in ranges)
    with pytest.raises(ValueError, match="part"):
        plan.part(plan.part_count)


def test_a_part_of_case_directories_takes_a_small_share_of_the_timeout_at_2_ms_a_put():
    # 5 generated files and 1 companion file a case: 6 PUTs, 12 ms, plus 1 ms of planning
    plan = plan_parts("case-dirs", 10_000, file_bodies=10_000, shared_files=0)
    assert plan.cases_per_part == MAX_PART_CASES
    seconds = plan.cases_per_part * (6 * PUT_SECONDS + 0.001)
    assert seconds == pytest.approx(65.0)
    assert seconds < 0.1 * WORKER_TIMEOUT_SECONDS


def test_many_files_a_case_make_smaller_parts():
    few = plan_parts("case-dirs", 100_000, file_bodies=0)
    many = plan_parts("case-dirs", 100_000, file_bodies=100 * 100_000)
    assert many.cases_per_part < few.cases_per_part
    assert check_bounds(
        many, "case-dirs", case_bytes=4096, file_bytes=1024, bundle=True, window=2048
    ).within(0.8)


def test_an_empty_selection_is_one_empty_part():
    plan = plan_parts("jsonl", 0)
    assert plan.part_count == 1 and plan.part(0) == (0, 0)
