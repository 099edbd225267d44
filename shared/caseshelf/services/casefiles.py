"""The raw case of one case directory, from its files (`caseshelf.services.casedirs` reads
case-directory trees with it, `caseshelf.services.export_tree` the case directories of an
export that carry their own input file).

- `input.*`: `prompt` -> `inputs.user`; the envelope's other input keys (`user`, `hitl`,
  `memory_seeds`, `session_id`, `tool_fixtures`) -> `inputs.*`; every other key ->
  `metadata.input_fields`;
- `annotations.yaml` (a mapping) -> `expectations.details`;
- every file, the two above included, is a case file with its exact bytes.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from caseshelf.domain.boundedyaml import load_yaml
from caseshelf.domain.canonical import inline_body
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.strictjson import loads as strict_loads
from caseshelf.services.workspace import INPUT_FILES

INPUT_KEYS = ("user", "hitl", "memory_seeds", "session_id", "tool_fixtures")
ANNOTATIONS_FILE = "annotations.yaml"


def _parse(name: str, data: bytes, where: str) -> Any:
    try:
        text = data.decode("utf-8")
        if name.endswith(".json"):
            return strict_loads(text, where=f"{where}: {name}")
        return load_yaml(text, timestamps=True)
    except (UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
        raise BadRequest(f"{where}: {name} cannot be parsed: {exc}", field=name) from None


def case_from_files(case_id: str, files: dict[str, bytes]) -> dict[str, Any]:
    """The raw case of one case directory, given all of its files (pure)."""
    where = f"case {case_id!r}"
    inputs_name = next((n for n in INPUT_FILES if n in files), None)
    if inputs_name is None:
        raise BadRequest(
            f"{where}: no input file ({' / '.join(INPUT_FILES)})", case_id=case_id, field="input"
        )
    doc = _parse(inputs_name, files[inputs_name], where)
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise BadRequest(f"{where}: {inputs_name} is not a mapping", case_id=case_id)
    inputs: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for key, value in doc.items():
        if key == "prompt":
            if "user" in doc:
                raise BadRequest(
                    f"{where}: {inputs_name} has both prompt and user", case_id=case_id
                )
            inputs["user"] = value
        elif key in INPUT_KEYS:
            inputs[key] = value
        else:
            rest[str(key)] = value
    case: dict[str, Any] = {"id": case_id, "inputs": inputs}
    if ANNOTATIONS_FILE in files:
        notes = _parse(ANNOTATIONS_FILE, files[ANNOTATIONS_FILE], where)
        if notes is not None and not isinstance(notes, dict):
            raise BadRequest(f"{where}: annotations.yaml is not a mapping", case_id=case_id)
        if notes:
            case["expectations"] = {"details": notes}
    if rest:
        case["metadata"] = {"input_fields": rest}
    case["files"] = {path: inline_body(files[path]) for path in sorted(files)}
    return case
