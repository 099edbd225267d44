"""Download jobs: a version's download document rendered in parts on the export queue.

A download document (`RegistryService.render_pieces`) grows with the version; at a million
cases it cannot be rendered inside one API request (API Gateway's 29 s). So the download route
(`start`) answers the stored document when it is there, and otherwise starts its job: a job item
(`JOB#<id>`, kind `download`, followed with `GET /jobs/{id}` like every job) and one message a
part on the export queue, which the export worker delivers here (`run_part`) by the message's
`kind`. The job engine is the export jobs' (`caseshelf.services.export_jobs.PartJobs`): parts
recorded on the job with compare-and-set, the last part's invocation finishing, the dead-letter
queue failing the job naming the part.

- A part (`caseshelf.domain.export_parts.plan_download`) renders the cases of its range
  (`RegistryService.render_cases`, a window at a time) into its piece
  `<scratch>part-NNNNN.rows`, then its marker `part-NNNNN.json` LAST; a part whose marker is
  there is not rendered again (a redelivery, or an earlier job of the same document).
- The finish streams the document to its key (`caseshelf.domain.layout.download_key`): the
  head, the pieces joined by commas (appended by S3 itself where they are large enough,
  `UploadPartCopy`), the tail; the document appears whole at commit. Then the job is
  `succeeded`, its result naming the route to fetch the document from.

One render of a document at a time: the pointer `DOWNLOADJOB#<tenant>` / `<owner>/<digest>`
names the job rendering it, claimed with a conditional write; a request that finds that job
running answers it (it joins it). The scratch area is the document's own
(`t/<owner>/exports/downloads/<digest>.parts/`), so a job started after a failed one reuses the
parts that one rendered.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from caseshelf.domain import layout
from caseshelf.domain.errors import Conflict
from caseshelf.domain.export_parts import PartPlan, plan_download
from caseshelf.domain.identity import Identity
from caseshelf.domain.versions import VersionRecord
from caseshelf.ports import Index, Queue
from caseshelf.services.export_fanout import (
    PartMeta,
    done_part,
    part_key,
    remove_scratch,
    scratch_prefix,
)
from caseshelf.services.export_jobs import (
    CAS_TRIES,
    JOB_TTL,
    PartJobs,
    _identity,
    fresh_parts,
)
from caseshelf.services.jobs import JOB_SK, job_pk
from caseshelf.services.registry import Download, RegistryService
from caseshelf.services.versioned import Clock, iso, utc_now

log = logging.getLogger("caseshelf.download_jobs")

KIND = "download"
POINTER_PK = "DOWNLOADJOB#"


@dataclass(frozen=True)
class DownloadStarted:
    """What the download route answers: the stored document (`download`), or its job."""

    download: Download | None = None
    job: dict[str, Any] | None = None


def download_prefix(rec: VersionRecord) -> str:
    """`t/<owner>/exports/downloads/<digest>/`: the document's scratch area is this prefix's
    `.parts/` sibling (`caseshelf.services.export_fanout.scratch_prefix`)."""
    return layout.download_key(rec.tenant, rec.content_digest).removesuffix(".json") + "/"


class DownloadJobService(PartJobs):
    kind = KIND
    incomplete = (
        "No document was stored; ask for the download again to resume it: the parts rendered "
        "are reused"
    )

    def __init__(
        self,
        registry: RegistryService,
        index: Index,
        queue: Callable[[], Queue],
        *,
        clock: Clock = utc_now,
    ) -> None:
        """`queue` opens the export queue (on first use)."""
        super().__init__(index, queue, clock=clock)
        self.registry = registry
        self.store = registry.store

    # -- starting ----------------------------------------------------------------------------

    def start(
        self, identity: Identity, name: str, ref: str, *, include_deleted: bool = False
    ) -> DownloadStarted:
        """The stored document, or the job rendering it: one already running for this
        document (joined), else a new one."""
        rec = self.registry.get_version(identity, name, ref, include_deleted=include_deleted)
        found = self.registry.stored_download(rec)
        if found is not None:
            return DownloadStarted(download=found)
        root = self.registry.root(rec)
        plan = plan_download(len(root), file_bodies=len(root.blob_locations()))
        job = self._new_job(identity, rec, include_deleted, plan)
        self._register(job)
        self.index.put_item(job_pk(job["id"]), JOB_SK, job, if_absent=True)
        running = self._claim(identity.tenant, rec, job["id"])
        if running is not None:
            # Another request started the same document first: this job item is never queued
            # nor answered (it expires with its TTL); the caller follows that one.
            self._end(
                job["id"],
                "failed",
                error={
                    "title": "Joined",
                    "code": "Joined",
                    "detail": f"the same download was under way as job {running['id']}",
                },
            )
            # Its parts are sent again first when its workers stopped: asking again resumes it.
            self.sweep_job(running["id"])
            return DownloadStarted(
                job=self.index.get_item(job_pk(running["id"]), JOB_SK) or running
            )
        self._send(job["id"], list(range(plan.part_count)))
        log.debug(
            "download job started",
            extra={"job_id": job["id"], "digest": rec.content_digest, "parts": plan.part_count},
        )
        return DownloadStarted(job=job)

    def _claim(self, tenant: str, rec: VersionRecord, job_id: str) -> dict[str, Any] | None:
        """Point the document's pointer at `job_id` when no job renders it now (None: claimed),
        else the running job that does. A finished job's pointer is taken over: its document
        was found absent (expired by the exports' lifecycle rule, or removed by gc)."""
        sk = f"{rec.tenant}/{rec.content_digest}"
        for _ in range(CAS_TRIES):
            try:
                self.index.put_item(POINTER_PK + tenant, sk, {"job": job_id}, if_absent=True)
                return None
            except Conflict:
                pass
            pointer = self.index.get_item(POINTER_PK + tenant, sk)
            if pointer is None:
                continue
            other = self.index.get_item(job_pk(pointer["job"]), JOB_SK)
            if other is not None and other.get("state") == "running":
                return other
            try:  # the pointed job ended (or expired): this one takes over
                self.index.update_item(
                    POINTER_PK + tenant, sk, {"job": job_id}, expect={"job": pointer["job"]}
                )
                return None
            except Conflict:
                continue
        raise Conflict(f"too many concurrent downloads of {rec.name}@{rec.version}; ask again")

    def _new_job(
        self, identity: Identity, rec: VersionRecord, include_deleted: bool, plan: PartPlan
    ) -> dict[str, Any]:
        now = self.clock()
        route = f"/datasets/{quote(rec.name)}/versions/{quote(rec.version)}/download"
        if include_deleted:
            route += "?include_deleted=true"
        return {
            "id": uuid.uuid4().hex,
            "kind": KIND,
            "tenant": identity.tenant,
            "principal": identity.principal,
            "roles": sorted(identity.roles),
            "state": "running",
            "via": "api",
            "key": scratch_prefix(download_prefix(rec)),
            "request": {
                "dataset": rec.name,
                "version": rec.version,
                "include_deleted": include_deleted,
            },
            "created_at": iso(now),
            "updated_at": iso(now),
            "expires_at": int((now + JOB_TTL).timestamp()),
            "attempts": 0,
            "download": {
                "dataset": rec.name,
                "version": rec.version,
                "owner": rec.tenant,
                "content_digest": rec.content_digest,
                "filename": f"{rec.name}-{rec.version}.json",
                "url": route,
            },
            **fresh_parts(plan),
        }

    # -- a part ------------------------------------------------------------------------------

    def _version(self, job: dict[str, Any]) -> VersionRecord:
        """The job's version, resolved again by this invocation, and checked to be the content
        the job was started for."""
        d = job["download"]
        rec = self.registry.get_version(
            _identity(job), d["dataset"], d["version"], include_deleted=True
        )
        if rec.content_digest != d["content_digest"] or rec.tenant != d["owner"]:
            raise Conflict(
                f"download job {job['id']}: {d['dataset']}@{d['version']} is no longer "
                f"{d['content_digest']}; ask for the download again",
                job_id=job["id"],
            )
        return rec

    def _open(self, job: dict[str, Any]) -> VersionRecord:
        return self._version(job)

    def _write_part(
        self, job: dict[str, Any], opened: VersionRecord, number: int, rng: tuple[int, int]
    ) -> tuple[PartMeta, str]:
        meta = done_part(self.store, job["key"], number, rng, False)
        if meta is not None:
            return meta, "reused"
        return self._render_part(opened, job["key"], number, rng), "written"

    def _render_part(
        self, rec: VersionRecord, scratch: str, number: int, rng: tuple[int, int]
    ) -> PartMeta:
        """The cases of `rng` rendered into the part's piece, then its marker (last)."""
        writer = self.store.open_writer(part_key(scratch, number, "rows"))
        try:
            for piece in self.registry.render_cases(rec, *rng):
                writer.write(piece)
        except BaseException:
            writer.abort()
            raise
        size = writer.commit()
        meta = PartMeta(number, rng[0], rng[1], 0, size, 0, rows_size=size)
        self.store.put(part_key(scratch, number, "json"), meta.to_json())
        return meta

    # -- the finish --------------------------------------------------------------------------

    def _finish(self, job: dict[str, Any], opened: VersionRecord) -> None:
        """The document from the head, the parts' pieces and the tail; the job's end."""
        rec = opened
        scratch = job["key"]
        metas = [
            PartMeta.from_json(self.store.get(part_key(scratch, n, "json")))
            for n in range(job["parts_total"])
        ]
        head, tail = self.registry.render_ends(rec)
        key = layout.download_key(rec.tenant, rec.content_digest)
        out = self.store.open_writer(key, content_type="application/json")
        try:
            out.write(head)
            first = True
            for m in metas:
                if not m.rows_size:
                    continue
                if not first:
                    out.write(b",")
                out.copy(part_key(scratch, m.number, "rows"), m.rows_size)
                first = False
            out.write(tail)
        except BaseException:
            out.abort()
            raise
        size = out.commit()
        d = job["download"]
        result = {
            "id": d["dataset"],
            "version": d["version"],
            "content_digest": d["content_digest"],
            "case_count": job["plan"]["case_count"],
            "filename": d["filename"],
            "bytes": size,
            "url": d["url"],
        }
        self._end(job["id"], "succeeded", result=result)
        remove_scratch(self.store, download_prefix(rec))
