"""Canonical JSON and digests (architecture §4).

Canonical JSON: UTF-8, object keys sorted, no insignificant whitespace. Non-finite numbers never
reach here: every wire model refuses them at validation, and `canonical_json` refuses them again
for plain values so that no caller can hash a NaN as `null`.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from caseshelf.domain.errors import BadRequest

# Canonical JSON is orjson's output with sorted keys: compact, UTF-8, no NaN (refused first).
CANONICAL_OPTIONS = orjson.OPT_SORT_KEYS
_OPTS = CANONICAL_OPTIONS


# The integers canonical JSON can carry: orjson writes 64-bit integers only.
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1


def json_problem(value: Any) -> tuple[str, str] | None:
    """What keeps `value` from being canonical JSON as it is: `(pointer, "number")` for the first
    NaN, Infinity or integer beyond 64 bits, else `(pointer, "type")` for the first value of a
    type JSON has no form for (datetime, bytes, set, a non-string key ...), else None. The pointer
    is "" for the value itself."""
    kind = type(value)
    if kind is str or value is None or kind is bool:
        return None
    if kind is int:
        return None if INT_MIN <= value <= INT_MAX else ("", "number")
    if kind is float:
        return None if math.isfinite(value) else ("", "number")
    if kind is dict:
        items: Iterable[tuple[Any, Any]] = value.items()
    elif kind is list or kind is tuple:
        items = enumerate(value)
    else:
        return ("", "type")
    # a tuple serialises like a list, but the model should hold the list JSON gives back
    first_type: tuple[str, str] | None = ("", "type") if kind is tuple else None
    for key, item in items:
        if kind is dict and type(key) is not str:
            first_type = first_type or (f"/{key}", "type")
        if item is None or type(item) is str:
            continue
        found = json_problem(item)
        if found is not None:
            if found[1] == "number":
                return f"/{key}{found[0]}", "number"
            first_type = first_type or (f"/{key}{found[0]}", "type")
    return first_type


def find_non_finite(value: Any) -> str | None:
    """The JSON pointer ("" for the value itself) of the first number inside `value` that
    canonical JSON cannot hold: NaN, Infinity, or an integer beyond 64 bits. None when clean."""
    problem = json_problem(value)
    return problem[0] if problem is not None and problem[1] == "number" else None


def _check_finite(value: Any) -> None:
    where = find_non_finite(value)
    if where is not None:
        raise BadRequest(f"non-finite or out-of-range number at {where or '/'}", field=where or "/")


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


class ContentDigester:
    """`content_digest`, fed the `[case id, case digest]` pairs a batch at a time (in dataset
    order) so the hashing goes along with the cases instead of after the last one. The bytes
    hashed are exactly `content_digest`'s: its canonical JSON starts with the sorted-first key,
    `"cases"`, whose list is written piece by piece, and ends with the other keys."""

    def __init__(
        self, *, description: str, tags: Sequence[str], shared_files: Iterable[dict[str, str]]
    ) -> None:
        rest = {
            "description": description,
            "tags": list(tags),
            "shared_files": [dict(f) for f in shared_files],
        }
        self._tail = b"]," + canonical_json(rest, checked=True)[1:]  # without its "{"
        self._hash = hashlib.sha256(b'{"cases":[')
        self._empty = True

    def add(self, case_digests: Sequence[tuple[str, str]]) -> None:
        if not case_digests:
            return
        pairs = orjson.dumps(case_digests, option=_OPTS)  # [["id","sha256:..."],...]
        self.add_encoded(memoryview(pairs)[1:-1])

    def add_encoded(self, pairs: bytes | memoryview) -> None:
        """`add` of pairs written already: `["<id>","sha256:<hex>"]` in canonical JSON, joined
        by commas (a caller holding ids as JSON makes no tuple a case)."""
        if not pairs:
            return
        if not self._empty:
            self._hash.update(b",")
        self._hash.update(pairs)
        self._empty = False

    def digest(self) -> str:
        """The content digest (`sha256:<hex>`); the digester takes no more pairs after it."""
        self._hash.update(self._tail)
        return "sha256:" + self._hash.hexdigest()


# Bytes JSON writes as a six-byte escape each (controls other than tab, newline, return).
_ESCAPED_IN_JSON = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def inline_body(data: bytes) -> dict[str, str]:
    """A file body inline in a JSON document: `{text}` for UTF-8 text, `{base64}` for anything
    else, binary that happens to be valid UTF-8 included (1 GiB of zero bytes is 6 GiB as
    escaped text, 1.3 GiB as base64). Either form stores the same bytes under the same digest."""
    if not _ESCAPED_IN_JSON.search(data):
        try:
            return {"text": data.decode("utf-8")}
        except UnicodeDecodeError:
            pass
    return {"base64": base64.b64encode(data).decode("ascii")}
