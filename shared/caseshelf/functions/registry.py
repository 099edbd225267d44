"""The registry Lambda: register, validate, list, read, page and search cases, download, one
file, a version's numbers, tag, tombstone, and who the caller is.

Each route parses its input (the resolver validates it against the models), calls one method of
the registry service and returns a wire model. Status codes for errors come from
`caseshelf.api.errors`; nothing here decides one.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.utilities.typing import LambdaContext

from caseshelf import bootstrap
from caseshelf.api import browse_dto, dto, refs_dto
from caseshelf.api.app import count, current_identity, instrumented, make_resolver, problems
from caseshelf.api.errors import PROBLEM_JSON, problem_of
from caseshelf.api.job_dto import JobOut, job_out
from caseshelf.api.routes import (
    Cursor,
    DatasetIdPath,
    DigestPath,
    IncludeDeleted,
    LabelPath,
    Limit,
    PositionPath,
    RefPath,
    SearchField,
    SearchText,
    Shared,
    bounded_page_out,
    created_response,
    created_responses,
    page_out,
)
from caseshelf.domain.canonical import hex_of
from caseshelf.domain.models import DatasetVersionInput
from caseshelf.services.browse import BrowseService
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


def browse() -> BrowseService:
    return bootstrap.services().browse


@app.post(
    "/datasets",
    summary="Register a dataset version",
    description="201 when a new version was created; 200 with `created: false` when this "
    "label already holds the same content (idempotent).",
    tags=TAGS,
    status_code=201,
    responses=created_responses(
        dto.RegisterOut, 400, 403, 409, 413, 507, description="A new version was created."
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
    return bounded_page_out(dto.VersionOut, page, dto.version_out, cursor)


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
    summary="A version's cases, one page at a time; or a search of them",
    description="Cases in dataset order, in their canonical form (defaults omitted). With "
    "`q`, the cases matching it (`by`: `id` holds it, a `tag` equals it, a string of the "
    "case's `text` holds it, or `any` of these; case-insensitive), in dataset order: each page "
    "searches on from its cursor until it holds `limit` matches or its scan budget is spent, "
    "so a page may hold fewer (even none) and still have a `next_cursor`; `scanned_to` says "
    "how far it got. A text search (`text` or `any`) of a version up to 256 MiB reads the "
    "version's search index (made once, with its `stats` or by its first text search, and kept) "
    "and covers the whole rest of the version in one page.",
    tags=TAGS,
    responses={
        200: {
            "description": "A page of cases (`PageOut`), or with `q` a page of matches "
            "(`CaseSearchPageOut`).",
            "content": {
                "application/json": {
                    "model": dto.PageOut[dict[str, Any]] | browse_dto.CaseSearchPageOut
                }
            },
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
    q: SearchText = None,
    by: SearchField = "any",
) -> Response[Any]:
    if q is not None:
        found = browse().search_cases(
            current_identity(app),
            id,
            ref,
            q,
            by=by,
            cursor=cursor,
            limit=limit,
            include_deleted=include_deleted,
        )
        return Response(
            status_code=200,
            content_type="application/json",
            body=browse_dto.search_page_out(found),
            headers={NEXT_CURSOR_HEADER: found.next_cursor} if found.next_cursor else None,
        )
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
    "/datasets/<id>/versions/<ref>/cases/<position>",
    summary="One case of a version, by its position",
    description="The case at `position` (0-based, in dataset order) in its canonical form. A "
    "case too large for an answer (over 5 MB escaped, the budget of every page: such a case "
    "is a stub with `oversized` in a page of cases, naming this route) is answered as "
    "`{id, url, bytes, expires_in}`, a presigned GET of the case alone (S3 on AWS).",
    tags=TAGS,
    responses={
        200: {
            "description": "The case, or a presigned URL of it (`CaseLinkOut`).",
            "content": {"application/json": {"model": dict[str, Any] | dto.CaseLinkOut}},
        },
        **problems(400, 403, 404, ok=None),
    },
)
def get_case(
    id: DatasetIdPath,
    ref: RefPath,
    position: PositionPath,
    include_deleted: IncludeDeleted = False,
) -> Response[Any]:
    svc = registry()
    got = svc.one_case(current_identity(app), id, ref, position, include_deleted=include_deleted)
    if got.record is not None:
        return Response(
            status_code=200, content_type="application/json", body=got.record.decode("utf-8")
        )
    assert got.id is not None and got.url is not None
    out = dto.CaseLinkOut(id=got.id, url=got.url, bytes=got.size, expires_in=svc.presign_expiry)
    return Response(status_code=200, content_type="application/json", body=out.model_dump())


@app.get(
    "/datasets/<id>/versions/<ref>/download",
    summary="The whole version as one dataset document",
    description="200 `{url, filename, expires_in}` with a presigned GET URL of the document "
    "(S3 on AWS; a URL on the local server itself on the embedded store it serves). A "
    "store no server publishes answers the document itself, as an attachment. Either way the "
    "document registers as it is, with the same content digest. The document is rendered "
    "once per content digest, as a job: when it is not rendered yet the answer is that job "
    "(202, `Location: /jobs/{id}`, kind `download`), whose parts (ranges of cases) the export "
    "workers render; follow it with `GET /jobs/{id}` (`progress` counts the parts and cases "
    "rendered) and, once it has `succeeded`, ask this route again (its `result.url`), which "
    "then answers the document. Asked again while the job runs, the route answers the same "
    "job; a `failed` job's `error` names the part and the reason, and asking again resumes it.",
    tags=TAGS,
    responses={
        200: {
            "description": "A presigned URL (`DownloadOut`), or the document itself where the "
            "store has no URLs (a `DatasetVersionInput`, sent as an attachment).",
            "content": {"application/json": {"model": dto.DownloadOut | DatasetVersionInput}},
        },
        202: {
            "description": "The document's job, started (or under way already).",
            "content": {"application/json": {"model": JobOut}},
        },
        **problems(400, 403, 404, 507, ok=None),
    },
)
def download(
    id: DatasetIdPath, ref: RefPath, include_deleted: IncludeDeleted = False
) -> Response[Any]:
    svc = registry()
    started = bootstrap.services().download_jobs.start(
        current_identity(app), id, ref, include_deleted=include_deleted
    )
    if started.job is not None:
        job = job_out(started.job)
        count("DownloadJobsStarted")
        return Response(
            status_code=202,
            content_type="application/json",
            body=job,
            headers={"Location": job.url},
        )
    got = started.download
    assert got is not None
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
    description="`ref` is the version label. Each tag named moves here from any other version "
    "(a tag names at most one version); each tag the version had and the list leaves out is "
    "removed; `[]` removes them all. Tags are metadata, never part of the content digest.",
    tags=TAGS,
    responses=problems(400, 403, 404, 507),
)
def set_tags(
    id: DatasetIdPath, ref: LabelPath, body: Annotated[dto.TagsIn, Body()]
) -> dto.VersionOut:
    rec = registry().set_version_tags(current_identity(app), id, ref, body.tags)
    return dto.version_out(rec)


@app.get(
    "/datasets/<id>/tags",
    summary="Where each of a dataset's tags points, and the moves that put it there",
    description="A tag names at most one version. `history` lists its moves newest first.",
    tags=TAGS,
    responses=problems(400, 403, 404),
)
def get_tags(id: DatasetIdPath) -> dto.TagsOut:
    board, pointers = registry().tags(current_identity(app), id)
    history = [dto.tag_move_out(m) for m in reversed(board.history)]
    return dto.TagsOut(id=id, tags=pointers, history=history, dropped=board.dropped)


@app.post(
    "/datasets/<id>/tags",
    summary="Point tags at a version",
    description="Each tag moves to `version` from wherever it pointed (the answer's `moves` "
    "say from where); a tag already there makes no move. 409 when another request moved the "
    "dataset's tags at the same time.",
    tags=TAGS,
    responses=problems(400, 403, 404, 409, 507),
)
def move_tags(id: DatasetIdPath, body: Annotated[dto.TagsMoveIn, Body()]) -> dto.TagMovesOut:
    rec, moves = registry().move_tags(current_identity(app), id, body.version, body.tags)
    return dto.TagMovesOut(
        id=id,
        moves=[dto.tag_move_out(m) for m in moves],
        version=dto.version_out(rec) if rec is not None else None,
    )


@app.delete(
    "/datasets/<id>/tags/<tag>",
    summary="Remove a tag",
    description="The tag points at no version after this; the move is kept in the history.",
    tags=TAGS,
    responses=problems(400, 403, 404, 409, 507),
)
def remove_tag(id: DatasetIdPath, tag: LabelPath) -> dto.TagMovesOut:
    moves = registry().remove_tags(current_identity(app), id, [tag])
    return dto.TagMovesOut(id=id, moves=[dto.tag_move_out(m) for m in moves], version=None)


@app.delete(
    "/datasets/<id>/versions/<ref>",
    summary="Tombstone a version",
    description="`ref` is the version label. Hidden from listings and `latest`; content kept; "
    "the creator or an admin only.",
    tags=TAGS,
    responses=problems(400, 403, 404, 507),
)
def delete_version(id: DatasetIdPath, ref: LabelPath) -> dto.VersionOut:
    return dto.version_out(registry().delete_version(current_identity(app), id, ref))


@app.post(
    "/datasets/<id>/versions/<ref>/revive",
    summary="Revive a tombstoned version",
    description="`ref` is the version label; the creator or an admin only.",
    tags=TAGS,
    responses=problems(400, 403, 404, 507),
)
def revive_version(id: DatasetIdPath, ref: LabelPath) -> dto.VersionOut:
    return dto.version_out(registry().revive_version(current_identity(app), id, ref))


@app.get(
    "/datasets/<id>/versions/<ref>/files/<digest>",
    summary="One file of a version: a case's companion file or a shared file",
    description="The body as it is stored, by its digest (as a case's `files` and the "
    "version's `shared_files` name it): `text/plain; charset=utf-8` when it is UTF-8 text, "
    "else `application/octet-stream` (ask with `Accept: application/octet-stream` to have "
    "API Gateway send the bytes rather than base64). 413 over the one-file limit: the "
    "version's `download` has every body.",
    tags=TAGS,
    responses={
        200: {
            "description": "The file's bytes.",
            "content": {
                "text/plain": {"schema": {"type": "string"}},
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            },
        },
        **problems(400, 403, 404, ok=None),
        413: {
            "description": "The file is over the one-file limit; the version's `download` has "
            "every body (`size`, `limit`, `digest`).",
            "content": {PROBLEM_JSON: {"model": dto.Problem}},
        },
    },
)
def get_file(
    id: DatasetIdPath,
    ref: RefPath,
    digest: DigestPath,
    include_deleted: IncludeDeleted = False,
) -> Response[str]:
    got = browse().file(current_identity(app), id, ref, digest, include_deleted=include_deleted)
    text = got.content_type.startswith("text/")
    disposition = "inline" if text else "attachment"
    answer = Response(
        status_code=200,
        content_type=got.content_type,
        # Bytes travel base64-encoded in a proxy answer (API Gateway decodes them).
        body=got.body.decode("utf-8") if text else base64.b64encode(got.body).decode("ascii"),
        headers={
            "Content-Disposition": f'{disposition}; filename="{hex_of(digest)}"',
            "X-Content-Type-Options": "nosniff",
            # Opened on its own, the body is still never a page that runs anything.
            "Content-Security-Policy": "default-src 'none'; sandbox",
            "Cache-Control": "private, max-age=3600",
        },
    )
    answer.base64_encoded = not text
    return answer


@app.get(
    "/datasets/<id>/versions/<ref>/stats",
    summary="A version's numbers: cases per tag, input lengths, file sizes",
    description="Over every case of the version. Computed on first use and kept by content "
    "digest (every version with the same content has the same numbers).",
    tags=TAGS,
    responses=problems(400, 403, 404),
)
def get_stats(
    id: DatasetIdPath, ref: RefPath, include_deleted: IncludeDeleted = False
) -> browse_dto.VersionStatsOut:
    rec, stats = browse().stats(current_identity(app), id, ref, include_deleted=include_deleted)
    return browse_dto.stats_out(rec, stats)


@app.post(
    "/refs/resolve",
    summary="Resolve many refs in one request",
    description="Each `ID@REF` is answered with the version it resolves to now, or its problem "
    "(an error of one ref is its own answer's, not the request's); a tag ref also with the "
    "tag's last move (who moved it from where to where, when); a ref given with the `version` "
    "or `digest` it was pinned to also with that version as the registry holds it, tombstoned "
    "ones included (`pinned`), or its problem. What `caseshelf check` asks of a lock file: one "
    "round trip for every pin. 413 over the count a request may carry.",
    tags=TAGS,
    responses=problems(400, 403, 413),
)
def resolve_refs(body: Annotated[refs_dto.RefsResolveIn, Body()]) -> refs_dto.RefsResolveOut:
    queries = [q.query() for q in body.refs]
    answers = bootstrap.services().refs.resolve_many(current_identity(app), queries)
    count("RefsResolved", len(queries))
    return refs_dto.resolved_out(answers, problem_of)


@app.get(
    "/me",
    summary="Who the caller is",
    description="The tenant, principal and roles the authorizer gave this request, and what "
    "they allow: a version is deleted or revived by its creator or an admin.",
    tags=["caller"],
    responses=problems(403, store=False),
)
def me() -> browse_dto.MeOut:
    return browse_dto.me_out(current_identity(app))


@instrumented
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # A registration validates a whole document into a model per case: scoped, the cyclic
    # collector stays out of it (`caseshelf.services.bulk`: four times faster at 100,000 cases).
    with gc_paused():
        return app.resolve(event, context)
