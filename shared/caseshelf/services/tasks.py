"""Read container-task trees (a directory, one task, a .tar.gz/.zip, an S3 prefix) and register
them as a dataset version.

Every reader returns a `Tree` (relative POSIX path -> bytes, plus executable bits) held in memory;
nothing is extracted to disk. Archives are checked entry by entry before any of their content is
used: no absolute path, no `..`, no link leaving the tree (CWE-22, CWE-59), no device or fifo,
and limits on the number of entries and on the total uncompressed size (a zip bomb is refused
from its declared sizes and again from the bytes actually inflated).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import posixpath
import re
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol, cast

from pydantic import Field, model_validator

from caseshelf.domain import layout
from caseshelf.domain.errors import BadRequest, Forbidden, NotFound, TooLarge
from caseshelf.domain.identity import Identity
from caseshelf.domain.models import DATASET_ID_PATTERN, BumpKind, DatasetId, Label, Strict
from caseshelf.domain.paths import relative_path_problem
from caseshelf.domain.strictjson import loads as strict_loads
from caseshelf.domain.tasks import (
    HARBOR,
    HARBOR_MARKER,
    TB_MARKER,
    TERMINAL_BENCH,
    Skipped,
    TaskSource,
    harbor_case,
    harbor_catalog,
    task_keys,
    terminal_bench_case,
)
from caseshelf.ports import BlobStore
from caseshelf.services.archives import Budget as _Budget
from caseshelf.services.archives import (
    Extracted,
    Limits,
    Member,
    Tree,
    extract,
    iter_members,
    read_tar,
    read_zip,
)
from caseshelf.services.archives import clean_member as _clean_member
from caseshelf.services.casedirs import build_case_dir_dataset
from caseshelf.services.objectio import open_object
from caseshelf.services.staging import ensure_room, staged_bytes
from caseshelf.services.workspace import load_eval_config, project_root_of

FORMATS = (TERMINAL_BENCH, HARBOR)
CASE_DIRS = "case-dirs"
MARKERS = {TERMINAL_BENCH: TB_MARKER, HARBOR: HARBOR_MARKER}


def walk_tree(
    root: Path, on_entry: Callable[[], None] = lambda: None
) -> Iterator[tuple[str, Path]]:
    """(path relative to `root`, file to read) of every file under the resolved `root`, in
    sorted order: a file symlink is followed when it resolves to a file inside `root` and
    refused otherwise (CWE-59); directory symlinks are refused. `on_entry` is called for each
    file before its checks. The caller still checks that what it opens is a regular file."""
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        for d in list(dirnames):
            if (base / d).is_symlink():
                rel = (base / d).relative_to(root).as_posix()
                raise BadRequest(f"{root}: {rel} is a directory symlink; not followed", path=rel)
        dirnames.sort()
        for fname in sorted(filenames):
            full = base / fname
            rel = full.relative_to(root).as_posix()
            on_entry()
            problem = relative_path_problem(rel)
            if problem:
                raise BadRequest(f"{root}: {rel!r} {problem}", path=rel)
            if full.is_symlink():
                target = full.resolve()
                if not target.is_relative_to(root) or not target.is_file():
                    raise BadRequest(
                        f"{root}: {rel} links outside the tree (or to no file); not followed",
                        path=rel,
                    )
                full = target
            yield rel, full


def read_directory(root: Path, limits: Limits = Limits()) -> Tree:
    """Every regular file under `root`, by the rules of `walk_tree`."""
    root = root.resolve()
    tree = Tree(root.name)
    budget = _Budget(limits, str(root))
    for rel, full in walk_tree(root, budget.entry):
        st = full.stat()
        if not stat.S_ISREG(st.st_mode):
            raise BadRequest(f"{root}: {rel} is not a regular file", path=rel)
        budget.size(st.st_size)
        tree.files[rel] = full.read_bytes()
        tree.modes[rel] = st.st_mode & 0o777
    return tree


ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz", ".zip")


def archive_kind(name: str, head: bytes = b"") -> str | None:
    lower = name.lower()
    if lower.endswith(".zip") or head.startswith(b"PK\x03\x04"):
        return "zip"
    if any(lower.endswith(s) for s in ARCHIVE_SUFFIXES) or head.startswith(b"\x1f\x8b"):
        return "tar"
    return None


def read_archive_bytes(data: bytes, name: str, limits: Limits = Limits()) -> Tree:
    kind = archive_kind(name, data[:4])
    if kind == "zip":
        return read_zip(io.BytesIO(data), name, limits)
    if kind == "tar":
        return read_tar(io.BytesIO(data), name, limits)
    raise BadRequest(f"{name}: not a .tar.gz or .zip archive", field="archive")


def _archive_stem(name: str) -> str:
    base = posixpath.basename(name)
    for suffix in ARCHIVE_SUFFIXES:
        if base.lower().endswith(suffix):
            return base[: -len(suffix)]
    return base


def read_path(path: str | Path, limits: Limits = Limits()) -> Tree:
    """A local directory (or single task directory) or a local archive."""
    p = Path(path)
    if p.is_dir():
        return read_directory(p, limits)
    if p.is_file():
        kind = archive_kind(p.name, p.open("rb").read(4))
        if kind is None:
            raise BadRequest(f"{p}: not a directory, .tar.gz or .zip", path=str(p))
        with p.open("rb") as fh:
            tree = read_zip(fh, p.name, limits) if kind == "zip" else read_tar(fh, p.name, limits)
        tree.name = _archive_stem(p.name)
        return tree
    raise BadRequest(f"{p}: no such file or directory", path=str(p))


def parse_s3_url(url: str) -> tuple[str, str]:
    if not url.startswith("s3://"):
        raise BadRequest(f"{url!r} is not an s3:// URL", field="s3")
    bucket, _, prefix = url[5:].partition("/")
    if not bucket:
        raise BadRequest(f"{url!r} names no bucket", field="s3")
    return bucket, prefix


# --- tasks in a tree ------------------------------------------------------------------------------


def _other_format(paths: Iterable[str], marker: str) -> str:
    """A hint when the tree holds the tasks of the other format: the `--format` that reads it."""
    names = {posixpath.basename(p) for p in paths}
    for fmt, other in MARKERS.items():
        if other != marker and other in names:
            return f"; it holds {other} files: import it with --format {fmt} (`format: {fmt}`)"
    return ""


@dataclass(frozen=True)
class TaskPlace:
    """Where one task directory sits in a tree: its root (`""` for the tree itself), its name,
    its case key (`task_keys`) and the tree paths of its files, sorted."""

    root: str
    name: str
    key: str
    paths: tuple[str, ...]

    @property
    def location(self) -> str:
        return self.root or self.name


def place_tasks(name: str, paths: Iterable[str], marker: str) -> list[TaskPlace]:
    """The task directories of a tree of `paths` (each holds `marker`; a task inside a task is
    part of the outer one), in path order. The tree itself is a task when `marker` is at its
    root. Only paths are read: a tree on disk is placed before any of its files is."""
    paths = list(paths)
    found = {posixpath.dirname(p) for p in paths if posixpath.basename(p) == marker}
    if "" in found:
        roots = {""}
    else:
        roots = set()
        for r in found:
            parent = posixpath.dirname(r)
            while parent and parent not in found:
                parent = posixpath.dirname(parent)
            if not parent:
                roots.add(r)
    if not roots:
        raise BadRequest(
            f"{name}: no task found (no {marker} in the tree){_other_format(paths, marker)}",
            field="path",
        )
    by_root: dict[str, list[str]] = {r: [] for r in roots}
    for path in paths:
        parent = posixpath.dirname(path)
        while True:
            if parent in by_root:
                by_root[parent].append(path)
                break
            if not parent:
                break
            parent = posixpath.dirname(parent)
    roots_sorted = sorted(by_root)
    keys = task_keys([r for r in roots_sorted if r])
    return [
        TaskPlace(
            root,
            posixpath.basename(root) if root else name,
            keys.get(root, ""),
            tuple(sorted(by_root[root])),
        )
        for root in roots_sorted
    ]


def task_source(
    place: TaskPlace, read: Callable[[str], bytes], modes: Mapping[str, int]
) -> TaskSource:
    """The files of one placed task, read now (`read(tree path)`), by their path in the task."""
    cut = len(place.root) + 1 if place.root else 0
    return TaskSource(
        name=place.name,
        files={p[cut:]: read(p) for p in place.paths},
        modes={p[cut:]: modes.get(p, 0o644) for p in place.paths},
        location=place.location,
        key=place.key,
    )


def split_tasks(tree: Tree, marker: str) -> list[TaskSource]:
    """The task directories of a tree held in memory (`place_tasks`), with their files."""
    return [
        task_source(place, tree.files.__getitem__, tree.modes)
        for place in place_tasks(tree.name, tree.files, marker)
    ]


def registry_files(name: str, paths: Iterable[str], places: list[TaskPlace]) -> list[str]:
    """Every Harbor `registry.json` of the tree outside the task directories, wherever it sits
    (the root first, then by path): a registry sits beside the tasks it lists, not always at the
    top of the tree given."""
    roots = [t.location for t in places if t.location != name or len(places) > 1]
    found = []
    for path in paths:
        if posixpath.basename(path) != "registry.json":
            continue
        if any(path.startswith(f"{r}/") for r in roots if r):
            continue
        found.append(path)
    return sorted(found, key=lambda p: (p.count("/"), p))


# A failed import lists this many invalid tasks, then counts the rest.
LISTED_FAILURES = 20


def invalid_tasks_message(skipped: list[Skipped], total: int) -> str:
    """Every invalid task's reason (the first `LISTED_FAILURES`, then a count), one a line, and
    what to do next."""
    n = len(skipped)
    lines = [s.reason for s in skipped[:LISTED_FAILURES]]
    if n > LISTED_FAILURES:
        lines.append(f"… and {n - LISTED_FAILURES} more (every one is in `errors`)")
    head = f"{n} of {total} tasks are invalid" if n > 1 else "a task is invalid"
    if n < total:
        then = (
            "fix them, or import the others with --skip-invalid (`skip_invalid: true`): the "
            "tasks left out are stamped in the version"
        )
    else:
        then = "fix them: no task is valid, so --skip-invalid would leave nothing to import"
    return f"{head}:\n  " + "\n  ".join(lines) + f"\n{then}"


def _check_distinct_ids(places: list[TaskPlace], id_prefix: str) -> None:
    seen: dict[str, str] = {}
    for task in places:
        cid = f"{id_prefix}{task.key or task.name}"
        if cid in seen:
            raise BadRequest(
                f"tasks {seen[cid]!r} and {task.location!r} both map to case id {cid!r}",
                case_ids=[cid],
            )
        seen[cid] = task.location


@dataclass
class TaskDataset:
    """The registration body built from a tree and the tasks left out (with `skip_invalid`)."""

    body: dict[str, Any]
    skipped: list[Skipped]


def _default_dataset_id(name: str, fmt: str) -> str:
    return name if re.match(DATASET_ID_PATTERN, name) else fmt


@dataclass
class TaskPlan:
    """How the tasks of a tree become cases: where each task is, the mapper, and what the
    tree says of the dataset (Harbor's `dataset.toml` and `registry.json`). Built from the
    tree's paths and a reader of its few dataset-wide files, so a tree on disk is planned
    before any task's files are read."""

    name: str
    fmt: str
    places: list[TaskPlace]
    mapper: Callable[[TaskSource], dict[str, Any]]
    facts: dict[str, Any]


def plan_tasks(
    name: str,
    paths: Iterable[str],
    read: Callable[[str], bytes],
    fmt: str,
    *,
    image_template: str | None = None,
    id_prefix: str = "",
) -> TaskPlan:
    if fmt not in MARKERS:
        raise BadRequest(f"unknown task format {fmt!r}; use one of {list(FORMATS)}", field="format")
    paths = list(paths)
    places = place_tasks(name, paths, MARKERS[fmt])
    _check_distinct_ids(places, id_prefix)
    catalog: dict[str, Any] = {}
    facts: dict[str, Any] = {}
    if fmt == HARBOR:
        toml = read("dataset.toml") if "dataset.toml" in paths else None
        catalog, facts = harbor_catalog(None, toml.decode("utf-8") if toml else None)
        for path in registry_files(name, paths, places):
            reg_doc = strict_loads(read(path), where=path)  # a repeated key is refused
            listed, listed_facts = harbor_catalog(reg_doc, None)
            for entry_name, entry in listed.items():
                catalog.setdefault(entry_name, {}).update(entry)
            for key, value in listed_facts.items():
                facts.setdefault(key, value)

    mapper: Callable[[TaskSource], dict[str, Any]]
    if fmt == TERMINAL_BENCH:

        def mapper(t: TaskSource) -> dict[str, Any]:
            return terminal_bench_case(t, image_template=image_template, id_prefix=id_prefix)
    else:

        def mapper(t: TaskSource) -> dict[str, Any]:
            return harbor_case(
                t, image_template=image_template, id_prefix=id_prefix, catalog=catalog
            )

    return TaskPlan(name, fmt, places, mapper, facts)


def check_mapped(
    failures: list[tuple[str, BadRequest]], total: int, valid: int, name: str, skip_invalid: bool
) -> list[Skipped]:
    """The tasks left out; an invalid task fails the import (every failure listed) unless
    `skip_invalid`, and so does a tree with no valid task."""
    skipped = [Skipped(task=tid, reason=exc.detail) for tid, exc in failures]
    if failures and not skip_invalid:
        raise BadRequest(
            invalid_tasks_message(skipped, total),
            case_ids=[tid for tid, _ in failures],
            field=failures[0][1].fields.get("field"),
            errors=[s.reason for s in skipped],
        )
    if not valid:
        raise BadRequest(f"{name}: no valid task to import", case_ids=[s.task for s in skipped])
    return skipped


def dataset_head(
    plan: TaskPlan,
    skipped: list[Skipped],
    *,
    image_template: str | None = None,
    skip_invalid: bool = False,
    dataset: str | None = None,
    version: str | None = None,
    bump: BumpKind | None = None,
    id_prefix: str = "",
    origin: str | None = None,
) -> dict[str, Any]:
    """The registration body of a planned tree without its cases: id, version or bump,
    description and `produced_by` (the source, and with `skip_invalid` the tasks left out)."""
    facts = plan.facts
    source: dict[str, Any] = {
        "kind": plan.fmt,
        "origin": origin or plan.name,
        "tasks": len(plan.places),
    }
    if image_template:
        source["image_template"] = image_template
    if id_prefix:
        source["id_prefix"] = id_prefix
    source.update({k: v for k, v in facts.items() if k in {"git_url", "name", "version"}})
    produced_by: dict[str, Any] = {"source": source}
    if skip_invalid:
        produced_by["skip_invalid"] = True
        produced_by["skipped"] = [{"task": s.task, "reason": s.reason} for s in skipped]

    body: dict[str, Any] = {
        "id": dataset
        or (facts.get("name") if isinstance(facts.get("name"), str) else None)
        or _default_dataset_id(plan.name, plan.fmt),
        "produced_by": produced_by,
    }
    if "/" in body["id"]:
        body["id"] = body["id"].replace("/", "-")
    if version is not None:
        body["version"] = version
    elif bump is not None:
        body["bump"] = bump
    elif isinstance(facts.get("version"), str):
        body["version"] = facts["version"]
    else:
        body["bump"] = "minor"
    if isinstance(facts.get("description"), str):
        body["description"] = facts["description"]
    return body


def build_task_dataset(
    tree: Tree,
    fmt: str,
    *,
    image_template: str | None = None,
    skip_invalid: bool = False,
    dataset: str | None = None,
    version: str | None = None,
    bump: BumpKind | None = None,
    id_prefix: str = "",
    origin: str | None = None,
) -> TaskDataset:
    """Map every task of a tree held in memory to a case. An invalid task fails the whole
    import with every failure listed, unless `skip_invalid`: then each is reported and the
    skip is stamped in `produced_by`."""
    plan = plan_tasks(
        tree.name,
        tree.files,
        tree.files.__getitem__,
        fmt,
        image_template=image_template,
        id_prefix=id_prefix,
    )
    cases: list[dict[str, Any]] = []
    failures: list[tuple[str, BadRequest]] = []
    for place in plan.places:
        try:
            cases.append(plan.mapper(task_source(place, tree.files.__getitem__, tree.modes)))
        except BadRequest as exc:
            failures.append((f"{id_prefix}{place.key or place.name}", exc))
    skipped = check_mapped(failures, len(plan.places), len(cases), tree.name, skip_invalid)
    body = dataset_head(
        plan,
        skipped,
        image_template=image_template,
        skip_invalid=skip_invalid,
        dataset=dataset,
        version=version,
        bump=bump,
        id_prefix=id_prefix,
        origin=origin,
    )
    body["cases"] = cases
    return TaskDataset(body, skipped)


class Registry(Protocol):
    def register(self, identity: Identity, body: Any) -> Any: ...

    def register_stream(self, identity: Identity, head: Any, cases: Iterable[Any]) -> Any: ...


def import_task_tree(
    registry: Registry,
    identity: Identity,
    tree: Tree,
    fmt: str,
    **options: Any,
) -> tuple[Any, list[Skipped]]:
    """Build the dataset of a tree and register it; (register result, skipped tasks)."""
    from caseshelf.services.registry import parse_dataset  # lazy: ~35 ms; CLI packing skips

    built = build_task_dataset(tree, fmt, **options)
    return registry.register(identity, parse_dataset(built.body)), built.skipped


# --- a tree on disk, a task at a time ----------------------------------------------------------

# The cases handed to the registry at once: a batch ends at this many, or past these bytes of
# task files (a case holds its files inline until the registry stores them).
STREAM_BATCH_CASES = 64
STREAM_BATCH_BYTES = 8 << 20


@dataclass
class TaskProgress:
    """How far a task import is: the tasks found, those read and checked (the first pass over
    the tree), and those mapped into the version (the second)."""

    total: int = 0
    read: int = 0
    mapped: int = 0


@dataclass(frozen=True)
class TaskOptions:
    image_template: str | None = None
    skip_invalid: bool = False
    id_prefix: str = ""
    dataset: str | None = None
    version: str | None = None
    bump: BumpKind | None = None


def _placed_cases(
    plan: TaskPlan, tree: Extracted, places: list[TaskPlace], progress: TaskProgress
) -> Iterator[list[dict[str, Any]]]:
    """The cases of `places`, mapped again from the files on disk, in batches
    (`STREAM_BATCH_CASES`, `STREAM_BATCH_BYTES`)."""
    batch: list[dict[str, Any]] = []
    held = 0
    for place in places:
        task = task_source(place, tree.read, tree.modes)
        held += sum(len(b) for b in task.files.values())
        batch.append(plan.mapper(task))
        progress.mapped += 1
        if len(batch) >= STREAM_BATCH_CASES or held >= STREAM_BATCH_BYTES:
            yield batch
            batch, held = [], 0
    if batch:
        yield batch


def register_extracted(
    registry: Registry,
    identity: Identity,
    tree: Extracted,
    fmt: str,
    options: TaskOptions,
    *,
    origin: str,
    via: str | None = None,
    upload: Mapping[str, Any] | None = None,
    progress: TaskProgress | None = None,
) -> TaskImportResult:
    """Register the tasks of a tree written out on disk (`caseshelf.services.archives.extract`)
    one task at a time: memory holds the task being mapped and a batch of cases, never the
    tree. A first pass maps every task to find the invalid ones (the version's head says which
    were left out, and an invalid task fails the import before anything is written); the
    second maps the valid ones again and streams them into the registry in path order, so the
    version is the one the same tree held in memory registers. `via` (how it came) and `upload`
    (the uploaded file's name and digest) are stamped in `produced_by`."""
    from caseshelf.services.registry import parse_head  # lazy: ~35 ms; CLI packing skips

    progress = progress if progress is not None else TaskProgress()
    plan = plan_tasks(
        tree.name,
        tree.modes,
        tree.read,
        fmt,
        image_template=options.image_template,
        id_prefix=options.id_prefix,
    )
    progress.total = len(plan.places)
    failures: list[tuple[str, BadRequest]] = []
    valid: list[TaskPlace] = []
    for place in plan.places:
        try:
            plan.mapper(task_source(place, tree.read, tree.modes))
            valid.append(place)
        except BadRequest as exc:
            failures.append((f"{options.id_prefix}{place.key or place.name}", exc))
        progress.read += 1
    skipped = check_mapped(failures, len(plan.places), len(valid), tree.name, options.skip_invalid)
    head = dataset_head(plan, skipped, origin=origin, **asdict(options))
    if via:
        head["produced_by"]["via"] = via
    if upload is not None:
        head["produced_by"]["source"]["upload"] = dict(upload)
    res = registry.register_stream(
        identity, parse_head(head), _placed_cases(plan, tree, valid, progress)
    )
    return TaskImportResult(res.record, res.created, skipped, len(valid))


# --- the use case behind POST /datasets/terminal-bench|harbor and `import-tasks` -------------


class TaskImportRequest(Strict):
    """Where the tasks are and how to map them. Exactly one of `upload_id` (an archive put
    under the tenant's `uploads/<upload_id>/`), `s3` (an `s3://bucket/prefix/` of task
    directories, or one archive object) or `archive_base64` (a small `.tar.gz`/`.zip` inline)."""

    upload_id: str | None = Field(default=None, pattern=r"^[0-9a-f]{32}$")
    s3: str | None = Field(default=None, pattern=r"^s3://[^/]+(/.*)?$")
    archive_base64: str | None = None
    filename: str = Field(default="tasks.tar.gz", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    image_template: str | None = Field(default=None, min_length=1, max_length=512)
    skip_invalid: bool = False
    id_prefix: str = Field(default="", max_length=64, pattern=r"^[A-Za-z0-9._-]*$")
    dataset: DatasetId | None = None
    version: Label | None = None
    bump: BumpKind | None = None

    @model_validator(mode="after")
    def _one_source(self) -> TaskImportRequest:
        given = [k for k in ("upload_id", "s3", "archive_base64") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("give exactly one of upload_id, s3, archive_base64")
        if self.version is not None and self.bump is not None:
            raise ValueError("give either version or bump, not both")
        return self


@dataclass(frozen=True)
class TaskImportResult:
    record: Any  # the committed VersionRecord
    created: bool
    skipped: list[Skipped]
    case_count: int
    warnings: list[str] = field(default_factory=list)


_EVAL_NAMES = ("eval.yaml", "eval.yml")
_DIR_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _top_eval(path: str) -> bool:
    """An `eval.yaml` at the top of an archive, in its one top directory, or in the harness's
    `eval/<name>/` layout under either."""
    parts = path.split("/")
    if parts[-1] not in _EVAL_NAMES:
        return False
    if len(parts) <= 2:
        return True
    return len(parts) in (3, 4) and parts[-3] == "eval"


def _inside(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root)


def case_dirs_from_tree(
    tree: Tree,
    *,
    dataset: str | None = None,
    version: str | None = None,
    bump: BumpKind | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """(registration body, warnings) of an archived case-directory tree: its `eval.yaml` at
    the root or in one top directory (or under `eval/<name>/` there, the harness's layout, whose
    project root is the directory above `eval/`). The tree (its entries already checked as it
    was read, links already copies) is written to a private temporary directory and read like a
    local one; `dataset.path` and `runner.plugin_dirs` must stay inside it, so an archive never
    reads the server's own files."""
    evals = sorted(p for p in tree.files if _top_eval(p))
    if not evals:
        raise BadRequest(f"{tree.name}: no eval.yaml at the top of the archive", field="archive")
    if len(evals) > 1:
        raise BadRequest(f"{tree.name}: several eval.yaml files: {evals}", field="archive")
    top = tree.name if _DIR_NAME.match(tree.name) else CASE_DIRS
    _check_room_for(tree)
    with tempfile.TemporaryDirectory(prefix="caseshelf-case-dirs-") as tmp:
        base = (Path(tmp) / top).resolve()
        for rel, data in tree.files.items():
            dest = base / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if rel in tree.links:
                # A link stays a link (to its in-tree target), so that the case reader applies
                # the same symlink rule as to a directory on disk.
                dest.symlink_to(os.path.relpath(base / tree.links[rel], dest.parent))
            else:
                dest.write_bytes(data)
        eval_path = base / evals[0]
        root = project_root_of(eval_path)
        if not _inside(root, base):
            root = eval_path.parent
        config = load_eval_config(eval_path, project_root=root)
        if not _inside(config.dataset_dir, base):
            raise BadRequest(
                f"{tree.name}: dataset.path points outside the archive", field="dataset.path"
            )
        for plugin in config.plugin_dirs:
            if not _inside(plugin, base):
                raise BadRequest(
                    f"{tree.name}: runner.plugin_dirs entry {plugin.name!r} points outside the "
                    "archive",
                    field="runner.plugin_dirs",
                )
        built = build_case_dir_dataset(
            eval_path, dataset=dataset, version=version, bump=bump, project_root=root
        )
    return built.body, built.warnings


def _check_room_for(tree: Tree) -> None:
    """`StorageFull` (507) before `case_dirs_from_tree` writes the tree out, when the temporary
    directory's disk (a Lambda function's /tmp: its EphemeralStorage) cannot hold it."""
    parents = {posixpath.dirname(rel) for rel in tree.files}
    needed = staged_bytes([len(data) for data in tree.files.values()], len(parents) + 2)
    ensure_room(
        Path(tempfile.gettempdir()),
        needed,
        what=f"{tree.name}: the case-directory archive, written out to be read",
        around="register it on the embedded store (`caseshelf import-tasks PATH --format "
        "case-dirs`), then `caseshelf download ID@REF -o FILE` and `caseshelf register FILE "
        "--api URL` (a document upload is read in ranges, not written to disk); or give the "
        "importer function more EphemeralStorage (infra/template.yaml)",
    )


DIGEST_CHUNK = 8 << 20


def object_digest(store: BlobStore, key: str) -> dict[str, Any]:
    """`{sha256, size}` of a stored object, read in ranges so that a large upload is never held
    whole: what provenance records of an uploaded file, whose storage key is the server's."""
    info = store.head(key)
    if info is None:
        raise NotFound(f"no object {key}", key=key)
    h = hashlib.sha256()
    for offset in range(0, info.size, DIGEST_CHUNK):
        h.update(store.get_range(key, offset, min(DIGEST_CHUNK, info.size - offset)))
    return {"sha256": "sha256:" + h.hexdigest(), "size": info.size}


@dataclass(frozen=True)
class TaskSourceRef:
    """Where a task import reads, checked: one archive object (`key`, its file name `name`) or
    the task directories under `prefix`, in the registry's store (`bucket` None) or in another
    bucket; `origin` is what the version's `produced_by` names."""

    origin: str
    name: str
    bucket: str | None = None
    key: str | None = None
    prefix: str | None = None

    def plain(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def extract_prefix(
    store: BlobStore, prefix: str, where: str, dest: Path, limits: Limits = Limits()
) -> Extracted:
    """Every object under `prefix` written out under `dest`, an object at a time (keys
    relative to the prefix, checked as archive members are)."""
    tree = Extracted(posixpath.basename(prefix.rstrip("/")) or "tasks", dest)
    budget = _Budget(limits, where)
    keys: list[tuple[str, str, int]] = []
    for obj in store.list(prefix):
        if obj.key.endswith("/"):
            continue
        budget.entry()
        budget.member(obj.key[len(prefix) :], obj.size)
        budget.size(obj.size)
        rel = _clean_member(obj.key[len(prefix) :], where)
        if rel is not None:
            keys.append((obj.key, rel, obj.size))
    if not keys:
        raise BadRequest(f"{where}: no objects under this prefix", field="s3")
    for key, rel, size in keys:
        with open_object(store, key) as fh:
            member = Member(rel, 0o644, size, handle=fh)
            extracted = extract(iter([member]), where, dest)
        tree.modes.update(extracted.modes)
    return tree


class TaskImportService:
    def __init__(
        self,
        registry: Registry,
        store: BlobStore,
        *,
        own_bucket: str | None = None,
        store_for_bucket: Callable[[str], BlobStore] | None = None,
        limits: Limits = Limits(),
    ) -> None:
        self.registry = registry
        self.store = store
        self.own_bucket = own_bucket
        self.store_for_bucket = store_for_bucket
        self.limits = limits

    def locate(self, identity: Identity, req: TaskImportRequest, inline_key: str) -> TaskSourceRef:
        """Check where a request's tasks are, before any work: an inline archive is decoded and
        written to `inline_key` (the job's own object), an upload must be there and within the
        limit, an S3 place must be the caller's (or a bucket the deployment lists)."""
        tenant = identity.check_can_write()
        if req.archive_base64 is not None:
            try:
                data = base64.b64decode(req.archive_base64, validate=True)
            except (binascii.Error, ValueError):
                raise BadRequest(
                    "archive_base64 is not valid base64", field="archive_base64"
                ) from None
            if archive_kind(req.filename, data[:4]) is None:
                raise BadRequest(f"{req.filename}: not a .tar.gz or .zip archive", field="archive")
            self.store.put(inline_key, data)
            return TaskSourceRef(f"inline:{req.filename}", req.filename, key=inline_key)
        if req.upload_id is not None:
            prefix = f"{layout.root(tenant)}uploads/{req.upload_id}/"
            objects = [o for o in self.store.list(prefix) if not o.key.endswith("/")]
            if not objects:
                raise NotFound(f"no upload {req.upload_id!r}", id=req.upload_id)
            if len(objects) > 1:
                raise BadRequest(f"upload {req.upload_id!r} holds several files", field="upload_id")
            obj = objects[0]
            if obj.size > self.limits.max_total_bytes:
                raise TooLarge(f"upload {req.upload_id!r} is {obj.size} bytes", field="size")
            name = posixpath.basename(obj.key)
            return TaskSourceRef(f"upload:{req.upload_id}", name, key=obj.key)
        assert req.s3 is not None
        bucket, prefix = parse_s3_url(req.s3)
        if prefix and relative_path_problem(prefix.rstrip("/")):
            raise BadRequest(f"{req.s3}: the prefix is not a safe path", field="s3")
        if bucket == self.own_bucket:
            # The registry's own bucket: only the caller's tenant tree, never another's.
            root = layout.root(tenant)
            if not prefix.startswith(root):
                raise Forbidden(f"{req.s3}: outside your tenant's prefix {root}", field="s3")
            store, where = self.store, None
        else:
            if self.store_for_bucket is None:
                raise BadRequest("reading another bucket is not available here", field="s3")
            store, where = self.store_for_bucket(bucket), bucket
        exact = store.head(prefix) if prefix and not prefix.endswith("/") else None
        if exact is not None and archive_kind(prefix) is not None:
            if exact.size > self.limits.max_total_bytes:
                raise TooLarge(f"{req.s3}: {exact.size} bytes is over the limit", field="size")
            return TaskSourceRef(req.s3, posixpath.basename(prefix), bucket=where, key=prefix)
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        name = posixpath.basename(prefix.rstrip("/")) or "tasks"
        return TaskSourceRef(req.s3, name, bucket=where, prefix=prefix)

    def _store_of(self, ref: TaskSourceRef) -> BlobStore:
        if ref.bucket is None:
            return self.store
        assert self.store_for_bucket is not None
        return self.store_for_bucket(ref.bucket)

    def _extract(self, ref: TaskSourceRef, dest: Path) -> Extracted:
        """The source written out under `dest`, a member (or an object) at a time."""
        store = self._store_of(ref)
        if ref.key is None:
            assert ref.prefix is not None
            return extract_prefix(store, ref.prefix, ref.origin, dest, self.limits)
        with open_object(store, ref.key) as fh:
            kind = archive_kind(ref.name, fh.peek(4)[:4])
            if kind is None:
                raise BadRequest(f"{ref.name}: not a .tar.gz or .zip archive", field="archive")
            members = iter_members(cast(BinaryIO, fh), ref.name, kind, self.limits)
            tree = extract(members, ref.name, dest)
        tree.name = _archive_stem(ref.name)
        return tree

    def run(
        self,
        identity: Identity,
        fmt: str,
        ref: TaskSourceRef,
        options: TaskOptions,
        *,
        via: str | None = None,
        upload: Mapping[str, Any] | None = None,
        progress: TaskProgress | None = None,
    ) -> TaskImportResult:
        """Import the tasks at `ref` as `fmt` (`terminal-bench`, `harbor` or `case-dirs`): the
        source is written out to a private scratch directory member by member, then registered
        a task at a time (`register_extracted`). The version is registered whole or not at
        all."""
        identity.check_can_write()
        with tempfile.TemporaryDirectory(prefix="caseshelf-tasks-") as tmp:
            tree = self._extract(ref, Path(tmp) / "tree")
            if fmt == CASE_DIRS:
                return self._case_dirs(identity, tree, options, via=via, upload=upload)
            return register_extracted(
                self.registry,
                identity,
                tree,
                fmt,
                options,
                origin=ref.origin,
                via=via,
                upload=upload,
                progress=progress,
            )

    def _case_dirs(
        self,
        identity: Identity,
        tree: Extracted,
        options: TaskOptions,
        *,
        via: str | None,
        upload: Mapping[str, Any] | None,
    ) -> TaskImportResult:
        from caseshelf.services.registry import parse_dataset  # lazy: ~35 ms; CLI packing skips

        held = Tree(tree.name, links=dict(tree.links))
        for path, mode in tree.modes.items():
            held.files[path] = tree.read(path)
            held.modes[path] = mode
        body, warnings = case_dirs_from_tree(
            held, dataset=options.dataset, version=options.version, bump=options.bump
        )
        source = body["produced_by"]["source"]
        source["origin"] = upload["filename"] if upload else tree.name
        if via:
            body["produced_by"]["via"] = via
        if upload is not None:
            source["upload"] = dict(upload)
        parsed = parse_dataset(body)
        res = self.registry.register(identity, parsed)
        return TaskImportResult(res.record, res.created, [], len(parsed.plain_cases), warnings)

    def import_object(
        self,
        identity: Identity,
        fmt: str,
        key: str,
        options: TaskOptions,
        *,
        via: str | None = None,
        progress: TaskProgress | None = None,
    ) -> TaskImportResult:
        """Import one archive object of the caller's tenant (an upload or a drop) as `fmt`:
        `terminal-bench`, `harbor` or `case-dirs`. `via` is stamped in `produced_by`, with the
        uploaded file's name and digest (never its storage key)."""
        tenant = identity.check_can_write()
        if not key.startswith(layout.root(tenant)):
            raise Forbidden(f"{key}: outside your tenant's prefix", field="key")
        info = self.store.head(key)
        if info is None:
            raise NotFound(f"no object {key}", key=key)
        if info.size > self.limits.max_total_bytes:
            raise TooLarge(f"{key}: {info.size} bytes is over the limit", field="size")
        name = posixpath.basename(key)
        upload = {"filename": name, **object_digest(self.store, key)}
        ref = TaskSourceRef(name, name, key=key)
        return self.run(identity, fmt, ref, options, via=via, upload=upload, progress=progress)
