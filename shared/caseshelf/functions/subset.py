"""The subset Lambda: a stamped selection of one version's cases, optionally registered as a
derived version.

The route parses its input (the resolver validates it against the models), calls the selection
service and returns a wire model. Status codes for errors come from `caseshelf.api.errors`. A
selection with `register_as` is registered by a job (202, `Location: /jobs/{id}`): the route
checks what it can at once and queues it for the importer's worker
(`caseshelf.services.jobs.JobService.start_subset`).
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Query
from aws_lambda_powertools.utilities.typing import LambdaContext

from caseshelf import bootstrap
from caseshelf.api import dto
from caseshelf.api.app import count, current_identity, instrumented, make_resolver, problems
from caseshelf.api.import_dto import JobOut, job_out
from caseshelf.api.routes import DatasetIdPath, RefPath
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.subset import SubsetRequest

app = make_resolver(
    "caseshelf subset",
    description="Stamped selections of a dataset version's cases.",
)

TAGS = ["subset"]


@app.post(
    "/datasets/<id>/versions/<ref>/subset",
    summary="Select a stamped subset of a version",
    description="Steps run in this order: `ids` -> `tags` (any match) -> `limit` (first N) -> "
    "`sample` (N by the seeded rule); cases keep dataset order. The answer is stamped with "
    "the counts and the selection, so a partial run can never pass for the whole version. "
    "Only the manifest is read unless `cases=true`; the cases then come a page at a time, as "
    "many as fit one answer (5 MB escaped), `cases_next_cursor` asking for the next. With "
    "`register_as` the selection is registered as a derived version that points at the same "
    "packs, by a job (202, `Location: /jobs/{id}`): a bad selection, an unknown version or a "
    "missing right to write is still a 4xx at once; follow the job with `GET /jobs/{id}`, "
    "whose `progress` counts the cases selected and registered and whose `result`, once "
    "`succeeded`, is `SubsetRegisteredOut` (`parent`, `stamp`, `registered`: `created` false "
    "when the same version was there already); once `failed`, `error` says why (a conflict "
    "on the target's label, unknown ids). The selected ids are this route's answer without "
    "`register_as`. `cases=true` does not go with `register_as`.",
    tags=TAGS,
    responses={
        202: {
            "description": "The registration's job, started.",
            "content": {"application/json": {"model": JobOut}},
        },
        **problems(400, 403, 404, 413, 507, description="The selection (no `register_as`)."),
    },
)
def select(
    id: DatasetIdPath,
    ref: RefPath,
    body: Annotated[SubsetRequest, Body()],
    cases: Annotated[bool, Query(description="Also return the selected cases.")] = False,
    include_deleted: Annotated[bool, Query(description="Allow a tombstoned version.")] = False,
    cursor: Annotated[
        str | None,
        Query(
            description="With `cases=true`: the `cases_next_cursor` of the previous answer.",
            pattern=dto.CURSOR_PATTERN,
        ),
    ] = None,
) -> Response[dto.SubsetOut | JobOut]:
    if body.register_as is not None:
        return _start_job(id, ref, body, cases=cases or cursor is not None, deleted=include_deleted)
    res = bootstrap.services().selection.select_subset(
        current_identity(app),
        id,
        ref,
        body,
        with_cases=cases,
        include_deleted=include_deleted,
        cursor=cursor,
    )
    count("SubsetsSelected")
    return Response(status_code=200, content_type="application/json", body=dto.subset_out(res))


def _start_job(
    name: str, ref: str, body: SubsetRequest, *, cases: bool, deleted: bool
) -> Response[dto.SubsetOut | JobOut]:
    if cases:
        raise BadRequest(
            "cases=true does not go with register_as: the registration runs as a job. Ask "
            "for the cases with the same selection and no register_as",
            field="cases",
        )
    started = bootstrap.services().jobs.start_subset(
        current_identity(app), name, ref, body, include_deleted=deleted
    )
    job = job_out(started)
    count("SubsetJobsStarted")
    return Response(
        status_code=202, content_type="application/json", body=job, headers={"Location": job.url}
    )


@instrumented
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
