"""A `case-dirs` export tree read back into a registration body: the round trip of an export.

`caseshelf import-tasks --format case-dirs DIR` reads DIR this way when it holds an export's
`manifest.json` (and no `eval.yaml`). The manifest says which file of each case directory is a
file of the case, which was generated from which fields (`role`: `input`, `answers`,
`annotations`, `environment`, `reference`) and which is a shared file (`shared`), so the cases
come back as they were: importing an unchanged export tree gives the exported version's content
digest.

- a case's own files are its `files`, byte for byte; when the case carries its own input file
  (a case-directory import), its fields are read from its files as `caseshelf.services.casedirs`
  reads them, then every generated file present overrides the fields it holds;
- `input.yaml` (role `input`) -> `inputs` (the `prompt` mirror of a string `user` dropped);
  `answers.yaml` -> `inputs.hitl`; `annotations.yaml` -> expectations, graders, metadata, tags;
  `environment.yaml` -> env, image, resources, network, timeout_sec; `reference.md` (derived
  from the ground truth) and the files of `env.source.files` (role `env-file`, also in
  `environment.yaml`) are not read;
- shared files become the version's shared files again (from the first case that carries each);
- the version's description and tags come from the manifest's `dataset`.

Only the files the manifest lists are read; each is read as a regular file inside the tree (a
symlink anywhere on its path is refused, CWE-59), and one whose digest no longer matches the
manifest is read as it is now, with a warning.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from caseshelf.domain.canonical import inline_body
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.export import (
    ANNOTATION_KEYS,
    DEFAULT_TIMEOUT_SEC,
    ENV_KEYS,
    FORMAT,
    INPUT_NAMES,
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    ROLE_ENV_FILE,
    ROLE_SHARED,
    parse_manifest,
)
from caseshelf.domain.models import DATASET_ID_PATTERN, BumpKind
from caseshelf.services.casefiles import case_from_files

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def is_export_tree(path: Path) -> bool:
    """A directory holding an export's manifest and no `eval.yaml` of a case tree."""
    if not path.is_dir() or any((path / n).exists() for n in ("eval.yaml", "eval.yml")):
        return False
    marker = path / MANIFEST_NAME
    if not marker.is_file() or marker.is_symlink():
        return False
    try:
        head = marker.read_bytes()[:4096]
    except OSError:
        return False
    return MANIFEST_FORMAT.encode() in head


