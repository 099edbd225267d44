"""`caseshelf tag`, `untag` and `tags`: version tags as pointers. A tag names at most one version
of a dataset; putting it on another version moves it, and every move is kept."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape

from caseshelf.cli.common import client, emit, say, table, wire
from caseshelf.cli.registry import parse_ref, parse_version
from caseshelf.cli.root import command

TagsArg = Annotated[list[str], typer.Argument(metavar="TAG", help="One or more tag names.")]


def _said_moves(o: dict[str, Any]) -> None:
    if not o["moves"]:
        say("nothing moved: every tag already pointed there")
    for m in o["moves"]:
        tag = escape(m["tag"])
        if m["to_version"] is None:
            say(f"{o['id']}: removed {tag} (it pointed at {m['from_version']})")
        elif m["from_version"] is None:
            say(f"{o['id']}: {tag} -> {m['to_version']}")
        else:
            say(f"{o['id']}: {tag} moved {m['from_version']} -> {m['to_version']}")


def tag(
    ref: Annotated[str, typer.Argument(metavar="ID@VERSION")],
    tags: Annotated[
        list[str] | None, typer.Argument(metavar="TAG", help="One or more tag names.")
    ] = None,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace", help="Make these the version's only tags (others it had are removed)."
        ),
    ] = False,
    clear: Annotated[
        bool, typer.Option("--clear", help="Remove every tag of the version.")
    ] = False,
) -> None:
    """Point tags at a version (e.g. stable, prod): each moves there from wherever it pointed."""
    name, version = parse_version(ref)
    if clear and tags:
        raise typer.BadParameter("give tags or --clear, not both")
    if not clear and not tags:
        raise typer.BadParameter("give one or more tags, or --clear")
    tags = tags or []
    if replace or clear:
        out = wire(client().set_tags(f"{name}@{version}", list(tags)))
        emit(out, lambda o: say(f"{o['id']}@{o['version']} tags: {', '.join(o['version_tags'])}"))
        return
    emit(wire(client().tag(f"{name}@{version}", list(tags))), _said_moves)


def untag(
    name: Annotated[str, typer.Argument(metavar="ID", help="The dataset.")],
    tags: TagsArg,
) -> None:
    """Remove tags from a dataset (each points at no version after)."""
    parse_ref(name)
    emit(wire(client().untag(name, list(tags))), _said_moves)


def _show_tags(o: dict[str, Any], history: bool) -> None:
    if not o["tags"]:
        say(f"{o['id']} has no tags")
    else:
        table(("tag", "version"), sorted(o["tags"].items()))
    if not history:
        return
    rows = [
        [
            m["seq"],
            m["tag"],
            m["from_version"] or "",
            m["to_version"] or "(removed)",
            m["by"],
            m["at"],
        ]
        for m in o["history"]
    ]
    table(("#", "tag", "from", "to", "by", "when"), rows, title="moves, newest first")
    if o["dropped"]:
        say(f"({o['dropped']} older moves are no longer kept)")


def tags(
    name: Annotated[str, typer.Argument(metavar="ID", help="The dataset.")],
    history: Annotated[
        bool, typer.Option("--history", help="Also list every move, newest first.")
    ] = False,
) -> None:
    """Where each of a dataset's tags points (and, with --history, how it got there)."""
    parse_ref(name)
    emit(wire(client().tags(name)), lambda o: _show_tags(o, history))


def register_commands(app: typer.Typer) -> None:
    command(app, "tag")(tag)
    command(app, "untag")(untag)
    command(app, "tags")(tags)
