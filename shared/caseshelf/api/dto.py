"""Wire shapes of responses (requests are the domain models in `caseshelf.domain.models`).

Every response body the API or the CLI's `--json` prints is one of these models, built from
service results by the `*_from` functions here and nowhere else.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from caseshelf.domain.versions import VersionRecord
from caseshelf.services.registry import DatasetSummary, RegisterResult, ValidateResult

T = TypeVar("T")


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PageOut(Wire, Generic[T]):
    items: list[T]
    next_cursor: str | None = None


class RegisterOut(Wire):
    id: str
    version: str
    content_digest: str
    case_count: int
    created: bool


class ValidateOut(Wire):
    valid: bool = True
    would_conflict: bool
    content_digest: str
    case_count: int
    version: str


class VersionOut(Wire):
    id: str
    version: str
    content_digest: str
    case_count: int
    bytes: int
    description: str
    tags: list[str]
    version_tags: list[str]
    created_at: str
    created_by: str
    deleted_at: str | None = None
    deleted_by: str | None = None
    produced_by: dict[str, Any] | None = None
    owner: str = Field(description="The tenant that owns it: the caller's, or _shared.")


class DatasetOut(Wire):
    id: str
    owner: str
    latest: str | None
    latest_digest: str | None
    version_count: int
    case_count: int | None
    description: str
    created_at: str
    updated_at: str


class TagsIn(Wire):
    tags: list[str]


class DownloadOut(Wire):
    url: str
    filename: str
    expires_in: int


class Problem(Wire):
    """`application/problem+json` (RFC 9457) plus fields that help fix the input."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    detail: str


def register_out(res: RegisterResult) -> RegisterOut:
    r = res.record
    return RegisterOut(
        id=r.name,
        version=r.version,
        content_digest=r.content_digest,
        case_count=r.case_count,
        created=res.created,
    )


def validate_out(res: ValidateResult) -> ValidateOut:
    return ValidateOut(
        would_conflict=res.would_conflict,
        content_digest=res.content_digest,
        case_count=res.case_count,
        version=res.version,
    )


def version_out(r: VersionRecord) -> VersionOut:
    return VersionOut(
        id=r.name,
        version=r.version,
        content_digest=r.content_digest,
        case_count=r.case_count,
        bytes=r.bytes,
        description=r.description,
        tags=list(r.tags),
        version_tags=list(r.version_tags),
        created_at=r.created_at,
        created_by=r.created_by,
        deleted_at=r.deleted_at,
        deleted_by=r.deleted_by,
        produced_by=r.produced_by,
        owner=r.tenant,
    )


def dataset_out(s: DatasetSummary) -> DatasetOut:
    latest = s.latest
    return DatasetOut(
        id=s.id,
        owner=s.tenant,
        latest=latest.version if latest else None,
        latest_digest=latest.content_digest if latest else None,
        version_count=s.version_count,
        case_count=latest.case_count if latest else None,
        description=latest.description if latest else "",
        created_at=s.created_at,
        updated_at=s.updated_at,
    )
