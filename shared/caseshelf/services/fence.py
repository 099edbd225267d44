"""The write fence: registrations and gc's deletions of one tenant never overlap.

Packs, blobs and manifests are content-addressed and written with put-if-absent, so a
registration reuses an object that is already there, whoever left it: a committed version, or a
crashed registration whose objects nothing references yet. gc deletes exactly such objects. Age
alone cannot tell them apart (S3 has no way to freshen an object's time without rewriting it), so
the two take turns through one row of the index per tenant (`GC#<tenant>` / `FENCE`):

    {"rev": n, "writers": {<lease id>: <expiry>, ...}, "sweep": {"id": ..., "until": ...} | null}

Every change is a compare-and-set on `rev` (`Index.update_item(..., expect={"rev": n})`), so the
row moves through one order of changes on both backends (SQLite in a transaction, DynamoDB by a
condition on the document it read). A registration adds its lease before its first write and
removes it after its commit; while any live lease is listed, gc deletes nothing of that tenant.
gc marks a sweep before it deletes and clears it after; while a sweep is marked, a registration
waits for it (briefly: gc holds a sweep for one batch of deletions at a time). A registration
that finds its lease expired before its commit gives up instead of committing, since gc may have
collected something it meant to reuse; the objects it wrote are left to a later gc.

A lease or sweep left behind by a crash expires on its own (`LEASE_SECONDS`, `SWEEP_SECONDS`).

Lost answers. A write can reach the index while its answer is lost (a dropped connection, a 500
after the commit): the caller sees a failure, or the client's retry finds the row changed. Every
change here carries its own id (the lease's, the sweep's) and is idempotent, so the fence makes
it again (`LOST_ANSWER_ATTEMPTS`) and recognises it when it is already there: gc finds its own
sweep mark and goes on, instead of taking it for another gc's. A sweep mark gc cannot confirm
is cleared before gc gives up, and one it cannot clear either expires `SWEEP_SECONDS` after it
was set, like a crashed gc's.
"""

from __future__ import annotations

import contextlib
import logging
import random
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from caseshelf.domain.errors import BackendUnavailable, CaseshelfError, Conflict, NotFound
from caseshelf.ports import Index

FENCE_SK = "FENCE"
# How long a registration may run between taking its lease and committing (an import Lambda
# runs 15 minutes at most; a local registration of a million cases takes a few).
LEASE_SECONDS = 3600.0
# How long one gc sweep (a batch of deletions) may hold the fence.
SWEEP_SECONDS = 120.0
# How long a registration waits for a sweep to end before it answers "try again".
WAIT_SECONDS = 20.0
# A margin for the clocks of the machines involved.
SKEW_SECONDS = 30.0
_CAS_ATTEMPTS = 200
# Tries of one change of the row while the index is unavailable (its answer may have been lost).
LOST_ANSWER_ATTEMPTS = 3

log = logging.getLogger(__name__)


def fence_pk(tenant: str) -> str:
    return f"GC#{tenant}"


@dataclass(frozen=True)
class Lease:
    tenant: str
    id: str
    expires: float


@dataclass(frozen=True)
class Sweep:
    tenant: str
    id: str
    until: float


class FenceBusy(Conflict):
    """The fence is held by the other side: try again later."""


