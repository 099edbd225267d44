"""Harbor's registry manifest of a `harbor` export: `dataset.toml`, each task pinned by the
digest Harbor computes for it. Pure: task files as `(path, digest)` pairs in, TOML bytes out.

What Harbor defines, and where (harbor 0.25.0, the version the tests run):

- `harbor/models/dataset/manifest.py`, `DatasetManifest`: `[dataset]` (`name` as `org/name`,
  `version`, `description`, `authors`, `keywords`), `[[tasks]]` (`name` as `org/name`,
  `digest` as `sha256:<hex>`), `[[files]]`, `[metadata]`; `harbor/constants.py`,
  `ORG_NAME_PATTERN`, the form of every name.
- `harbor/publisher/packager.py`, `Packager.compute_content_hash(task_dir)`: a task's digest is
  the sha256 of one line `"<path>\\0<sha256 hex of the file>\\n"` per file, in path order, over
  the files `Packager.collect_files` picks: `task.toml`, `instruction.md`, `README.md` and
  `trajectory.json` at the root, and every file under `environment/`, `tests/`, `solution/`
  and `steps/`, less those a `.harborignore` in `tests/` or `solution/` (and their `steps/*/`
  counterparts) excludes (`harbor/models/task/file_filter.py`, `TaskFileFilter`), less those
  the task's root `.gitignore` matches, or without one `DEFAULT_IGNORES`.

`task_digest` computes exactly that from the files' paths and digests (their sha256 is what
the export already knows of every file). The default ignore patterns are matched here as Git
does; a task that carries its own `.gitignore` or `.harborignore` has its rules read by
`pathspec`, the library Harbor reads them with (`pip install 'caseshelf[harbor]'`).

Names: a task imported from Harbor whose `[task] name` the import kept
(`metadata.harbor_task.name`) keeps it; any other task is `<org>/<case id>` (`harbor_org` of
the dataset id), the case id made a Harbor name where it is not one (other characters as `-`,
and then 12 hex of its sha256 so that two ids never share a name). The export writes that name
into the `[task]` table of every `task.toml` it generates, which is how `harbor sync` and
`harbor publish` find a task of `dataset.toml` in the directory.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Any

import orjson

from caseshelf.extras import require

MANIFEST_NAME = "dataset.toml"
# harbor/constants.py ORG_NAME_PATTERN (and no "..", which every Harbor name validator adds)
NAME_PATTERN = r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$"
_NAME = re.compile(NAME_PATTERN)
_PART = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]*")
_NOT_PART = re.compile(r"[^a-zA-Z0-9._-]+")
# harbor/publisher/packager.py
ROOT_FILES = ("task.toml", "instruction.md", "README.md", "trajectory.json")
TREES = ("environment", "tests", "solution", "steps")
DEFAULT_IGNORES = ("__pycache__/", "*.pyc", ".DS_Store", "*.swp", "*.swo", "*~")
# harbor/models/task/file_filter.py
HARBORIGNORE = ".harborignore"
IGNORE_SCOPES = ("/tests/", "/solution/", "/steps/*/tests/", "/steps/*/solution/")
GITIGNORE = ".gitignore"


# --- names ---------------------------------------------------------------------------------


def is_harbor_name(name: str) -> bool:
    return bool(_NAME.fullmatch(name)) and ".." not in name


def name_part(text: str) -> str:
    """`text` as one part of a Harbor name (`org` or `name`): as it is when it is one, else
    its other characters as `-` and 12 hex of its sha256, so distinct texts stay distinct."""
    if _PART.fullmatch(text) and ".." not in text:
        return text
    slug = re.sub(r"\.{2,}", ".", _NOT_PART.sub("-", text)).strip("-._")[:64] or "case"
    return f"{slug}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:12]}"


def harbor_org(dataset_id: str) -> str:
    """The org of an export's Harbor names: the dataset id (a Harbor name part already, unless
    it holds `..`)."""
    return name_part(dataset_id)


def task_name(case: Mapping[str, Any], org: str) -> str:
    """The Harbor name of a case's task (see the module)."""
    kept = ((case.get("metadata") or {}).get("harbor_task") or {}).get("name")
    if isinstance(kept, str) and is_harbor_name(kept):
        return kept
    return f"{org}/{name_part(case['id'])}"


# --- the digest ----------------------------------------------------------------------------


def task_digest(files: Iterable[tuple[str, str]], rules: Mapping[str, bytes]) -> str:
    """Harbor's digest of a task package (`Packager.compute_content_hash`) from its files:
    `(path in the task, "sha256:<hex>")` each. `rules` holds the bodies of the task's
    `.gitignore` and `.harborignore` files by path (the only bodies the choice of files reads)."""
    digests = dict(files)
    picked = collected_paths(digests, rules)
    outer = hashlib.sha256()
    for path in picked:
        outer.update(f"{path}\0{digests[path].removeprefix('sha256:')}\n".encode())
    return "sha256:" + outer.hexdigest()


def rule_files(paths: Iterable[str]) -> list[str]:
    """The paths among a task's files whose bodies `task_digest` needs."""
    return [p for p in paths if p == GITIGNORE or p.rpartition("/")[2] == HARBORIGNORE]


def collected_paths(paths: Iterable[str], rules: Mapping[str, bytes]) -> list[str]:
    """The files Harbor's `Packager.collect_files` picks of a task, in its (path) order."""
    every = sorted(paths)
    with_rules = bool(rule_files(every))
    excluded = _harborignore(every, rules) if with_rules else _named_harborignore
    picked = [p for p in ROOT_FILES if p in every]
    for path in every:
        top, slash, _ = path.partition("/")
        if slash and top in TREES and not _any_excluded(path, excluded):
            picked.append(path)
    ignored = _gitignore(rules) if GITIGNORE in every else _default_ignored
    return sorted(p for p in picked if not ignored(p))


