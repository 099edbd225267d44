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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

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
from caseshelf.services.archives import Limits, Tree, read_tar, read_zip
from caseshelf.services.archives import clean_member as _clean_member

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


def read_store_prefix(store: BlobStore, prefix: str, where: str, limits: Limits = Limits()) -> Tree:
    """Every object under `prefix` of a store as a tree (keys relative to the prefix); a single
    archive object (`.tar.gz`, `.zip`) is read as that archive."""
    exact = store.head(prefix) if prefix and not prefix.endswith("/") else None
    if exact is not None and archive_kind(prefix) is not None:
        if exact.size > limits.max_total_bytes:
            raise TooLarge(f"{where}: {exact.size} bytes is over the limit", field="size")
        tree = read_archive_bytes(store.get(prefix), posixpath.basename(prefix), limits)
        tree.name = _archive_stem(prefix)
        return tree
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    tree = Tree(posixpath.basename(prefix.rstrip("/")) or "tasks")
    budget = _Budget(limits, where)
    keys: list[tuple[str, str]] = []
    for obj in store.list(prefix):
        if obj.key.endswith("/"):
            continue
        budget.entry()
        budget.size(obj.size)
        rel = _clean_member(obj.key[len(prefix) :], where)
        if rel is not None:
            keys.append((obj.key, rel))
    if not keys:
        raise BadRequest(f"{where}: no objects under this prefix", field="s3")
    for key, rel in keys:
        tree.files[rel] = store.get(key)
        tree.modes[rel] = 0o644
    return tree


# --- tasks in a tree ------------------------------------------------------------------------------


def _other_format(tree: Tree, marker: str) -> str:
    """A hint when the tree holds the tasks of the other format: the `--format` that reads it."""
    for fmt, other in MARKERS.items():
        if other != marker and any(posixpath.basename(p) == other for p in tree.files):
            return f"; it holds {other} files: import it with --format {fmt} (`format: {fmt}`)"
    return ""


def split_tasks(tree: Tree, marker: str) -> list[TaskSource]:
    """The task directories of a tree (each holds `marker`; a task inside a task is part of
    the outer one), in path order. The tree itself is a task when `marker` is at its root."""
    found = {posixpath.dirname(p) for p in tree.files if posixpath.basename(p) == marker}
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
            f"{tree.name}: no task found (no {marker} in the tree){_other_format(tree, marker)}",
            field="path",
        )
    by_root: dict[str, tuple[dict[str, bytes], dict[str, int]]] = {r: ({}, {}) for r in roots}
    for path, data in tree.files.items():
        parent = posixpath.dirname(path)
        while True:
            if parent in by_root:
                rel = path[len(parent) + 1 :] if parent else path
                files, modes = by_root[parent]
                files[rel] = data
                modes[rel] = tree.modes.get(path, 0o644)
                break
            if not parent:
                break
            parent = posixpath.dirname(parent)
    out = []
    roots_sorted = sorted(by_root)
    keys = task_keys([r for r in roots_sorted if r])
    for root in roots_sorted:
        files, modes = by_root[root]
        name = posixpath.basename(root) if root else tree.name
        out.append(
            TaskSource(
                name=name, files=files, modes=modes, location=root or name, key=keys.get(root, "")
            )
        )
    return out


def registry_files(tree: Tree, tasks: list[TaskSource]) -> list[str]:
    """Every Harbor `registry.json` of the tree outside the task directories, wherever it sits
    (the root first, then by path): a registry sits beside the tasks it lists, not always at the
    top of the tree given."""
    roots = [t.location for t in tasks if t.location != tree.name or len(tasks) > 1]
    found = []
    for path in tree.files:
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


def _check_distinct_ids(tasks: list[TaskSource], id_prefix: str) -> None:
    seen: dict[str, str] = {}
    for task in tasks:
        cid = f"{id_prefix}{task.case_key}"
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


def _default_dataset_id(tree: Tree, fmt: str) -> str:
    return tree.name if re.match(DATASET_ID_PATTERN, tree.name) else fmt


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
    """Map every task of `tree` to a case. An invalid task fails the whole import with every
    failure listed, unless `skip_invalid`: then each is reported and the skip is stamped in
    `produced_by`."""
    if fmt not in MARKERS:
        raise BadRequest(f"unknown task format {fmt!r}; use one of {list(FORMATS)}", field="format")
    tasks = split_tasks(tree, MARKERS[fmt])
    _check_distinct_ids(tasks, id_prefix)
    catalog: dict[str, Any] = {}
    facts: dict[str, Any] = {}
    if fmt == HARBOR:
        toml = tree.files.get("dataset.toml")
        catalog, facts = harbor_catalog(None, toml.decode("utf-8") if toml else None)
        for path in registry_files(tree, tasks):
            reg_doc = strict_loads(tree.files[path], where=path)  # a repeated key is refused
            listed, listed_facts = harbor_catalog(reg_doc, None)
            for name, entry in listed.items():
                catalog.setdefault(name, {}).update(entry)
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

    cases: list[dict[str, Any]] = []
    failures: list[tuple[str, BadRequest]] = []
    for task in tasks:
        try:
            cases.append(mapper(task))
        except BadRequest as exc:
            failures.append((f"{id_prefix}{task.case_key}", exc))
    skipped = [Skipped(task=tid, reason=exc.detail) for tid, exc in failures]
    if failures and not skip_invalid:
        raise BadRequest(
            invalid_tasks_message(skipped, len(tasks)),
            case_ids=[tid for tid, _ in failures],
            field=failures[0][1].fields.get("field"),
            errors=[s.reason for s in skipped],
        )
    if not cases:
        raise BadRequest(
            f"{tree.name}: no valid task to import", case_ids=[s.task for s in skipped]
        )

    source: dict[str, Any] = {"kind": fmt, "origin": origin or tree.name, "tasks": len(tasks)}
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
        or _default_dataset_id(tree, fmt),
        "cases": cases,
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
    return TaskDataset(body, skipped)


