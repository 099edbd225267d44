"""Wire shapes of the browsing routes: case search pages, a version's numbers, the caller.

Built from `caseshelf.services.browse` results by the `*_out` functions here and nowhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from caseshelf.api.dto import CURSOR_PATTERN, Wire
from caseshelf.domain.browse import Distribution, VersionStats
from caseshelf.domain.identity import Identity
from caseshelf.domain.layout import SHARED_TENANT

if TYPE_CHECKING:
    from caseshelf.domain.versions import VersionRecord
    from caseshelf.services.browse import SearchPage


class CaseSearchPageOut(Wire):
    """A page of `GET …/cases?q=`: the matches found, and how far the scan went."""

    items: list[dict[str, Any]]
    next_cursor: str | None = Field(
        default=None,
        pattern=CURSOR_PATTERN,
        description="Pass as `cursor` (with the same `q` and `by`) to search on from where "
        "this page stopped; null once every case has been searched.",
    )
    scanned_from: int = Field(description="The page searched cases [scanned_from, scanned_to).")
    scanned_to: int = Field(description="Position (in dataset order) where the search stopped.")
    case_count: int = Field(description="Cases in the version.")


class BucketOut(Wire):
    low: int = Field(description="Values from `low` (inclusive)…")
    high: int = Field(description="…up to `high` (exclusive): powers of two.")
    count: int


class DistributionOut(Wire):
    count: int
    total: int
    min: int | None = None
    max: int | None = None
    mean: float | None = None
    p50: int | None = None
    p90: int | None = None
    p99: int | None = None
    buckets: list[BucketOut]


class TagCountOut(Wire):
    tag: str
    cases: int


class SharedFileOut(Wire):
    dest: str
    digest: str
    size: int


class InputKindsOut(Wire):
    text: int = Field(description="Cases whose inputs.user is a string.")
    turns: int = Field(description="…a list of turns.")
    file: int = Field(description="…a file (`{ref}`).")
    none: int = Field(description="…absent.")


class VersionStatsOut(Wire):
    """A version's numbers, over every one of its cases."""

    id: str
    version: str
    content_digest: str
    case_count: int
    tags: list[TagCountOut] = Field(description="Cases per tag, most cases first.")
    untagged: int = Field(description="Cases without a tag.")
    input_kinds: InputKindsOut
    input_length: DistributionOut = Field(
        description="Characters of inputs.user (a string, or the turns together)."
    )
    file_sizes: DistributionOut = Field(description="Bytes of each companion file of a case.")
    shared_files: list[SharedFileOut]


class MeOut(Wire):
    """Who the API takes the caller for (from the authorizer only), and what that allows."""

    tenant: str
    principal: str
    roles: list[str]
    admin: bool = Field(description="May delete and revive any version of the tenant.")
    reads: list[str] = Field(description="Tenants whose datasets the caller reads, in order.")
    writes_shared: bool = Field(description="May register into the `_shared` tenant.")


def search_page_out(page: SearchPage) -> CaseSearchPageOut:
    return CaseSearchPageOut(
        items=page.items,
        next_cursor=page.next_cursor,
        scanned_from=page.scanned_from,
        scanned_to=page.scanned_to,
        case_count=page.case_count,
    )


def _distribution_out(d: Distribution) -> DistributionOut:
    return DistributionOut(
        count=d.count,
        total=d.total,
        min=d.min,
        max=d.max,
        mean=d.mean,
        p50=d.p50,
        p90=d.p90,
        p99=d.p99,
        buckets=[BucketOut(low=b.low, high=b.high, count=b.count) for b in d.buckets],
    )


def stats_out(rec: VersionRecord, stats: VersionStats) -> VersionStatsOut:
    return VersionStatsOut(
        id=rec.name,
        version=rec.version,
        content_digest=stats.content_digest,
        case_count=stats.case_count,
        tags=[TagCountOut(tag=t, cases=n) for t, n in stats.tags],
        untagged=stats.untagged,
        input_kinds=InputKindsOut(**stats.input_kinds),
        input_length=_distribution_out(stats.input_length),
        file_sizes=_distribution_out(stats.file_sizes),
        shared_files=[
            SharedFileOut(dest=s.dest, digest=s.digest, size=s.size) for s in stats.shared_files
        ],
    )


def me_out(identity: Identity) -> MeOut:
    return MeOut(
        tenant=identity.tenant,
        principal=identity.principal,
        roles=sorted(identity.roles),
        admin=identity.is_admin,
        reads=list(identity.read_tenants()),
        writes_shared=identity.tenant == SHARED_TENANT and identity.is_admin,
    )
