"""What a registration writes: the pure decision between digesting a batch of records and
storing it (the way `caseshelf.domain.diff.plan_diff` decides a diff before anything is read).

Every registration (a dataset document, a bump, a derived version, an import, a task on-ramp)
hands the pipeline batches of cases in dataset order, each with its digest. For each batch,
`plan_batch` answers which cases reuse a record already stored (in the base version, or in the
version a derived one is cut from) and which runs of consecutive cases are new and go into
packs. No I/O: the registry applies the plan (`caseshelf.services.registry`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from caseshelf.domain.manifest import Location


@dataclass(frozen=True)
class BatchPlan:
    """`reused[i]` is where case i's record is stored already, or None when it is new; `runs`
    are the `[first, stop)` ranges of consecutive new cases, in order, each as long as it can
    be (two runs never touch). Every new case is in exactly one run."""

    reused: list[Location | None]
    runs: list[tuple[int, int]]

    @property
    def reused_count(self) -> int:
        return sum(loc is not None for loc in self.reused)

    @property
    def new_count(self) -> int:
        return sum(stop - first for first, stop in self.runs)


def plan_batch(digests: Sequence[str], known: Mapping[str, Location]) -> BatchPlan:
    """The plan of one batch: each case whose digest (hex) is in `known` reuses that location
    (a case digest covers the whole canonical case, its id included, so equal digests are equal
    records); the others are new, grouped in runs so that a run is written as one slice of the
    batch's buffer."""
    if not known:  # nothing stored to reuse (a first version, an import): one run of all
        return BatchPlan([None] * len(digests), [(0, len(digests))] if digests else [])
    reused: list[Location | None] = [known.get(d) for d in digests]
    runs: list[tuple[int, int]] = []
    first = -1
    for i, loc in enumerate(reused):
        if loc is None:
            if first < 0:
                first = i
        elif first >= 0:
            runs.append((first, i))
            first = -1
    if first >= 0:
        runs.append((first, len(reused)))
    return BatchPlan(reused, runs)


def record_spans(lengths: Sequence[int]) -> tuple[list[int], list[int]]:
    """Where each record of a batch starts and ends in the batch's buffer, records lying back to
    back, each followed by a newline: `(starts, stops)`, a stop counting the newline."""
    starts: list[int] = []
    stops: list[int] = []
    at = 0
    for length in lengths:
        starts.append(at)
        at += length + 1
        stops.append(at)
    return starts, stops
