"""`caseshelf migrate`: rewrite dataset YAML files to the inputs + expectations envelope."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from caseshelf.cli.common import emit, note, say
from caseshelf.cli.root import command


def _print(lines: list[tuple[str, str]]) -> None:
    for stream, text in lines:
        if stream == "err":
            note(text)
        else:
            say(text)


def migrate(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="Files or directories (default: the current directory)."),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 when a file would change.")
    ] = False,
) -> None:
    """Rewrite legacy dataset YAML to the envelope (keeps comments and key order).

    Files that are not datasets are left untouched; see docs/migration.md."""
    from caseshelf.services.migrate import migrate_paths, summarise  # lazy: ruamel, ~25 ms

    results = migrate_paths(paths or [Path()], check=check)
    lines, code = summarise(results, check=check)
    emit(
        {
            "check": check,
            "files": [
                {"path": str(r.path), "status": r.status, "codes": r.codes, "error": r.error}
                for r in results
            ],
        },
        lambda _data: _print(lines),
    )
    if code:
        raise typer.Exit(code)


def register_commands(app: typer.Typer) -> None:
    command(app, "migrate")(migrate)
