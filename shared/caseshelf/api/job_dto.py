"""Wire shape of a job (`GET /jobs/{id}`, and the 202 of the routes that start one: an import,
an export, a download), built from a job item by `job_out` here and nowhere else. Kept apart from
`caseshelf.api.import_dto` so a function answering a job imports no importer code."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from caseshelf.api.dto import Wire


class JobProgressOut(Wire):
    """How far an export or download job is: its parts (each a range of cases, written by one
    worker invocation) and what they wrote."""

    parts_total: int = Field(ge=0)
    parts_done: int = Field(ge=0)
    cases_total: int = Field(ge=0)
    cases_written: int = Field(ge=0)
    files_written: int = Field(ge=0)
    bytes_written: int = Field(ge=0)


class TaskProgressOut(Wire):
    """How far a task import job is: the tasks found, those read and checked (the first pass
    over the tree) and those mapped into the version (the second)."""

    tasks_total: int = Field(ge=0)
    tasks_read: int = Field(ge=0)
    tasks_mapped: int = Field(ge=0)


class SubsetProgressOut(Wire):
    """How far a subset job (`register_as`) is: the cases selected (known once the selection
    is decided) and those registered in the derived version (all of them, once it is)."""

    cases_selected: int = Field(ge=0)
    cases_registered: int = Field(ge=0)


class JobOut(Wire):
    id: str
    kind: Literal["import", "export", "download"] = Field(
        default="import",
        description="`import`: an upload or drop being imported, a task import or a subset "
        "registered (`request.kind`); `export`: an export's parts; "
        "`download`: a version's download document rendered in parts (its `result` names the "
        "download route, which then answers the document).",
    )
    state: Literal["pending", "running", "succeeded", "failed"]
    via: str
    url: str = Field(default="", description="Where to follow it: `/jobs/{id}`.")
    filename: str | None = Field(default=None, description="An import's uploaded file.")
    created_at: str
    updated_at: str
    request: dict[str, Any]
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    attempts: int = Field(
        default=0, ge=0, description="Workers that took the job (more than one: resumed)."
    )
    lease_until: str | None = Field(
        default=None,
        description="While running: until when the worker's lease holds (it renews it as it "
        "works); a job whose lease expired is resumed or failed by the next delivery or sweep.",
    )
    progress: JobProgressOut | TaskProgressOut | SubsetProgressOut | None = Field(
        default=None,
        description="An export or download job's parts and what they wrote; a task import's "
        "tasks read and mapped; a subset's cases selected and registered.",
    )


def job_out(job: dict[str, Any]) -> JobOut:
    progress: JobProgressOut | TaskProgressOut | SubsetProgressOut | None = None
    told = job.get("progress")
    if isinstance(told, dict):
        shape = SubsetProgressOut if "cases_selected" in told else TaskProgressOut
        progress = shape.model_validate(told)
    if job.get("kind") in ("export", "download"):
        progress = JobProgressOut(
            parts_total=job["parts_total"],
            parts_done=len(job["parts_done"]),
            cases_total=job["plan"]["case_count"],
            cases_written=job["cases_written"],
            files_written=job["files_written"],
            bytes_written=job["bytes_written"],
        )
    return JobOut(
        id=job["id"],
        kind=job.get("kind", "import"),
        state=job["state"],
        via=job.get("via", "upload"),
        url=f"/jobs/{job['id']}",
        filename=job.get("filename"),
        progress=progress,
        created_at=job["created_at"],
        updated_at=job["updated_at"],
        request=job["request"],
        result=job.get("result"),
        error=job.get("error"),
        attempts=int(job.get("attempts") or 0),
        lease_until=job.get("lease_until"),
    )
