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
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson

from caseshelf.domain.errors import CaseshelfError, Conflict, Corrupt, NotFound, Upstream
from caseshelf.domain.export_parts import PartPlan, plan_parts
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
from caseshelf.services.jobs import JOB_SK, job_pk
from caseshelf.services.versioned import Clock, iso, utc_now

log = logging.getLogger("caseshelf.export_jobs")

JOB_TTL = timedelta(days=30)
POINTER_PK = "EXPORTJOB#"
REQUEST_NAME = "request.json"
INDICES_NAME = "indices.u32"
CAS_TRIES = 64
SHOWN_IDS = 100  # of a subset's ids, on the job
Render = Callable[[ExportResult], dict[str, Any]]


@dataclass(frozen=True)
class Started:
    """What the route answers: the export already complete (`result`), or its job."""

    result: ExportResult | None = None
    job: dict[str, Any] | None = None


@dataclass(frozen=True)
class PartOutcome:
    status: str  # written | reused | finished | failed | ignored
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
        "rev": 0,
        "result": None,
        "error": None,
    }


class PartJobs:
    """The job item of a job of parts on the export queue, whatever the parts write: its parts
    recorded with compare-and-set on `rev`, a part's last error kept, the end, and the dead
    letter that fails it naming the part. `kind` is the job's kind (the worker routes a
    message to the service of its `kind`); `incomplete` says, in a failed job's error, what
    is not there and how to resume."""

    kind = "export"
    incomplete = (
        "Nothing of the export is complete (it has no manifest); ask for the export again to "
        "resume it: the parts written are reused"
    )

    def __init__(self, index: Index, queue: Callable[[], Queue], *, clock: Clock) -> None:
        self.index = index
        self.queue = queue
        self.clock = clock

    def _job(self, job_id: str) -> dict[str, Any] | None:
        """The job `job_id` when it is one of this service's kind."""
        job = self.index.get_item(job_pk(job_id), JOB_SK)
        return job if job is not None and job.get("kind") == self.kind else None

    def run_part(self, job_id: str, number: int) -> PartOutcome:
        """Write part `number` of the job (unless written), record it, and finish the job when
        it was the last. An error of the request fails the job; any other error is raised, for
        the queue to deliver the message again. Each kind opens its job (`_open`), writes a
        part (`_write_part`) and finishes (`_finish`) its own way."""
        job = self._job(job_id)
        if job is None:
            log.warning(f"{self.kind} part for no job", extra={"job_id": job_id, "part": number})
            return PartOutcome("ignored", job_id, number, f"no such {self.kind} job")
        if job["state"] != "running":
            return PartOutcome("ignored", job_id, number, f"the job is {job['state']}")
        rng = _plan(job).part(number)
        try:
            opened = self._open(job)
            meta, status = self._write_part(job, opened, number, rng)
        except CaseshelfError as exc:
            if isinstance(exc, Upstream | Corrupt):  # the store's, not the request's: retried
                self._note_error(job_id, number, exc.detail)
                raise
            self._fail(job_id, number, rng, exc)
            return PartOutcome("failed", job_id, number, exc.detail)
        except Exception as exc:
            self._note_error(job_id, number, f"{type(exc).__name__}: {exc}")
            raise
        job = self._record(job_id, meta)
        if job["state"] == "running" and len(job["parts_done"]) == job["parts_total"]:
            self._finish(job, opened)
            return PartOutcome("finished", job_id, number)
        return PartOutcome(status, job_id, number)

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
        def change(job: dict[str, Any]) -> dict[str, Any] | None:
            if meta.number in job["parts_done"]:
                return None
            return {
                "parts_done": sorted([*job["parts_done"], meta.number]),
                "cases_written": job["cases_written"] + (meta.stop - meta.start),
                "files_written": job["files_written"] + meta.files,
                "bytes_written": job["bytes_written"] + meta.nbytes,
            }

        return self._cas(job_id, change)

    def _note_error(self, job_id: str, number: int, reason: str) -> None:
        """Keep a part's last error on the job (what its dead letter will name)."""
        try:
            self._cas(
                job_id,
                lambda job: {
                    "part_errors": {**job.get("part_errors", {}), str(number): reason[:500]}
                },
            )
        except CaseshelfError:
            log.warning("could not note an export part's error", extra={"job_id": job_id})

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
            return {"state": state, **changes}

        self._cas(job_id, change)
        log.debug("part job ended", extra={"job_id": job_id, "kind": self.kind, "state": state})

    def dead_letter(self, job_id: str, number: int, receives: int) -> PartOutcome:
        """A part's message that every delivery failed: the job fails, naming the part, its
        cases and its last error."""
        job = self._job(job_id)
        if job is None:
            return PartOutcome("ignored", job_id, number, f"no such {self.kind} job")
        lo, hi = _plan(job).part(number)
        last = (job.get("part_errors") or {}).get(str(number)) or (
            "the worker stopped without an answer (a timeout or out of memory)"
        )
        what = f"the finish of the {self.kind}" if job.get("finishing") else f"part {number}"
        self._end(
            job_id,
            "failed",
            error={
                "title": f"{self.kind.capitalize()} Part Failed",
                "code": "PartFailed",
                "detail": f"{what} (cases {lo}-{hi - 1}) failed on each of its {receives} "
                f"deliveries; the last error: {last}. {self.incomplete}",
                "part": number,
            },
        )
        return PartOutcome("failed", job_id, number, last)


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
                return Started(job=running)  # the same export is under way: follow that job
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
        self.index.put_item(job_pk(job["id"]), JOB_SK, job, if_absent=True)
        self.index.put_item(POINTER_PK + prepared.record.tenant, spec.export_id, {"job": job["id"]})
        self.queue().send([{"job": job["id"], "part": n} for n in range(plan.part_count)])
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
        self._cas(job["id"], lambda j: None if j.get("finishing") else {"finishing": True})
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
