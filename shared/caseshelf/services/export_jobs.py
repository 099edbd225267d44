"""Export jobs: an export too large for one invocation, run as parts on a queue.

`start` (the export route's invocation) resolves the version and the request, answers the
existing export when it is complete already, and otherwise plans the parts
(`caseshelf.domain.export_parts`), writes the job item (`JOB#<id>`, kind `export`, the same
rows and `GET /jobs/{id}` as the import jobs) and one queue message per part. The request and
the subset's positions are kept in the export's scratch area (`export_fanout`), so the job item
stays small whatever the request carries.

`run_part` (the worker, one message each) writes its part unless its marker says it is written,
then records it on the job with a conditional update (compare-and-set on the item's `rev`): the
update that completes the set makes its invocation the finisher, which writes the row file, the
bundle and, last, the manifest (`export_fanout.finish_export`) and marks the job succeeded with
the export's answer. A failure of the finish fails the message, which is delivered again; the
redelivered part finds itself done and finishes again (the finish writes the same bytes).

Faults: an error that is the request's (a case the format cannot carry) fails the job at once,
naming the case and the part. Any other error (a crash, a timeout, an unavailable store) leaves
the message to the queue, which delivers it again; after `maxReceiveCount` deliveries the queue
moves it to its dead-letter queue, whose delivery (`dead_letter`) fails the job naming the part
and its last error. Nothing of a failed job looks complete: there is no manifest. Asking for the
export again starts a new job whose parts find the earlier parts' markers and are not written
again.
"""

from __future__ import annotations

import array
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson

from caseshelf.domain.errors import CaseshelfError, Conflict, Corrupt, NotFound, Upstream
from caseshelf.domain.export_parts import (
    FINISH,
    PartPlan,
    exhausted,
    plan_parts,
    stalled_parts,
)
from caseshelf.domain.identity import Identity
from caseshelf.ports import Index, Queue
from caseshelf.services.export_fanout import (
    HARBOR,
    PartMeta,
    done_part,
    finish_export,
    part_key,
    remove_scratch,
    scratch_prefix,
    write_part,
)
from caseshelf.services.exports import ExportRequest, ExportResult, ExportService, Prepared
from caseshelf.services.jobs import (
    JOB_SK,
    LEASE_SECONDS,
    RESUME_WITHIN_SECONDS,
    Heartbeat,
    job_pk,
)
from caseshelf.services.versioned import Clock, iso, utc_now

log = logging.getLogger("caseshelf.export_jobs")

JOB_TTL = timedelta(days=30)
POINTER_PK = "EXPORTJOB#"
REQUEST_NAME = "request.json"
INDICES_NAME = "indices.u32"
CAS_TRIES = 64
SHOWN_IDS = 100  # of a subset's ids, on the job
# The running jobs of parts, one row each (sk: the job's id), which the sweep looks at; written
# before the job item, removed by the sweep once the job has ended.
RUNNING_PK = "RUNNING#part-jobs"
# A part whose worker died is sent again within this long: its lease (`LEASE_SECONDS`, renewed
# every third of it while the part runs) runs out, and the next sweep (every
# `SWEEP_EVERY_SECONDS`: the export worker's `SweepParts` schedule, the local server's period)
# sends it again.
PART_RESUME_WITHIN_SECONDS = RESUME_WITHIN_SECONDS
Render = Callable[[ExportResult], dict[str, Any]]


@dataclass(frozen=True)
class Started:
    """What the route answers: the export already complete (`result`), or its job."""

    result: ExportResult | None = None
    job: dict[str, Any] | None = None


@dataclass(frozen=True)
class PartOutcome:
    status: str  # written | reused | finished | failed | ignored | resent
    job_id: str
    part: int
    reason: str = ""


def _identity(job: dict[str, Any]) -> Identity:
    return Identity(job["tenant"], job["principal"], frozenset(job.get("roles") or ()))


def _plan(job: dict[str, Any]) -> PartPlan:
    p = job["plan"]
    return PartPlan(p["case_count"], p["cases_per_part"], p["files_per_case"])


