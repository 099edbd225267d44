"""`caseshelf import-tasks`: Terminal-Bench and Harbor task trees, and eval-harness case
directories, registered as a dataset version."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from caseshelf.cli import client, command, emit, fields_table, note, say


class TaskFormat(StrEnum):
    terminal_bench = "terminal-bench"
    harbor = "harbor"
    case_dirs = "case-dirs"


def _register_tasks(path: str, fmt: str, options: dict[str, Any]) -> dict[str, Any]:
    from caseshelf.services.tasks import TaskImportRequest, build_task_dataset, read_path

    c: Any = client()
    if path.startswith("s3://"):
        if hasattr(c, "services"):
            req = TaskImportRequest(s3=path, **options)
            res = c.services().tasks.import_tasks(c.identity(), fmt, req)
            rec = res.record
            return {
                "id": rec.name,
                "version": rec.version,
                "content_digest": rec.content_digest,
                "case_count": rec.case_count,
                "created": res.created,
                "skipped": [{"task": s.task, "reason": s.reason} for s in res.skipped],
            }
        out: dict[str, Any] = c.request("POST", "datasets", fmt, body={"s3": path, **options})
        return out
    built = build_task_dataset(read_path(path), fmt, origin=Path(path).name, **options)
    registered: dict[str, Any] = dict(c.register(built.body))
    registered["skipped"] = [{"task": s.task, "reason": s.reason} for s in built.skipped]
    return registered


def register_commands(app: typer.Typer) -> None:
    @command(app, "import-tasks")
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
        image_template: Annotated[
            str | None,
            typer.Option(
                "--image-template",
                help="Prebuilt image for tasks that name none; {id} is the case id, {name} the "
                "task directory.",
            ),
        ] = None,
        skip_invalid: Annotated[
            bool,
            typer.Option(
                "--skip-invalid",
                help="Leave out invalid tasks (each is reported and the skip is stamped).",
            ),
        ] = False,
        id_prefix: Annotated[
            str, typer.Option("--id-prefix", help="Prefix for every case id.")
        ] = "",
        dataset: Annotated[str | None, typer.Option("--dataset", help="Dataset id.")] = None,
        version: Annotated[str | None, typer.Option("--version", help="Version label.")] = None,
        bump: Annotated[
            str | None, typer.Option("--bump", help="major|minor|patch (default: minor).")
        ] = None,
    ) -> None:
        """Import container tasks or case directories as a dataset version."""
        if bump is not None and bump not in ("major", "minor", "patch"):
            raise typer.BadParameter("major, minor or patch", param_hint="--bump")
        if format == TaskFormat.case_dirs:
            from caseshelf.services.casedirs import build_case_dir_dataset

            if image_template or skip_invalid or id_prefix:
                raise typer.BadParameter(
                    "--image-template, --skip-invalid and --id-prefix are for container tasks",
                    param_hint="--format",
                )
            built = build_case_dir_dataset(
                path,
                dataset=dataset,
                version=version,
                bump=bump,  # type: ignore[arg-type]
            )
            for line in built.warnings:
                note(f"warning: {line}")
            result: dict[str, Any] = dict(client().register(built.body))
            result["skipped"] = []
        else:
            options: dict[str, Any] = {
                "image_template": image_template,
                "skip_invalid": skip_invalid,
                "id_prefix": id_prefix,
                "dataset": dataset,
                "version": version,
                "bump": bump,
            }
            result = _register_tasks(path, format.value, options)
        for skipped in result.get("skipped") or []:
            note(f"skipped {skipped['task']}: {skipped['reason']}")

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
