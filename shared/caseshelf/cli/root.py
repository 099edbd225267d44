"""The `caseshelf` typer app: the root callback, the common options every command takes
(`command`), and the run that turns errors into exit codes. What commands share at run time
(state, client, output) is `caseshelf.cli.common`, which needs no rich to start.

Option and argument types (`Annotated[...]` aliases) must be defined at module level: commands'
annotations are resolved against their module's globals.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Sequence
from typing import Annotated, Any, NoReturn

import typer

from caseshelf import __version__
from caseshelf.cli.common import begin, fail, failed, state

try:  # typer vendors click and names its exception base TyperException; older ones use click's
    from typer import TyperException as CliError
except ImportError:  # pragma: no cover
    from click import ClickException as CliError  # type: ignore[assignment]

app = typer.Typer(
    name="caseshelf",
    help="A registry for evaluation datasets: versioned, content-addressed, diffable.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


# -- common options -------------------------------------------------------------------------

JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print machine-readable JSON on stdout.", show_default=False)
]
VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help="Log everything caseshelf does on stderr (default: warnings; or set "
        "CASESHELF_LOG_LEVEL).",
        show_default=False,
    ),
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
    "verbose": (VerboseOpt, False),
    "api": (ApiOpt, None),
    "tenant": (TenantOpt, None),
    "principal": (PrincipalOpt, None),
    "roles": (RolesOpt, None),
}


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


def _print_version(value: bool) -> None:
    if value:
        print(f"caseshelf {__version__}")
        raise typer.Exit(0)


VersionOpt = Annotated[
    bool,
    typer.Option(
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print caseshelf's version and exit.",
        show_default=False,
    ),
]


@app.callback()
def _root(
    version: VersionOpt = False,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
    api: ApiOpt = None,
    tenant: TenantOpt = None,
    principal: PrincipalOpt = None,
    roles: RolesOpt = None,
) -> None:
    """A registry for evaluation datasets: versioned, content-addressed, diffable.

    Works on the embedded store: CASESHELF_HOME, else the nearest .caseshelf/ at or above the
    working directory (caseshelf init makes one), else the user's data directory (caseshelf
    info names it); or with --api URL on a deployed or local API.
    """
    begin(
        api=api,
        tenant=tenant,
        principal=principal,
        roles=roles,
        json_out=json_out,
        verbose=verbose,
    )


# -- running ------------------------------------------------------------------------------


def abort(message: str) -> NoReturn:
    """Fail the command: `error: <message>` on stderr, exit code 1."""
    fail(message)
    raise typer.Exit(1)


def _usage_error(exc: Any) -> None:
    """A usage error as typer renders it (a panel with the usage line), or one plain line."""
    try:
        from typer import rich_utils  # lazy: ~80 ms, for a usage error only

        rich_utils.rich_format_error(exc)
    except Exception:  # any other typer/click: keep the message, lose the styling
        fail(str(exc))


def run_app(argv: Sequence[str] | None = None) -> int:
    """Run the typer app, its commands declared (`caseshelf.cli.load_commands`), and answer
    its exit code: 0, 1 on a failed command, 2 on a usage error."""
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
    except (Exception, KeyboardInterrupt) as exc:
        code = failed(exc)
        if code is None:
            raise
        return code
    return rv if isinstance(rv, int) else 0
