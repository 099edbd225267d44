"""Wire shapes of the importer's responses (recipes, imports, previews, uploads, jobs), built
from service results by the `*_out` functions here and nowhere else. Requests are the models in
`caseshelf.domain.recipe` and `caseshelf.services.imports` / `caseshelf.services.jobs`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from caseshelf.api.dto import RegisterOut, Wire, registered_as
from caseshelf.domain.recipe import Recipe, recipe_plain
from caseshelf.domain.versions import VersionRecord
from caseshelf.services.bundles import BundleItem, BundlePlan
from caseshelf.services.imports import ImportResult, Preview
from caseshelf.services.jobs import QUEUED_SUBSET, Upload
from caseshelf.services.recipes import (
    RecipeRegistered,
    RecipeSummary,
    RecipeValidated,
    StoredRecipe,
)


class ImportOut(RegisterOut):
    rows_read: int
    produced_by: dict[str, Any]


class PreviewOut(Wire):
    recipe: dict[str, Any] = Field(description="{id, version, content_digest, owner}")
    source: dict[str, Any]
    fields: list[str]
    rows: list[dict[str, Any]]
    cases: list[dict[str, Any]]
    errors: list[dict[str, Any]] = Field(description="Rows that did not map: {row, detail}.")


class RecipeOut(Wire):
    id: str
    version: str
    owner: str
    content_digest: str
    created_at: str | None = None
    created_by: str | None = None
    deleted_at: str | None = None
    recipe: dict[str, Any] = Field(description="The recipe, snake_case, defaults omitted.")


class RecipeVersionOut(Wire):
    id: str
    version: str
    owner: str
    content_digest: str
    category: str
    description: str
    created_at: str
    created_by: str
    deleted_at: str | None = None
    deleted_by: str | None = None


class RecipeRegisterOut(Wire):
    id: str
    version: str
    content_digest: str
    created: bool


class RecipeValidateOut(Wire):
    valid: bool = True
    id: str
    version: str
    content_digest: str
    would_conflict: bool


class RecipeSummaryOut(Wire):
    id: str
    owner: str
    latest: str | None
    category: str
    description: str
    version_count: int
    created_at: str | None = None
    updated_at: str | None = None


class BenchmarkOut(Wire):
    id: str
    version: str
    category: str
    description: str
    origin: dict[str, Any]
    source: dict[str, Any]


class HfDatasetOut(Wire):
    model_config = ConfigDict(extra="allow")

    id: str


class HfSplitOut(Wire):
    config: str
    split: str


class HfFilesOut(Wire):
    dataset: str
    revision: str
    files: list[str]


class UploadOut(Wire):
    job_id: str
    upload_url: str | None = Field(
        description="Presigned PUT. On the embedded store, the local server's own upload URL "
        "(`caseshelf serve`), else null."
    )
    key: str
    expires_in: int
    state: Literal["pending"] = "pending"


class JobProgressOut(Wire):
    """How far an export job is: its parts (each a range of cases, written by one worker
    invocation) and what they wrote."""

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
    kind: Literal["import", "export"] = Field(
        default="import",
        description="`import`: an upload or drop being imported, a task import or a subset "
        "registered (`request.kind`); `export`: an export's parts.",
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
        description="An export job's parts and what they wrote; a task import's tasks read "
        "and mapped; a subset's cases selected and registered.",
    )


def import_out(done: ImportResult) -> ImportOut:
    return registered_as(
        ImportOut,
        done.result.record,
        done.result.created,
        rows_read=done.rows_read,
        produced_by=done.produced_by,
    )


def preview_out(p: Preview) -> PreviewOut:
    return PreviewOut(
        recipe=p.recipe.stamp(),
        source=p.source,
        fields=p.fields,
        rows=p.rows,
        cases=p.cases,
        errors=p.errors,
    )


def recipe_out(found: StoredRecipe) -> RecipeOut:
    rec = found.record
    return RecipeOut(
        id=found.recipe.id,
        version=found.recipe.version,
        owner=found.owner,
        content_digest=found.content_digest,
        created_at=rec.created_at if rec else None,
        created_by=rec.created_by if rec else None,
        deleted_at=rec.deleted_at if rec else None,
        recipe=recipe_plain(found.recipe),
    )


def recipe_version_out(r: VersionRecord) -> RecipeVersionOut:
    return RecipeVersionOut(
        id=r.name,
        version=r.version,
        owner=r.tenant,
        content_digest=r.content_digest,
        category=str(r.extra.get("category", "")),
        description=r.description,
        created_at=r.created_at,
        created_by=r.created_by,
        deleted_at=r.deleted_at,
        deleted_by=r.deleted_by,
    )


def recipe_register_out(res: RecipeRegistered) -> RecipeRegisterOut:
    r = res.record
    return RecipeRegisterOut(
        id=r.name, version=r.version, content_digest=r.content_digest, created=res.created
    )


def recipe_validate_out(res: RecipeValidated) -> RecipeValidateOut:
    return RecipeValidateOut(
        id=res.id,
        version=res.version,
        content_digest=res.content_digest,
        would_conflict=res.would_conflict,
    )


def recipe_summary_out(s: RecipeSummary) -> RecipeSummaryOut:
    return RecipeSummaryOut(
        id=s.id,
        owner=s.owner,
        latest=s.latest,
        category=s.category,
        description=s.description,
        version_count=s.version_count,
        created_at=s.created_at,
        updated_at=s.updated_at,
    )


def benchmark_out(r: Recipe) -> BenchmarkOut:
    plain = recipe_plain(r)
    return BenchmarkOut(
        id=r.id,
        version=r.version,
        category=r.category,
        description=r.description,
        origin=plain.get("origin", {}),
        source=plain["source"],
    )


def upload_out(u: Upload) -> UploadOut:
    return UploadOut(job_id=u.job["id"], upload_url=u.url, key=u.key, expires_in=u.expires_in)


def job_out(job: dict[str, Any]) -> JobOut:
    progress: JobProgressOut | TaskProgressOut | SubsetProgressOut | None = None
    if isinstance(job.get("progress"), dict):
        told = SubsetProgressOut if job.get("work") == QUEUED_SUBSET else TaskProgressOut
        progress = told.model_validate(job["progress"])
    if job.get("kind") == "export":
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


class BundleItemOut(Wire):
    kind: Literal["dataset", "recipe"]
    id: str
    version: str
    status: Literal["registered", "unchanged", "conflict"] = Field(
        description="`conflict`: the label holds other content; `message` names both digests."
    )
    content_digest: str | None = None
    message: str | None = None


class BundleOut(Wire):
    id: str
    version: str
    results: list[BundleItemOut]
    skipped: dict[str, int] = Field(
        default_factory=dict,
        description="Sections a dataset registry keeps no part of (harnesses, judges, ...), "
        "with their item counts.",
    )
    warnings: list[str] = Field(default_factory=list)


def bundle_out(plan: BundlePlan, items: list[BundleItem]) -> BundleOut:
    return BundleOut(
        id=plan.id,
        version=plan.version,
        results=[
            BundleItemOut(
                kind=i.kind,
                id=i.id,
                version=i.version,
                status=i.status,
                content_digest=i.content_digest,
                message=i.message,
            )
            for i in items
        ],
        skipped=dict(plan.skipped),
        warnings=list(plan.warnings),
    )
