"""What route functions share: the paging and tombstone query parameters, pages of wire models,
and the "201 when new, 200 when already there" answer of every register-like route.

The routes stay one per function module, each with its own OpenAPI docs; only their bodies'
common shapes live here. Importing this module does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from pydantic import BaseModel

from caseshelf.api.app import problems
from caseshelf.api.dto import CURSOR_PATTERN, JOB_ID_PATTERN, REF_PATTERN, PageOut, wire_size
from caseshelf.domain.answers import ANSWER_BUDGET_BYTES, PAGE_FRAME_BYTES, fitting
from caseshelf.domain.browse import SearchBy
from caseshelf.domain.models import DATASET_ID_PATTERN, DIGEST_PATTERN, LABEL_PATTERN
from caseshelf.domain.paging import decode_position, encode_position
from caseshelf.ports import Page

M = TypeVar("M", bound=BaseModel)
W = TypeVar("W")

Cursor = Annotated[
    str | None,
    Query(description="The `next_cursor` of the previous page.", pattern=CURSOR_PATTERN),
]
DatasetIdPath = Annotated[str, Path(pattern=DATASET_ID_PATTERN, description="A dataset id.")]
RecipeIdPath = Annotated[str, Path(pattern=DATASET_ID_PATTERN, description="A recipe id.")]
RefPath = Annotated[
    str,
    Path(
        pattern=REF_PATTERN,
        description="A version label, `latest`, a version tag or `sha256:<hex>`.",
    ),
]
LabelPath = Annotated[str, Path(pattern=LABEL_PATTERN, description="A version label.")]
JobIdPath = Annotated[str, Path(pattern=JOB_ID_PATTERN, description="An import job's id.")]
PositionPath = Annotated[
    int, Path(ge=0, le=2**53, description="A case's position in the version, from 0.")
]
IncludeDeleted = Annotated[bool, Query(description="Also show tombstoned versions.")]
DigestPath = Annotated[
    str, Path(pattern=DIGEST_PATTERN, description="A file's digest, `sha256:<hex>`.")
]
SearchText = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=256,
        description="Search the cases for this text instead of listing them all (see `by`).",
    ),
]
SearchField = Annotated[
    SearchBy,
    Query(description="What `q` is looked for in: the id, the tags, the text, or any."),
]
Limit = Annotated[int, Query(ge=1, le=1000)]
Shared = Annotated[bool, Query(description="List the `_shared` tenant.")]

ALREADY_REGISTERED = "Already registered with the same content (`created: false`)."


def page_out(model: type[W], page: Page, convert: Callable[[Any], W]) -> PageOut[W]:
    """A service page as a `PageOut[model]`, each item converted to its wire model."""
    return PageOut[model](  # type: ignore[valid-type]
        items=[convert(item) for item in page.items], next_cursor=page.next_cursor
    )


def bounded_page_out(
    model: type[W],
    page: Page,
    convert: Callable[[Any], W],
    cursor: str | None,
    budget: int = ANSWER_BUDGET_BYTES,
) -> PageOut[W]:
    """`page_out` of a list paged by position (`caseshelf.domain.paging`), cut to the items
    that fit one answer of `budget` escaped bytes (`caseshelf.domain.answers`); the cursor then
    points at the first item left out. An item is a few kilobytes (a version's record), so a
    page always holds at least one."""
    items = [convert(item) for item in page.items]
    kept = fitting(map(wire_size, items), budget - PAGE_FRAME_BYTES)  # type: ignore[arg-type]
    if kept == len(items):
        return PageOut[model](items=items, next_cursor=page.next_cursor)  # type: ignore[valid-type]
    kept = max(kept, 1)
    nxt = encode_position(decode_position(cursor) + kept)
    return PageOut[model](items=items[:kept], next_cursor=nxt)  # type: ignore[valid-type]


def created_responses(
    model: type[BaseModel], *statuses: int, description: str
) -> dict[int, OpenAPIResponse]:
    """The OpenAPI answers of a register-like route: 201 (`description`) when it made something
    new, 200 with the same `model` when it was already there, and the problems it can give."""
    return {
        200: {
            "description": ALREADY_REGISTERED,
            "content": {"application/json": {"model": model}},
        },
        **problems(*statuses, ok=201, description=description),
    }


def created_response(created: bool, body: M) -> Response[M]:
    """201 with `body` when something new was made, else 200."""
    return Response(status_code=201 if created else 200, content_type="application/json", body=body)
