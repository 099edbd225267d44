"""A first recipe for a file of plain rows, from the fields its rows have. Pure.

`draft_recipe(name, kind, fields)` guesses which field is the task, which the answer and which
the id by their usual names (`question`, `prompt`, `input`…; `answer`, `target`, `label`…;
`id`, `task_id`, `uid`…), and keeps every other field as case metadata, so nothing of a row is
lost. Without an id field (none found, none given), case ids are `<name>-<row number>`; for
rows of several files (`_file`, `_row`), `{_file}-{_row}`, each case tagged with its file.
The draft is a valid recipe (`parse_recipe` accepts it); `caseshelf preview FILE` prints it as
YAML to edit and pass to `caseshelf import FILE --recipe`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from caseshelf.domain.recipe import FILE_FIELD, ROW_FIELD

TASK_NAMES = (
    "question", "prompt", "input", "query", "problem", "instruction", "task", "text", "user",
    "context",
)  # fmt: skip
ANSWER_NAMES = (
    "answer", "best answer", "target", "label", "output", "expected", "expected_answer",
    "ground_truth", "solution", "correct_answer", "response", "completion",
)  # fmt: skip
ID_NAMES = ("id", "task_id", "question_id", "qid", "uid", "example_id", "idx", "_id", "key")

_NOT_ID_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def _pick(fields: Sequence[str], names: Sequence[str], taken: set[str]) -> str | None:
    lowered = {f.lower(): f for f in fields if f not in taken}
    return next((lowered[n] for n in names if n in lowered), None)


def draft_name(stem: str) -> str:
    """A dataset id from a file name's stem (`TruthfulQA_mini` -> `truthfulqa_mini`)."""
    name = _NOT_ID_CHARS.sub("-", stem.lower()).strip("-._")
    return name[:64] or "rows"


def draft_recipe(
    name: str, kind: str, fields: Sequence[str], *, id_field: str | None = None
) -> dict[str, Any]:
    """A recipe document for rows with `fields` (in their order), read as `kind`."""
    taken: set[str] = set()
    if id_field is None:
        id_field = _pick(fields, ID_NAMES, taken)
    if id_field is not None:
        taken.add(id_field)
    task = _pick(fields, TASK_NAMES, taken)
    if task is None:
        task = next((f for f in fields if f not in taken), None)
    if task is not None:
        taken.add(task)
    answer = _pick(fields, ANSWER_NAMES, taken)
    if answer is not None:
        taken.add(answer)
    mapping: dict[str, Any] = {}
    if id_field is not None:
        mapping["id_field"] = id_field
    elif {FILE_FIELD, ROW_FIELD} <= set(fields):  # several files: an id from where the row is
        mapping["id_template"] = f"{{{FILE_FIELD}}}-{{{ROW_FIELD}}}"
    taken.update(f for f in (FILE_FIELD, ROW_FIELD) if f in fields)
    mapping["task_field"] = task if task is not None else "_index"
    mapping["prompt_env"] = True
    if answer is not None:
        mapping["answer_field"] = answer
    if FILE_FIELD in fields:
        mapping["tag_fields"] = [FILE_FIELD]
    rest = [f for f in fields if f not in taken]
    if rest:
        mapping["metadata_fields"] = rest
    return {
        "id": name,
        "version": "1.0.0",
        "description": "",
        "category": "qa",
        "source": {"kind": kind},
        "mapping": mapping,
    }
