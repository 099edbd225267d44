"""The `caseshelf` command: a typer app (`caseshelf.cli.root`) whose commands live in capability
modules, and what every command shares at run time (`caseshelf.cli.common`).

Each module named in `COMMAND_MODULES` (under `caseshelf.cli`) defines its commands as
module-level functions and has a function `register_commands(app)` that declares them with
`command(app, "name")(fn)` (`caseshelf.cli.root`), which adds the common options (`--json`,
`--api`, `--tenant`, `--principal`, `--roles`) to every command, so they work before or after
the command name. `COMMANDS` names the module of each command, so a run declares only the
commands of the module it needs. Commands get their client with `client()` and print with
`emit(...)` (`caseshelf.cli.common`): JSON on stdout with `--json`, rich tables and plain lines
otherwise.

The modules below this one never import it, so the package has no import circle: this module is
the top, `common` the bottom.

Errors: a domain error (from the embedded store, or an HTTP problem+json body turned back into one)
prints `error: <detail>` on stderr and exits 1; a usage error exits 2.
"""

from __future__ import annotations

import importlib
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
from caseshelf.cli.root import (
    ApiOpt,
    CliError,
    JsonOpt,
    PrincipalOpt,
    RolesOpt,
    TenantOpt,
    abort,
    app,
    command,
    run_app,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

# What commands share (`caseshelf.cli.common`, `caseshelf.cli.root`), named here too:
# `from caseshelf.cli import emit` works.
__all__ = [
    "COMMANDS",
    "COMMAND_MODULES",
    "ApiOpt",
    "CliError",
    "JsonOpt",
    "PrincipalOpt",
    "Progress",
    "RolesOpt",
    "State",
    "TenantOpt",
    "abort",
    "api_hint",
    "app",
    "begin",
    "client",
    "command",
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
    name = command_name(argv) if argv is not None else None
    wanted = [COMMANDS[name]] if name in COMMANDS else COMMAND_MODULES
    for module_name in wanted:
        if module_name not in _loaded:
            module = importlib.import_module(f"caseshelf.cli.{module_name}")
            module.register_commands(app)
            _loaded.add(module_name)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line and answer its exit code: 0, 1 on a failed command, 2 on a usage
    error."""
    load_commands(sys.argv[1:] if argv is None else argv)
    return run_app(argv)


def main() -> None:
    """Console-script entry point (`caseshelf`)."""
    own_process()
    sys.exit(run())
