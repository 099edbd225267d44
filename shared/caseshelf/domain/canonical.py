"""Canonical JSON and digests (DESIGN §4).

Canonical JSON: UTF-8, object keys sorted, no insignificant whitespace. Non-finite numbers never
reach here: every wire model refuses them at validation, and `canonical_json` refuses them again
for plain values so that no caller can hash a NaN as `null`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from caseshelf.domain.errors import BadRequest

_OPTS = orjson.OPT_SORT_KEYS


def _check_finite(value: Any, path: str = "") -> None:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BadRequest(f"non-finite number at {path or '/'}", field=path or "/")
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_finite(v, f"{path}/{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _check_finite(v, f"{path}/{i}")


def canonical_json(value: Any, *, checked: bool = False) -> bytes:
    """Serialise plain JSON values canonically. `checked=True` skips the finiteness walk for
    values that already passed model validation (the hot path of registration)."""
    if not checked:
        _check_finite(value)
    return orjson.dumps(value, option=_OPTS)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest_of(data: bytes) -> str:
    """`sha256:<hex>` of raw bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def hex_of(digest: str) -> str:
    """The hex part of a `sha256:<hex>` digest."""
    if not digest.startswith("sha256:") or len(digest) != 71:
        raise BadRequest(f"not a sha256 digest: {digest!r}", field="digest")
    return digest[7:]


def content_digest(
    *,
    description: str,
    tags: Sequence[str],
    shared_files: Iterable[dict[str, str]],
    case_digests: Iterable[tuple[str, str]],
) -> str:
    """The content digest of a version: its description, tags, shared files and the ordered list
    of `[case id, case digest]`. Provenance, creator, time and version tags stay outside."""
    body = {
        "description": description,
        "tags": list(tags),
        "shared_files": [dict(f) for f in shared_files],
        "cases": [[cid, d] for cid, d in case_digests],
    }
    return digest_of(canonical_json(body, checked=True))
