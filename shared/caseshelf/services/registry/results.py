"""What the registry answers: a registration's result and its write figures, a validation's,
a dataset's summary, one case, a download."""

from __future__ import annotations

from dataclasses import dataclass, field

from caseshelf.domain.versions import VersionRecord, ordered

KIND = "dataset"


@dataclass(frozen=True)
class WriteStats:
    case_bytes_written: int = 0  # the version's new records, and copies of superseded ones
    pack_objects_written: int = 0
    blob_bytes_written: int = 0
    cases_reused: int = 0
    superseded_copied: int = 0  # records of the base version copied (`_keep_superseded`)


@dataclass(frozen=True)
class _Copied:
    records: int = 0
    bytes_written: int = 0
    objects_written: int = 0


@dataclass(frozen=True)
class RegisterResult:
    record: VersionRecord
    created: bool
    stats: WriteStats = field(default_factory=WriteStats)


@dataclass(frozen=True)
class ValidateResult:
    content_digest: str
    case_count: int
    would_conflict: bool
    version: str


@dataclass(frozen=True)
class DatasetSummary:
    id: str
    tenant: str
    latest: VersionRecord | None
    version_count: int
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class OneCase:
    """One case of a version: its canonical record, or (too large for an answer) the URL of
    it alone; `size` is its escaped size (`caseshelf.domain.answers.escaped_size`)."""

    size: int
    record: bytes | None = None
    id: str | None = None
    url: str | None = None


@dataclass(frozen=True)
class Download:
    """Either a presigned URL (AWS) or the document's bytes (embedded store)."""

    filename: str
    url: str | None = None
    body: bytes | None = None


def unchanged_latest(records: list[VersionRecord], content_digest: str) -> VersionRecord | None:
    """The latest live version when it already holds this content: a bump then registers
    nothing (re-running the same import or bumped registration is idempotent)."""
    live = [r for r in records if r.live]
    if live:
        latest = ordered(live)[-1]
        if latest.content_digest == content_digest:
            return latest
    return None