def _any_excluded(path: str, excluded: Callable[[str, bool], bool]) -> bool:
    """`select_files` from the tree's root: an excluded directory is not entered."""
    parts = path.split("/")
    for depth in range(1, len(parts) + 1):
        if excluded("/".join(parts[:depth]), depth < len(parts)):
            return True
    return False


def _named_harborignore(path: str, is_dir: bool) -> bool:
    return path.rpartition("/")[2] == HARBORIGNORE


def _default_ignored(path: str) -> bool:
    """Whether Git's reading of `DEFAULT_IGNORES` matches `path`: a pattern without a slash
    matches a name at any depth, and what is under a matched directory."""
    parts = path.split("/")
    if "__pycache__" in parts[:-1]:
        return True
    patterns = DEFAULT_IGNORES[1:]
    return any(fnmatchcase(part, pattern) for part in parts for pattern in patterns)


def _gitignore(rules: Mapping[str, bytes]) -> Callable[[str], bool]:
    pathspec = require("pathspec", "a Harbor export of a task with its own .gitignore")
    lines = rules[GITIGNORE].decode("utf-8", "replace").splitlines()
    spec = pathspec.PathSpec.from_lines("gitignore", lines)
    return lambda path: bool(spec.match_file(path))


def _harborignore(paths: list[str], rules: Mapping[str, bytes]) -> Callable[[str, bool], bool]:
    """`TaskFileFilter._matches` over the task's paths (`is_dir` said by the caller)."""
    pathspec = require("pathspec", "a Harbor export of a task with a .harborignore")
    scopes = pathspec.GitIgnoreSpec.from_lines(IGNORE_SCOPES)
    specs: dict[str, Any] = {}

    def spec_for(directory: str) -> Any:
        if directory not in specs:
            body = rules.get(f"{directory}/{HARBORIGNORE}" if directory else HARBORIGNORE)
            lines = body.decode("utf-8", "replace").splitlines() if body is not None else []
            specs[directory] = pathspec.GitIgnoreSpec.from_lines(lines)
        return specs[directory]

    def excluded(path: str, is_dir: bool) -> bool:
        parts = path.split("/")
        if parts[-1] == HARBORIGNORE:
            return True
        if not scopes.match_file(path + ("/" if is_dir else "")):
            return False
        within: list[tuple[str, Any]] = []
        candidate = ""
        for n, part in enumerate(parts):
            if scopes.match_file((candidate or ".") + "/"):
                within.append((candidate, spec_for(candidate)))
            candidate = f"{candidate}/{part}" if candidate else part
            suffix = "/" if n < len(parts) - 1 or is_dir else ""
            if not scopes.match_file(candidate + suffix):
                continue
            hit = False
            for directory, spec in within:
                below = candidate[len(directory) + 1 :] if directory else candidate
                match = spec.check_file(below + suffix)
                if match.include is not None:
                    hit = match.include
            if hit:
                return True
        return False

    return excluded


# --- dataset.toml --------------------------------------------------------------------------


def toml_string(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's; DEL is one TOML wants escaped too)."""
    return orjson.dumps(text).decode("utf-8").replace("\x7f", "\\u007F")


def manifest_head(dataset: Mapping[str, Any]) -> bytes:
    """The `[dataset]` table: `name` `<org>/<org>`, the version label, description and tags."""
    org = harbor_org(str(dataset["id"]))
    lines = ["[dataset]", f"name = {toml_string(f'{org}/{org}')}"]
    if dataset.get("version"):
        lines.append(f"version = {toml_string(str(dataset['version']))}")
    lines.append(f"description = {toml_string(str(dataset.get('description') or ''))}")
    lines.append("authors = []")
    keywords = ", ".join(toml_string(str(t)) for t in dataset.get("tags") or ())
    lines.append(f"keywords = [{keywords}]")
    return ("\n".join(lines) + "\n\n").encode("utf-8")


def manifest_task(name: str, digest: str) -> bytes:
    """One `[[tasks]]` entry."""
    return f"[[tasks]]\nname = {toml_string(name)}\ndigest = {toml_string(digest)}\n\n".encode()


def manifest_tail(
    dataset: Mapping[str, Any],
    *,
    content_digest: str,
    export_id: str,
    case_count: int,
    subset: Mapping[str, Any] | None,
) -> bytes:
    """`[metadata.caseshelf]`: where the tasks come from, to the content digest."""
    lines = [
        "[metadata.caseshelf]",
        f"dataset = {toml_string(str(dataset['id']))}",
    ]
    if dataset.get("version"):
        lines.append(f"version = {toml_string(str(dataset['version']))}")
    lines += [
        f"content_digest = {toml_string(content_digest)}",
        f"export_id = {toml_string(export_id)}",
        f"case_count = {case_count}",
    ]
    if subset is not None:
        stamp = orjson.dumps(subset, option=orjson.OPT_SORT_KEYS).decode()
        lines.append(f"subset = {toml_string(stamp)}")
    return ("\n".join(lines) + "\n").encode("utf-8")


__all__ = [
    "DEFAULT_IGNORES",
    "MANIFEST_NAME",
    "NAME_PATTERN",
    "collected_paths",
    "harbor_org",
    "is_harbor_name",
    "manifest_head",
    "manifest_tail",
    "manifest_task",
    "name_part",
    "rule_files",
    "task_digest",
    "task_name",
]
