"""Case-directory trees (an `eval.yaml` with a `dataset:` block) -> a dataset version.

`cases/<id>/` holds `input.yaml` (else `input.yml`, else `input.json`, the harness's order),
optional `answers.yaml`, `annotations.yaml`, `reference.*` and companion files. The mapping:

- `input.*`: `prompt` -> `inputs.user`; the envelope's other input keys (`user`, `hitl`,
  `memory_seeds`, `session_id`, `tool_fixtures`) -> `inputs.*`; every other key ->
  `metadata.input_fields` (a case has no free-form inputs);
- `annotations.yaml` (a mapping) -> `expectations.details`;
- every file of the case directory, the three above included, is a case file with its exact
  bytes, so an export gives the tree back byte for byte (the export writes a case's own
  `input.yaml`, `answers.yaml`, `annotations.yaml` and `reference.*` instead of generating them);
- `workspace.files`: `{dest, source}` entries become the version's shared files (the source read
  from the project root, never from outside it); per-case string entries are kept in
  `produced_by.source.workspace_files` with the rest of the dataset block.

The case id is the directory name, decoded with `case_id_from_dir` (the export's encoding).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from caseshelf.domain.boundedyaml import load_yaml
from caseshelf.domain.canonical import inline_body
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.models import DATASET_ID_PATTERN, BumpKind
from caseshelf.domain.paths import case_id_from_dir, destination_problem
from caseshelf.services.casefiles import case_from_files
from caseshelf.services.export_tree import export_tree_dataset, is_export_tree
from caseshelf.services.workspace import (
    EvalConfig,
    Roots,
    SharedSpec,
    collect_case_tree,
    load_eval_config,
    walk_regular,
)


@dataclass
class CaseDirDataset:
    body: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


def _read_case_dir(case_dir: Path, config: EvalConfig, warnings: list[str]) -> dict[str, bytes]:
    """Every file of a case directory, by the rules the export and the workspace use
    (`collect_case_tree`): a file symlink is read as its target when the target is allowed and
    skipped with a warning otherwise; directory and nested symlinks are skipped with a warning."""
    return {
        rel: path.read_bytes()
        for rel, path in collect_case_tree(case_dir, config, warn=warnings.append).items()
    }


def _shared_files(config: EvalConfig, warnings: list[str]) -> list[dict[str, str]]:
    """`{dest, source}` entries read into shared files; a source outside the project (or a
    plugin dir), missing or dangling is skipped with a warning, as at materialization."""
    roots = Roots.of(config)
    out: list[dict[str, str]] = []
    for spec in config.files:
        if not isinstance(spec, SharedSpec):
            continue
        what = f"workspace.files {{dest: {spec.dest!r}}}"
        problem = destination_problem(spec.dest)
        if problem:
            warnings.append(f"{what}: skipped: dest {problem}")
            continue
        src = Path(spec.source)
        src = src if src.is_absolute() else config.project_root / src
        try:
            real = src.resolve(strict=True)
        except (OSError, RuntimeError):
            warnings.append(f"{what}: skipped: source {spec.source!r} is missing or dangling")
            continue
        if not roots.source_allowed(real):
            warnings.append(f"{what}: skipped: source {spec.source!r} is outside the project")
            continue
        if real.is_dir():
            for rel, path in walk_regular(real, "", warnings.append, what):
                out.append({"dest": f"{spec.dest}/{rel}", **inline_body(path.read_bytes())})
        else:
            out.append({"dest": spec.dest, **inline_body(real.read_bytes())})
    return out


def find_eval_yaml(path: Path) -> Path:
    if path.is_dir():
        for name in ("eval.yaml", "eval.yml"):
            if (path / name).is_file():
                return path / name
        raise BadRequest(f"{path}: no eval.yaml in this directory", path=str(path))
    if path.is_file():
        return path
    raise BadRequest(f"{path}: no such file or directory", path=str(path))


def build_case_dir_dataset(
    path: str | Path,
    *,
    dataset: str | None = None,
    version: str | None = None,
    bump: BumpKind | None = None,
    project_root: Path | None = None,
) -> CaseDirDataset:
    """The registration body of an `eval.yaml` (or its directory) and its case directories;
    a directory holding a case-dirs export is read back as the export's version
    (`caseshelf.services.export_tree`)."""
    if is_export_tree(Path(path)):
        read = export_tree_dataset(Path(path), dataset=dataset, version=version, bump=bump)
        return CaseDirDataset(*read)
    eval_path = find_eval_yaml(Path(path))
    config = load_eval_config(eval_path, project_root=project_root)
    raw = load_yaml(eval_path.read_text(encoding="utf-8"), timestamps=True) or {}
    block = raw.get("dataset") or {}
    warnings: list[str] = []
    if not config.dataset_dir.is_dir():
        raise BadRequest(
            f"{eval_path}: dataset.path {str(block.get('path') or '')!r} is not a directory",
            field="dataset.path",
        )
    cases = []
    for child in sorted(config.dataset_dir.iterdir()):
        if child.is_symlink():
            warnings.append(f"{child.name}: skipped: a case directory may not be a symlink")
            continue
        if not child.is_dir():
            continue
        files = _read_case_dir(child, config, warnings)
        cases.append(case_from_files(case_id_from_dir(child.name), files))
    if not cases:
        raise BadRequest(f"{config.dataset_dir}: no case directories", field="dataset.path")

    source: dict[str, Any] = {"kind": "case-dirs", "eval": eval_path.name}
    for key in ("path", "schema"):
        if block.get(key):
            source[key] = block[key]
    per_case = [e for e in config.files if isinstance(e, str)]
    if per_case:
        source["workspace_files"] = per_case
    shared = [e for e in config.files if isinstance(e, SharedSpec)]
    if shared:
        source["shared_sources"] = [{"dest": s.dest, "source": s.source} for s in shared]
    body: dict[str, Any] = {
        "id": dataset or _dataset_id(raw.get("name"), eval_path),
        "cases": cases,
        "produced_by": {"source": source},
    }
    if isinstance(raw.get("description"), str):
        body["description"] = raw["description"].strip()
    shared_files = _shared_files(config, warnings)
    if shared_files:
        body["shared_files"] = shared_files
    if version is not None:
        body["version"] = version
    else:
        body["bump"] = bump or "minor"
    return CaseDirDataset(body, warnings)


def _dataset_id(name: Any, eval_path: Path) -> str:
    for candidate in (name, eval_path.resolve().parent.name):
        if isinstance(candidate, str) and re.match(DATASET_ID_PATTERN, candidate):
            return candidate
    return "case-dirs"