def _read_inside(root: Path, rel: str) -> bytes:
    """The bytes of `root/rel`, refusing a symlink at any step (CWE-59)."""
    here = root
    parts = rel.split("/")
    for i, part in enumerate(parts):
        here = here / part
        try:
            st = here.lstat()
        except FileNotFoundError:
            raise BadRequest(
                f"{root}: {rel!r} is in the manifest but not in the tree", path=rel
            ) from None
        if stat.S_ISLNK(st.st_mode):
            raise BadRequest(f"{root}: {rel!r} goes through a symlink", path=rel)
        last = i == len(parts) - 1
        if last and not stat.S_ISREG(st.st_mode):
            raise BadRequest(f"{root}: {rel!r} is not a regular file", path=rel)
        if not last and not stat.S_ISDIR(st.st_mode):
            raise BadRequest(f"{root}: {'/'.join(parts[: i + 1])!r} is not a directory", path=rel)
    fd = os.open(here, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def _yaml(data: bytes, what: str) -> Any:
    try:
        return yaml.load(data.decode("utf-8"), Loader=_Loader)  # noqa: S506 (a safe loader)
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise BadRequest(f"{what} cannot be parsed: {exc}", field=what) from None


def case_from_export(
    case_id: str, files: dict[str, bytes], roles: dict[str, str]
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """(raw case, shared files by dest) of one exported case directory (pure)."""
    where = f"case {case_id!r}"
    own = {p: b for p, b in files.items() if p not in roles}
    shared = {p: b for p, b in files.items() if roles.get(p) == ROLE_SHARED}
    made = {
        roles[p]: files[p] for p in files if roles.get(p) not in (None, ROLE_SHARED, ROLE_ENV_FILE)
    }
    if any(n in own for n in INPUT_NAMES):
        case = case_from_files(case_id, own)
    else:
        case = {"id": case_id}
        if own:
            case["files"] = {path: inline_body(own[path]) for path in sorted(own)}
    if "input" in made:
        inputs = _yaml(made["input"], f"{where}: input.yaml") or {}
        if not isinstance(inputs, dict):
            raise BadRequest(f"{where}: input.yaml is not a mapping", case_id=case_id)
        if "user" in inputs:
            inputs.pop("prompt", None)
        case["inputs"] = inputs
    if "answers" in made:
        doc = _yaml(made["answers"], f"{where}: answers.yaml") or {}
        case.setdefault("inputs", {})["hitl"] = doc.get("answers") or []
    if "annotations" in made:
        doc = _yaml(made["annotations"], f"{where}: annotations.yaml") or {}
        if not isinstance(doc, dict):
            raise BadRequest(f"{where}: annotations.yaml is not a mapping", case_id=case_id)
        for key in ANNOTATION_KEYS:
            case.pop(key, None)
            if key in doc:
                case[key] = doc[key]
    if "environment" in made:
        doc = _yaml(made["environment"], f"{where}: environment.yaml") or {}
        if not isinstance(doc, dict):
            raise BadRequest(f"{where}: environment.yaml is not a mapping", case_id=case_id)
        for key in ENV_KEYS:
            if key in doc and not (key == "timeout_sec" and doc[key] == DEFAULT_TIMEOUT_SEC):
                case[key] = doc[key]
    return case, shared


def export_tree_dataset(
    root: Path,
    *,
    dataset: str | None = None,
    version: str | None = None,
    bump: BumpKind | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """(registration body, warnings) of an export tree."""
    manifest = parse_manifest(_read_inside(root, MANIFEST_NAME))
    doc = manifest.doc
    fmt = doc.get("export_format") or FORMAT
    if fmt != FORMAT:
        raise BadRequest(
            f"{root}: a {fmt!r} export; only a case-dirs export is read back as case directories",
            field="format",
        )
    warnings: list[str] = []
    cases: list[dict[str, Any]] = []
    shared_bodies: dict[str, bytes] = {}
    for case_id, entry in doc.get("cases", {}).items():
        dirname = entry["dir"]
        files: dict[str, bytes] = {}
        roles: dict[str, str] = {}
        for rel in entry.get("files", {}):
            key = f"{dirname}/{rel}"
            data = _read_inside(root, key)
            digest, size = manifest.files[key]
            if len(data) != size or "sha256:" + hashlib.sha256(data).hexdigest() != digest:
                warnings.append(f"{key}: changed since the export; read as it is now")
            files[rel] = data
            if key in manifest.roles:
                roles[rel] = manifest.roles[key]
        case, shared = case_from_export(case_id, files, roles)
        for dest, data in shared.items():
            shared_bodies.setdefault(dest, data)
        cases.append(case)
    if not cases:
        raise BadRequest(f"{root}: the export holds no case", path=str(root))
    meta = doc.get("dataset") or {}
    shared_files = []
    for sf in doc.get("shared_files") or []:
        if sf["dest"] not in shared_bodies:
            warnings.append(f"shared file {sf['dest']!r}: no case carries it; left out")
            continue
        shared_files.append({"dest": sf["dest"], **inline_body(shared_bodies[sf["dest"]])})
    name = dataset or meta.get("id")
    if not isinstance(name, str) or not re.match(DATASET_ID_PATTERN, name):
        name = "export"
    body: dict[str, Any] = {
        "id": name,
        "cases": cases,
        "description": meta.get("description") or "",
        "tags": list(meta.get("tags") or []),
        "produced_by": {
            "source": {
                "kind": "export",
                "export_id": manifest.export_id,
                "content_digest": doc.get("content_digest"),
                "dataset": {k: meta.get(k) for k in ("id", "version")},
            }
        },
    }
    if shared_files:
        body["shared_files"] = shared_files
    if version is not None:
        body["version"] = version
    else:
        body["bump"] = bump or "minor"
    return body, warnings
