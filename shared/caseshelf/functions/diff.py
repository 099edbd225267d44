"""The diff Lambda: what changed between two versions (of one dataset, or of two datasets of
the caller's tenant).

The route parses its input, calls the diff service and returns a wire model. Status codes for
errors come from `caseshelf.api.errors`.
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.utilities.typing import LambdaContext

from caseshelf import bootstrap
from caseshelf.api import dto
from caseshelf.api.app import count, current_identity, instrumented, make_resolver, problems
from caseshelf.api.routes import Cursor, DatasetIdPath
from caseshelf.domain.models import DATASET_ID_PATTERN

app = make_resolver(
    "caseshelf diff",
    description="Case-level and field-level differences between dataset versions.",
)

TAGS = ["diff"]
# A field path: `/` or a JSON pointer, without control characters.
FIELD_PATH_PATTERN = r"^/[^\x00-\x1f]*$"

Ref = Annotated[
    str,
    Query(
        pattern=dto.REF_PATTERN,
        description="A version label, `latest`, a version tag or `sha256:<hex>`.",
    ),
]


@app.get(
    "/datasets/<id>/diff",
    summary="Diff two versions",
    description="Cases are matched by id and compared by digest first, so only changed cases "
    "are read. Each change is `{path, before, after}` with an RFC 6901 pointer; `before` or "
    "`after` is left out where that side has no such key (null is a value). "
    "`candidate_id` diffs against another dataset of the same tenant. With `summary=true` "
    "only the counts and the version metadata changes are computed (no case is read). "
    "The entries are paged: the changed cases, then the added ones (candidate order), then the "
    "removed ones (base order), `limit` entries a page across the three lists; `summary` and "
    "`meta` cover the whole diff on every page, and only the page's cases are read. "
    "`next_cursor` pins both versions by content digest: with `cursor`, the versions are the "
    "ones it names. `fields=true` adds which field paths the changed cases changed and how "
    "many cases each (`fields`, over the whole diff: both forms of every changed case are read "
    "once and the counts kept). `path` keeps only the changed cases with a change at that field "
    "path or under it, each with only those changes (`path_matches` counts them); give the same "
    "`path` with each `cursor`.",
    tags=TAGS,
    responses=problems(400, 403, 404),
)
def diff(
    id: DatasetIdPath,
    base: Ref,
    candidate: Ref,
    candidate_id: Annotated[
        str | None,
        Query(pattern=DATASET_ID_PATTERN, description="The candidate's dataset (default: id)."),
    ] = None,
    summary: Annotated[bool, Query(description="Counts and metadata changes only.")] = False,
    include_deleted: Annotated[bool, Query(description="Allow tombstoned versions.")] = False,
    cursor: Cursor = None,
    limit: Annotated[
        int, Query(ge=1, le=1000, description="Entries a page, across the three lists.")
    ] = 100,
    fields: Annotated[
        bool, Query(description="Also count the field paths the changed cases changed.")
    ] = False,
    path: Annotated[
        str | None,
        Query(
            pattern=FIELD_PATH_PATTERN,
            max_length=512,
            description="Only changes at this field path or under it, e.g. "
            "`/expectations/ground_truth` or `/inputs/user/*` (`*`: any list position).",
        ),
    ] = None,
) -> dto.DiffOut:
    res = bootstrap.services().diff.diff_versions(
        current_identity(app),
        id,
        base,
        candidate,
        candidate_name=candidate_id,
        summary_only=summary,
        include_deleted=include_deleted,
        cursor=cursor,
        limit=limit,
        fields=fields,
        path=path,
    )
    count("DiffsComputed")
    return dto.bounded_diff_out(res)


@instrumented
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
