"""Import jobs: large inputs uploaded to the bucket and imported by the S3 event.

An upload declares what it is (`UploadRequest`, discriminated by `kind`): `benchmark` (the
default) is a file of rows imported through a recipe; `tasks` is a Terminal-Bench, Harbor or
case-directory archive imported by the task on-ramps (`caseshelf.services.tasks`); `dataset` is
a dataset document (`.json`, `.jsonl`, `.yaml`: what `POST /datasets` takes, or a bare list of
cases) registered through the registry service as that route registers it, with the same answer
and the same errors: a registration too large for one request body.

Two ways in, one worker:
- `POST /uploads` (`create_upload`) writes a job item (`JOB#<id>`, state `pending`) and answers a
  presigned PUT for `t/<tenant>/uploads/<job id>/<filename>`. A benchmark's recipe is resolved
  (and pinned to its version) at that moment, so a bad recipe fails before anything is uploaded.
  On the embedded store served by `caseshelf serve` the URL is the dev server's own
  `PUT /_uploads/<token>`, which writes the object and delivers the same object-created event.
- A pipeline drops a file under `t/<tenant>/imports/<folder>/<file>` next to a sidecar
  `t/<tenant>/imports/<folder>/import.json` holding the upload request without `filename`
  (recipe, dataset, version or bump, limit...; or `kind: tasks` and its options). The object's
  key and ETag name the job, so a redelivered event finds the job already there and does nothing.

`handle_object` is the S3 event's entry point: it checks the key's tenant prefix against the
job, moves the job pending -> running with a conditional write (a duplicate event loses that
race and stops), runs the import, and records succeeded (with the version) or failed (with the
error). A key outside any job, or under another tenant's prefix, is rejected, logged and left
alone. Each import's own commit protocol means a failure never leaves a half-registered version.

Leases. A worker can die without a word (a Lambda timeout or out-of-memory kill, `kill -9` of
the local server). So a running job carries a lease (`lease_until`, `worker`, `attempts`): the
worker renews it every quarter of `lease_seconds` while it works (`Heartbeat`), and finishes
only while it still holds it. An event for a running job whose lease holds is a duplicate (S3
delivers at least once); one for a job whose lease expired resumes it, as a new attempt, or,
after `max_attempts`, fails it with the reason. Resuming is safe because an import is
idempotent: the same content under the same or the next label registers nothing twice.
Redeliveries come from S3 and EventBridge (retries) and Lambda's own retries of a failed
invocation; what none of them redelivers, `recover` finds: a scheduled sweep (a `Schedule`
event of the importer, run by `caseshelf serve` too) lists the uploads still in the bucket and
resumes or fails the jobs of those whose lease expired, or whose event never came; and it looks
at the queued jobs not ended (one `QUEUED_PK` row each), sending again the message of one whose
lease expired or that is still pending a lease after its last send.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, Literal

import orjson
from pydantic import (
    ConfigDict,
    Discriminator,
    Field,
    RootModel,
    Tag,
    ValidationError,
    model_validator,
)

from caseshelf.domain import layout
from caseshelf.domain.envelope import validation_problem
from caseshelf.domain.errors import BadRequest, CaseshelfError, Conflict, NotFound, TooLarge
from caseshelf.domain.identity import Identity
from caseshelf.domain.keys import tenant_pk
from caseshelf.domain.models import BumpKind, DatasetId, Label, Strict
from caseshelf.domain.paths import relative_path_problem
from caseshelf.domain.subset import SubsetRequest, check_selection
from caseshelf.domain.words import FILENAME_RULE
from caseshelf.ports import BlobStore, Index, Queue
from caseshelf.services.imports import (
    ImportRequest,
    ImportService,
    RecipeRef,
    RowReader,
    SourceOverride,
)
from caseshelf.services.objectio import open_object
from caseshelf.services.registry import parse_head
from caseshelf.services.selection import SubsetProgress
from caseshelf.services.tasks import (
    TaskOptions,
    TaskProgress,
    TaskSourceRef,
    archive_kind,
    object_digest,
)
from caseshelf.services.versioned import Clock, iso, utc_now

if TYPE_CHECKING:
    from caseshelf.services.registry import RegisterResult, RegistryService
    from caseshelf.services.selection import SelectionService
    from caseshelf.services.tasks import TaskImportRequest, TaskImportResult, TaskImportService

log = logging.getLogger("caseshelf.jobs")

JOB_SK = "JOB"
UPLOADS_SK = "UPLOADS"  # under the tenant's row: this tenant has started uploads (the sweep)
JOB_TTL = timedelta(days=30)
SIDECAR = "import.json"
# Queued jobs (started through the API) not ended yet, one row each (sk: the job's id), which the
# sweep looks at: written before the job item, removed by the sweep once the job has ended.
QUEUED_PK = "RUNNING#queued-jobs"
# A job whose worker dies is resumed (or failed) within this long: its lease runs out, and the
# next sweep finds it. The sweep runs every minute (the template's `SweepJobs` schedule on AWS,
# the local server's `SWEEP_SECONDS`), so the lease is what remains of the bound.
RESUME_WITHIN_SECONDS = 120
SWEEP_EVERY_SECONDS = 60
LEASE_SECONDS = 45  # a worker that has not renewed its lease for this long is taken for dead
MAX_ATTEMPTS = 3  # attempts of one job (the first and two resumptions) before it fails
QUEUED_TASKS = "tasks"  # a job's `work`: a task import started through the tasks API
QUEUED_SUBSET = "subset"  # a job's `work`: a subset registered as a version (`register_as`)
# What a queued job's message may start, and what to do when its worker keeps stopping.
_QUEUED_WORK = {
    QUEUED_TASKS: "Split the tasks into smaller archives and import each",
    QUEUED_SUBSET: "Select fewer cases a time (limit, or tags) and register each",
}
# A subset job keeps its request and its result's stamp in its item (the index's rows hold
# 390 KiB on DynamoDB): a selection's request, ids and all, may take this much.
SUBSET_JOB_REQUEST_BYTES = 128 * 1024
_FILENAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_UPLOAD_KEY = re.compile(r"^t/([^/]+)/uploads/([0-9a-f]{32})/([^/]+)$")
_DROP_KEY = re.compile(r"^t/([^/]+)/imports/((?:[^/]+/)*)([^/]+)$")


# -- what an upload is -------------------------------------------------------------------------


def _one_target(version: str | None, bump: str | None) -> None:
    if version is not None and bump is not None:
        raise ValueError("give either version or bump, not both")


class BenchmarkUpload(Strict):
    """A benchmark's rows (jsonl, csv, parquet), imported through a recipe."""

    kind: Literal["benchmark"] = Field(
        default="benchmark", description="What the upload is; `benchmark` when absent."
    )
    filename: str = Field(description="The file's name; its extension tells its format.")
    recipe: str | RecipeRef | dict[str, Any] = Field(
        description="A recipe id (registered or catalog), {id, version}, or a whole recipe."
    )
    format: Literal["jsonl", "json", "csv", "parquet"] | None = Field(
        default=None, description="The file's format when its extension does not tell."
    )
    dataset: DatasetId | None = None
    version: Label | None = None
    bump: BumpKind | None = None
    limit: int | None = Field(default=None, ge=1)
    description: str | None = None
    tags: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _target(self) -> BenchmarkUpload:
        _one_target(self.version, self.bump)
        return self


