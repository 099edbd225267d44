"""The importer Lambda: recipe-driven benchmark imports, the recipe registry, Hugging Face
discovery, presigned uploads and import jobs; and, for S3 events, the import worker.

Each route parses its input (the resolver validates it against the models), calls one service
method and returns a wire model. Status codes for errors come from `caseshelf.api.errors`.
An S3 event (a bucket notification, or the same delivered through EventBridge) is handed to the
job service object by object; its keys are URL-encoded, so each is `unquote_plus`ed first. A
scheduled event runs the jobs' sweep (`JobService.recover`). A message of the import queue is a
job started through the API (a task import): run it (`JobService.run_queued`), or, from the
dead-letter queue, fail it (`JobService.dead_letter`). A worker that raises is retried by
Lambda, then its event goes to the dead-letter queue (infra/template.yaml).
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import unquote_plus

import orjson
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Query
from aws_lambda_powertools.utilities.typing import LambdaContext

from caseshelf import bootstrap
from caseshelf.api import dto
from caseshelf.api import import_dto as out
from caseshelf.api.app import (
    count,
    current_identity,
    instrumented,
    logger,
    make_resolver,
    problems,
    report_swept,
)
from caseshelf.api.routes import (
    Cursor,
    IncludeDeleted,
    JobIdPath,
    LabelPath,
    Limit,
    RecipeIdPath,
    RefPath,
    Shared,
    created_response,
    created_responses,
    page_out,
)
from caseshelf.domain.recipe import Recipe
from caseshelf.functions import IMPORT_DEAD_LETTER_QUEUE
from caseshelf.services.bulk import gc_paused
from caseshelf.services.bundles import import_bundle as apply_bundle
from caseshelf.services.imports import ImportRequest
from caseshelf.services.jobs import UploadRequest

app = make_resolver(
    "caseshelf importer",
    description="Recipe-driven imports of benchmarks, recipes, uploads and import jobs.",
)

BENCH = ["benchmarks"]
RECIPES = ["recipes"]
JOBS = ["uploads"]


def svc() -> bootstrap.Services:
    return bootstrap.services()


# -- benchmarks ------------------------------------------------------------------------------


@app.get(
    "/benchmarks",
    summary="The first-party benchmark catalog",
    description="Recipes shipped with caseshelf and served from `_shared`; import one by id.",
    tags=BENCH,
    responses=problems(403, store=False),
)
def list_benchmarks() -> dto.PageOut[out.BenchmarkOut]:
    items = [out.benchmark_out(r) for r in svc().recipes.benchmarks()]
    return dto.PageOut[out.BenchmarkOut](items=items, next_cursor=None)


@app.post(
    "/benchmarks/preview",
    summary="Preview an import",
    description="The first rows of the source, the fields found, and the cases they would "
    "become (rows that do not map are listed with their error). Registers nothing.",
    tags=BENCH,
    responses=problems(400, 403, 404, 502),
)
def preview(body: Annotated[ImportRequest, Body()]) -> out.PreviewOut:
    return out.preview_out(svc().imports.preview(current_identity(app), body))


@app.post(
    "/benchmarks/import",
    summary="Import a benchmark as a dataset version",
    description="Reads the whole source (paging to exhaustion) unless `limit` is given, which "
    "is stamped in `produced_by`. 201 for a new version; 200 with `created: false` when the "
    "label already holds the same content. Nothing is registered on any error.",
    tags=BENCH,
    status_code=201,
    responses=created_responses(
        out.ImportOut, 400, 403, 404, 409, 413, 502, 507, description="A new version."
    ),
)
def import_benchmark(body: Annotated[ImportRequest, Body()]) -> Response[out.ImportOut]:
    done = svc().imports.run(current_identity(app), body)
    if done.result.created:
        count("ImportsRegistered")
        count("CasesImported", done.result.record.case_count)
    return created_response(done.result.created, out.import_out(done))


@app.post(
    "/benchmarks/publish",
    summary="Publish the catalog into _shared",
    description="Registers every first-party catalog recipe as a recipe version of the `_shared` "
    "tenant. An admin of `_shared` only; idempotent (`created: false` for a version that "
    "already holds the same recipe); a version holding other content is a 409 and nothing is "
    "registered.",
    tags=BENCH,
    responses=problems(403, 409, 507),
)
def publish_catalog() -> dto.PageOut[out.RecipeRegisterOut]:
    done = svc().recipes.publish_catalog(current_identity(app))
    created = sum(1 for r in done if r.created)
    if created:
        count("RecipesRegistered", created)
    return dto.PageOut[out.RecipeRegisterOut](
        items=[out.recipe_register_out(r) for r in done], next_cursor=None
    )


@app.get(
    "/benchmarks/hf/search",
    summary="Search Hugging Face datasets",
    tags=BENCH,
    responses=problems(400, 403, 502, store=False),
)
def hf_search(
    q: Annotated[str, Query(min_length=1, max_length=200, description="Search terms.")],
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> dto.PageOut[out.HfDatasetOut]:
    found = svc().imports.hf_search(current_identity(app), q, limit=limit)
    return dto.PageOut[out.HfDatasetOut](
        items=[out.HfDatasetOut(**d) for d in found if "id" in d], next_cursor=None
    )


@app.get(
    "/benchmarks/hf/splits",
    summary="A Hugging Face dataset's configs and splits",
    tags=BENCH,
    responses=problems(400, 403, 404, 502, store=False),
)
def hf_splits(
    dataset: Annotated[str, Query(min_length=1, max_length=200, description="owner/name")],
) -> dto.PageOut[out.HfSplitOut]:
    splits = svc().imports.hf_splits(current_identity(app), dataset)
    return dto.PageOut[out.HfSplitOut](
        items=[out.HfSplitOut(**s) for s in splits], next_cursor=None
    )


@app.get(
    "/benchmarks/hf/files",
    summary="A Hugging Face dataset's files at a revision",
    tags=BENCH,
    responses=problems(400, 403, 404, 502, store=False),
)
def hf_files(
    dataset: Annotated[str, Query(min_length=1, max_length=200, description="owner/name")],
    revision: Annotated[str | None, Query(max_length=128)] = None,
) -> out.HfFilesOut:
    sha, files = svc().imports.hf_files(current_identity(app), dataset, revision=revision)
    return out.HfFilesOut(dataset=dataset, revision=sha, files=files)


# -- recipes ---------------------------------------------------------------------------------


@app.post(
    "/recipes",
    summary="Register a recipe version",
    description="201 when new; 200 with `created: false` when this id and version already "
    "hold the same recipe; 409 naming both digests when they hold another.",
    tags=RECIPES,
    status_code=201,
    responses=created_responses(
        out.RecipeRegisterOut, 400, 403, 409, 507, description="A new recipe version."
    ),
)
def register_recipe(body: Annotated[Recipe, Body()]) -> Response[out.RecipeRegisterOut]:
    res = svc().recipes.register(current_identity(app), body)
    if res.created:
        count("RecipesRegistered")
    return created_response(res.created, out.recipe_register_out(res))


@app.post(
    "/bundles",
    summary="Import an everdict bundle (datasets and recipes together)",
    description="Every dataset and recipe of the bundle is validated as if registered alone "
    "before anything is registered: one invalid item is a 400 naming each invalid one, and "
    "nothing is registered. Then each is registered in turn, datasets first; an item whose "
    "label holds other content is reported as a `conflict` in `results` and the others go on. "
    "Harness, judge, model and runtime sections are reported in `skipped`.",
    tags=RECIPES,
    responses=problems(400, 403, 413, 507),
)
def import_bundle(body: Annotated[dict[str, Any], Body()]) -> out.BundleOut:
    s = svc()
    plan, items = apply_bundle(s.registry, s.recipes, current_identity(app), body)
    count("BundlesImported")
    return out.bundle_out(plan, items)


@app.post(
    "/recipes/validate",
    summary="Validate a recipe (dry run)",
    tags=RECIPES,
    responses=problems(400, 403),
)
def validate_recipe(body: Annotated[Recipe, Body()]) -> out.RecipeValidateOut:
    return out.recipe_validate_out(svc().recipes.validate(current_identity(app), body))


@app.get(
    "/recipes",
    summary="List recipes",
    description="The caller's recipes in id order, or with `shared=true` the `_shared` ones.",
    tags=RECIPES,
    responses=problems(400, 403),
)
def list_recipes(
    cursor: Cursor = None,
    limit: Limit = 50,
    shared: Shared = False,
) -> dto.PageOut[out.RecipeSummaryOut]:
    page = svc().recipes.list_recipes(
        current_identity(app), shared=shared, cursor=cursor, limit=limit
    )
    return page_out(out.RecipeSummaryOut, page, out.recipe_summary_out)


@app.get(
    "/recipes/<id>",
    summary="A recipe's latest version",
    description="Own tenant first, then `_shared`, then the first-party catalog.",
    tags=RECIPES,
    responses=problems(400, 403, 404),
)
def get_recipe(id: RecipeIdPath) -> out.RecipeOut:
    return out.recipe_out(svc().recipes.get(current_identity(app), id))


@app.get(
    "/recipes/<id>/versions",
    summary="List a recipe's versions, newest first",
    tags=RECIPES,
    responses=problems(400, 403, 404),
)
def list_recipe_versions(
    id: RecipeIdPath,
    cursor: Cursor = None,
    limit: Limit = 100,
    include_deleted: IncludeDeleted = False,
) -> dto.PageOut[out.RecipeVersionOut]:
    page = svc().recipes.list_versions(
        current_identity(app), id, include_deleted=include_deleted, cursor=cursor, limit=limit
    )
    return page_out(out.RecipeVersionOut, page, out.recipe_version_out)


@app.get(
    "/recipes/<id>/versions/<ref>",
    summary="One recipe version",
    description="`ref` is a version, `latest`, a version tag or `sha256:<hex>`.",
    tags=RECIPES,
    responses=problems(400, 403, 404),
)
def get_recipe_version(
    id: RecipeIdPath, ref: RefPath, include_deleted: IncludeDeleted = False
) -> out.RecipeOut:
    found = svc().recipes.get(current_identity(app), id, ref, include_deleted=include_deleted)
    return out.recipe_out(found)


@app.delete(
    "/recipes/<id>/versions/<ref>",
    summary="Tombstone a recipe version",
    description="`ref` is the version. Hidden from listings and `latest`; content kept; the "
    "creator or an admin only.",
    tags=RECIPES,
    responses=problems(400, 403, 404, 507),
)
def delete_recipe_version(id: RecipeIdPath, ref: LabelPath) -> out.RecipeVersionOut:
    return out.recipe_version_out(svc().recipes.delete(current_identity(app), id, ref))


@app.post(
    "/recipes/<id>/versions/<ref>/revive",
    summary="Revive a tombstoned recipe version",
    description="`ref` is the version label; the creator or an admin only.",
    tags=RECIPES,
    responses=problems(400, 403, 404, 507),
)
def revive_recipe_version(id: RecipeIdPath, ref: LabelPath) -> out.RecipeVersionOut:
    return out.recipe_version_out(svc().recipes.revive(current_identity(app), id, ref))


# -- uploads and jobs ------------------------------------------------------------------------


@app.post(
    "/uploads",
    summary="Start an import from a large file",
    description="Creates a pending import job and answers a presigned PUT for the file. `kind` "
    "says what the file is: `benchmark` (the default; rows imported through a recipe), "
    "`tasks` (a Terminal-Bench, Harbor or case-directory archive) or `dataset` (a dataset "
    "document too large for `POST /datasets`, registered as that route registers it, with the "
    "same result and errors). Once the file lands, the import runs by itself; follow it with "
    "`GET /jobs/{id}`.",
    tags=JOBS,
    status_code=201,
    responses=problems(400, 403, 404, 507, ok=201, description="The job and its upload URL."),
)
def create_upload(body: Annotated[UploadRequest, Body()]) -> Response[out.UploadOut]:
    up = svc().jobs.create_upload(current_identity(app), body)
    count("UploadsStarted")
    return Response(status_code=201, content_type="application/json", body=out.upload_out(up))


@app.get(
    "/jobs/<id>",
    summary="An import job's state",
    description="pending -> running -> succeeded (with the version) or failed (with the error). "
    "A running job whose worker stopped is resumed or failed (with the reason) once its lease "
    "expires; `attempts` counts the workers that took it.",
    tags=JOBS,
    responses=problems(400, 403, 404, 507),
)
def get_job(id: JobIdPath) -> out.JobOut:
    identity = current_identity(app)
    job = svc().jobs.get(identity, id)
    if job.get("state") == "running" and job.get("kind") in ("export", "download"):
        # Read, a job of parts whose workers stopped has its parts sent again (the sweep's rule):
        # what resumes it where no schedule runs (the embedded client following a job that a
        # process which died had started).
        parts = svc().export_jobs if job["kind"] == "export" else svc().download_jobs
        if parts.sweep_job(id) is not None:
            job = svc().jobs.get(identity, id)
    return out.job_out(job)


# -- the S3 worker ---------------------------------------------------------------------------


def s3_objects(event: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(unquoted key, etag) of every object an S3 event names: bucket notifications
    (`Records[].s3`) and EventBridge `Object Created` events (`detail`)."""
    found: list[tuple[str, str | None]] = []
    for record in event.get("Records") or []:
        obj = (record.get("s3") or {}).get("object") or {}
        if record.get("eventSource") == "aws:s3" and obj.get("key"):
            found.append((unquote_plus(obj["key"]), obj.get("eTag")))
    if event.get("source") == "aws.s3" and event.get("detail-type") == "Object Created":
        obj = (event.get("detail") or {}).get("object") or {}
        if obj.get("key"):
            found.append((unquote_plus(obj["key"]), obj.get("etag")))
    return found


