"""The client's uploads and jobs: `POST /uploads`, a file sent to the URL it answers, and a
job followed to its end."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from caseshelf.client.base import ClientBase, Progress, _body
from caseshelf.client.transport import InProcess, Request, job_error, put_url
from caseshelf.domain.errors import BadRequest, Upstream

if TYPE_CHECKING:
    from pydantic import BaseModel

    from caseshelf.api.import_dto import JobOut, UploadOut
    from caseshelf.services.pull import Progress as PullProgress


JOB_POLL_SECONDS = 0.5


def _upload_name(path: Path, default: str) -> str:
    """The file's name as an upload may carry it: letters, digits, `.`, `_` and `-`."""

    return re.sub(r"[^A-Za-z0-9._-]", "-", path.name).lstrip(".-") or default


class _counting:
    """A binary file whose reads are told to `progress(n)` (None: told to no one)."""

    def __init__(self, fh: BinaryIO, progress: Progress | None) -> None:
        self._fh, self._progress = fh, progress

    def read(self, n: int = -1) -> bytes:
        data = self._fh.read(n)
        if data and self._progress is not None:
            self._progress(len(data))
        return data


class JobsMixin(ClientBase):
    """Uploads and jobs."""

    def _job_result(
        self,
        path: tuple[str, ...],
        body: Mapping[str, Any],
        wait: float,
        *,
        query: Mapping[str, Any] | None = None,
    ) -> Any:
        """POST `body` to a route that answers a job (202, or an answer at once): the job
        followed to its end (`follow_job`) and its result, or the error it failed with."""
        from caseshelf.api.job_dto import JobOut  # lazy: pydantic, ~0.2 s

        answer = self.transport.send(Request("POST", path, dict(query or {}), _body(body)))
        if answer.status != 202:
            return answer.json()
        job = self.follow_job(self._as(JobOut, answer.json()).id, wait=wait)
        if job.state == "failed":
            raise job_error(job.id, job.error)
        return job.result

    def create_upload(self, body: Mapping[str, Any] | BaseModel) -> UploadOut:
        """`POST /uploads`: a presigned URL to PUT a file to, and the job that imports it."""
        from caseshelf.api.import_dto import UploadOut  # lazy: pydantic, ~0.2 s

        return self._as(UploadOut, self.call("POST", "uploads", body=body))

    def job(self, job_id: str) -> JobOut:
        from caseshelf.api.job_dto import JobOut  # lazy: pydantic, ~0.2 s

        return self._as(JobOut, self.call("GET", "jobs", job_id))

    def upload(
        self,
        path: str | Path,
        body: Mapping[str, Any],
        *,
        wait: float = 900.0,
        on_upload: Callable[[UploadOut], None] | None = None,
    ) -> JobOut:
        """Upload a local file (`POST /uploads`, then a PUT of the file to the URL answered)
        and wait for its import job to end. `body` is the upload request without `filename`
        (`{kind: benchmark, recipe, ...}` or `{kind: tasks, format, ...}`). A failed job is an
        `Upstream` error naming its detail."""
        p = Path(path)
        if not p.is_file():
            raise BadRequest(f"{p}: no such file", field="source")
        up = self.create_upload({"filename": _upload_name(p, "upload"), **body})
        if not up.upload_url:
            raise BadRequest(
                "this API gives no upload URL (an embedded store no server publishes): import "
                "the file without --api, or against `caseshelf serve`"
            )
        if on_upload is not None:
            on_upload(up)
        self._put_file(up.upload_url, p, None)
        job = self.wait_for_job(up.job_id, wait=wait)
        if job.state == "failed":
            detail = (job.error or {}).get("detail") if isinstance(job.error, dict) else None
            raise Upstream(f"import job {up.job_id} failed: {detail}", job_id=up.job_id)
        return job

    def _put_file(self, url: str, path: Path, progress: Progress | None) -> None:
        """Send the file at `path` to an upload URL, 1 MiB at a time (`progress(n)` per piece):
        served by this transport itself for an embedded store's URL, else PUT over HTTP."""

        size = path.stat().st_size
        with path.open("rb") as fh:
            if isinstance(self.transport, InProcess) and self.transport.serves(url):
                self.transport.put_url(url, cast(BinaryIO, _counting(fh, progress)), size)
            else:
                put_url(url, fh, size=size, progress=progress)

    def follow_job(
        self, job_id: str, *, wait: float = 3600.0, progress: PullProgress | None = None
    ) -> JobOut:
        """The job once it has ended, its progress told to `progress` as it goes (an export's
        totals, then the cases, files and bytes its parts wrote). In process, this thread
        delivers the queued parts to the worker function, one at a time between looks at the
        job; over HTTP the server's workers run them and this looks every
        `JOB_POLL_SECONDS`."""
        from caseshelf.api.job_dto import JobProgressOut  # lazy: pydantic, ~0.2 s

        deadline = time.monotonic() + wait
        told: tuple[int, int, int] | None = None
        while True:
            job = self.job(job_id)
            p = job.progress
            if progress is not None and isinstance(p, JobProgressOut):
                now = (p.cases_written, p.files_written, p.bytes_written)
                if told is None:
                    progress.start(p.cases_total, 0, 0)
                    told = (0, 0, 0)
                if now != told:
                    progress.advance(now[1] - told[1], now[2] - told[2], now[0] - told[0])
                    told = now
            if job.state in ("succeeded", "failed"):
                return job
            if isinstance(self.transport, InProcess) and self.transport.run_queued(limit=1):
                continue
            if time.monotonic() > deadline:
                raise Upstream(
                    f"job {job_id} is still {job.state} after {wait:.0f} s; "
                    f"follow it with GET /jobs/{job_id}",
                    job_id=job_id,
                )
            time.sleep(JOB_POLL_SECONDS)

    def wait_for_job(self, job_id: str, *, wait: float = 900.0) -> JobOut:
        """The job once it has ended (`succeeded` or `failed`); `Upstream` naming it when it
        is still running after `wait` seconds."""
        deadline = time.monotonic() + wait
        while True:
            job = self.job(job_id)
            if job.state in ("succeeded", "failed"):
                return job
            if time.monotonic() > deadline:
                raise Upstream(
                    f"import job {job_id} is still {job.state} after {wait:.0f} s; "
                    f"follow it with GET /jobs/{job_id}",
                    job_id=job_id,
                )
            time.sleep(JOB_POLL_SECONDS)
