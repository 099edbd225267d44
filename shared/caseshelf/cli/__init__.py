"""The `caseshelf` command: a typer app whose commands live in capability modules.

Each module named in `COMMAND_MODULES` (under `caseshelf.cli`) has a function
`register_commands(app)`; it declares its commands with `command(app, "name")`, which adds the
common options (`--json`, `--api`, `--tenant`, `--principal`, `--roles`) to every command, so they
work before or after the command name. `COMMANDS` names the module of each command, so a run
declares only the commands of the module it needs. Commands get their client with `client()`
and print with `emit(...)`: JSON on stdout with `--json`, rich tables and plain lines otherwise.

Option and argument types (`Annotated[...]` aliases) must be defined at module level: commands'
annotations are resolved against their module's globals.

Errors: a domain error (from the embedded store, or an HTTP problem+json body turned back into one)
prints `error: <detail>` on stderr and exits 1; a usage error exits 2.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
import typing
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

# The command owns its process: pydantic's plugin discovery (a scan of every installed
# distribution's entry points, a tenth of a second of every start-up) is skipped unless asked for.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import orjson
import typer
from rich.console import Console
from rich.markup import escape

from caseshelf.domain.errors import CaseshelfError

try:  # typer vendors click and names its exception base TyperException; older ones use click's
    from typer import TyperException as CliError
except ImportError:  # pragma: no cover
    from click import ClickException as CliError  # type: ignore[assignment]

if TYPE_CHECKING:
    from caseshelf.bootstrap import Settings
    from caseshelf.client import Client

# Capability modules under `caseshelf.cli`; each has `register_commands(app: typer.Typer)`.
COMMAND_MODULES: list[str] = [
    "registry",
    "migrate",
    "subset",
    "export",
    "tasks",
    "imports",
    "verify",
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
            "tag",
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
    "recipes": "imports",
    "verify": "verify",
}
# The common options that take a value (the token after them is no command name).
_VALUE_OPTIONS = frozenset({"--api", "--tenant", "--principal", "--roles"})

app = typer.Typer(
    name="caseshelf",
    help="A registry for evaluation datasets: versioned, content-addressed, diffable.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# Off a terminal (pipes, files, CI logs) tables are as wide as their content needs, not 80.
_WIDE = 240
stdout = Console(soft_wrap=True, width=None if sys.stdout.isatty() else _WIDE)
stderr = Console(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() else _WIDE)


# -- common options -------------------------------------------------------------------------

JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print machine-readable JSON on stdout.", show_default=False)
]
ApiOpt = Annotated[
    str | None,
    typer.Option(
        "--api",
        envvar="CASESHELF_API",
        metavar="URL",
        help="Talk HTTP to this API instead of the embedded store (bearer token from "
        "CASESHELF_TOKEN).",
        show_default=False,
    ),
]
TenantOpt = Annotated[
    str | None,
    typer.Option(
        "--tenant",
        envvar="CASESHELF_TENANT",
        help="Act as this tenant (default: local).",
        show_default=False,
    ),
]
PrincipalOpt = Annotated[
    str | None,
    typer.Option(
        "--principal",
        envvar="CASESHELF_PRINCIPAL",
        help="Act as this principal (default: local).",
        show_default=False,
    ),
]
RolesOpt = Annotated[
    str | None,
    typer.Option(
        "--roles",
        envvar="CASESHELF_ROLES",
        metavar="LIST",
        help="Comma list of roles, e.g. admin.",
        show_default=False,
    ),
]

_COMMON: dict[str, tuple[Any, Any]] = {
    "json_out": (JsonOpt, False),
    "api": (ApiOpt, None),
    "tenant": (TenantOpt, None),
    "principal": (PrincipalOpt, None),
    "roles": (RolesOpt, None),
}


@dataclass
class State:
    """What the common options chose, shared by the root callback and every command."""

    api: str | None = None
    tenant: str | None = None
    principal: str | None = None
    roles: str | None = None
    json_out: bool = False
    _client: Client | None = field(default=None, repr=False)

    def merge(self, **values: Any) -> None:
        for name, value in values.items():
            if value is not None and value is not False:
                setattr(self, name, value)

    def role_list(self) -> tuple[str, ...] | None:
        if self.roles is None:
            return None
        return tuple(r.strip() for r in self.roles.split(",") if r.strip())

    def settings(self, **overrides: Any) -> Settings:
        """Settings from the environment, with the identity options on top."""
        from caseshelf.bootstrap import load_settings

        return load_settings(
            tenant=self.tenant,
            principal=self.principal,
            roles=self.role_list(),
            **overrides,
        )

    def client(self) -> Client:
        """The Python client on what the options chose: the embedded store in process, or
        the API at `--api` over HTTP. Every command is a layer on it."""
        if self._client is None:
            from caseshelf.client import Client, Http, InProcess

            if self.api:
                try:
                    http = Http(
                        self.api,
                        tenant=self.tenant,
                        principal=self.principal,
                        roles=self.role_list(),
                        token=os.environ.get("CASESHELF_TOKEN") or None,
                    )
                except CaseshelfError as exc:
                    raise typer.BadParameter(exc.detail, param_hint="--api") from None
                self._client = Client(http)
            else:
                self._client = Client(InProcess(self.settings()))
        return self._client


_state = State()


def state() -> State:
    """The options of the command being run (one command runs per invocation)."""
    return _state


def client() -> Client:
    """The client the options chose: the embedded store, or HTTP with `--api URL`."""
    return state().client()


def json_mode() -> bool:
    return state().json_out


def wire(value: Any) -> Any:
    """A client answer (a wire model, or a list of them) as the JSON the API sent; a list
    becomes the page it came as (`{items, next_cursor: null}`)."""
    if isinstance(value, list):
        return {"items": [wire(v) for v in value], "next_cursor": None}
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else value


def api_hint() -> str:
    """` --api URL` when the command talks to an API (so a printed follow-up command does too)."""
    api = state().api
    return f" --api {api}" if api else ""


def command(
    target: typer.Typer, name: str | None = None, **kwargs: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`target.command(name)` plus the common options on the command itself."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        hints = typing.get_type_hints(fn, include_extras=True)
        sig = inspect.signature(fn)
        own = [
            p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()
        ]
        taken = {p.name for p in own}
        common = [
            inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=a)
            for n, (a, d) in _COMMON.items()
            if n not in taken
        ]
        common_names = {p.name for p in common}

        @functools.wraps(fn)
        def wrapper(*args: Any, **kw: Any) -> Any:
            state().merge(**{n: kw.pop(n) for n in list(kw) if n in common_names})
            return fn(*args, **kw)

        params = own + common
        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        if "return" in hints:
            wrapper.__annotations__["return"] = hints["return"]
        target.command(name, **kwargs)(wrapper)
        return fn

    return decorate


@app.callback()
def _root(
    json_out: JsonOpt = False,
    api: ApiOpt = None,
    tenant: TenantOpt = None,
    principal: PrincipalOpt = None,
    roles: RolesOpt = None,
) -> None:
    """A registry for evaluation datasets: versioned, content-addressed, diffable.

    Works on the embedded store in CASESHELF_HOME (default ./.caseshelf), or with --api URL on a
    deployed or local API.
    """
    global _state
    _state = State()
    _state.merge(api=api, tenant=tenant, principal=principal, roles=roles, json_out=json_out)


# -- output ---------------------------------------------------------------------------------


def dumps(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()


def emit(data: Any, render: Callable[[Any], None] | None = None) -> None:
    """JSON on stdout with `--json`; otherwise `render(data)` (or the JSON when there is none)."""
    if json_mode() or render is None:
        sys.stdout.write(dumps(data) + "\n")
        sys.stdout.flush()
    else:
        render(data)


def say(message: str) -> None:
    """A human line on stdout (rich markup allowed; escape user text with `escape`)."""
    stdout.print(message, highlight=False)


def note(message: str) -> None:
    """A hint on stderr, never mixed into machine output."""
    stderr.print(message, highlight=False, style="dim")


def warn(message: str) -> None:
    """`warning: <message>` on stderr."""
    stderr.print(f"[yellow]warning:[/] {escape(message)}", highlight=False)


def table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None
) -> None:
    """A rich table of plain values (user text is escaped)."""
    from rich.table import Table

    t = Table(*columns, title=title, show_edge=False, pad_edge=False, header_style="bold")
    for row in rows:
        t.add_row(*(escape("" if v is None else str(v)) for v in row))
    stdout.print(t)


def fields_table(pairs: Sequence[tuple[str, Any]]) -> None:
    """One object as aligned `key  value` lines."""
    width = max((len(k) for k, _ in pairs), default=0)
    for key, value in pairs:
        text = "" if value is None else str(value)
        stdout.print(f"[bold]{key.ljust(width)}[/]  {escape(text)}".rstrip(), highlight=False)


def short(digest: str | None, n: int = 12) -> str:
    """`sha256:` plus the first `n` hex digits, for tables."""
    if not digest:
        return ""
    return digest[: 7 + n]


@dataclass
class Progress:
    """A handle on one progress task; a no-op where nothing is drawn."""

    _advance: Callable[[float], None] = lambda _n: None
    _total: Callable[[float | None], None] = lambda _t: None
    _restart: Callable[[str, float | None], None] = lambda _d, _t: None

    def advance(self, n: float = 1) -> None:
        self._advance(n)

    def total(self, total: float | None) -> None:
        self._total(total)

    def restart(self, description: str, total: float | None = None) -> None:
        """The same bar, counting something else from zero (e.g. bytes uploaded)."""
        self._restart(description, total)


@contextmanager
def progress(description: str, total: float | None = None) -> Iterator[Progress]:
    """A progress bar on stderr for long work, with its total when known: only on a terminal,
    also under `--json` (stdout carries the JSON, stderr the bar)."""
    if not stderr.is_terminal:
        yield Progress()
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.progress import Progress as RichProgress

    with RichProgress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield Progress(
            lambda n: bar.advance(task, n),
            lambda t: bar.update(task, total=t),
            lambda d, t: bar.reset(task, total=t, description=d),
        )


# -- entry point ----------------------------------------------------------------------------


def fail(message: str) -> None:
    """Print `error: <message>` on stderr."""
    stderr.print(f"[bold red]error:[/] {escape(message)}", highlight=False)


def abort(message: str) -> NoReturn:
    """Fail the command: `error: <message>` on stderr, exit code 1."""
    fail(message)
    raise typer.Exit(1)


def _usage_error(exc: Any) -> None:
    """A usage error as typer renders it (a panel with the usage line), or one plain line."""
    try:
        from typer import rich_utils

        rich_utils.rich_format_error(exc)
    except Exception:  # any other typer/click: keep the message, lose the styling
        fail(str(exc))


def run(argv: Sequence[str] | None = None) -> int:
    """Run the app and answer its exit code: 0, 1 on a failed command, 2 on a usage error."""
    load_commands(sys.argv[1:] if argv is None else argv)
    command_ = typer.main.get_command(app)
    try:
        rv = command_.main(
            args=list(argv) if argv is not None else None,
            prog_name="caseshelf",
            standalone_mode=False,
        )
    except CliError as exc:  # usage errors (exit code 2) and other CLI errors
        _usage_error(exc)
        return exc.exit_code or 1
    except typer.Abort:
        fail("aborted")
        return 1
    except CaseshelfError as exc:
        fail(exc.detail)
        return 1
    except KeyboardInterrupt:
        fail("interrupted")
        return 130
    except OSError as exc:
        fail(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
        return 1
    except Exception as exc:
        # AWS client failures that are not answers (no credentials, no endpoint) come from
        # botocore, which is imported only when AWS is used: name them without a traceback.
        if type(exc).__module__.startswith("botocore"):
            fail(f"AWS: {exc}")
            return 1
        raise
    return rv if isinstance(rv, int) else 0


def main() -> None:
    """Console-script entry point (`caseshelf`)."""
    sys.exit(run())


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
    """Declare the commands: with `argv`, only those of the module of the command it names
    (start-up pays for one capability module, not six); otherwise, or for help and unknown
    names, every module's."""
    name = command_name(argv) if argv is not None else None
    wanted = [COMMANDS[name]] if name in COMMANDS else COMMAND_MODULES
    for module_name in wanted:
        if module_name not in _loaded:
            module = importlib.import_module(f"{__name__}.{module_name}")
            module.register_commands(app)
            _loaded.add(module_name)
