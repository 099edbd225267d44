"""Cases as table rows and back: what `Client.to_pandas` gives and what `register(cases=df)` takes.

A row is a case with every nested object spread into its leaves, one column each, named by the
dotted path (`inputs.user`, `expectations.ground_truth`, `env.kind`, `metadata.subject`); a list
stays one column holding the list (`tags`, `graders`, `inputs.hitl`), and an empty object stays
as it is. `id` comes first, then the fields in the case model's order (`inputs`, `expectations`,
`env`, ..., `files`; `inputs.user` before `inputs.hitl`, `expectations.ground_truth` before
`expectations.details`), other leaves in the order they first appear. `tags` is `[]` where a
case has none. Rows go back to cases by the same rule, so `register(cases=cs.to_pandas(ref))`
registers the same content: a key holding a `.` is kept whole by the frame's
`attrs["caseshelf_paths"]` (column -> keys), and without it only under `files` (a file's path
before its `digest`/`size`).

A cell with no value (None, NaN, NA, NaT) leaves its field out of the case. `id` must hold a
string in every row; anything else that is not a JSON value (an infinite float, an object pandas
cannot say as JSON) is an error naming the row and the column, before anything is sent.
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from caseshelf.domain.errors import BadRequest
from caseshelf.extras import require

# The case model's fields in their order (`caseshelf.domain.models.Case`): the columns' order.
CASE_FIELDS = (
    "id", "inputs", "expectations", "env", "image", "resources", "network", "timeout_sec",
    "graders", "tags", "metadata", "files",
)  # fmt: skip
_RANK = {name: n for n, name in enumerate(CASE_FIELDS)}
# The order of the fields of `inputs` and `expectations` in their models.
_SUB_RANK = {
    "inputs": {
        name: n
        for n, name in enumerate(
            ("user", "hitl", "messages", "memory_seeds", "session_id", "tool_fixtures")
        )
    },
    "expectations": {name: n for n, name in enumerate(("ground_truth", "metrics", "details"))},
}


def _order(path: Path) -> tuple[int, int]:
    """Where a column goes: by the case model's field, then by the sub-field's place in its
    model (`inputs`, `expectations`); otherwise as first seen (the sort is stable)."""
    top = _RANK.get(path[0], len(_RANK))
    sub = _SUB_RANK.get(path[0])
    return top, (sub.get(path[1], len(sub)) if sub and len(path) > 1 else 0)


# Where a frame keeps the keys of columns whose names do not split back into them.
PATHS_ATTR = "caseshelf_paths"

Path = tuple[str, ...]


def _leaves(value: Any, path: Path, out: dict[Path, Any]) -> None:
    if isinstance(value, dict) and value:
        for key, v in value.items():
            _leaves(v, (*path, key), out)
    else:
        out[path] = value


def flatten(case: Mapping[str, Any]) -> dict[Path, Any]:
    """A canonical case as one flat row: key path -> leaf value."""
    row: dict[Path, Any] = {}
    for key, value in case.items():
        _leaves(value, (key,), row)
    return row


def column_name(path: Path) -> str:
    return ".".join(path)


def split_column(name: str) -> Path:
    """The keys a column name stands for, where no frame says otherwise: split at dots, except
    a file's path under `files` (`files.run-tests.sh.digest`)."""
    head, _, rest = name.partition(".")
    if head == "files" and rest:
        where, dot, leaf = rest.rpartition(".")
        return (head, where, leaf) if dot and leaf in ("digest", "size") else (head, rest)
    return tuple(name.split("."))


def unflatten(row: Mapping[Path, Any]) -> dict[str, Any]:
    """A flat row (key path -> value) as a case (the inverse of `flatten`)."""
    case: dict[str, Any] = {}
    for path, value in row.items():
        node = case
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return case


def _missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    try:
        import pandas as pd  # lazy: optional [pandas] extra, ~400 ms; only for pandas values
    except ImportError:  # pragma: no cover - only reached with pandas objects
        return False
    try:
        return bool(pd.isna(value)) if not isinstance(value, list | dict | tuple) else False
    except (TypeError, ValueError):
        return False


def _plain(value: Any, row: int, column: str, case_id: Any) -> Any:
    """A cell as a JSON value (numpy scalars and arrays as Python ones)."""
    if isinstance(value, str | bool | int) or value is None:
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _cell_error(row, column, case_id, f"{value} is not a JSON number")
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v, row, column, case_id) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, row, column, case_id) for v in value]
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays
    if callable(tolist):
        return _plain(tolist(), row, column, case_id)
    raise _cell_error(row, column, case_id, f"a {type(value).__name__} is not a JSON value")


def _cell_error(row: int, column: str, case_id: Any, why: str) -> BadRequest:
    who = f" (case {case_id!r})" if isinstance(case_id, str) else ""
    return BadRequest(
        f"row {row}{who}, column {column!r}: {why}",
        row=row,
        column=column,
        case_id=case_id if isinstance(case_id, str) else None,
        field=column,
    )


