"""The storage ports the core needs. Adapters fulfil them; services receive them as parameters.

Keys are plain strings relative to the store root, always under `t/<tenant>/` (see
`caseshelf.domain.layout`). Every object the registry writes is content-addressed or written once,
so `put_if_absent` is the only write the registration path needs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from caseshelf.domain.versions import VersionRecord


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    last_modified: float  # POSIX seconds


class ObjectWriter(Protocol):
    """An object written as a stream (an S3 multipart upload; a temporary file locally): it
    appears, whole, only at `commit`; `abort` leaves nothing. Neither memory nor local disk
    grows with the object."""

    def write(self, data: bytes) -> int: ...

    def copy(self, key: str, size: int) -> None:
        """Append the `size` bytes of the object `key` of the same store: copied by the store
        itself where it can (S3 `UploadPartCopy`), so they need not pass through this
        process."""

    def commit(self) -> int:
        """Make the object visible; its size in bytes."""

    def abort(self) -> None: ...


class BlobStore(Protocol):
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Write `data` at `key` unless an object is there; True when this call wrote it."""

    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> None:
        """Write or replace an object (transient areas only: uploads, exports)."""

    def put_file(self, key: str, path: Path, *, content_type: str | None = None) -> None:
        """`put` of a local file's bytes, streamed from disk (an export's manifest or row file
        can be larger than what a process should hold)."""

    def open_writer(self, key: str, *, content_type: str | None = None) -> ObjectWriter:
        """Write an object as a stream of pieces (transient areas only, as `put`)."""

    def get(self, key: str) -> bytes:
        """The whole object; `NotFound` when absent."""

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """`length` bytes from `offset`; `NotFound` when absent."""

    def exists(self, key: str) -> bool: ...

    def head(self, key: str) -> ObjectInfo | None:
        """Size and time of an object, or None when absent."""

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object under `prefix`, in key order, paging to exhaustion."""

    def delete(self, key: str) -> None: ...

    def presign_get(
        self, key: str, *, expires: int = 900, filename: str | None = None
    ) -> str | None:
        """A time-limited GET URL, or None where the backend has none (the embedded store).
        `filename`: the name the download is saved as (its answer says
        `Content-Disposition: attachment; filename=...`), not the key's last part."""

    def presign_put(self, key: str, *, expires: int = 900) -> str | None:
        """A time-limited PUT URL, or None where the backend has none (the embedded store)."""


class Queue(Protocol):
    """A work queue (SQS on AWS; in process on the embedded store): each message is a small
    JSON document handed to the function that consumes the queue."""

    def send(self, messages: Sequence[dict[str, Any]]) -> None: ...


@dataclass(frozen=True)
class DatasetEntry:
    tenant: str
    kind: str
    name: str
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class Page:
    items: Sequence[Any]
    next_cursor: str | None


class Index(Protocol):
    def put_version(self, rec: VersionRecord) -> None:
        """The commit point: write the version row only if that label is not there yet
        (`Conflict` otherwise), and touch its dataset row."""

    def get_version(
        self, tenant: str, kind: str, name: str, version: str
    ) -> VersionRecord | None: ...

    def list_versions(self, tenant: str, kind: str, name: str) -> list[VersionRecord]:
        """Every version of one dataset, tombstoned ones included, in no particular order."""

    def update_version(
        self,
        tenant: str,
        kind: str,
        name: str,
        version: str,
        changes: dict[str, Any],
    ) -> VersionRecord:
        """Set `version_tags`, `deleted_at`, `deleted_by` on an existing version (`NotFound` when
        it is not there) and return the updated row."""

    def list_datasets(
        self, tenant: str, kind: str, *, cursor: str | None = None, limit: int = 50
    ) -> Page:
        """Dataset rows of one tenant in name order; `cursor` is the opaque `next_cursor`."""

    def list_tenants(self) -> list[str]:
        """Every tenant with at least one dataset row (for maintenance such as gc)."""

    def put_item(self, pk: str, sk: str, item: dict[str, Any], *, if_absent: bool = False) -> None:
        """Auxiliary rows (jobs, recipes' side data): a plain JSON document under (pk, sk)."""

    def get_item(self, pk: str, sk: str) -> dict[str, Any] | None: ...

    def update_item(
        self, pk: str, sk: str, changes: dict[str, Any], *, expect: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Merge `changes` into an existing row; with `expect`, only when each named attribute
        currently has that value (`Conflict` otherwise). `NotFound` when the row is absent."""

    def list_items(self, pk: str) -> list[tuple[str, dict[str, Any]]]:
        """Every auxiliary row under `pk`, as (sk, document), in sk order (a small partition:
        the running jobs the sweeps look at)."""

    def delete_item(self, pk: str, sk: str) -> None:
        """Remove an auxiliary row (nothing when it is absent)."""