class Registry(Protocol):
    def register(self, identity: Identity, body: Any) -> Any: ...


def import_task_tree(
    registry: Registry,
    identity: Identity,
    tree: Tree,
    fmt: str,
    **options: Any,
) -> tuple[Any, list[Skipped]]:
    """Build the dataset of a tree and register it; (register result, skipped tasks)."""
    from caseshelf.services.registry import parse_dataset

    built = build_task_dataset(tree, fmt, **options)
    return registry.register(identity, parse_dataset(built.body)), built.skipped


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
    from caseshelf.services.casedirs import build_case_dir_dataset
    from caseshelf.services.workspace import load_eval_config, project_root_of

    evals = sorted(p for p in tree.files if _top_eval(p))
    if not evals:
        raise BadRequest(f"{tree.name}: no eval.yaml at the top of the archive", field="archive")
    if len(evals) > 1:
        raise BadRequest(f"{tree.name}: several eval.yaml files: {evals}", field="archive")
    top = tree.name if _DIR_NAME.match(tree.name) else CASE_DIRS
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

    def read(self, identity: Identity, req: TaskImportRequest) -> tuple[Tree, str]:
        """The tree a request points at, and a description of where it came from."""
        tenant = identity.tenant
        if req.archive_base64 is not None:
            try:
                data = base64.b64decode(req.archive_base64, validate=True)
            except (binascii.Error, ValueError):
                raise BadRequest(
                    "archive_base64 is not valid base64", field="archive_base64"
                ) from None
            tree = read_archive_bytes(data, req.filename, self.limits)
            tree.name = _archive_stem(req.filename)
            return tree, f"inline:{req.filename}"
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
            tree = read_archive_bytes(self.store.get(obj.key), name, self.limits)
            tree.name = _archive_stem(name)
            return tree, f"upload:{req.upload_id}"
        assert req.s3 is not None
        bucket, prefix = parse_s3_url(req.s3)
        if prefix and relative_path_problem(prefix.rstrip("/")):
            raise BadRequest(f"{req.s3}: the prefix is not a safe path", field="s3")
        if bucket == self.own_bucket:
            # The registry's own bucket: only the caller's tenant tree, never another's.
            root = layout.root(tenant)
            if not prefix.startswith(root):
                raise Forbidden(f"{req.s3}: outside your tenant's prefix {root}", field="s3")
            store = self.store
        else:
            if self.store_for_bucket is None:
                raise BadRequest("reading another bucket is not available here", field="s3")
            store = self.store_for_bucket(bucket)
        return read_store_prefix(store, prefix, req.s3, self.limits), req.s3

    def import_tasks(
        self, identity: Identity, fmt: str, req: TaskImportRequest
    ) -> TaskImportResult:
        from caseshelf.services.registry import parse_dataset

        identity.check_can_write()
        tree, origin = self.read(identity, req)
        built = build_task_dataset(
            tree,
            fmt,
            image_template=req.image_template,
            skip_invalid=req.skip_invalid,
            dataset=req.dataset,
            version=req.version,
            bump=req.bump,
            id_prefix=req.id_prefix,
            origin=origin,
        )
        body = parse_dataset(built.body)
        res = self.registry.register(identity, body)
        return TaskImportResult(res.record, res.created, built.skipped, len(body.plain_cases))

    def import_object(
        self,
        identity: Identity,
        fmt: str,
        key: str,
        *,
        image_template: str | None = None,
        skip_invalid: bool = False,
        id_prefix: str = "",
        dataset: str | None = None,
        version: str | None = None,
        bump: BumpKind | None = None,
        via: str | None = None,
    ) -> TaskImportResult:
        """Import one archive object of the caller's tenant (an upload or a drop) as `fmt`:
        `terminal-bench`, `harbor` or `case-dirs`. The version is registered whole or not at
        all; `via` is stamped in `produced_by`."""
        from caseshelf.services.registry import parse_dataset

        tenant = identity.check_can_write()
        if not key.startswith(layout.root(tenant)):
            raise Forbidden(f"{key}: outside your tenant's prefix", field="key")
        info = self.store.head(key)
        if info is None:
            raise NotFound(f"no object {key}", key=key)
        if info.size > self.limits.max_total_bytes:
            raise TooLarge(f"{key}: {info.size} bytes is over the limit", field="size")
        name = posixpath.basename(key)
        data = self.store.get(key)
        tree = read_archive_bytes(data, name, self.limits)
        tree.name = _archive_stem(name)
        skipped: list[Skipped] = []
        warnings: list[str] = []
        if fmt == CASE_DIRS:
            body, warnings = case_dirs_from_tree(tree, dataset=dataset, version=version, bump=bump)
            body["produced_by"]["source"]["origin"] = name
        else:
            built = build_task_dataset(
                tree,
                fmt,
                image_template=image_template,
                skip_invalid=skip_invalid,
                dataset=dataset,
                version=version,
                bump=bump,
                id_prefix=id_prefix,
                origin=name,
            )
            body, skipped = built.body, built.skipped
        if via:
            body["produced_by"]["via"] = via
        # The uploaded file as the user sent it: its name and digest, never the storage key.
        body["produced_by"]["source"]["upload"] = {
            "filename": name,
            "sha256": "sha256:" + hashlib.sha256(data).hexdigest(),
            "size": len(data),
        }
        parsed = parse_dataset(body)
        res = self.registry.register(identity, parsed)
        return TaskImportResult(res.record, res.created, skipped, len(parsed.plain_cases), warnings)