def rows_to_cases(
    rows: Iterable[Mapping[str, Any]],
    columns: list[str],
    paths: Mapping[str, Path] | None = None,
) -> Iterator[dict[str, Any]]:
    """Table rows (flat columns) as cases; errors name the row and the column. `paths`: the
    keys of columns whose names do not split back into them (a frame's `attrs`)."""
    if "id" not in columns:
        raise BadRequest(
            "the table has no 'id' column: every case needs an id "
            f"(columns: {', '.join(map(str, columns[:20]))})",
            column="id",
            field="id",
        )
    keys = {c: tuple((paths or {}).get(c) or split_column(c)) for c in columns}
    for i, row in enumerate(rows):
        case_id = row.get("id")
        if _missing(case_id) or not isinstance(case_id, str):
            why = "no value" if _missing(case_id) else f"a {type(case_id).__name__}"
            raise _cell_error(i, "id", None, f"{why} where the case id (a string) is required")
        flat: dict[Path, Any] = {}
        for column in columns:
            value = row.get(column)
            if _missing(value):
                continue
            flat[keys[column]] = _plain(value, i, str(column), case_id)
        yield unflatten(flat)


def frame_to_cases(df: Any) -> list[dict[str, Any]]:
    """A pandas DataFrame's rows as cases."""
    columns = [str(c) for c in df.columns]
    if len(set(columns)) != len(columns):
        raise BadRequest("the table has repeated column names", field="cases")
    paths = getattr(df, "attrs", {}).get(PATHS_ATTR)
    return list(rows_to_cases(df.to_dict(orient="records"), columns, paths))


def is_frame(value: Any) -> bool:
    """A pandas DataFrame, known without importing pandas when it was never imported."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(value, pd.DataFrame)


def cases_frame(cases: Iterable[Mapping[str, Any]]) -> Any:
    """Cases as a DataFrame of leaf columns, in dataset order (None where a case has no value
    for a column; a column of whole numbers with gaps is pandas' nullable `Int64`, so numbers
    come back as they were)."""
    pd = require("pandas", "to_pandas")
    columns, paths = columns_and_paths(cases)
    data = {
        name: pd.array(values, dtype="Int64") if _gapped_ints(values) else values
        for name, values in columns.items()
    }
    df = pd.DataFrame(data, copy=False)
    unsplit = {name: list(p) for name, p in paths.items() if split_column(name) != p}
    if unsplit:
        df.attrs[PATHS_ATTR] = unsplit
    return df


def _gapped_ints(values: list[Any]) -> bool:
    seen = False
    gap = False
    for v in values:
        if v is None:
            gap = True
        elif type(v) is int:
            seen = True
        else:
            return False
    return seen and gap


def columns_of(cases: Iterable[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """The flat rows of `cases` as one list per column (see `columns_and_paths`)."""
    return columns_and_paths(cases)[0]


def columns_and_paths(
    cases: Iterable[Mapping[str, Any]],
) -> tuple[dict[str, list[Any]], dict[str, Path]]:
    """The flat rows of `cases` as one list per column, None where a row has no value (`tags`
    `[]`), ordered `id` first, then by the case model's fields; and each column's key path.

    Built column by column instead of as a list of row dicts: pandas (and Arrow) take columns
    without looking at every row's keys again, which is most of the time a list of 100,000
    dicts costs (`bench/bench_client.py`)."""
    columns: dict[Path, list[Any]] = {}
    n = -1
    for n, case in enumerate(cases):
        for path, value in flatten(case).items():
            column = columns.get(path)
            if column is None:
                column = columns[path] = [None] * n
            column.append(value)
        for column in columns.values():
            if len(column) <= n:
                column.append(None)
    tags = columns.get(("tags",))
    if tags is not None:
        columns[("tags",)] = [[] if t is None else t for t in tags]
    elif n >= 0:
        columns[("tags",)] = [[] for _ in range(n + 1)]
    order = sorted(columns, key=_order)
    return (
        {column_name(p): columns[p] for p in order},
        {column_name(p): p for p in order},
    )


# What the columns of `to_hf` are made by; a change to `flatten` or `columns_of` that gives other
# columns for the same content changes it, and so every fingerprint.
HF_LAYOUT = "caseshelf.to_hf/1"
_SEMVER = re.compile(r"\d+\.\d+\.\d+")


def hf_fingerprint(content_digest: str) -> str:
    """The `datasets` fingerprint of a version's `to_hf` dataset: the sha256 hex (64 characters,
    the longest fingerprint `datasets` takes) of `HF_LAYOUT` and the content digest. The same
    content gives the same fingerprint on every store and API; other content another one."""
    return hashlib.sha256(f"{HF_LAYOUT}\n{content_digest}".encode()).hexdigest()


def hf_info(
    info_type: Any,
    *,
    name: str,
    version: str,
    content_digest: str,
    description: str,
    location: str,
) -> Any:
    """The `datasets.DatasetInfo` of a version: `dataset_name` its id, `description` its ref and
    content digest on the first line (then its own description), `homepage` where it is, and
    `version` its label when the label is `X.Y.Z` (the only form `datasets` takes there)."""
    head = f"{name}@{version} {content_digest}"
    return info_type(
        description=f"{head}\n\n{description}" if description else head,
        homepage=location,
        dataset_name=name,
        version=version if _SEMVER.fullmatch(version) else None,
    )
