"""Opaque position cursors for lists the registry slices itself (versions, cases)."""

from __future__ import annotations

import base64

from caseshelf.domain.errors import BadRequest

MAX_PAGE = 1000


def encode_position(n: int) -> str:
    return base64.urlsafe_b64encode(f"pos:{n}".encode()).decode().rstrip("=")


def decode_position(cursor: str | None) -> int:
    if not cursor:
        return 0
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        tag, _, num = raw.partition(":")
        if tag != "pos" or not num.isdigit():
            raise ValueError
        return int(num)
    except ValueError:
        raise BadRequest(f"invalid cursor {cursor!r}", field="cursor") from None


def check_limit(limit: int, default: int = 100) -> int:
    if limit is None:
        return default
    if limit < 1 or limit > MAX_PAGE:
        raise BadRequest(f"limit must be between 1 and {MAX_PAGE}", field="limit")
    return limit