def handle_s3_event(event: dict[str, Any]) -> dict[str, Any]:
    jobs = svc().jobs
    outcomes = []
    for key, etag in s3_objects(event):
        # An uploaded dataset document is parsed whole before its cases stream into the
        # registry: scoped, the cyclic collector stays out of it, as for the registry
        # function's registrations (`caseshelf.services.bulk`: with the collector running,
        # such a job takes about twice as long).
        with gc_paused():
            outcome = jobs.handle_object(key, etag=etag)
        logger.info(
            "import object handled",
            extra={"key": key, "status": outcome.status, "job_id": outcome.job_id},
        )
        count(f"ImportJobs{outcome.status.capitalize()}")
        outcomes.append({"key": key, "status": outcome.status, "job_id": outcome.job_id})
    return {"objects": outcomes}


def is_s3_event(event: dict[str, Any]) -> bool:
    return bool(event.get("Records")) or event.get("source") == "aws.s3"


def is_queue_event(event: dict[str, Any]) -> bool:
    """Messages of the import queue (its SQS event source, batch size 1)."""
    records = event.get("Records") or []
    return bool(records) and all(r.get("eventSource") == "aws:sqs" for r in records)


def handle_queue_record(record: dict[str, Any]) -> dict[str, Any]:
    """One queued import job: run it; from the dead-letter queue, fail it saying why. A worker
    that dies leaves the message to the queue (delivered again, then dead-lettered)."""
    jobs = svc().jobs
    try:
        doc = orjson.loads(record.get("body") or "")
        job_id = doc["job"]
        if not isinstance(job_id, str):
            raise TypeError(job_id)
    except (orjson.JSONDecodeError, TypeError, KeyError):
        logger.warning("import worker: not a job message", extra={"id": record.get("messageId")})
        return {"status": "ignored"}
    arn = str(record.get("eventSourceARN") or "")
    configured = svc().settings.import_dead_letter_arn
    if (configured and arn == configured) or arn.endswith(":" + IMPORT_DEAD_LETTER_QUEUE):
        receives = int((record.get("attributes") or {}).get("ApproximateReceiveCount") or 1)
        outcome = jobs.dead_letter(job_id, receives)
    else:
        with gc_paused():
            outcome = jobs.run_queued(job_id)
    logger.info("import job handled", extra={"job_id": job_id, "status": outcome.status})
    count(f"ImportJobs{outcome.status.capitalize()}")
    return {"job_id": job_id, "status": outcome.status}


def is_sweep_event(event: dict[str, Any]) -> bool:
    """The template's scheduled sweep (an EventBridge `Scheduled Event`)."""
    return event.get("source") == "aws.events" and event.get("detail-type") == "Scheduled Event"


def sweep_jobs() -> dict[str, Any]:
    """Resume (or fail, with the reason) the import jobs whose worker stopped and that no
    redelivery resumed, and start those whose object-created event never came."""
    return report_swept(
        svc().jobs.recover(),
        message="import job swept",
        metric="ImportJobsSwept",
        reason_key="reason",
    )


@instrumented
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if is_queue_event(event):
        return {"records": [handle_queue_record(r) for r in event["Records"]]}
    if is_s3_event(event):
        return handle_s3_event(event)
    if is_sweep_event(event):
        return sweep_jobs()
    return app.resolve(event, context)
