"""The registration plan (`caseshelf.domain.writeplan`): which records are new and which reuse a
stored location, as plain values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from caseshelf.domain.manifest import Location
from caseshelf.domain.writeplan import plan_batch, record_spans
from caseshelf.services.registry.staging import Staged
from caseshelf.services.registry.writer import _write_runs
from caseshelf.services.storage import PackWriter

pytestmark = pytest.mark.integration

DIGESTS = st.lists(st.sampled_from([f"{i:064x}" for i in range(40)]), unique=True, max_size=40)


@given(DIGESTS, st.sets(st.integers(0, 39)))
def test_every_case_is_reused_or_in_exactly_one_maximal_run(
    digests: list[str], stored: set[int]
) -> None:
    # Given some of the batch's records stored already
    known = {f"{i:064x}": Location(f"pack{i}", i * 10, 9) for i in stored}
    # When the batch is planned
    plan = plan_batch(digests, known)
    # Then a case reuses its stored location exactly when its digest is known
    assert plan.reused == [known.get(d) for d in digests]
    # And the runs cover the new cases, each once, in order, none touching another
    covered = [i for first, stop in plan.runs for i in range(first, stop)]
    assert covered == [i for i, d in enumerate(digests) if d not in known]
    assert all(first < stop for first, stop in plan.runs)
    assert all(a[1] < b[0] for a, b in zip(plan.runs, plan.runs[1:], strict=False))
    assert plan.new_count + plan.reused_count == len(digests)


def test_nothing_known_is_one_run_and_everything_known_is_none() -> None:
    digests = [f"{i:064x}" for i in range(5)]
    assert plan_batch(digests, {}).runs == [(0, 5)]
    every = {d: Location("p", 0, 1) for d in digests}
    assert plan_batch(digests, every).runs == []
    assert plan_batch([], every).runs == []


@given(st.lists(st.integers(0, 1000), max_size=50))
def test_record_spans_lie_back_to_back_with_their_newlines(lengths: list[int]) -> None:
    starts, stops = record_spans(lengths)
    data = b"".join(b"x" * n + b"\n" for n in lengths)
    assert [data[a : b - 1] for a, b in zip(starts, stops, strict=True)] == [
        b"x" * n for n in lengths
    ]
    assert (stops[-1] if stops else 0) == len(data)


class _Store:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self.objects.setdefault(key, data) is data


def test_a_batch_that_reuses_records_does_not_keep_its_buffer_in_the_pack_being_filled() -> None:
    # Given a batch of four records, and a pack being filled
    records = [b'{"id":"a"}', b'{"id":"b"}', b'{"id":"c"}', b'{"id":"d"}']
    data = bytearray(b"".join(r + b"\n" for r in records))
    batch = Staged(["a", "b", "c", "d"], ["0" * 64] * 4, [()] * 4, [len(r) for r in records], data)
    store = _Store()
    packs = PackWriter(store, lambda h: f"packs/{h}")  # type: ignore[arg-type]
    containers, offsets = [""] * 4, [0] * 4
    # When only two of its records are new
    _write_runs(packs, batch, [(1, 2), (3, 4)], [], containers, offsets)
    # Then the pack holds copies of them, not views of the batch's buffer
    assert all(getattr(piece, "obj", None) is not data for piece in packs._pieces)
    # And a batch of new records alone is appended as a view of its buffer
    _write_runs(packs, batch, [(0, 4)], [], [""] * 4, [0] * 4)
    assert packs._pieces[-1].obj is data  # type: ignore[union-attr]
    # And each record is where the columns say it is
    packs.flush()
    (stored,) = store.objects.values()
    assert stored[offsets[1] : offsets[1] + len(records[1])] == records[1]
    assert stored[offsets[3] : offsets[3] + len(records[3])] == records[3]