class TasksUpload(Strict):
    """A `.tar.gz`/`.zip` of Terminal-Bench or Harbor task directories, or of a case-directory
    tree (`eval.yaml` + its case directories), imported by the task on-ramps."""

    kind: Literal["tasks"] = Field(description="What the upload is.")
    filename: str = Field(description="The archive's name (.tar.gz, .tgz, .tar, .zip).")
    format: Literal["terminal-bench", "harbor", "case-dirs"]
    image_template: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description="Container tasks: the prebuilt image of tasks that name none ({id}, {name}).",
    )
    skip_invalid: bool = Field(
        default=False,
        description="Container tasks: leave out invalid tasks, each reported in the result.",
    )
    id_prefix: str = Field(
        default="",
        max_length=64,
        pattern=r"^[A-Za-z0-9._-]*$",
        description="Container tasks: a prefix for every case id.",
    )
    dataset: DatasetId | None = None
    version: Label | None = None
    bump: BumpKind | None = None

    @model_validator(mode="after")
    def _options(self) -> TasksUpload:
        _one_target(self.version, self.bump)
        if self.format == "case-dirs" and (
            self.image_template or self.skip_invalid or self.id_prefix
        ):
            raise ValueError("image_template, skip_invalid and id_prefix are for container tasks")
        return self


DATASET_SUFFIXES = (".json", ".jsonl", ".ndjson", ".yaml", ".yml")


class DatasetUpload(Strict):
    """A dataset document (the body `POST /datasets` takes, as `.json`, `.jsonl` or `.yaml`;
    or a bare list of cases), registered as that route registers it. `dataset`, `version`,
    `bump` and `base` override the document's own, as the CLI's options do (a bare list of
    cases gets its id and version from them)."""

    kind: Literal["dataset"] = Field(description="What the upload is.")
    filename: str = Field(description="The document's name (.json, .jsonl, .ndjson, .yaml, .yml).")
    dataset: DatasetId | None = None
    version: Label | None = None
    bump: BumpKind | None = None
    base: str | None = Field(default=None, min_length=1, max_length=300)
    dry_run: bool = Field(
        default=False,
        description="Validate only, as `POST /datasets/validate` does: the job's result is that "
        "route's answer and nothing is stored.",
    )

    @model_validator(mode="after")
    def _target(self) -> DatasetUpload:
        _one_target(self.version, self.bump)
        if not self.filename.lower().endswith(DATASET_SUFFIXES):
            raise ValueError(
                f"filename {self.filename!r}: a dataset upload is a .json, .jsonl, .ndjson, "
                ".yaml or .yml file"
            )
        return self


def _upload_kind(raw: Any) -> Any:
    if isinstance(raw, dict):
        return raw.get("kind", "benchmark")
    return getattr(raw, "kind", "benchmark")


UploadSpec = Annotated[
    Annotated[BenchmarkUpload, Tag("benchmark")]
    | Annotated[TasksUpload, Tag("tasks")]
    | Annotated[DatasetUpload, Tag("dataset")],
    Discriminator(
        _upload_kind,
        custom_error_type="upload_kind",
        custom_error_message="kind is 'benchmark' (the default), 'tasks' or 'dataset'",
    ),
]


