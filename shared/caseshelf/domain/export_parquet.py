"""A window of parquet rows built by Arrow from the canonical records, without a Python object
per case.

`export_formats.add_parquet_rows` builds the rows from parsed cases: a dict per case, three JSON
texts written per case, and Python lists that Arrow then converts. For the common shape (cases
without an environment, companion files or graders, whose free-form fields hold objects, lists,
strings, integers and booleans), the same columns come out of Arrow alone: the window's records
(canonical JSON, one per line) are parsed by `pyarrow.json.read_json` (C++, on every core), the
typed columns are its struct fields, and the JSON-text columns (`inputs`, `expectations`,
`metadata`) are written back from the parsed columns with Arrow's string kernels, as orjson
writes them (sorted keys, no whitespace, the same escapes). Canonical records have their keys
sorted and their text written by orjson, so the text is the one `row_of` gives, byte for byte.

Anything this path cannot write exactly (a float, whose text Arrow formats its own way; a value
Arrow's reader infers as a timestamp; a key that some cases of the window lack, or hold as
null, since Arrow reads both as null; lists of objects; an environment, graders or files) makes
`arrow_rows` answer None, and the window is built by the per-case path.
`tests/unit/test_export_parquet.py` checks both give the same table.
"""

from __future__ import annotations

from typing import Any

import orjson

from caseshelf.domain.export import DEFAULT_TIMEOUT_SEC, ENV_KEYS

# Top-level keys the per-case path is needed for (the environment columns, the files column,
# graders: a list of objects).
_PER_CASE_KEYS = frozenset((*ENV_KEYS, "files", "graders"))
# orjson's escapes (RFC 8259's, with \b \t \n \f \r short and the other controls as \u00xx), in
# the order they are applied (the backslash first: the others add backslashes)
_SHORT = {8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}
_ESCAPES = [("\\", "\\\\"), ('"', '\\"')] + [
    (chr(c), _SHORT.get(c, f"\\u{c:04x}")) for c in range(0x20)
]


def escapes_in(raw: bytes) -> list[tuple[str, str]]:
    """The escapes to apply to the strings of a window: those its raw records hold (a string
    holds a character to escape only if the records hold its escape), found by a walk from one
    backslash to the next (outside strings, JSON has none), so the replacement passes run only
    for them. A window with more than 4,096 escapes gets every pass, the walk cut short."""
    found: set[bytes] = set()
    at = raw.find(b"\\")
    for _ in range(4096):
        if at < 0:
            return [(char, escape) for char, escape in _ESCAPES if escape.encode("ascii") in found]
        size = 6 if raw[at + 1 : at + 2] == b"u" else 2
        found.add(raw[at : at + size])
        at = raw.find(b"\\", at + size)
    return list(_ESCAPES)


def _pieces(values: Any, valid: Any, escapes: list[tuple[str, str]]) -> list[Any] | None:
    """The JSON text of each value of an Arrow array as pieces to join (literals and string
    arrays), for the rows where `valid` holds; None when some such value has no exact text here:
    a type without one (floats, timestamps, nulls, lists of objects or of lists), or an object
    missing a key that others have (read as null)."""
    import pyarrow as pa  # lazy: pyarrow takes ~0.35 s to import
    import pyarrow.compute as pc  # lazy: pyarrow takes ~0.35 s to import

    kind = values.type
    if pa.types.is_string(kind):
        for char, escape in escapes:
            values = pc.replace_substring(values, char, escape)
        return ['"', values, '"']
    if pa.types.is_int64(kind) or pa.types.is_boolean(kind):
        return [pc.cast(values, pa.string())]
    if pa.types.is_list(kind):
        items = values.values
        if items.null_count or not (
            pa.types.is_string(items.type)
            or pa.types.is_int64(items.type)
            or pa.types.is_boolean(items.type)
        ):
            return None
        texts = _pieces(items, items.is_valid(), escapes)
        if texts is None:
            return None
        joined = pc.binary_join(
            pa.ListArray.from_arrays(values.offsets, _joined(texts), mask=values.is_null()), ","
        )
        return ["[", joined, "]"]
    if pa.types.is_struct(kind):
        out: list[Any] = ["{"]
        for i in sorted(range(kind.num_fields), key=lambda i: kind.field(i).name):
            child = pc.struct_field(values, [i])
            if child.null_count and pc.any(pc.and_(valid, child.is_null())).as_py():
                return None  # a key some objects lack, or hold as null
            inner = _pieces(child, pc.and_(valid, child.is_valid()), escapes)
            if inner is None:
                return None
            name = orjson.dumps(kind.field(i).name).decode("utf-8")
            out += [("," if len(out) > 1 else "") + name + ":", *inner]
        return [*out, "}"]
    return None


def _joined(pieces: list[Any]) -> Any:
    """Pieces (literals and arrays) joined row by row in one pass, adjacent literals merged."""
    import pyarrow.compute as pc  # lazy: pyarrow takes ~0.35 s to import

    merged: list[Any] = []
    for piece in pieces:
        if isinstance(piece, str) and merged and isinstance(merged[-1], str):
            merged[-1] += piece
        else:
            merged.append(piece)
    return pc.binary_join_element_wise(*merged, "")


