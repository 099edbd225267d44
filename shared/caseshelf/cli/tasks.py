"""`caseshelf import-tasks`: Terminal-Bench and Harbor task trees, and eval-harness case
directories, registered as a dataset version.

On the embedded store the tree is read and registered in-process. With `--api` a local tree goes
through an upload instead, so its size is not bound by the API's request body limit: a directory
is packed into a temporary `.tar.gz` (an archive goes as it is), uploaded with
`{kind: tasks, format, ...}` and its import job followed to the end; the server reads it with the
same checks as a local import.
"""

from __future__ import annotations

import os
import re
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from caseshelf.cli.common import client, emit, fields_table, note, say, state, wire
from caseshelf.cli.imports import WaitOpt, upload_and_follow
from caseshelf.cli.root import command
from caseshelf.domain.errors import BadRequest


class TaskFormat(StrEnum):
    terminal_bench = "terminal-bench"
    harbor = "harbor"
    case_dirs = "case-dirs"


def _register_tasks(path: str, fmt: str, options: dict[str, Any]) -> dict[str, Any]:
    from caseshelf.services.tasks import (  # lazy: ~55 ms off the start-up of help
        build_task_dataset,
        read_path,
    )

    c = client()
    if path.startswith("s3://"):
        given = {k: v for k, v in options.items() if v is not None}
        return wire(c.import_tasks(fmt, s3=path, **given))
    built = build_task_dataset(read_path(path), fmt, origin=Path(path).name, **options)
    registered: dict[str, Any] = wire(c.register(built.body))
    registered["skipped"] = [{"task": s.task, "reason": s.reason} for s in built.skipped]
    return registered


def _pack_directory(root: Path, dest: Path) -> None:
    """Write the tree under `root` as a gzipped tar at `dest`, streamed file by file, with the
    rules of a local import (`services.tasks.read_directory`): paths relative to `root`, a file
    symlink that resolves inside `root` stored as a copy, any other link refused, regular files
    only, permission bits kept. Owners and times are left out, so the archive says only what
    the import reads."""
    from caseshelf.services.tasks import walk_tree  # lazy: ~55 ms off the start-up of help

    root = root.resolve()
    with tarfile.open(dest, "w:gz", compresslevel=6, format=tarfile.PAX_FORMAT) as tar:
        for rel, full in walk_tree(root):
            _add_file(tar, root, rel, full)