class UploadRequest(RootModel[UploadSpec]):
    """The body of `POST /uploads` (and, without `filename`, of a drop's `import.json`): the
    file's name and what to do with it once it lands, by `kind`."""

    # Built on first use, as its three kinds are: a RootModel does not take their config.
    model_config = ConfigDict(defer_build=True)


def parse_upload(raw: Any) -> UploadRequest:
    if not isinstance(raw, dict):
        raise BadRequest("an upload request is a JSON object")
    try:
        return UploadRequest.model_validate(raw)
    except ValidationError as exc:
        loc, msg = validation_problem(exc)
        raise BadRequest(f"{loc or 'kind'}: {msg}", field=loc or "kind") from None


@dataclass(frozen=True)
class Upload:
    job: dict[str, Any]
    url: str | None  # None on an embedded store that no dev server publishes
    key: str
    expires_in: int


@dataclass(frozen=True)
class Outcome:
    """What the worker did with one object: `succeeded`, `failed`, `duplicate` (done, or
    running under a live lease), `ignored` (a sidecar), `rejected` (no such job, wrong tenant)
    or `superseded` (this worker lost its lease and another attempt took the job over)."""

    status: str
    job_id: str | None = None
    reason: str = ""


def job_pk(job_id: str) -> str:
    return f"JOB#{job_id}"


