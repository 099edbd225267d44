"""The subset Lambda: a stamped selection of one version's cases, optionally registered as a
derived version.

The route parses its input (the resolver validates it against the models), calls the selection
service and returns a wire model. Status codes for errors come from `caseshelf.api.errors`.
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Query
from aws_lambda_powertools.utilities.typing import LambdaContext

from caseshelf import bootstrap
from caseshelf.api import dto
from caseshelf.api.app import count, current_identity, instrumented, make_resolver, problems
from caseshelf.api.routes import DatasetIdPath, RefPath, created_response
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
    "`register_as` the selection is registered as a derived version (201 when it is new) "
    "that points at the same packs.",
    tags=TAGS,
    responses={
        201: {"description": "The selection was registered as a new version."},
        **problems(400, 403, 404, 409, 413, 507),
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
) -> Response[dto.SubsetOut]:
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
    created = res.registered is not None and res.registered.created
    if created:
        count("DatasetVersionsRegistered")
    return created_response(created, dto.subset_out(res))


@instrumented
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