class WriteFence:
    """Leases for registrations, sweeps for gc, over one index row per tenant."""

    def __init__(
        self,
        index: Index,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        lease_seconds: float = LEASE_SECONDS,
        sweep_seconds: float = SWEEP_SECONDS,
        wait_seconds: float = WAIT_SECONDS,
    ) -> None:
        self.index = index
        self.clock = clock
        self.sleep = sleep
        self.lease_seconds = lease_seconds
        self.sweep_seconds = sweep_seconds
        self.wait_seconds = wait_seconds

    # -- the row ---------------------------------------------------------------------------

    def _read(self, tenant: str) -> dict[str, Any]:
        pk = fence_pk(tenant)
        doc = self.index.get_item(pk, FENCE_SK)
        if doc is None:
            with contextlib.suppress(Conflict):  # another writer made it first
                self.index.put_item(
                    pk, FENCE_SK, {"rev": 0, "writers": {}, "sweep": None}, if_absent=True
                )
            doc = self.index.get_item(pk, FENCE_SK)
            if doc is None:
                raise NotFound(f"the write fence of tenant {tenant} vanished")
        return doc

    def _cas(self, tenant: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> Any:
        """`_change`, made again when the index stays unavailable: every change is idempotent
        (a lease or sweep of its own id), so a change whose answer was lost is found made."""
        for _ in range(LOST_ANSWER_ATTEMPTS - 1):
            try:
                return self._change(tenant, change)
            except BackendUnavailable as exc:
                log.warning("write fence of tenant %s: %s; trying again", tenant, exc.detail)
                self.sleep(random.uniform(0.05, 0.5))
        return self._change(tenant, change)

    def _change(
        self, tenant: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> Any:
        """Apply `change(doc)` (the new writers/sweep, or None for no change) by compare-and-set
        on `rev`, re-reading on contention. Returns the document written (or read)."""
        for attempt in range(_CAS_ATTEMPTS):
            doc = self._read(tenant)
            new = change(doc)
            if new is None:
                return doc
            new["rev"] = int(doc.get("rev", 0)) + 1
            try:
                return self.index.update_item(
                    fence_pk(tenant), FENCE_SK, new, expect={"rev": doc.get("rev", 0)}
                )
            except Conflict:
                self.sleep(random.uniform(0, 0.002 * min(attempt + 1, 20)))
        raise FenceBusy(f"the write fence of tenant {tenant} kept changing; try again")

    def _live_writers(self, doc: dict[str, Any], now: float) -> dict[str, float]:
        return {k: float(v) for k, v in (doc.get("writers") or {}).items() if float(v) > now}

    @staticmethod
    def _sweep_of(doc: dict[str, Any], now: float) -> dict[str, Any] | None:
        sweep = doc.get("sweep")
        return sweep if isinstance(sweep, dict) and float(sweep.get("until", 0)) > now else None

    # -- registrations ---------------------------------------------------------------------

    def enter(self, tenant: str) -> Lease:
        """Take a lease for a registration of `tenant`, waiting for a sweep in progress."""
        lease_id = secrets.token_hex(8)
        deadline = self.clock() + self.wait_seconds
        while True:
            now = self.clock()
            taken = self._cas(tenant, partial(self._add_writer, lease_id=lease_id, now=now))
            expires = (taken.get("writers") or {}).get(lease_id)
            if expires is not None:
                return Lease(tenant, lease_id, float(expires))
            if self.clock() >= deadline:
                raise FenceBusy(
                    f"gc is collecting the objects of tenant {tenant}; try again in a minute",
                    tenant=tenant,
                )
            self.sleep(0.05)

    def _add_writer(self, doc: dict[str, Any], *, lease_id: str, now: float) -> Any:
        if self._sweep_of(doc, now) is not None:
            return None  # a sweep holds the fence: no change, and the caller waits
        writers = self._live_writers(doc, now)
        writers[lease_id] = now + self.lease_seconds
        return {"writers": writers}

    def check(self, lease: Lease) -> None:
        """Before the commit point: refuse to commit once the lease may have run out (gc may
        then have collected an object this registration found present and reused)."""
        if self.clock() > lease.expires - SKEW_SECONDS:
            raise FenceBusy(
                f"the registration ran longer than its {self.lease_seconds:g} s lease and was "
                "not committed; run it again",
                tenant=lease.tenant,
            )

    def leave(self, lease: Lease) -> None:
        def drop(doc: dict[str, Any]) -> Any:
            writers = dict(doc.get("writers") or {})
            if lease.id not in writers:
                return None
            del writers[lease.id]
            return {"writers": self._live_writers({"writers": writers}, self.clock())}

        self._cas(lease.tenant, drop)

    @contextmanager
    def writing(self, tenant: str) -> Iterator[Lease]:
        """A lease held for the duration of the block (released on error too; a crash leaves
        it to expire)."""
        lease = self.enter(tenant)
        try:
            yield lease
        finally:
            try:
                self.leave(lease)
            except CaseshelfError as exc:
                # The work is done (or failed on its own): a lease that could not be removed
                # only delays gc until it expires, so it never turns the outcome into an error.
                log.warning("write fence of tenant %s: lease not removed (%s)", tenant, exc)

    # -- gc --------------------------------------------------------------------------------

    def begin_sweep(self, tenant: str, now: float) -> Sweep | str:
        """Mark a sweep of `tenant` at `now`, or answer why not (registrations in flight, or
        another sweep)."""
        sweep = Sweep(tenant, secrets.token_hex(8), now + self.sweep_seconds)
        why: list[str] = []

        def mark(doc: dict[str, Any]) -> Any:
            why.clear()
            current = doc.get("sweep")
            if isinstance(current, dict) and current.get("id") == sweep.id:
                return None  # this sweep's own mark: a write whose answer was lost went through
            writers = self._live_writers(doc, now)
            if writers:
                why.append(f"{len(writers)} registration(s) in flight")
                return None
            if self._sweep_of(doc, now) is not None:
                why.append("another gc is sweeping it")
                return None
            return {"writers": {}, "sweep": {"id": sweep.id, "until": sweep.until}}

        try:
            self._cas(tenant, mark)
        except CaseshelfError:
            # Whether the mark was written is unknown: clear it if it was, so that no
            # registration waits for a sweep that will delete nothing (if this fails too, the
            # mark expires at `sweep.until`).
            with contextlib.suppress(CaseshelfError):
                self.end_sweep(sweep)
            raise
        return why[0] if why else sweep

    def sweep_alive(self, sweep: Sweep, now: float) -> bool:
        """Whether `sweep` may still delete at `now` (with a margin for clocks)."""
        return now < sweep.until - SKEW_SECONDS

    def end_sweep(self, sweep: Sweep) -> None:
        def clear(doc: dict[str, Any]) -> Any:
            current = doc.get("sweep")
            if not isinstance(current, dict) or current.get("id") != sweep.id:
                return None
            return {"sweep": None}

        self._cas(sweep.tenant, clear)