class JobService:
    def __init__(
        self,
        index: Index,
        store: BlobStore,
        imports: ImportService,
        tasks: TaskImportService,
        *,
        object_url: Callable[[str], str],
        object_reader: RowReader,
        presign_expiry: int = 900,
        clock: Clock = utc_now,
        lease_seconds: float = LEASE_SECONDS,
        max_attempts: int = MAX_ATTEMPTS,
        registry: RegistryService | None = None,
        queue: Callable[[], Queue] | None = None,
        selection: Callable[[], SelectionService] | None = None,
    ) -> None:
        # Dataset uploads register through the same registry service the imports write to.
        self.registry = registry if registry is not None else imports.registry
        self.lease_seconds = lease_seconds
        self.max_attempts = max_attempts
        self.index = index
        self.store = store
        self.imports = imports
        self.tasks = tasks
        self.object_url = object_url
        self.object_reader = object_reader
        self.presign_expiry = presign_expiry
        self.clock = clock
        self.queue = queue
        self.selection = selection
        # Of the jobs this process runs.
        self.progress: dict[str, TaskProgress | SubsetProgress] = {}

    # -- creating --------------------------------------------------------------------------

    def _new_job(
        self, identity: Identity, job_id: str, key: str, req: UploadRequest, *, via: str
    ) -> dict[str, Any]:
        now = self.clock()
        spec = req.root
        request = spec.model_dump(mode="json", exclude_none=True)
        if isinstance(spec, BenchmarkUpload):
            request["recipe"] = self._pin_recipe(identity, spec.recipe)
        elif isinstance(spec, TasksUpload) and archive_kind(spec.filename) is None:
            raise BadRequest(
                f"filename {spec.filename!r}: a task upload is a .tar.gz, .tgz, .tar or .zip",
                field="filename",
            )
        return {
            "id": job_id,
            "tenant": identity.tenant,
            "principal": identity.principal,
            "roles": sorted(identity.roles),
            "state": "pending",
            "via": via,
            "key": key,
            "filename": spec.filename,
            "request": request,
            "created_at": iso(now),
            "updated_at": iso(now),
            "expires_at": int((now + JOB_TTL).timestamp()),
            "attempts": 0,
            "lease_until": None,
            "worker": None,
            "result": None,
            "error": None,
        }

    def _pin_recipe(
        self, identity: Identity, spec: str | RecipeRef | dict[str, Any]
    ) -> str | dict[str, Any]:
        """Resolve the recipe now (a bad one fails before the upload) and pin its version."""
        resolved = self.imports.resolve_recipe(identity, spec)
        if resolved.owner == "inline":
            return spec.model_dump() if isinstance(spec, RecipeRef) else spec
        return {"id": resolved.recipe.id, "version": resolved.recipe.version}

    def create_upload(self, identity: Identity, req: UploadRequest) -> Upload:
        tenant = identity.check_can_write()
        filename = req.root.filename
        if not _FILENAME.match(filename):
            raise BadRequest(
                f"filename {filename!r}: {FILENAME_RULE}",
                field="filename",
            )
        job_id = uuid.uuid4().hex
        key = f"{layout.root(tenant)}uploads/{job_id}/{filename}"
        job = self._new_job(identity, job_id, key, req, via="upload")
        self.index.put_item(tenant_pk(tenant), UPLOADS_SK, {"tenant": tenant})
        self.index.put_item(job_pk(job_id), JOB_SK, job, if_absent=True)
        url = self.store.presign_put(key, expires=self.presign_expiry)
        return Upload(job=job, url=url, key=key, expires_in=self.presign_expiry)

    def start_tasks(self, identity: Identity, fmt: str, req: TaskImportRequest) -> dict[str, Any]:
        """`POST /datasets/terminal-bench|harbor`: check where the tasks are (an inline archive
        is written to the job's own object), write the job (`pending`, via `api`) and queue it
        for the import worker (`run_queued`). The route answers the job at once: the work,
        which grows with the tasks, is the worker's."""
        if self.queue is None:
            raise RuntimeError("task import jobs need the import queue")
        tenant = identity.check_can_write()
        job_id = uuid.uuid4().hex
        ref = self.tasks.locate(identity, req, f"{layout.root(tenant)}jobs/{job_id}/{req.filename}")
        request = {
            "kind": "tasks",
            "format": fmt,
            "source": ref.origin,
            **req.model_dump(
                mode="json", exclude_none=True, exclude={"archive_base64", "upload_id", "s3"}
            ),
        }
        return self._queue_job(
            identity,
            job_id,
            QUEUED_TASKS,
            request,
            key=ref.key if ref.bucket is None else None,
            source=ref.plain(),
            filename=ref.name,
        )

    def start_subset(
        self,
        identity: Identity,
        name: str,
        ref: str,
        req: SubsetRequest,
        *,
        include_deleted: bool = False,
    ) -> dict[str, Any]:
        """`POST /datasets/{id}/versions/{ref}/subset` with `register_as`: check what can be
        checked before any work (the selection's form, the version, the right to write, the
        request's size), pin the version (its label and content digest), write the job
        (`pending`, via `api`) and queue it for the import worker (`run_queued`), which
        selects and registers. The route answers the job at once."""
        if self.queue is None or self.selection is None:
            raise RuntimeError("subset jobs need the import queue and the selection service")
        if req.register_as is None:
            raise BadRequest("a subset job registers its selection: give register_as")
        identity.check_can_write()
        check_selection(req.selection())
        rec = self.registry.get_version(identity, name, ref, include_deleted=include_deleted)
        request = {
            "kind": "subset",
            "dataset": rec.name,
            "ref": ref,
            "version": rec.version,
            "content_digest": rec.content_digest,
            "include_deleted": include_deleted,
            **req.model_dump(mode="json", exclude_none=True),
        }
        size = len(orjson.dumps(request))
        if size > SUBSET_JOB_REQUEST_BYTES:
            raise TooLarge(
                f"the subset request takes {size:,} bytes; one registered as a job may take "
                f"{SUBSET_JOB_REQUEST_BYTES:,} (its ids are kept with the job). Select the "
                "cases by tags, limit or sample instead, or split the ids into several "
                "subsets and register each",
                field="ids",
                limit=SUBSET_JOB_REQUEST_BYTES,
            )
        return self._queue_job(identity, uuid.uuid4().hex, QUEUED_SUBSET, request)

    def _queue_job(
        self,
        identity: Identity,
        job_id: str,
        work: str,
        request: dict[str, Any],
        *,
        key: str | None = None,
        source: dict[str, Any] | None = None,
        filename: str | None = None,
    ) -> dict[str, Any]:
        """Write a queued job's item (`pending`, via `api`) and send its one message."""
        assert self.queue is not None
        now = self.clock()
        job = {
            "id": job_id,
            "tenant": identity.tenant,
            "principal": identity.principal,
            "roles": sorted(identity.roles),
            "state": "pending",
            "via": "api",
            "work": work,
            "key": key,
            "source": source,
            "filename": filename,
            "request": request,
            "created_at": iso(now),
            "updated_at": iso(now),
            "expires_at": int((now + JOB_TTL).timestamp()),
            "attempts": 0,
            "lease_until": None,
            "worker": None,
            "result": None,
            "error": None,
        }
        self.index.put_item(QUEUED_PK, job_id, {"work": work, "at": iso(now)})
        self.index.put_item(job_pk(job_id), JOB_SK, job, if_absent=True)
        self.queue().send([{"job": job_id}])
        return job

    def run_queued(self, job_id: str) -> Outcome:
        """A queued job's message (the import queue, batch size 1): run it unless it is done
        or running under a live lease (a duplicate delivery). A worker that dies leaves the
        message to the queue, which delivers it again once its visibility timeout is past (the
        lease has expired by then: the job is resumed as a new attempt)."""
        job = self.index.get_item(job_pk(job_id), JOB_SK)
        if job is None or job.get("work") not in _QUEUED_WORK:
            return Outcome("rejected", job_id, "no such queued job")
        return self._run(job)

    def dead_letter(self, job_id: str, receives: int) -> Outcome:
        """A queued job whose every delivery failed (its worker stopped each time: a timeout
        or out of memory): the job fails, saying so; nothing was registered."""
        job = self.index.get_item(job_pk(job_id), JOB_SK)
        if job is None or job.get("work") not in _QUEUED_WORK:
            return Outcome("rejected", job_id, "no such queued job")
        if job.get("state") in ("succeeded", "failed"):
            return Outcome("duplicate", job_id, "the job has ended")
        detail = (
            f"the job's worker stopped without finishing on each of its {receives} "
            "deliveries (a timeout or out of memory); nothing was registered. "
            + _QUEUED_WORK[job["work"]]
        )
        error = {
            "title": "Worker Stopped",
            "code": "LeaseExpired",
            "detail": detail,
            "attempts": int(job.get("attempts") or 0),
        }
        try:
            self.index.update_item(
                job_pk(job_id),
                JOB_SK,
                {"state": "failed", "updated_at": iso(self.clock()), "error": error},
                expect={"state": job.get("state"), "updated_at": job.get("updated_at")},
            )
        except Conflict:
            return Outcome("duplicate", job_id, "the job changed meanwhile")
        return Outcome("failed", job_id, detail)

    # -- reading ---------------------------------------------------------------------------

    def get(self, identity: Identity, job_id: str) -> dict[str, Any]:
        """A job of the caller's tenant; another tenant's job is simply not found."""
        if not re.fullmatch(r"[0-9a-f]{32}", job_id or ""):
            raise NotFound(f"no job {job_id!r}", id=job_id)
        job = self.index.get_item(job_pk(job_id), JOB_SK)
        if job is None or job.get("tenant") != identity.tenant:
            raise NotFound(f"no job {job_id!r}", id=job_id)
        if job.get("kind") in ("export", "download") or job.get("work"):
            # Its deliveries are the queue's (caseshelf.services.export_jobs, `run_queued`).
            return job
        if self._expired(job) and not self.store.exists(job["key"]):
            # Nothing can resume it: its input is gone (a finished upload is removed only
            # after the job is done, so this is a worker that died and an expired upload).
            failed = self._give_up(job, "its input object is gone")
            return failed or self.index.get_item(job_pk(job_id), JOB_SK) or job
        return job

    # -- leases ----------------------------------------------------------------------------

    def _lease_until(self, now: datetime) -> str:
        return iso(now + timedelta(seconds=self.lease_seconds))

    def _expired(self, job: dict[str, Any]) -> bool:
        lease = job.get("lease_until")
        return job.get("state") == "running" and (lease is None or lease <= iso(self.clock()))

    def _claim(self, job: dict[str, Any]) -> dict[str, Any] | None:
        """Take the job for this worker: a pending one, or a running one whose lease expired
        (a new attempt). None when another worker holds it or it is done."""
        state = job.get("state")
        if state == "pending":
            expect: dict[str, Any] = {"state": "pending"}
        elif self._expired(job):
            expect = {"state": "running", "lease_until": job.get("lease_until")}
        else:
            return None
        now = self.clock()
        attempts = int(job.get("attempts") or 0) + 1
        changes = {
            "state": "running",
            "updated_at": iso(now),
            "lease_until": self._lease_until(now),
            "worker": uuid.uuid4().hex,
            "attempts": attempts,
        }
        try:
            return self.index.update_item(job_pk(job["id"]), JOB_SK, changes, expect=expect)
        except Conflict:
            return None

    def _give_up(self, job: dict[str, Any], why: str) -> dict[str, Any] | None:
        """Fail a running job whose lease expired, saying why; None when it changed first."""
        attempts = int(job.get("attempts") or 0)
        error = {
            "title": "Worker Stopped",
            "code": "LeaseExpired",
            "detail": f"the import's worker stopped without finishing ({attempts} attempt"
            f"{'s' if attempts != 1 else ''}; the last lease expired at {job.get('lease_until')})"
            f" and {why}; nothing was registered by the stopped attempts",
            "attempts": attempts,
        }
        try:
            failed = self.index.update_item(
                job_pk(job["id"]),
                JOB_SK,
                {"state": "failed", "updated_at": iso(self.clock()), "error": error},
                expect={"state": "running", "lease_until": job.get("lease_until")},
            )
        except Conflict:
            return None
        log.warning("import job failed: lease expired", extra={"job_id": job["id"], "why": why})
        return failed

    def recover(self) -> list[Outcome]:
        """The sweep: every upload still in the store whose job never started (its event was
        lost) or whose worker's lease expired is resumed, or failed once its attempts are
        spent. Uploads of finished jobs are removed, so the listing stays short."""
        outcomes: list[Outcome] = []
        for tenant in self._tenants_with_uploads():
            for obj in self.store.list(f"{layout.root(tenant)}uploads/"):
                m = _UPLOAD_KEY.match(obj.key)
                if m is None:
                    continue
                job = self.index.get_item(job_pk(m.group(2)), JOB_SK)
                if job is None or job.get("key") != obj.key:
                    continue
                if job.get("state") == "pending" and obj.last_modified > (
                    self.clock().timestamp() - self.lease_seconds
                ):
                    continue  # just uploaded: its event is on the way
                if job.get("state") == "pending" or self._expired(job):
                    outcomes.append(self._run(job))
        return outcomes + self._recover_queued()

    def _recover_queued(self) -> list[Outcome]:
        """The sweep of the queued jobs: one whose worker's lease expired has its message sent
        again (the delivery resumes it, or fails it once its attempts are spent); one still
        pending a lease after its last send (its message never sent, or lost with a local
        server) is sent again, and failed after `max_attempts` sends. Rows of ended jobs go."""
        outcomes: list[Outcome] = []
        stale = iso(self.clock() - timedelta(seconds=self.lease_seconds))
        for job_id, row in self.index.list_items(QUEUED_PK):
            job = self.index.get_item(job_pk(job_id), JOB_SK)
            if job is None or job.get("state") in ("succeeded", "failed"):
                if job is not None or str(row.get("at") or "") <= stale:
                    self.index.delete_item(QUEUED_PK, job_id)
                continue
            if job.get("state") == "pending" and job.get("updated_at", "") <= stale:
                outcomes.append(self._resend_pending(job))
            elif job.get("state") == "running" and self._expired(job):
                if int(job.get("attempts") or 0) >= self.max_attempts:
                    self._give_up(job, f"it was tried {self.max_attempts} times")
                    outcomes.append(Outcome("failed", job_id, "the worker stopped every time"))
                    continue
                assert self.queue is not None
                self.queue().send([{"job": job_id}])
                outcomes.append(Outcome("resent", job_id, "its worker's lease expired"))
        return outcomes

    def _resend_pending(self, job: dict[str, Any]) -> Outcome:
        """Send a pending queued job's message again (counted on the job as `sends`), or fail
        the job once it has been sent `max_attempts` times and no worker took it up."""
        assert self.queue is not None
        job_id, sends = job["id"], 1 + int(job.get("sends") or 0)
        expect = {"state": "pending", "updated_at": job.get("updated_at")}
        now = iso(self.clock())
        if sends >= self.max_attempts:
            error = {
                "title": "Worker Stopped",
                "code": "NotStarted",
                "detail": f"no worker took the job up after {sends} sends of its message; "
                "nothing was registered. Start it again",
                "attempts": 0,
            }
            changes: dict[str, Any] = {"state": "failed", "updated_at": now, "error": error}
        else:
            changes = {"sends": sends, "updated_at": now}
        try:
            self.index.update_item(job_pk(job_id), JOB_SK, changes, expect=expect)
        except Conflict:
            return Outcome("duplicate", job_id, "the job changed meanwhile")
        if sends >= self.max_attempts:
            return Outcome("failed", job_id, "no worker took it up")
        self.queue().send([{"job": job_id}])
        return Outcome("resent", job_id, "it was pending a lease after its message was sent")

    def _tenants_with_uploads(self) -> list[str]:
        """Tenants that ever started an upload (`create_upload` marks them in the index, so the
        sweep lists only `uploads/` prefixes, never the whole bucket)."""
        return [
            t for t in self.index.list_tenants() if self.index.get_item(tenant_pk(t), UPLOADS_SK)
        ]

    # -- the worker ------------------------------------------------------------------------

    def handle_object(self, key: str, *, etag: str | None = None) -> Outcome:
        """Run the import an object's arrival stands for (the key is already unquoted)."""
        problem = relative_path_problem(key)
        if problem:
            return self._reject(key, None, f"the key {problem}")
        m = _UPLOAD_KEY.match(key)
        if m:
            return self._handle_upload(key, m.group(1), m.group(2))
        m = _DROP_KEY.match(key)
        if m:
            return self._handle_drop(key, m.group(1), m.group(2), m.group(3), etag)
        return self._reject(key, None, "the key is not under any tenant's uploads/ or imports/")

    def _reject(self, key: str, job_id: str | None, reason: str) -> Outcome:
        log.warning(
            "import object rejected", extra={"key": key, "job_id": job_id, "reason": reason}
        )
        return Outcome("rejected", job_id, reason)

    def _handle_upload(self, key: str, key_tenant: str, job_id: str) -> Outcome:
        job = self.index.get_item(job_pk(job_id), JOB_SK)
        if job is None:
            return self._reject(key, job_id, "no job for this upload")
        if job.get("tenant") != key_tenant or job.get("key") != key:
            return self._reject(key, job_id, "the key is not this job's (tenant or name differ)")
        return self._run(job)

    def _handle_drop(
        self, key: str, tenant: str, folder: str, filename: str, etag: str | None
    ) -> Outcome:
        if filename == SIDECAR:
            return Outcome("ignored", None, "a sidecar is read with its data file")
        try:
            identity = Identity(tenant, "s3-drop")
        except CaseshelfError:
            return self._reject(key, None, "the key's tenant is not a valid tenant")
        sidecar = f"t/{tenant}/imports/{folder}{SIDECAR}"
        try:
            raw = orjson.loads(self.store.get(sidecar))
            req = parse_upload({**raw, "filename": filename})
        except NotFound:
            return self._reject(key, None, f"no sidecar {sidecar} next to the dropped file")
        except (orjson.JSONDecodeError, TypeError, CaseshelfError) as exc:
            return self._reject(key, None, f"sidecar {sidecar} is not a valid import: {exc}")
        job_id = hashlib.sha256(f"{key}\n{etag or ''}".encode()).hexdigest()[:32]
        try:
            job = self._new_job(identity, job_id, key, req, via="s3-drop")
        except CaseshelfError as exc:
            return self._reject(key, job_id, f"sidecar {sidecar}: {exc}")
        try:
            self.index.put_item(job_pk(job_id), JOB_SK, job, if_absent=True)
        except Conflict:
            # A redelivery: a duplicate while the job runs or once it is done; a resumption
            # when its worker's lease expired.
            existing = self.index.get_item(job_pk(job_id), JOB_SK)
            if existing is None:
                return Outcome("duplicate", job_id, "this object's job already exists")
            return self._run(existing)
        return self._run(job)

    def _run(self, job: dict[str, Any]) -> Outcome:
        job_id = job["id"]
        if self._expired(job) and int(job.get("attempts") or 0) >= self.max_attempts:
            self._give_up(job, f"it was tried {self.max_attempts} times")
            return Outcome("failed", job_id, "the worker stopped on every attempt")
        claimed = self._claim(job)
        if claimed is None:
            return Outcome("duplicate", job_id, "the job is running under a live lease, or done")
        if int(claimed.get("attempts") or 1) > 1:
            log.warning(
                "import job resumed after its lease expired",
                extra={"job_id": job_id, "attempt": claimed["attempts"]},
            )
        identity = Identity(job["tenant"], job["principal"], frozenset(job.get("roles") or ()))
        finished = False
        try:
            beat = Heartbeat(
                lambda: self.renew(job_id, claimed["worker"]),
                self.lease_seconds / 4,
                f"lease-{job_id}",
            )
            with beat:
                outcome = self._work(claimed, identity)
            finished = outcome.status != "superseded"
            return outcome
        finally:
            if finished and job.get("via") == "upload":
                self._remove_upload(job["key"])

    def _remove_upload(self, key: str) -> None:
        """A finished upload has served its purpose (its cases are in packs, or its error is
        on the job); removing it keeps uploads/ from growing."""
        try:
            self.store.delete(key)
        except CaseshelfError:
            log.warning("could not remove a finished upload", extra={"key": key})

    def _work(self, job: dict[str, Any], identity: Identity) -> Outcome:
        """Run a claimed job to `succeeded` or `failed`: no error escapes, so no input can
        leave a job `running` (only a worker's death can, and its lease covers that)."""
        job_id = job["id"]
        worker = job["worker"]
        try:
            if job.get("work") == QUEUED_TASKS:
                result = self._queued_tasks(job, identity)
            elif job.get("work") == QUEUED_SUBSET:
                result = self._queued_subset(job, identity)
            elif isinstance(spec := parse_upload(job["request"]).root, TasksUpload):
                result = self._import_tasks(job, identity, spec)
            elif isinstance(spec, DatasetUpload):
                result = self._register_dataset(job, identity, spec)
            else:
                result = self._import_rows(job, identity, spec)
        except CaseshelfError as exc:
            error: dict[str, Any] = {
                "title": exc.title,
                "code": type(exc).__name__,
                "detail": exc.detail,
            }
            error.update({k: v for k, v in exc.fields.items() if _plain(v)})
            if not self._finish(job_id, worker, "failed", error=error):
                return Outcome("superseded", job_id, "another attempt holds the job")
            log.info("import job failed", extra={"job_id": job_id, "error": exc.detail})
            return Outcome("failed", job_id, exc.detail)
        except Exception:
            log.exception("import job crashed", extra={"job_id": job_id})
            self._finish(
                job_id,
                worker,
                "failed",
                error={
                    "title": "Internal Server Error",
                    "code": "Internal",
                    "detail": "the import stopped on an unexpected error; nothing was registered",
                },
            )
            return Outcome("failed", job_id, "internal error")
        if not self._finish(job_id, worker, "succeeded", result=result):
            return Outcome("superseded", job_id, "another attempt holds the job")
        return Outcome("succeeded", job_id)

    def _import_rows(
        self, job: dict[str, Any], identity: Identity, spec: BenchmarkUpload
    ) -> dict[str, Any]:
        request = spec.model_dump(exclude_none=True, exclude={"kind", "format", "filename"})
        source = SourceOverride(url=self.object_url(job["key"]), kind=spec.format)
        req = ImportRequest.model_validate({**request, "source": source})

        upload = {"filename": job["filename"], **object_digest(self.store, job["key"])}
        done = self.imports.run(
            identity, req, via=job.get("via", "upload"), reader=self.object_reader, upload=upload
        )
        return {**_registered(done.result), "rows_read": done.rows_read}

    def _register_dataset(
        self, job: dict[str, Any], identity: Identity, spec: DatasetUpload
    ) -> dict[str, Any]:
        """The uploaded document registered as `POST /datasets` registers its body: read by the
        dataset file rules (`caseshelf.services.loaders.stream_dataset_from`: a `.jsonl` a
        window of cases at a time, from ranged reads of the object), validated by the same
        model (errors name the case id, row and field), registered by the same service through
        its streamed entry (`register_stream`). The result is the route's answer
        (`RegisterOut`); with `dry_run`, `POST /datasets/validate`'s (`ValidateOut`), and
        nothing is stored."""
        from caseshelf.services.loaders import (  # lazy: ~4 ms off the export worker's start
            stream_dataset_from,
            with_overrides,
        )

        stream = stream_dataset_from(open_object(self.store, job["key"]), spec.filename)
        raw = with_overrides(
            stream.head, dataset=spec.dataset, version=spec.version, bump=spec.bump, base=spec.base
        )
        head = parse_head(raw)
        if spec.dry_run:
            checked = self.registry.validate_stream(identity, head, stream.batches)
            return {
                "valid": True,
                "would_conflict": checked.would_conflict,
                "content_digest": checked.content_digest,
                "case_count": checked.case_count,
                "version": checked.version,
            }
        return _registered(self.registry.register_stream(identity, head, stream.batches))

    def _import_tasks(
        self, job: dict[str, Any], identity: Identity, spec: TasksUpload
    ) -> dict[str, Any]:
        options = TaskOptions(
            image_template=spec.image_template,
            skip_invalid=spec.skip_invalid,
            id_prefix=spec.id_prefix,
            dataset=spec.dataset,
            version=spec.version,
            bump=spec.bump,
        )
        res = self.tasks.import_object(
            identity,
            spec.format,
            job["key"],
            options,
            via=job.get("via", "upload"),
            progress=self._task_progress(job["id"]),
        )
        return _task_result(res)

    def _queued_tasks(self, job: dict[str, Any], identity: Identity) -> dict[str, Any]:
        """A task import started through the tasks API: the result is that route's answer
        (`TaskImportOut`)."""
        req = job["request"]
        options = TaskOptions(
            image_template=req.get("image_template"),
            skip_invalid=bool(req.get("skip_invalid")),
            id_prefix=req.get("id_prefix", ""),
            dataset=req.get("dataset"),
            version=req.get("version"),
            bump=req.get("bump"),
        )
        ref = TaskSourceRef(**job["source"])
        progress = self._task_progress(job["id"])
        try:
            res = self.tasks.run(identity, req["format"], ref, options, progress=progress)
        finally:
            if job["source"].get("key", "").startswith(f"{layout.root(job['tenant'])}jobs/"):
                self._remove_upload(job["source"]["key"])  # the inline archive, served
        out = _task_result(res)
        out.pop("warnings", None)
        return out

    def _task_progress(self, job_id: str) -> TaskProgress:
        progress = TaskProgress()
        self.progress[job_id] = progress
        return progress

    def _queued_subset(self, job: dict[str, Any], identity: Identity) -> dict[str, Any]:
        """A subset registered as a version, started through the subset route: the selection
        of the version pinned when the job started, registered. The result is
        `SubsetRegisteredOut` (the parent, the stamp, the derived version)."""
        assert self.selection is not None
        req = job["request"]
        fields = {k: v for k, v in req.items() if k in SubsetRequest.model_fields}
        progress = SubsetProgress()
        self.progress[job["id"]] = progress
        res = self.selection().select_subset(
            identity,
            req["dataset"],
            req["version"],
            SubsetRequest.model_validate(fields),
            include_deleted=bool(req.get("include_deleted")),
            pinned=req["content_digest"],
            progress=progress,
        )
        assert res.registered is not None
        rec = res.record
        stamp = res.subset.stamp
        return {
            "parent": {
                "id": rec.name,
                "version": rec.version,
                "content_digest": rec.content_digest,
            },
            "stamp": None if stamp is None else stamp.model_dump(mode="json"),
            "registered": _registered(res.registered),
        }

    def _finish(self, job_id: str, worker: str, state: str, **changes: Any) -> bool:
        """Record the end, only while this worker holds the job; False when another attempt
        took it over (this worker was taken for dead: its result is that attempt's to give)."""
        done = self.progress.pop(job_id, None)
        if done is not None:
            changes["progress"] = _progress_item(done)
        try:
            self.index.update_item(
                job_pk(job_id),
                JOB_SK,
                {"state": state, "updated_at": iso(self.clock()), "lease_until": None, **changes},
                expect={"state": "running", "worker": worker},
            )
        except Conflict:
            log.warning("import job superseded", extra={"job_id": job_id, "worker": worker})
            return False
        return True

    def renew(self, job_id: str, worker: str) -> bool:
        """Extend this worker's lease; False when it no longer holds the job."""
        try:
            self.index.update_item(
                job_pk(job_id),
                JOB_SK,
                {"lease_until": self._lease_until(self.clock()), **self._progress_of(job_id)},
                expect={"state": "running", "worker": worker},
            )
        except Conflict:
            return False
        except CaseshelfError:
            log.warning("could not renew an import job's lease", extra={"job_id": job_id})
        return True

    def _progress_of(self, job_id: str) -> dict[str, Any]:
        """The job's progress as its lease renewal records it (each beat), if it tells any."""
        now = self.progress.get(job_id)
        return {} if now is None else {"progress": _progress_item(now)}


