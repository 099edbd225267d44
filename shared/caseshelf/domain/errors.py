"""Typed domain errors. One module (`caseshelf.api.errors`) maps them to HTTP; nothing else
decides a status code, and nothing decides one by reading message text."""

from __future__ import annotations

# `typing.TYPE_CHECKING` without importing typing (the CLI's start-up path imports this).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class CaseshelfError(Exception):
    """Base of every error the registry raises on purpose.

    `fields` carries what helps a caller fix the input (case ids, row, field, digests); it is
    rendered into the problem+json body next to `detail`.
    """

    title = "Error"

    def __init__(self, detail: str, **fields: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.fields = {k: v for k, v in fields.items() if v is not None}

    def __str__(self) -> str:
        return self.detail


class BadRequest(CaseshelfError):
    title = "Bad Request"


class NotFound(CaseshelfError):
    title = "Not Found"


class Conflict(CaseshelfError):
    title = "Conflict"


class Forbidden(CaseshelfError):
    title = "Forbidden"


class TooLarge(CaseshelfError):
    title = "Payload Too Large"


class Upstream(CaseshelfError):
    """A source the registry depends on (the Hub, a URL) failed after retries."""

    title = "Bad Gateway"


class BackendUnavailable(Upstream):
    """The registry's own storage (S3, DynamoDB) failed transiently (throttled, unavailable, a
    dropped connection) and kept failing after the client's retries: nothing the caller did, and
    worth trying again after `retry_after` seconds. The detail names the object or row and the
    fault."""

    title = "Service Unavailable"

    def __init__(self, detail: str, *, retry_after: int = 5, **fields: Any) -> None:
        super().__init__(detail, retry_after=retry_after, **fields)
        self.retry_after = retry_after


class Corrupt(Upstream):
    """A stored object whose bytes do not hash to the digest the manifest records for them (or
    that is missing where a committed version needs it): never served."""

    title = "Stored Object Corrupt"


class StorageFull(CaseshelfError):
    """The disk under the embedded store (or an export's destination) has no room left: nothing
    was committed; free space and retry."""

    title = "Insufficient Storage"