def _add_file(tar: Any, root: Path, rel: str, path: Path) -> None:
    """Add the regular file at `path` to `tar` as `rel`, with its size and permission bits, as
    the file opened (not a path looked up twice); anything else is refused naming it."""
    with path.open("rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise BadRequest(f"{root}: {rel} is not a regular file", path=rel)
        info = tarfile.TarInfo(rel)
        info.size = st.st_size
        info.mode = st.st_mode & 0o777
        tar.addfile(info, fh)


def _pack_case_tree(root: Path, subtrees: list[Path], dest: Path) -> None:
    """Write `subtrees` of the project `root` (the eval directory, the shared sources) as a
    gzipped tar at `dest`, at their paths relative to `root`, so that the server sees the same
    project a local import reads: a file symlink that resolves inside `root` stays a symlink
    (the server applies the listed-symlink rule to it as a local import does) and its target
    file goes along; any other symlink is left out with a warning, as a local import leaves it
    out."""
    root = root.resolve()
    seen: set[str] = set()
    with tarfile.open(dest, "w:gz", compresslevel=6, format=tarfile.PAX_FORMAT) as tar:

        def add(path: Path) -> None:
            rel = path.relative_to(root).as_posix()
            if rel in seen:
                return
            seen.add(rel)
            if path.is_symlink():
                target = path.resolve()
                if not target.is_relative_to(root) or not target.is_file():
                    note(f"warning: {rel}: skipped: a symlink to outside the project or to no file")
                    return
                info = tarfile.TarInfo(rel)
                info.type = tarfile.SYMTYPE
                info.linkname = os.path.relpath(target, path.parent.resolve())
                tar.addfile(info)
                add(target)  # the file it points at travels too, so the server can judge it
                return
            _add_file(tar, root, rel, path)

        for sub in subtrees:
            if sub.is_file() or sub.is_symlink():
                add(sub)
                continue
            for dirpath, dirnames, filenames in os.walk(sub):
                here = Path(dirpath)
                for d in sorted(dirnames):
                    if (here / d).is_symlink():
                        rel = (here / d).relative_to(root).as_posix()
                        note(f"warning: {rel}: skipped: a directory symlink is not followed")
                dirnames[:] = sorted(d for d in dirnames if not (here / d).is_symlink())
                for fname in sorted(filenames):
                    add(here / fname)


def _case_tree_parts(eval_yaml: Path, project_root: Path | None) -> tuple[Path, list[Path]]:
    """(project root, what of it to upload) for a case-directory tree: the eval directory and
    every `{dest, source}` source inside the project root."""
    from caseshelf.services.workspace import SharedSpec, load_eval_config  # lazy: ~30 ms off help

    config = load_eval_config(eval_yaml, project_root=project_root)
    root = config.project_root
    config_dir = eval_yaml.resolve().parent
    if not config_dir.is_relative_to(root):
        return config_dir, [config_dir]
    parts = [config_dir]
    for spec in config.files:
        if isinstance(spec, SharedSpec):
            src = Path(spec.source)
            src = src if src.is_absolute() else root / src
            if src.exists() and src.resolve().is_relative_to(root):
                parts.append(src)
    return root, parts


@contextmanager
def _archive_of(path: Path, fmt: str, project_root: Path | None = None) -> Iterator[Path]:
    """`path` as an archive to upload: an archive as it is; a directory packed into a temporary
    `<name>.tar.gz`. For case-dirs (an `eval.yaml` or its directory) the archive holds the
    project as the server must see it: the eval directory and the shared sources at their paths
    under the project root (`services.workspace.project_root_of`, or `--project-root`)."""
    from caseshelf.services.tasks import archive_kind  # lazy: ~55 ms off the start-up of help

    if fmt == "case-dirs" and archive_kind(path.name) is None:
        from caseshelf.services.casedirs import find_eval_yaml  # lazy: ~25 ms, case-dirs only

        eval_yaml = find_eval_yaml(path)
        root, parts = _case_tree_parts(eval_yaml, project_root)
        name = re.sub(r"[^A-Za-z0-9._-]", "-", eval_yaml.resolve().parent.name).lstrip(".-")
        with tempfile.TemporaryDirectory(prefix="caseshelf-upload-") as tmp:
            archive = Path(tmp) / f"{name[:100] or 'case-dirs'}.tar.gz"
            note(f"packing {eval_yaml.parent}")
            _pack_case_tree(root, parts, archive)
            yield archive
        return
    if path.is_file():
        with path.open("rb") as fh:
            head = fh.read(4)
        if archive_kind(path.name, head) is None:
            raise BadRequest(f"{path}: not a directory, .tar.gz or .zip", path=str(path))
        yield path
        return
    if not path.is_dir():
        raise BadRequest(f"{path}: no such file or directory", path=str(path))
    name = re.sub(r"[^A-Za-z0-9._-]", "-", path.resolve().name).lstrip(".-")[:100] or "tasks"
    with tempfile.TemporaryDirectory(prefix="caseshelf-upload-") as tmp:
        archive = Path(tmp) / f"{name}.tar.gz"
        note(f"packing {path}")
        _pack_directory(path, archive)
        yield archive


def _upload_tasks(
    path: str, fmt: str, options: dict[str, Any], wait: float, project_root: Path | None = None
) -> dict[str, Any]:
    """With --api: a local tree through an upload and its import job, answered like a local
    import (plus `job_id`)."""
    body: dict[str, Any] = {"kind": "tasks", "format": fmt}
    body.update({k: v for k, v in options.items() if v is not None and v is not False and v != ""})
    with _archive_of(Path(path).expanduser(), fmt, project_root) as archive:
        result = upload_and_follow(archive, body, wait)
    for line in result.get("warnings") or []:
        note(f"warning: {line}")
    return result


ImageTemplateOpt = Annotated[
    str | None,
    typer.Option(
        "--image-template",
        help="Prebuilt image for tasks that name none; {id} is the case id, {name} the "
        "task directory.",
    ),
]
SkipInvalidOpt = Annotated[
    bool,
    typer.Option(
        "--skip-invalid",
        help="Leave out invalid tasks (each is reported and the skip is stamped).",
    ),
]
ProjectRootOpt = Annotated[
    Path | None,
    typer.Option(
        "--project-root",
        help="case-dirs: the root {dest, source} resolves against (default: the "
        "directory above eval/ for eval/<name>/eval.yaml, else the eval.yaml's own).",
    ),
]


def import_tasks(
    path: Annotated[
        str,
        typer.Argument(
            help="A directory of tasks, one task, a .tar.gz/.zip, an s3:// prefix, or (for "
            "case-dirs) an eval.yaml or its directory."
        ),
    ],
    format: Annotated[
        TaskFormat, typer.Option("--format", "-f", help="The tree's format.")
    ] = TaskFormat.terminal_bench,
    image_template: ImageTemplateOpt = None,
    skip_invalid: SkipInvalidOpt = False,
    id_prefix: Annotated[str, typer.Option("--id-prefix", help="Prefix for every case id.")] = "",
    dataset: Annotated[str | None, typer.Option("--dataset", help="Dataset id.")] = None,
    version: Annotated[str | None, typer.Option("--version", help="Version label.")] = None,
    bump: Annotated[
        str | None, typer.Option("--bump", help="major|minor|patch (default: minor).")
    ] = None,
    project_root: ProjectRootOpt = None,
    wait: WaitOpt = 900.0,
) -> None:
    """Import container tasks or case directories as a dataset version."""
    if bump is not None and bump not in ("major", "minor", "patch"):
        raise typer.BadParameter("major, minor or patch", param_hint="--bump")
    if format == TaskFormat.case_dirs and (image_template or skip_invalid or id_prefix):
        raise typer.BadParameter(
            "--image-template, --skip-invalid and --id-prefix are for container tasks",
            param_hint="--format",
        )
    if project_root is not None and format != TaskFormat.case_dirs:
        raise typer.BadParameter("--project-root is for case-dirs", param_hint="--format")
    options: dict[str, Any] = {
        "image_template": image_template,
        "skip_invalid": skip_invalid,
        "id_prefix": id_prefix,
        "dataset": dataset,
        "version": version,
        "bump": bump,
    }
    result: dict[str, Any]
    if state().api and not path.startswith("s3://"):
        result = _upload_tasks(path, format.value, options, wait, project_root)
    elif format == TaskFormat.case_dirs:
        from caseshelf.services.casedirs import build_case_dir_dataset  # lazy: ~25 ms, as above

        built = build_case_dir_dataset(
            path,
            dataset=dataset,
            version=version,
            bump=bump,  # type: ignore[arg-type]
            project_root=project_root,
        )
        for line in built.warnings:
            note(f"warning: {line}")
        result = wire(client().register(built.body))
        result["skipped"] = []
    else:
        result = _register_tasks(path, format.value, options)
    left_out = result.get("skipped") or []
    if left_out:
        n = len(left_out)
        note(f"skipped {n} task{'s' if n > 1 else ''}: {', '.join(s['task'] for s in left_out)}")
        for skipped in left_out:
            note(f"  {skipped['reason']}")

    def render(data: dict[str, Any]) -> None:
        verb = "registered" if data.get("created") else "already registered"
        say(f"{verb} {data['id']}@{data['version']} ({data['case_count']} cases)")
        fields_table(
            [
                ("content_digest", data.get("content_digest")),
                ("skipped", len(data.get("skipped") or [])),
            ]
        )

    emit(result, render)


def register_commands(app: typer.Typer) -> None:
    command(app, "import-tasks")(import_tasks)
