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


def check_limit(limit: int | None, default: int = 100) -> int:
    if limit is None:
        return default
    if limit < 1 or limit > MAX_PAGE:
        raise BadRequest(f"limit must be between 1 and {MAX_PAGE}", field="limit")
    return limit


_HEX64 = frozenset("0123456789abcdef")


def _hex_of(digest: str) -> str:
    hex_part = digest.removeprefix("sha256:")
    if len(hex_part) != 64 or not set(hex_part) <= _HEX64:
        raise ValueError(digest)
    return hex_part


def encode_diff_position(base_digest: str, candidate_digest: str, n: int) -> str:
    """A cursor into a diff's entries that pins both versions by content digest: every page
    of a series is of the same two versions, whatever `latest` or a tag names meanwhile."""
    raw = f"diff:{_hex_of(base_digest)}:{_hex_of(candidate_digest)}:{n}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_diff_position(cursor: str) -> tuple[str, str, int]:
    """`(base content digest, candidate content digest, position)` of a diff cursor."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        tag, base_hex, cand_hex, num = raw.split(":")
        if tag != "diff" or not num.isdigit():
            raise ValueError(raw)
        return f"sha256:{_hex_of(base_hex)}", f"sha256:{_hex_of(cand_hex)}", int(num)
    except ValueError:
        raise BadRequest(f"invalid cursor {cursor!r}", field="cursor") from None


def encode_selection_position(content_digest: str, n: int) -> str:
    """A cursor into a selection's cases that pins the version by content digest: every page of
    a series is of the same content, whatever `latest` or a tag names meanwhile."""
    raw = f"sel:{_hex_of(content_digest)}:{n}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_selection_position(cursor: str) -> tuple[str, int]:
    """`(the version's content digest, position among the selected cases)` of a cursor."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        tag, hex_digest, num = raw.split(":")
        if tag != "sel" or not num.isdigit():
            raise ValueError(raw)
        return f"sha256:{_hex_of(hex_digest)}", int(num)
    except ValueError:
        raise BadRequest(f"invalid cursor {cursor!r}", field="cursor") from None
