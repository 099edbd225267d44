"""The registry Lambda: register, validate, list, read, page cases, download, tag, tombstone.

Each route parses its input (the resolver validates it against the models), calls one method of
the registry service and returns a wire model. Status codes for errors come from
`caseshelf.api.errors`; nothing here decides one.
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.utilities.typing import LambdaContext

from caseshelf import bootstrap
from caseshelf.api import dto
from caseshelf.api.app import count, current_identity, instrumented, make_resolver, problems
from caseshelf.api.routes import (
    Cursor,
    DatasetIdPath,
    IncludeDeleted,
    LabelPath,
    Limit,
    RefPath,
    Shared,
    created_response,
    created_responses,
    page_out,
)
from caseshelf.domain.models import DatasetVersionInput
from caseshelf.services.bulk import gc_paused
from caseshelf.services.registry import RegistryService

app = make_resolver(
    "caseshelf registry",
    description="Versioned, content-addressed evaluation datasets.",
)
app.enable_swagger(path="/swagger")

TAGS = ["datasets"]
NEXT_CURSOR_HEADER = "X-Next-Cursor"


def registry() -> RegistryService:
    return bootstrap.services().registry


@app.post(
    "/datasets",
    summary="Register a dataset version",
    description="201 when a new version was created; 200 with `created: false` when this "
    "label already holds the same content (idempotent).",
    tags=TAGS,
    status_code=201,
    responses=created_responses(
        dto.RegisterOut, 400, 403, 409, 413, description="A new version was created."
    ),
)
def register(body: Annotated[DatasetVersionInput, Body()]) -> Response[dto.RegisterOut]:
    res = registry().register(current_identity(app), body)
    if res.created:
        count("DatasetVersionsRegistered")
        count("CasesRegistered", res.record.case_count)
    return created_response(res.created, dto.register_out(res))


@app.post(
    "/datasets/validate",
    summary="Validate a dataset version (dry run)",
    tags=TAGS,
    responses=problems(400, 403, 413),
)
def validate(body: Annotated[DatasetVersionInput, Body()]) -> dto.ValidateOut:
    return dto.validate_out(registry().validate(current_identity(app), body))


@app.get(
    "/datasets",
    summary="List datasets",
    description="The caller's datasets in id order, or with `shared=true` the `_shared` ones.",
    tags=TAGS,
    responses=problems(400, 403),
)
def list_datasets(
    cursor: Cursor = None,
    limit: Limit = 50,
    shared: Shared = False,
) -> dto.PageOut[dto.DatasetOut]:
    page = registry().list_datasets(
        current_identity(app), shared=shared, cursor=cursor, limit=limit
    )
    return page_out(dto.DatasetOut, page, dto.dataset_out)


@app.get(
    "/datasets/<id>",
    summary="One dataset's summary",
    tags=TAGS,
    responses=problems(400, 403, 404),
)
def get_dataset(id: DatasetIdPath) -> dto.DatasetOut:
    return dto.dataset_out(registry().summary(current_identity(app), id))


@app.get(
    "/datasets/<id>/versions",
    summary="List a dataset's versions, newest first",
    tags=TAGS,
    responses=problems(400, 403, 404),
)
def list_versions(
    id: DatasetIdPath,
    cursor: Cursor = None,
    limit: Limit = 100,
    include_deleted: IncludeDeleted = False,
) -> dto.PageOut[dto.VersionOut]:
    page = registry().list_versions(
        current_identity(app), id, include_deleted=include_deleted, cursor=cursor, limit=limit
    )
    return page_out(dto.VersionOut, page, dto.version_out)


@app.get(
    "/datasets/<id>/versions/<ref>",
    summary="One version's metadata",
    description="`ref` is a label, `latest`, a version tag or `sha256:<hex>`.",
    tags=TAGS,
    responses=problems(400, 403, 404),
)
def get_version(
    id: DatasetIdPath, ref: RefPath, include_deleted: IncludeDeleted = False
) -> dto.VersionOut:
    rec = registry().get_version(current_identity(app), id, ref, include_deleted=include_deleted)
    return dto.version_out(rec)


@app.get(
    "/datasets/<id>/versions/<ref>/cases",
    summary="A version's cases, one page at a time",
    description="Cases in dataset order, in their canonical form (defaults omitted).",
    tags=TAGS,
    responses={
        200: {
            "description": "Success",
            "content": {"application/json": {"model": dto.PageOut[dict[str, Any]]}},
        },
        **problems(400, 403, 404, ok=None),
    },
)
def list_cases(
    id: DatasetIdPath,
    ref: RefPath,
    cursor: Cursor = None,
    limit: Limit = 100,
    include_deleted: IncludeDeleted = False,
) -> Response[Any]:
    # The stored records are the cases' canonical JSON: the page is spliced from them, never
    # parsed and dumped again (`RegistryService.case_page_json`).
    page, next_cursor = registry().case_page_json(
        current_identity(app),
        id,
        ref,
        cursor=cursor,
        limit=limit,
        include_deleted=include_deleted,
    )
    # The next cursor in a header as well: a client may ask for the next page before it has
    # parsed this one.
    headers = {NEXT_CURSOR_HEADER: next_cursor} if next_cursor else None
    return Response(
        status_code=200,
        content_type="application/json",
        body=page.decode("utf-8"),
        headers=headers,
    )


@app.get(
    "/datasets/<id>/versions/<ref>/download",
    summary="The whole version as one dataset document",
    description="200 `{url, filename, expires_in}` with a presigned GET URL of the document "
    "(S3 on AWS; a URL on the local server itself on the embedded store it serves). A "
    "store no server publishes answers the document itself, as an attachment. Either way the "
    "document registers as it is, with the same content digest.",
    tags=TAGS,
    responses={
        200: {
            "description": "A presigned URL (`DownloadOut`), or the document itself where the "
            "store has no URLs (a `DatasetVersionInput`, sent as an attachment).",
            "content": {"application/json": {"model": dto.DownloadOut | DatasetVersionInput}},
        },
        **problems(400, 403, 404, ok=None),
    },
)
def download(
    id: DatasetIdPath, ref: RefPath, include_deleted: IncludeDeleted = False
) -> Response[Any]:
    svc = registry()
    got = svc.download(current_identity(app), id, ref, include_deleted=include_deleted)
    if got.url is not None:
        out = dto.DownloadOut(url=got.url, filename=got.filename, expires_in=svc.presign_expiry)
        return Response(status_code=200, content_type="application/json", body=out.model_dump())
    assert got.body is not None
    return Response(
        status_code=200,
        content_type="application/json",
        body=got.body.decode("utf-8"),
        headers={"Content-Disposition": f'attachment; filename="{got.filename}"'},
    )


@app.put(
    "/datasets/<id>/versions/<ref>/tags",
    summary="Replace a version's tags",
    description="`ref` is the version label. `[]` removes every tag. Tags are metadata, never "
    "part of the content digest.",
    tags=TAGS,
    responses=problems(400, 403, 404),
)
def set_tags(
    id: DatasetIdPath, ref: LabelPath, body: Annotated[dto.TagsIn, Body()]
) -> dto.VersionOut:
    rec = registry().set_version_tags(current_identity(app), id, ref, body.tags)
    return dto.version_out(rec)


@app.delete(
    "/datasets/<id>/versions/<ref>",
    summary="Tombstone a version",
    description="`ref` is the version label. Hidden from listings and `latest`; content kept; "
    "the creator or an admin only.",
    tags=TAGS,
    responses=problems(400, 403, 404),
)
def delete_version(id: DatasetIdPath, ref: LabelPath) -> dto.VersionOut:
    return dto.version_out(registry().delete_version(current_identity(app), id, ref))


@app.post(
    "/datasets/<id>/versions/<ref>/revive",
    summary="Revive a tombstoned version",
    description="`ref` is the version label; the creator or an admin only.",
    tags=TAGS,
    responses=problems(400, 403, 404),
)
def revive_version(id: DatasetIdPath, ref: LabelPath) -> dto.VersionOut:
    return dto.version_out(registry().revive_version(current_identity(app), id, ref))


@instrumented
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # A registration validates a whole document into a model per case: scoped, the cyclic
    # collector stays out of it (`caseshelf.services.bulk`: four times faster at 100,000 cases).
    with gc_paused():
        return app.resolve(event, context)