def _progress_item(p: TaskProgress | SubsetProgress) -> dict[str, int]:
    if isinstance(p, SubsetProgress):
        return {"cases_selected": p.selected, "cases_registered": p.registered}
    return {"tasks_total": p.total, "tasks_read": p.read, "tasks_mapped": p.mapped}


def _task_result(res: TaskImportResult) -> dict[str, Any]:
    return {
        **_registered(res),
        "skipped": [{"task": s.task, "reason": s.reason} for s in res.skipped],
        "warnings": list(res.warnings),
    }


class Heartbeat:
    """Calls `renew()` every `every` seconds (at least 50 ms), in a daemon thread, until the
    work ends or `renew` answers False (the lease is lost to another attempt). A lease's
    holder renews it this way while it works: leases of import jobs, of parts of jobs."""

    def __init__(self, renew: Callable[[], bool], every: float, name: str) -> None:
        self.renew, self.every, self.name = renew, max(every, 0.05), name
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name=name, daemon=True)

    def _beat(self) -> None:
        while not self.stop.wait(self.every):
            try:
                if not self.renew():
                    return
            except Exception:  # a transient index error: the next beat tries again
                log.warning("lease renewal failed", extra={"lease": self.name})

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def _plain(value: Any) -> bool:
    """Error fields a job item keeps: strings, numbers, and lists of them (e.g. `case_ids`)."""
    if isinstance(value, list):
        return all(isinstance(v, str | int) for v in value)
    return isinstance(value, str | int)


def _registered(res: RegisterResult | TaskImportResult) -> dict[str, Any]:
    """A job's result for the version it registered: what `POST /datasets` answers."""
    rec = res.record
    return {
        "id": rec.name,
        "version": rec.version,
        "content_digest": rec.content_digest,
        "case_count": rec.case_count,
        "created": res.created,
    }
