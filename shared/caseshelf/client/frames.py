"""Cases as table rows and back: what `Client.to_pandas` gives and what `register(cases=df)` takes.

A row is a case with its `inputs` and `expectations` spread into flat columns
(`inputs.user`, `expectations.ground_truth`, ...); every other field is one column holding its
JSON value as it is (`tags` a list, `env` and `metadata` objects). Rows go back to cases by the
same rule, so `register(cases=cs.to_pandas(ref))` registers the same content.

A cell with no value (None, NaN, NA, NaT) leaves its field out of the case. `id` must hold a
string in every row; anything else that is not a JSON value (an infinite float, an object pandas
cannot say as JSON) is an error naming the row and the column, before anything is sent.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from caseshelf.domain.errors import BadRequest
from caseshelf.extras import require

FLAT = ("inputs", "expectations")


def flatten(case: Mapping[str, Any]) -> dict[str, Any]:
    """A canonical case as one flat row."""
    row: dict[str, Any] = {}
    for key, value in case.items():
        if key in FLAT and isinstance(value, dict):
            for sub, v in value.items():
                row[f"{key}.{sub}"] = v
        else:
            row[key] = value
    return row


def unflatten(row: Mapping[str, Any]) -> dict[str, Any]:
    """A flat row as a case (the inverse of `flatten`)."""
    case: dict[str, Any] = {}
    for key, value in row.items():
        head, dot, sub = key.partition(".")
        if dot and head in FLAT:
            case.setdefault(head, {})[sub] = value
        else:
            case[key] = value
    return case


def _missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    try:
        import pandas as pd
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
    rows: Iterable[Mapping[str, Any]], columns: list[str]
) -> Iterator[dict[str, Any]]:
    """Table rows (flat columns) as cases; errors name the row and the column."""
    if "id" not in columns:
        raise BadRequest(
            "the table has no 'id' column: every case needs an id "
            f"(columns: {', '.join(map(str, columns[:20]))})",
            column="id",
            field="id",
        )
    for i, row in enumerate(rows):
        case_id = row.get("id")
        if _missing(case_id) or not isinstance(case_id, str):
            why = "no value" if _missing(case_id) else f"a {type(case_id).__name__}"
            raise _cell_error(i, "id", None, f"{why} where the case id (a string) is required")
        flat: dict[str, Any] = {}
        for column in columns:
            value = row.get(column)
            if _missing(value):
                continue
            flat[str(column)] = _plain(value, i, str(column), case_id)
        yield unflatten(flat)


def frame_to_cases(df: Any) -> list[dict[str, Any]]:
    """A pandas DataFrame's rows as cases."""
    columns = [str(c) for c in df.columns]
    if len(set(columns)) != len(columns):
        raise BadRequest("the table has repeated column names", field="cases")
    return list(rows_to_cases(df.to_dict(orient="records"), columns))


def is_frame(value: Any) -> bool:
    """A pandas DataFrame, known without importing pandas when it was never imported."""
    import sys

    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(value, pd.DataFrame)


def cases_frame(cases: Iterable[Mapping[str, Any]]) -> Any:
    """Cases as a DataFrame of flat columns, in dataset order (None where a case has no value
    for a column)."""
    pd = require("pandas", "to_pandas")
    return pd.DataFrame(columns_of(cases), copy=False)


def columns_of(cases: Iterable[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """The flat rows of `cases` as one list per column, None where a row has no value.

    Built column by column instead of as a list of row dicts: pandas (and Arrow) take columns
    without looking at every row's keys again, which is most of the time a list of 100,000
    dicts costs (`bench/bench_client.py`)."""
    columns: dict[str, list[Any]] = {}
    for n, case in enumerate(cases):
        for key, value in flatten(case).items():
            column = columns.get(key)
            if column is None:
                column = columns[key] = [None] * n
            column.append(value)
        for column in columns.values():
            if len(column) <= n:
                column.append(None)
    return columns


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
