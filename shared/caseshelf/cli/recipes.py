"""The recipe registry's commands, `caseshelf recipes ...`.

    caseshelf recipes register|validate FILE
    caseshelf recipes ls [--shared] | get ID[@VERSION] | rm ID@VERSION | revive ID@VERSION
    caseshelf recipes publish-catalog          (an admin of the _shared tenant)

A recipe maps a benchmark's rows to cases (`caseshelf import --recipe`); FILE is YAML or JSON.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from caseshelf.cli.common import client, emit, note, say, short, table, wire
from caseshelf.cli.imports import load_recipe_file
from caseshelf.cli.registry import parse_ref, parse_version
from caseshelf.cli.root import command

RecipeFileArg = Annotated[
    Path, typer.Argument(metavar="FILE", help="A recipe file (YAML or JSON).", show_default=False)
]


def register(file: RecipeFileArg) -> None:
    """Register a recipe version (idempotent for the same content)."""
    out = wire(client().register_recipe(load_recipe_file(file)))
    what = "registered" if out["created"] else "already registered, unchanged"
    emit(out, lambda o: say(f"{what} {o['id']}@{o['version']}  {short(o['content_digest'])}"))


def validate(file: RecipeFileArg) -> None:
    """Check a recipe without registering it."""
    out = wire(client().validate_recipe(load_recipe_file(file)))

    def render(o: dict[str, Any]) -> None:
        clash = "  (would conflict with the registered version)" if o["would_conflict"] else ""
        say(f"valid {o['id']}@{o['version']}  {short(o['content_digest'])}{clash}")

    emit(out, render)


def ls(
    shared: Annotated[bool, typer.Option("--shared", help="List the _shared tenant.")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 50,
    cursor: Annotated[str | None, typer.Option("--cursor", show_default=False)] = None,
) -> None:
    """The tenant's recipes (or the shared ones)."""
    out = wire(client().list_recipes(shared=shared, cursor=cursor, limit=limit))

    def render(page: dict[str, Any]) -> None:
        rows = [
            [r["id"], r["latest"], r["category"], r["version_count"], r["description"][:60]]
            for r in page["items"]
        ]
        table(["id", "latest", "category", "versions", "description"], rows)
        if page.get("next_cursor"):
            note(f"more: --cursor {page['next_cursor']}")

    emit(out, render)


def get(
    ref: Annotated[str, typer.Argument(metavar="ID@REF", help="ID alone means latest.")],
) -> None:
    """A recipe (own, shared, or from the catalog), as YAML."""
    parse_ref(ref, what="ID@REF")
    out = wire(client().recipe(ref))

    def render(o: dict[str, Any]) -> None:
        import yaml  # lazy: ~20 ms, `recipes get` only

        note(f"{o['id']}@{o['version']} from {o['owner']}  {short(o['content_digest'])}")
        say(escape(yaml.safe_dump(o["recipe"], sort_keys=False, allow_unicode=True).rstrip()))

    emit(out, render)


def rm(ref: Annotated[str, typer.Argument(metavar="ID@VERSION")]) -> None:
    """Tombstone a recipe version (the creator or an admin)."""
    name, version = parse_version(ref, what="ID@VERSION")
    out = wire(client().delete_recipe(f"{name}@{version}"))
    emit(out, lambda o: say(f"deleted {o['id']}@{o['version']}"))


def revive(ref: Annotated[str, typer.Argument(metavar="ID@VERSION")]) -> None:
    """Revive a tombstoned recipe version (the creator or an admin)."""
    name, version = parse_version(ref, what="ID@VERSION")
    out = wire(client().revive_recipe(f"{name}@{version}"))
    emit(out, lambda o: say(f"revived {o['id']}@{o['version']}"))


def publish_catalog() -> None:
    """Register the first-party catalog as recipes of the _shared tenant (idempotent).

    Run it as an admin of _shared: `--tenant _shared --roles admin` on the embedded store
    or the local server; a token of that tenant on a deployed API."""
    out = wire(client().publish_catalog())

    def render(page: dict[str, Any]) -> None:
        rows = [
            [
                r["id"],
                r["version"],
                "registered" if r["created"] else "unchanged",
                short(r["content_digest"]),
            ]
            for r in page["items"]
        ]
        table(["id", "version", "state", "content digest"], rows)

    emit(out, render)


def register_commands(app: typer.Typer) -> None:
    recipes = typer.Typer(
        help="Manage recipes: register, validate, ls, get, rm, revive, publish-catalog.",
        no_args_is_help=True,
    )
    app.add_typer(recipes, name="recipes")
    command(recipes, "register")(register)
    command(recipes, "validate")(validate)
    command(recipes, "ls")(ls)
    command(recipes, "get")(get)
    command(recipes, "rm")(rm)
    command(recipes, "revive")(revive)
    command(recipes, "publish-catalog")(publish_catalog)