def _object_text(table: dict[str, Any], n: int, name: str, escapes: list[tuple[str, str]]) -> Any:
    """The JSON text of the object column `name`, "{}" where a case has none; None when the
    column is not all objects with an exact text."""
    import pyarrow as pa  # lazy: pyarrow takes ~0.35 s to import
    import pyarrow.compute as pc  # lazy: pyarrow takes ~0.35 s to import

    if name not in table:
        return pa.repeat("{}", n)
    column = table[name]
    if not pa.types.is_struct(column.type):
        return None
    valid = column.is_valid()
    pieces = _pieces(column, valid, escapes)
    if pieces is None:
        return None
    if not any(not isinstance(p, str) for p in pieces):  # objects with no keys
        return pc.if_else(valid, "".join(pieces), "{}")
    text = _joined(pieces)
    return pc.if_else(valid, text, "{}") if column.null_count else text


def _text_field(table: dict[str, Any], n: int, name: str, key: str) -> Any:
    """`name.key` where it is a string, else null (as `row_of`'s `input` and `target`)."""
    import pyarrow as pa  # lazy: pyarrow takes ~0.35 s to import
    import pyarrow.compute as pc  # lazy: pyarrow takes ~0.35 s to import

    if name in table:
        column = table[name]
        kind = column.type
        if pa.types.is_struct(kind) and kind.get_field_index(key) >= 0:
            child = pc.struct_field(column, [kind.get_field_index(key)])
            if pa.types.is_string(child.type):
                return child
    return pa.nulls(n, pa.string())


def _one_array(column: Any) -> Any:
    """A column of the reader's table as one array (it answers a chunk per block read)."""
    import pyarrow as pa  # lazy: pyarrow takes ~0.35 s to import

    return column.chunk(0) if column.num_chunks == 1 else pa.concat_arrays(column.chunks)


def _empty_lists(n: int, kind: Any) -> Any:
    """`n` empty lists of type `kind`."""
    import pyarrow as pa  # lazy: pyarrow takes ~0.35 s to import

    offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(bytes(4 * (n + 1)))])
    return pa.ListArray.from_arrays(offsets, pa.array([], kind.value_type))


def arrow_rows(raw: bytes, count: int, schema: Any) -> Any | None:
    """The parquet rows (`schema`: `parquet_schema()`) of `count` canonical case records, one
    per line in `raw`: the values of `row_of`, built by Arrow; None when the window holds a case
    this path does not carry (see the module's docstring). What it buys: no Python object per
    case (the parse, the JSON texts and Arrow's conversion of Python lists were most of a
    parquet export's CPU), and Arrow's work runs with the interpreter lock released
    (`bench/bench_export.py`, `export-parquet`)."""
    import pyarrow as pa  # lazy: pyarrow takes ~0.35 s to import
    import pyarrow.compute as pc  # lazy: pyarrow takes ~0.35 s to import
    import pyarrow.json as pj  # lazy: pyarrow takes ~0.35 s to import

    if not count:
        return None
    # One block (one chunk per column, no unification of blocks' types) and one thread: the
    # streamed export builds a window while it reads the next and writes the one before, which
    # keeps both cores busy already.
    options = pj.ReadOptions(use_threads=False, block_size=max(len(raw) + 1, 1 << 20))
    try:
        read = pj.read_json(pa.py_buffer(raw), read_options=options)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # a key holding values of two kinds, say
    n = read.num_rows
    if n != count or "id" not in read.column_names or _PER_CASE_KEYS & set(read.column_names):
        return None
    table = {name: _one_array(read.column(name)) for name in read.column_names}
    del read
    ids = table["id"]
    if not pa.types.is_string(ids.type) or ids.null_count:
        return None
    tags: Any = _empty_lists(n, pa.list_(pa.string()))
    if "tags" in table:
        tags = table["tags"]
        if tags.type != pa.list_(pa.string()):
            return None
        tags = pc.fill_null(tags, pa.scalar([], type=tags.type))
    escapes = escapes_in(raw)
    del raw
    texts = {
        name: _object_text(table, n, name, escapes)
        for name in ("inputs", "expectations", "metadata")
    }
    if any(text is None for text in texts.values()):
        return None
    columns = {
        "id": ids,
        "input": _text_field(table, n, "inputs", "user"),
        "inputs": texts["inputs"],
        "target": _text_field(table, n, "expectations", "ground_truth"),
        "expectations": texts["expectations"],
        "graders": pa.repeat("[]", n),
        "tags": tags,
        "metadata": texts["metadata"],
        "environment": pa.nulls(n, pa.string()),
        "image": pa.nulls(n, pa.string()),
        "timeout_sec": pa.repeat(pa.scalar(DEFAULT_TIMEOUT_SEC, pa.int64()), n),
        "files": _empty_lists(n, schema.field("files").type),
    }
    arrays = [columns[f.name] for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)
