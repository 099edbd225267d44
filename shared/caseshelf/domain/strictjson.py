"""JSON parsing that never changes a value silently: the parser every JSON input goes through.

`orjson.loads` is fast, but it keeps the last of two equal keys and reads an integer outside
-2**63 .. 2**64 - 1 as a float (`18446744073709551616` and `18446744073709551617` become the same
number, and so do `-9223372036854775809` and `-9223372036854775810`). `loads` refuses the first
and keeps the second exactly (the models then refuse it by name, since canonical JSON holds
64-bit integers only):

- the fast path is orjson, plus two C-speed checks on the bytes: no run of 20 digits and no
  minus sign before a run of 19 (so every integer fits orjson's), and as many colons outside
  strings as the parsed value has keys (re-serialised by orjson; colons in strings cancel out),
  so no key was dropped;
- otherwise (a long digit run, an escaped colon, a document orjson cannot re-serialise) the
  standard library parses it again with a hook that refuses repeated keys, naming the key and
  the JSON pointer of the object (and the case id when the object lies in `cases`).

Invalid UTF-8, NaN/Infinity literals and nesting beyond what the parsers allow are `BadRequest`
naming where.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from caseshelf.domain.errors import BadRequest

# The deepest value canonical JSON can be written for (orjson's limit when serialising).
MAX_DEPTH = 254
_ESCAPED_COLON = re.compile(rb"\\u003[aA]")
# Every digit as "0", a minus sign as itself, every other byte as " ": a run of digits is then
# a plain substring search, many times faster than a regular expression over the whole
# document.
_DIGITS_TO_ZERO = bytes(0x30 if 0x30 <= b <= 0x39 else b if b == 0x2D else 0x20 for b in range(256))
_TWENTY_DIGITS = b"0" * 20
_MINUS_NINETEEN_DIGITS = b"-" + b"0" * 19


def _long_number(raw: bytes) -> bool:
    """Whether `raw` holds a number orjson may not read exactly: a run of 20 digits (2**64 has
    20), or a minus sign before a run of 19 (-2**63 - 1 has 19)."""
    digits = raw.translate(_DIGITS_TO_ZERO)
    return _TWENTY_DIGITS in digits or _MINUS_NINETEEN_DIGITS in digits


def _escaped_colon(raw: bytes) -> bool:
    """Whether `raw` writes a colon as `\\u003a` (a colon the count of colons would miss). The
    expression alone, no substring test before it: the regex engine searches its literal prefix
    as fast."""
    return _ESCAPED_COLON.search(raw) is not None


class _Repeated(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


class _Marked(dict[str, Any]):
    """An object that named `repeated` twice (the slow path's second pass)."""

    repeated: str = ""


def _refuse_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Repeated(key)
            seen.add(key)
    return out


def _mark_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    marked = _Marked(pairs)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            marked.repeated = key
            break
        seen.add(key)
    return marked


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _where_repeated(value: Any) -> tuple[str, str | None]:
    """The JSON pointer of the first object that repeats a key, and the id of the case it is
    in (when it is inside `cases`)."""
    stack: list[tuple[Any, str, str | None]] = [(value, "", None)]
    while stack:
        node, pointer, case_id = stack.pop()
        if isinstance(node, _Marked):
            return pointer or "/", case_id
        if isinstance(node, dict):
            items = list(node.items())
        elif isinstance(node, list):
            items = list(enumerate(node))
        else:
            continue
        for key, child in reversed(items):
            cid = case_id
            if pointer == "/cases" and isinstance(child, dict) and isinstance(child.get("id"), str):
                cid = child["id"]
            stack.append((child, f"{pointer}/{key}", cid))
    return "/", None


def _decode(data: bytes | bytearray | memoryview | str, where: str) -> str:
    if isinstance(data, str):
        return data
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(
            f"{where}: not UTF-8 (byte {exc.start}: {exc.reason})", field=where, byte=exc.start
        ) from None


def _fast(raw: bytes) -> tuple[bool, Any]:
    """(True, value) when orjson's value is the document's, exactly; (False, None) otherwise.
    Syntax errors are orjson's (`orjson.JSONDecodeError`, a `json.JSONDecodeError`)."""
    value = orjson.loads(raw)
    if _long_number(raw) or _escaped_colon(raw):
        return False, None
    try:
        again = orjson.dumps(value)
    except orjson.JSONEncodeError:  # nested beyond what orjson writes: let the slow path say
        return False, None
    return raw.count(b":") == again.count(b":"), value


def parsed_exactly(raws: list[bytes], values: list[Any]) -> bool:
    """Whether orjson's `values` of the documents `raws` (one each, e.g. the lines of a JSONL
    batch) are exactly what they hold: the fast path's checks, over a whole batch at once.
    When False, parse them again one by one with `loads`, which names the one at fault.

    The checks run over the documents joined by newlines (which no check matches across): one
    search of each kind per batch instead of one per document, about half the cost a line."""
    raw = b"\n".join(raws)
    if _long_number(raw) or _escaped_colon(raw):
        return False
    try:
        again = orjson.dumps(values)
    except orjson.JSONEncodeError:
        return False
    return raw.count(b":") == again.count(b":")


def loads(data: bytes | bytearray | memoryview | str, *, where: str = "body") -> Any:
    """The value of one JSON document, every value as written; `BadRequest` otherwise."""
    try:
        return _loads(data, where)
    except json.JSONDecodeError as exc:
        if "UTF-8" in exc.msg or "surrogate" in exc.msg:
            if not isinstance(data, str):
                _decode(data, where)  # names the byte when the bytes themselves are not UTF-8
            raise BadRequest(f"{where}: invalid JSON: {exc.msg}", field=where) from None
        raise BadRequest(
            f"{where}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
            field=where,
            line=exc.lineno,
            column=exc.colno,
        ) from None
    except ValueError as exc:  # NaN, Infinity on the slow path
        raise BadRequest(f"{where}: invalid JSON: {exc}", field=where) from None


def loads_body(text: str | bytes) -> Any:
    """`loads` for a request body, leaving syntax errors as `json.JSONDecodeError` (the API
    names their position itself, `caseshelf.api.errors.malformed_json`)."""
    return _loads(text, "body")


def _loads(data: bytes | bytearray | memoryview | str, where: str) -> Any:
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    ok, value = _fast(raw)
    if ok:
        return value
    text = data if isinstance(data, str) else _decode(raw, where)
    try:
        value = json.loads(text, object_pairs_hook=_refuse_repeats, parse_constant=_refuse_constant)
    except _Repeated as rep:
        marked = json.loads(text, object_pairs_hook=_mark_repeats)
        pointer, case_id = _where_repeated(marked)
        in_case = f"case {case_id!r}: " if case_id else ""
        raise BadRequest(
            f"{where}: {in_case}the key {rep.key!r} is given twice in the object at {pointer}; "
            "a key is given once (the value would otherwise be lost)",
            field=pointer,
            key=rep.key,
            case_id=case_id,
        ) from None
    except RecursionError:
        raise BadRequest(
            f"{where}: JSON nested deeper than {MAX_DEPTH} levels", field=where
        ) from None
    _check_depth(value, where)
    return value


def _check_depth(value: Any, where: str) -> None:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise BadRequest(f"{where}: JSON nested deeper than {MAX_DEPTH} levels", field=where)
        children = node.values() if type(node) is dict else node if type(node) is list else ()
        stack.extend((c, depth + 1) for c in children if type(c) in (dict, list))