def fresh_parts(plan: PartPlan) -> dict[str, Any]:
    """What a job of parts starts with: its plan, no part done, nothing written, no error."""
    return {
        "plan": {
            "case_count": plan.case_count,
            "cases_per_part": plan.cases_per_part,
            "files_per_case": plan.files_per_case,
        },
        "parts_total": plan.part_count,
        "parts_done": [],
        "cases_written": 0,
        "files_written": 0,
        "bytes_written": 0,
        "part_errors": {},
        "part_leases": {},
        "part_sends": {},
        "rev": 0,
        "result": None,
        "error": None,
    }


class PartJobs:
    """The job item of a job of parts on the export queue, whatever the parts write: its parts
    recorded with compare-and-set on `rev`, each part's lease while it is written, a part's last
    error kept, the end, and the two ways a part that keeps failing fails the job naming it: the
    dead letter, and the sweep (`sweep_job`) that sends again a part whose worker stopped.
    `kind` is the job's kind (the worker routes a message to the service of its `kind`);
    `incomplete` says, in a failed job's error, what is not there and how to resume."""

    kind = "export"
    incomplete = (
        "Nothing of the export is complete (it has no manifest); ask for the export again to "
        "resume it: the parts written are reused"
    )

    def __init__(
        self,
        index: Index,
        queue: Callable[[], Queue],
        *,
        clock: Clock,
        lease_seconds: float = LEASE_SECONDS,
    ) -> None:
        self.index = index
        self.queue = queue
        self.clock = clock
        self.lease_seconds = lease_seconds

    def _job(self, job_id: str) -> dict[str, Any] | None:
        """The job `job_id` when it is one of this service's kind."""
        job = self.index.get_item(job_pk(job_id), JOB_SK)
        return job if job is not None and job.get("kind") == self.kind else None

    def _register(self, job: dict[str, Any]) -> None:
        """List the job among the running jobs the sweep looks at (before its item is written,
        so no job item is ever out of the sweep's sight)."""
        self.index.put_item(RUNNING_PK, job["id"], {"kind": self.kind, "at": job["created_at"]})

    def _send(self, job_id: str, parts: list[int]) -> None:
        self.queue().send([{"job": job_id, "part": n, "kind": self.kind} for n in parts])

    def run_part(self, job_id: str, number: int) -> PartOutcome:
        """Write part `number` of the job (unless written) under the part's lease, record it,
        and finish the job when it was the last. An error of the request fails the job; any
        other error is raised, for the queue (or the sweep) to deliver the part again. Each
        kind opens its job (`_open`), writes a part (`_write_part`) and finishes (`_finish`)
        its own way."""
        job = self._job(job_id)
        if job is None:
            log.warning(f"{self.kind} part for no job", extra={"job_id": job_id, "part": number})
            return PartOutcome("ignored", job_id, number, f"no such {self.kind} job")
        if job["state"] != "running":
            return PartOutcome("ignored", job_id, number, f"the job is {job['state']}")
        rng = _plan(job).part(number)
        key, worker = str(number), None
        if number not in job["parts_done"]:
            worker = self._take_lease(job_id, key)
            if worker is None:
                why = f"part {number} is being written under a live lease, or the job ended"
                return PartOutcome("ignored", job_id, number, why)
        try:
            with self._beat(job_id, key, worker):
                opened = self._open(job)
                meta, status = self._write_part(job, opened, number, rng)
        except CaseshelfError as exc:
            if isinstance(exc, Upstream | Corrupt):  # the store's, not the request's: retried
                self._note_error(job_id, key, exc.detail, worker)
                raise
            self._fail(job_id, number, rng, exc)
            return PartOutcome("failed", job_id, number, exc.detail)
        except Exception as exc:
            self._note_error(job_id, key, f"{type(exc).__name__}: {exc}", worker)
            raise
        job = self._record(job_id, meta)
        if job["state"] == "running" and len(job["parts_done"]) == job["parts_total"]:
            return self._finish_leased(job, opened, number)
        return PartOutcome(status, job_id, number)

    def _finish_leased(self, job: dict[str, Any], opened: Any, number: int) -> PartOutcome:
        """The finish, under its own lease (`FINISH`): one finisher at a time; one that dies is
        replaced by the sweep."""
        worker = self._take_lease(job["id"], FINISH)
        if worker is None:
            return PartOutcome("ignored", job["id"], number, "another invocation is finishing")
        try:
            with self._beat(job["id"], FINISH, worker):
                self._finish(job, opened)
        except Exception as exc:
            self._note_error(job["id"], FINISH, f"{type(exc).__name__}: {exc}", worker)
            raise
        return PartOutcome("finished", job["id"], number)

    def _open(self, job: dict[str, Any]) -> Any:
        """What this invocation needs of the job to write a part and finish it."""
        raise NotImplementedError

    def _write_part(
        self, job: dict[str, Any], opened: Any, number: int, rng: tuple[int, int]
    ) -> tuple[PartMeta, str]:
        """Part `number` (cases `rng`) written, or found written: its meta, and `written` or
        `reused`."""
        raise NotImplementedError

    def _finish(self, job: dict[str, Any], opened: Any) -> None:
        """The job's output made whole from its parts, and its end."""
        raise NotImplementedError

    # -- the job item ------------------------------------------------------------------------

    def _cas(
        self, job_id: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> dict[str, Any]:
        """Apply `change(job)` (the changes, or None for none) as a conditional update on the
        job's `rev`, again on a lost race."""
        for _ in range(CAS_TRIES):
            job = self.index.get_item(job_pk(job_id), JOB_SK)
            if job is None:
                raise NotFound(f"no job {job_id!r}", id=job_id)
            changes = change(job)
            if changes is None:
                return job
            changes.update(rev=int(job.get("rev") or 0) + 1, updated_at=iso(self.clock()))
            try:
                return self.index.update_item(
                    job_pk(job_id), JOB_SK, changes, expect={"rev": job.get("rev")}
                )
            except Conflict:
                continue
        raise Conflict(f"job {job_id}: too many concurrent updates", job_id=job_id)

    def _record(self, job_id: str, meta: PartMeta) -> dict[str, Any]:
        """Record part `meta.number` done (once) and clear its lease."""
        key = str(meta.number)

        def change(job: dict[str, Any]) -> dict[str, Any] | None:
            leases = job.get("part_leases") or {}
            cleared = {k: v for k, v in leases.items() if k != key}
            if meta.number in job["parts_done"]:
                return None if key not in leases else {"part_leases": cleared}
            return {
                "parts_done": sorted([*job["parts_done"], meta.number]),
                "cases_written": job["cases_written"] + (meta.stop - meta.start),
                "files_written": job["files_written"] + meta.files,
                "bytes_written": job["bytes_written"] + meta.nbytes,
                "part_leases": cleared,
            }

        return self._cas(job_id, change)

    # -- leases ------------------------------------------------------------------------------

    def _until(self) -> str:
        return iso(self.clock() + timedelta(seconds=self.lease_seconds))

    def _take_lease(self, job_id: str, key: str) -> str | None:
        """Take the lease of part `key` (or of the finish) for a new worker id, answered; None
        when another worker holds it and it has not run out, or the job is not running."""
        worker = uuid.uuid4().hex

        def change(job: dict[str, Any]) -> dict[str, Any] | None:
            leases = job.get("part_leases") or {}
            held = leases.get(key)
            if job["state"] != "running" or (held and held["until"] > iso(self.clock())):
                return None
            changes: dict[str, Any] = {
                "part_leases": {**leases, key: {"until": self._until(), "worker": worker}}
            }
            if key == FINISH:
                changes["finishing"] = True
            return changes

        job = self._cas(job_id, change)
        held = (job.get("part_leases") or {}).get(key) or {}
        return worker if held.get("worker") == worker else None

    def renew_lease(self, job_id: str, key: str, worker: str) -> bool:
        """Extend `worker`'s lease of part `key`; False when it no longer holds it."""

        def change(job: dict[str, Any]) -> dict[str, Any] | None:
            leases = job.get("part_leases") or {}
            if job["state"] != "running" or (leases.get(key) or {}).get("worker") != worker:
                return None
            return {"part_leases": {**leases, key: {"until": self._until(), "worker": worker}}}

        job = self._cas(job_id, change)
        return ((job.get("part_leases") or {}).get(key) or {}).get("worker") == worker

    def _beat(
        self, job_id: str, key: str, worker: str | None
    ) -> contextlib.AbstractContextManager[Any]:
        """Renew the lease every third of it while the part (or the finish) runs."""
        if worker is None:
            return contextlib.nullcontext()
        return Heartbeat(
            lambda: self.renew_lease(job_id, key, worker),
            self.lease_seconds / 3,
            f"lease-{job_id}-{key}",
        )

    def _note_error(self, job_id: str, key: str, reason: str, worker: str | None) -> None:
        """Keep a part's (or the finish's) last error on the job, what its failure will name,
        and let its lease run out now, so that the next sweep sends the part again."""

        def change(job: dict[str, Any]) -> dict[str, Any] | None:
            changes: dict[str, Any] = {
                "part_errors": {**job.get("part_errors", {}), key: reason[:500]}
            }
            leases = job.get("part_leases") or {}
            if worker is not None and (leases.get(key) or {}).get("worker") == worker:
                ended = {"until": iso(self.clock()), "worker": worker}
                changes["part_leases"] = {**leases, key: ended}
            return changes

        try:
            self._cas(job_id, change)
        except CaseshelfError:
            log.warning("could not note a job part's error", extra={"job_id": job_id})

    def _fail(self, job_id: str, number: int, rng: tuple[int, int], exc: CaseshelfError) -> None:
        error: dict[str, Any] = {
            "title": exc.title,
            "code": type(exc).__name__,
            "detail": f"part {number} (cases {rng[0]}-{rng[1] - 1}): {exc.detail}",
            "part": number,
        }
        error.update({k: v for k, v in exc.fields.items() if isinstance(v, str | int)})
        self._end(job_id, "failed", error=error)

    def _end(self, job_id: str, state: str, **changes: Any) -> None:
        def change(job: dict[str, Any]) -> dict[str, Any] | None:
            if job["state"] != "running":
                return None
            return {"state": state, "part_leases": {}, **changes}

        self._cas(job_id, change)
        log.debug("part job ended", extra={"job_id": job_id, "kind": self.kind, "state": state})

    # -- parts that keep failing -------------------------------------------------------------

    def _part_failed(self, job: dict[str, Any], key: str, how: str) -> PartOutcome:
        """Fail the job: part `key` (or the finish) `how` (failed on every delivery, was sent
        every time it may be), naming its cases and its last error."""
        finishing = key == FINISH
        number = job["parts_total"] - 1 if finishing else int(key)
        errors = job.get("part_errors") or {}
        last = errors.get(key) or (
            "the worker stopped without an answer (a timeout, out of memory, or a stopped server)"
        )
        if finishing:
            what = f"the finish of the {self.kind}"
        else:
            lo, hi = _plan(job).part(number)
            what = f"part {number} (cases {lo}-{hi - 1})"
        self._end(
            job["id"],
            "failed",
            error={
                "title": f"{self.kind.capitalize()} Part Failed",
                "code": "PartFailed",
                "detail": f"{what} {how}; the last error: {last}. {self.incomplete}",
                "part": number,
            },
        )
        return PartOutcome("failed", job["id"], number, last)

    def dead_letter(self, job_id: str, number: int, receives: int) -> PartOutcome:
        """A part's message that every delivery failed: the job fails, naming the part, its
        cases and its last error."""
        job = self._job(job_id)
        if job is None:
            return PartOutcome("ignored", job_id, number, f"no such {self.kind} job")
        key = FINISH if job.get("finishing") else str(number)
        return self._part_failed(job, key, f"failed on each of its {receives} deliveries")

    def sweep_job(self, job_id: str) -> PartOutcome | None:
        """Send again the parts of a running job whose worker stopped (`stalled_parts`: a lease
        run out, or nothing of the job alive for a lease), counting the sends on the job; or,
        once a part has been sent `MAX_SENDS` times, fail the job naming it. None when nothing
        was due."""
        seen: dict[str, Any] = {}

        def change(job: dict[str, Any]) -> dict[str, Any] | None:
            seen.clear()
            if job.get("state") != "running" or job.get("kind") != self.kind:
                return None
            now = self.clock()
            leases = job.get("part_leases") or {}
            due = stalled_parts(
                job["parts_total"],
                job["parts_done"],
                {k: v["until"] for k, v in leases.items()},
                job["updated_at"],
                iso(now),
                iso(now - timedelta(seconds=self.lease_seconds)),
            )
            sends = dict(job.get("part_sends") or {})
            seen.update(job=job, due=due, spent=exhausted(due, sends))
            if not due or seen["spent"] is not None:
                return None
            sends.update((k, sends.get(k, 0) + 1) for k in due)
            return {
                "part_sends": sends,
                "part_leases": {k: v for k, v in leases.items() if k not in due},
            }

        self._cas(job_id, change)
        if not seen.get("due"):
            return None
        job, due, spent = seen["job"], seen["due"], seen["spent"]
        if spent is not None:
            sends = 1 + (job.get("part_sends") or {}).get(spent, 0)
            return self._part_failed(job, spent, f"was sent {sends} times, and stopped each time")
        last = job["parts_total"] - 1
        self._send(job_id, [last if k == FINISH else int(k) for k in due])
        log.warning("job parts sent again", extra={"job_id": job_id, "parts": due})
        return PartOutcome(
            "resent", job_id, last if due[0] == FINISH else int(due[0]), ",".join(due)
        )


def sweep_part_jobs(
    index: Index, services: Mapping[str, PartJobs], clock: Clock, lease_seconds: float
) -> list[PartOutcome]:
    """The sweep of the jobs of parts (the export worker's schedule, and the local server's):
    every running job listed under `RUNNING_PK` is swept by the service of its kind
    (`PartJobs.sweep_job`); a row whose job has ended (or whose job item never came, a lease
    after it was written) is removed."""
    outcomes: list[PartOutcome] = []
    stale = iso(clock() - timedelta(seconds=lease_seconds))
    for job_id, row in index.list_items(RUNNING_PK):
        job = index.get_item(job_pk(job_id), JOB_SK)
        if job is None or job.get("state") != "running":
            if job is not None or str(row.get("at") or "") <= stale:
                index.delete_item(RUNNING_PK, job_id)
            continue
        jobs = services.get(str(job.get("kind")))
        if jobs is None:
            continue
        try:
            outcome = jobs.sweep_job(job_id)
        except CaseshelfError as exc:  # the next sweep tries again
            log.warning("could not sweep a job", extra={"job_id": job_id, "error": exc.detail})
            continue
        if outcome is not None:
            outcomes.append(outcome)
    return outcomes


class ExportJobService(PartJobs):
    def __init__(
        self,
        exports: ExportService,
        index: Index,
        queue: Callable[[], Queue],
        *,
        render: Render,
        clock: Clock = utc_now,
    ) -> None:
        """`queue` opens the export queue (on first use); `render` turns an export's result
        into the route's answer (kept on the job as its `result`)."""
        super().__init__(index, queue, clock=clock)
        self.exports = exports
        self.render = render

    # -- starting ----------------------------------------------------------------------------

    def start(self, identity: Identity, name: str, ref: str, request: ExportRequest) -> Started:
        prepared = self.exports.prepare(identity, name, ref, request)
        spec, target = prepared.spec, prepared.target
        store = target.store
        assert store is not None
        found = self.exports.existing(target, spec.export_id, prepared.secret_ref, request.bundle)
        if found is not None:
            return Started(result=found)
        pointer = self.index.get_item(POINTER_PK + prepared.record.tenant, spec.export_id)
        if pointer is not None:
            running = self.index.get_item(job_pk(pointer["job"]), JOB_SK)
            same = running is not None and running.get("request") == _summary(request)
            if same and running is not None and running.get("state") == "running":
                # The same export is under way: follow that job (its parts sent again first
                # when its workers stopped: asking again resumes it).
                self.sweep_job(running["id"])
                return Started(job=self.index.get_item(job_pk(running["id"]), JOB_SK) or running)
        plan = plan_parts(
            request.format,
            spec.case_count,
            file_bodies=len(prepared.locations),
            shared_files=len(spec.shared),
        )
        scratch = scratch_prefix(target.prefix)
        store.put(scratch + REQUEST_NAME, request.model_dump_json().encode())
        if request.subset is not None:
            positions = array.array("I", prepared.indices)
            store.put(scratch + INDICES_NAME, positions.tobytes())
        job = self._new_job(identity, prepared, request, plan)
        self._register(job)
        self.index.put_item(job_pk(job["id"]), JOB_SK, job, if_absent=True)
        self.index.put_item(POINTER_PK + prepared.record.tenant, spec.export_id, {"job": job["id"]})
        self._send(job["id"], list(range(plan.part_count)))
        log.debug(
            "export job started",
            extra={"job_id": job["id"], "export_id": spec.export_id, "parts": plan.part_count},
        )
        return Started(job=job)

    def _new_job(
        self, identity: Identity, prepared: Prepared, request: ExportRequest, plan: PartPlan
    ) -> dict[str, Any]:
        now = self.clock()
        rec, spec, target = prepared.record, prepared.spec, prepared.target
        return {
            "id": uuid.uuid4().hex,
            "kind": "export",
            "tenant": rec.tenant,
            "principal": identity.principal,
            "roles": sorted(identity.roles),
            "state": "running",
            "via": "api",
            "key": scratch_prefix(target.prefix),
            "request": _summary(request),
            "created_at": iso(now),
            "updated_at": iso(now),
            "expires_at": int((now + JOB_TTL).timestamp()),
            "attempts": 0,
            "export": {
                "id": spec.export_id,
                "dataset": rec.name,
                "version": rec.version,
                "format": spec.fmt,
                "prefix": target.prefix,
                "bundle": request.bundle,
                "subset": spec.subset,
            },
            **fresh_parts(plan),
        }

    # -- a part ------------------------------------------------------------------------------

    def _prepared(self, job: dict[str, Any]) -> tuple[Prepared, ExportRequest]:
        """The job's export, resolved again by this invocation: the pinned version, the request
        and the positions the start kept."""
        scratch = job["key"]
        store = self.exports.store
        request = ExportRequest.model_validate_json(store.get(scratch + REQUEST_NAME))
        export = job["export"]
        chosen = None
        if request.subset is not None:
            positions = array.array("I")
            positions.frombytes(store.get(scratch + INDICES_NAME))
            chosen = (positions, export.get("subset"))
        prepared = self.exports.prepare(
            _identity(job), export["dataset"], export["version"], request, chosen=chosen
        )
        if prepared.spec.export_id != export["id"]:
            raise Conflict(
                f"export job {job['id']}: the version resolves to another export "
                f"({prepared.spec.export_id}, not {export['id']}); ask for the export again",
                job_id=job["id"],
            )
        return prepared, request

    def _open(self, job: dict[str, Any]) -> tuple[Prepared, ExportRequest]:
        return self._prepared(job)

    def _write_part(
        self,
        job: dict[str, Any],
        opened: tuple[Prepared, ExportRequest],
        number: int,
        rng: tuple[int, int],
    ) -> tuple[PartMeta, str]:
        prepared, request = opened
        meta = done_part(
            self.exports.store,
            job["key"],
            number,
            rng,
            request.bundle,
            tasks=prepared.fmt == HARBOR,
        )
        if meta is not None:
            return meta, "reused"
        written = write_part(prepared, number, rng, bundle=request.bundle, warn=self.exports.warn)
        return written, "written"

    # -- the finish --------------------------------------------------------------------------

    def _finish(self, job: dict[str, Any], opened: tuple[Prepared, ExportRequest]) -> None:
        prepared, request = opened
        store = self.exports.store
        scratch = job["key"]
        metas = [
            PartMeta.from_json(store.get(part_key(scratch, n, "json")))
            for n in range(job["parts_total"])
        ]
        done = finish_export(prepared, metas, bundle=request.bundle)
        result = self.exports.result_of(prepared, done, bundle=request.bundle)
        self._end(job["id"], "succeeded", result=self.render(result))
        remove_scratch(store, prepared.target.prefix)


def _summary(request: ExportRequest) -> dict[str, Any]:
    """The request as the job shows it: its options, and the shared files by destination (an
    inline body stays in the scratch area)."""
    out = request.model_dump(mode="json", exclude_none=True, exclude={"shared_files"})
    ids = (out.get("subset") or {}).get("ids")
    if ids is not None and len(ids) > SHOWN_IDS:  # the job item stays small
        out["subset"]["ids"] = [*ids[:SHOWN_IDS], f"... {len(ids) - SHOWN_IDS} more"]
    if request.shared_files:
        out["shared_files"] = [sf.dest for sf in request.shared_files]
    return out


def message_of(body: str) -> tuple[str, int, str]:
    """(job id, part, the job's kind) of a part's message (kind `export` when it names none);
    `ValueError` for anything else."""
    doc = orjson.loads(body)
    if not isinstance(doc, dict) or not isinstance(doc.get("job"), str):
        raise ValueError("not a part message")
    part = doc.get("part")
    if not isinstance(part, int) or isinstance(part, bool) or part < 0:
        raise ValueError("not a part message")
    kind = doc.get("kind", "export")
    if not isinstance(kind, str):
        raise ValueError("not a part message")
    return doc["job"], part, kind
