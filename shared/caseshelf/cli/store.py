"""`caseshelf info` (which store a command here uses, and how it was found) and `caseshelf init`
(a project's own store, `.caseshelf/` at its root). The rule is `caseshelf.storehome`'s."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

import caseshelf
from caseshelf.adapters.sqlite import SqliteIndex
from caseshelf.adapters.sqlite_stamp import INDEX_FILE
from caseshelf.cli.common import emit, fields_table, note, say, state
from caseshelf.cli.root import abort, command
from caseshelf.storehome import ENV, PROJECT_DIR, StoreHome, find_home


def store_info() -> dict[str, Any]:
    """What `info` answers: the version, and the store the options and environment choose."""
    st = state()
    out: dict[str, Any] = {"version": caseshelf.__version__}
    if st.api:
        return {**out, "backend": "api", "api": st.api}
    settings = st.settings()
    if settings.backend == "aws":
        return {
            **out,
            "backend": "aws",
            "bucket": settings.bucket,
            "table": settings.table,
            "region": settings.region,
        }
    home = settings.store_home
    return {
        **out,
        "backend": "local",
        "store": home.path,
        "found": home.found,
        "how": home.how,
        "exists": home.exists(),
        "writable": home.writable(),
        "tenant": settings.tenant,
    }


def _render_info(o: dict[str, Any]) -> None:
    pairs: list[tuple[str, Any]] = [("caseshelf", o["version"]), ("backend", o["backend"])]
    if o["backend"] == "api":
        pairs.append(("api", o["api"]))
    elif o["backend"] == "aws":
        pairs += [("bucket", o["bucket"]), ("table", o["table"]), ("region", o["region"])]
    else:
        state_words = "yes" if o["exists"] else "not yet (created by the first write)"
        pairs += [
            ("store", o["store"]),
            ("found", o["how"]),
            ("exists", state_words),
            ("writable", "yes" if o["writable"] else "no (reads only)"),
            ("tenant", o["tenant"]),
        ]
    fields_table(pairs)


def init_store(directory: Path) -> dict[str, Any]:
    """Make `<directory>/.caseshelf/` a store (its index); nothing is changed where one is
    there already."""
    home = StoreHome(str(directory.resolve() / PROJECT_DIR), "project")
    path = Path(home.path)
    if path.exists() and not path.is_dir():
        abort(f"{path} is a file, not a directory: move it away to make a store there")
    created = not home.exists()
    if created:
        if not directory.is_dir():
            abort(f"no directory {directory}: create it first, or name another")
        SqliteIndex(path / INDEX_FILE).create()
    return {"store": home.path, "created": created}


def info() -> None:
    """Which store commands run here use, and how it was found.

    Also the backend and the version of caseshelf. The embedded store is CASESHELF_HOME,
    else the nearest .caseshelf/ at or above the working directory (a project's store;
    caseshelf init makes one), else the user's data directory.
    """
    emit(store_info(), _render_info)


def init(
    directory: Annotated[
        Path,
        typer.Argument(help="The project's root (default: the working directory)."),
    ] = Path(),
) -> None:
    """Make a project store, DIRECTORY/.caseshelf/.

    Commands run at or below DIRECTORY then use it (unless CASESHELF_HOME names another).
    """
    if state().api:
        raise typer.BadParameter("init makes a store on this machine; drop --api")
    out = init_store(directory)

    def render(o: dict[str, Any]) -> None:
        if o["created"]:
            say(f"created a project store at {o['store']}")
        else:
            say(f"a store is already at {o['store']}")

    emit(out, render)
    chosen = find_home(cwd=str(directory.resolve()))
    if os.environ.get(ENV) and chosen.path != out["store"]:
        note(f"{ENV} is set ({chosen.path}): commands use that store until it is unset")


def register_commands(app: typer.Typer) -> None:
    command(app, "info")(info)
    command(app, "init")(init)
