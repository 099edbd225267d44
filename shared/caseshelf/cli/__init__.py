"""The `caseshelf` command: a typer app (`caseshelf.cli.root`) whose commands live in capability
modules, and the light part every command shares (`caseshelf.cli.common`), which imports neither
typer nor rich.

Each module named in `COMMAND_MODULES` (under `caseshelf.cli`) defines its commands as
module-level functions and has a function `register_commands(app)` that declares them with
`command(app, "name")(fn)` (`caseshelf.cli.root`), which adds the common options (`--json`,
`--api`, `--tenant`, `--principal`, `--roles`) to every command, so they work before or after
the command name. `COMMANDS` names the module of each command, so a run declares only the
commands of the module it needs. Commands get their client with `client()` and print with
`emit(...)` (`caseshelf.cli.common`): JSON on stdout with `--json`, rich tables and plain lines
otherwise.

Start-up: `main` first offers the command line to `caseshelf.cli.fast`, which runs the read-only
commands that need no typer (`ls`) through the same client and the same rendering; anything
else, help included, goes to the typer app. The modules below this one never import it, so the
package has no import circle: this module is the top, `common` the bottom.

Errors: a domain error (from the embedded store, or an HTTP problem+json body turned back into one)
prints `error: <detail>` on stderr and exits 1; a usage error exits 2.
"""

from __future__ import annotations

import os
import sys

# The command owns its process: pydantic's plugin discovery (a scan of every installed
# distribution's entry points, a tenth of a second of every start-up) is skipped unless asked for.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from caseshelf.cli.common import (
    Progress,
    State,
    api_hint,
    begin,
    client,
    dumps,
    emit,
    err_console,
    escape,
    fail,
    failed,
    fields_table,
    json_mode,
    live_progress,
    note,
    out_console,
    own_process,
    progress,
    say,
    short,
    state,
    table,
    warn,
    wire,
)

# `typing.TYPE_CHECKING` without importing typing: this module is on every command's start-up
# path, which imports only what the command runs (`caseshelf.cli.answers`).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from caseshelf.cli.root import (
        ApiOpt as ApiOpt,
    )
    from caseshelf.cli.root import (
        JsonOpt as JsonOpt,
    )
    from caseshelf.cli.root import (
        PrincipalOpt as PrincipalOpt,
    )
    from caseshelf.cli.root import (
        RolesOpt as RolesOpt,
    )
    from caseshelf.cli.root import (
        TenantOpt as TenantOpt,
    )
    from caseshelf.cli.root import (
        abort as abort,
    )
    from caseshelf.cli.root import (
        app as app,
    )
    from caseshelf.cli.root import (
        command as command,
    )

# What commands share (`caseshelf.cli.common`), named here too: `from caseshelf.cli import emit`.
__all__ = [
    "COMMANDS",
    "COMMAND_MODULES",
    "Progress",
    "State",
    "api_hint",
    "begin",
    "client",
    "command_name",
    "dumps",
    "emit",
    "err_console",
    "escape",
    "fail",
    "failed",
    "fields_table",
    "json_mode",
    "live_progress",
    "load_commands",
    "main",
    "note",
    "out_console",
    "progress",
    "run",
    "say",
    "short",
    "state",
    "table",
    "warn",
    "wire",
]

# Capability modules under `caseshelf.cli`; each has `register_commands(app: typer.Typer)`.
COMMAND_MODULES: list[str] = [
    "registry",
    "migrate",
    "subset",
    "export",
    "tasks",
    "imports",
    "recipes",
    "verify",
    "browse",
    "tags",
    "store",
    "pins",
]
# Which module declares each top-level command (a test holds this to what they declare): a run
# loads only the module of the command it names, or every module for help or an unknown name.
COMMANDS: dict[str, str] = {
    **dict.fromkeys(
        (
            "register",
            "validate",
            "ls",
            "versions",
            "get",
            "cases",
            "rm",
            "revive",
            "download",
            "serve",
            "gc",
        ),
        "registry",
    ),
    "migrate": "migrate",
    "subset": "subset",
    "diff": "subset",
    "export": "export",
    "pull": "export",
    "workspace": "export",
    "import-tasks": "tasks",
    "import": "imports",
    "import-bundle": "imports",
    "preview": "imports",
    "benchmarks": "imports",
    "recipes": "recipes",
    "verify": "verify",
    "stats": "browse",
    "file": "browse",
    "whoami": "browse",
    "tag": "tags",
    "untag": "tags",
    "tags": "tags",
    "info": "store",
    "init": "store",
    **dict.fromkeys(("pin", "unpin", "update", "check", "sync", "cache"), "pins"),
}
# The common options that take a value (the token after them is no command name).
_VALUE_OPTIONS = frozenset({"--api", "--tenant", "--principal", "--roles"})
# What `caseshelf.cli.root` provides (typer's part), imported when first asked for.
_FROM_APP = frozenset(
    {
        "ApiOpt",
        "CliError",
        "JsonOpt",
        "PrincipalOpt",
        "RolesOpt",
        "TenantOpt",
        "abort",
        "app",
        "command",
    }
)


def __getattr__(name: str) -> Any:
    if name in _FROM_APP:
        import importlib

        return getattr(importlib.import_module("caseshelf.cli.root"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def command_name(argv: Sequence[str]) -> str | None:
    """The command `argv` names (its first word that is no option or option value)."""
    words = iter(argv)
    for word in words:
        if word in _VALUE_OPTIONS:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


_loaded: set[str] = set()


def load_commands(argv: Sequence[str] | None = None) -> None:
    """Declare the commands on the typer app: with `argv`, only those of the module of the
    command it names (start-up pays for one capability module, not six); otherwise, or for help
    and unknown names, every module's."""
    import importlib

    from caseshelf.cli.root import app  # typer: imported only for a command that needs it

    name = command_name(argv) if argv is not None else None
    wanted = [COMMANDS[name]] if name in COMMANDS else COMMAND_MODULES
    for module_name in wanted:
        if module_name not in _loaded:
            module = importlib.import_module(f"caseshelf.cli.{module_name}")
            module.register_commands(app)
            _loaded.add(module_name)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line and answer its exit code: 0, 1 on a failed command, 2 on a usage
    error. A command `caseshelf.cli.fast` runs without typer goes there; every other to the
    typer app."""
    from caseshelf.cli.fast import run_fast  # its own imports only: `ls` starts without typer

    args = list(sys.argv[1:] if argv is None else argv)
    code = run_fast(args)
    if code is not None:
        return code
    from caseshelf.cli.root import run_app  # typer, click and rich: the other commands

    load_commands(args)
    return run_app(argv)


def main() -> None:
    """Console-script entry point (`caseshelf`)."""
    own_process()
    sys.exit(run())
