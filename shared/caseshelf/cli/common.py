"""What every command shares at run time: the common options' state, the client they choose,
and output (JSON with `--json`, rich tables and plain lines otherwise, hints and errors on
stderr). Rich is imported with the first line drawn, the client with the first call.
"""

from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Any

import typer

from caseshelf.cli.logs import configure, log
from caseshelf.domain.errors import CaseshelfError, NotFound
from caseshelf.storehome import find_home, placed

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from rich.console import Console

    from caseshelf.bootstrap import Settings
    from caseshelf.client import Client


# Whether this process is the command's own (the console script, `own_process`): only then
# does the command configure logging (`State.logs`).
_owns_process = False


def own_process() -> None:
    """Say that this process is the command's own: its logging is the command's to set."""
    global _owns_process
    _owns_process = True


def stop_on_signals() -> None:
    """In the command's own process, SIGTERM (what `docker stop` and Kubernetes send) and
    SIGINT stop a long-running command as Ctrl-C does, also where the process was started with
    SIGINT ignored (a job started in the background inherits that)."""
    if _owns_process:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.default_int_handler)


# -- the options' state and the client --------------------------------------------------------


class State:
    """What the common options chose, shared by the root callback and every command."""

    def __init__(self) -> None:
        self.api: str | None = None
        self.tenant: str | None = None
        self.principal: str | None = None
        self.roles: str | None = None
        self.json_out = False
        self.num_proc: int | None = None  # `import --num-proc`: CASESHELF_NUM_PROC otherwise
        self.verbose = False
        self._client: Client | None = None

    def merge(self, **values: Any) -> None:
        for name, value in values.items():
            if value is not None and value is not False:
                setattr(self, name, value)

    def role_list(self) -> tuple[str, ...] | None:
        if self.roles is None:
            return None
        return tuple(r.strip() for r in self.roles.split(",") if r.strip())

    def logs(self) -> None:
        """Human log lines on stderr at the level asked for (`caseshelf.cli.logs`), where the
        command owns its process (the console script)."""
        if _owns_process:
            configure(self.verbose)

    def settings(self, **overrides: Any) -> Settings:
        """Settings from the environment, with the identity options on top."""
        from caseshelf.bootstrap import load_settings  # lazy: ~100 ms --api and a kept ls skip

        self.logs()
        return load_settings(
            tenant=self.tenant,
            principal=self.principal,
            roles=self.role_list(),
            num_proc=self.num_proc,
            **overrides,
        )

    def client(self) -> Client:
        """The Python client on what the options chose: the embedded store in process, or
        the API at `--api` over HTTP. Every command is a layer on it."""
        if self._client is None:
            from caseshelf.client import (  # lazy: ~30 ms a kept ls answer skips
                Client,
                Http,
                InProcess,
            )

            self.logs()
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
                settings = self.settings()
                self._client = Client(InProcess(settings))
                if settings.backend == "local":
                    home = settings.store_home
                    log.info("the store at %s (%s)", home.path, home.how)
        return self._client


_state = State()


def begin(**values: Any) -> State:
    """A fresh state for the command being run, with the common options given."""
    global _state
    _state = State()
    _state.merge(**values)
    return _state


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


# -- output -----------------------------------------------------------------------------------

# Off a terminal (pipes, files, CI logs) tables are as wide as their content needs, not 80.
_WIDE = 240


@cache
def _console(to_stderr: bool) -> Console:
    """The rich console on stdout or stderr, built on the first line drawn there."""
    from rich.console import Console  # lazy: ~35 ms, on the first line drawn (see `note`)

    stream = sys.stderr if to_stderr else sys.stdout
    return Console(stderr=to_stderr, soft_wrap=True, width=None if stream.isatty() else _WIDE)


def out_console() -> Console:
    return _console(False)


def err_console() -> Console:
    return _console(True)


def escape(text: str) -> str:
    """`text` with rich markup escaped (user text in a marked-up line)."""
    from rich.markup import escape as rich_escape  # lazy: ~15 ms, as rich.console above

    return rich_escape(text)


def dumps(value: Any) -> str:
    import orjson  # lazy: ~12 ms (its .so) off verify's, migrate's and pins' start-up

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
    out_console().print(message, highlight=False)


def note(message: str) -> None:
    """A hint on stderr, never mixed into machine output."""
    if _plain_stderr(message):
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
        return
    err_console().print(message, highlight=False, style="dim")


def _plain_stderr(message: str) -> bool:
    """Whether `message` comes out of rich on stderr exactly as it is: stderr is no terminal
    (so no style is drawn), and the text has nothing rich would read as markup or an emoji
    code. Writing it straight spares a command that prints only such a line (`ls` on an empty
    store) the import of rich."""
    if "[" in message or ":" in message.replace(": ", "") or "FORCE_COLOR" in os.environ:
        return False
    return not sys.stderr.isatty() and os.environ.get("TTY_COMPATIBLE") != "1"


def warn(message: str) -> None:
    """`warning: <message>` on stderr."""
    err_console().print(f"[yellow]warning:[/] {escape(message)}", highlight=False)


def fail(message: str) -> None:
    """Print `error: <message>` on stderr."""
    err_console().print(f"[bold red]error:[/] {escape(message)}", highlight=False)


def table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None
) -> None:
    """A rich table of plain values (user text is escaped)."""
    from rich.table import Table  # lazy: ~35 ms, on the first table drawn

    t = Table(*columns, title=title, show_edge=False, pad_edge=False, header_style="bold")
    for row in rows:
        t.add_row(*(escape("" if v is None else str(v)) for v in row))
    out_console().print(t)


def fields_table(pairs: Sequence[tuple[str, Any]]) -> None:
    """One object as aligned `key  value` lines."""
    width = max((len(k) for k, _ in pairs), default=0)
    for key, value in pairs:
        text = "" if value is None else str(value)
        out_console().print(
            f"[bold]{key.ljust(width)}[/]  {escape(text)}".rstrip(), highlight=False
        )


def short(digest: str | None, n: int = 12) -> str:
    """`sha256:` plus the first `n` hex digits, for tables."""
    if not digest:
        return ""
    return digest[: 7 + n]


class Progress:
    """A handle on one progress task; a no-op where nothing is drawn."""

    def __init__(
        self,
        advance: Callable[[float], None] = lambda _n: None,
        total: Callable[[float | None], None] = lambda _t: None,
        restart: Callable[[str, float | None], None] = lambda _d, _t: None,
    ) -> None:
        self._advance = advance
        self._total = total
        self._restart = restart

    def advance(self, n: float = 1) -> None:
        self._advance(n)

    def total(self, total: float | None) -> None:
        self._total(total)

    def restart(self, description: str, total: float | None = None) -> None:
        """The same bar, counting something else from zero (e.g. bytes uploaded)."""
        self._restart(description, total)


def live_progress() -> bool:
    """Whether progress is drawn as one live bar (rich) redrawn in place: when stderr is a
    terminal (as rich sees it: `TTY_COMPATIBLE=1` and `FORCE_COLOR` count too). Otherwise
    commands print nothing (`progress`) or a few plain lines (`export`, `pull`) for logs. The
    one decision every command's progress takes."""
    return err_console().is_terminal


@contextmanager
def progress(description: str, total: float | None = None) -> Iterator[Progress]:
    """A progress bar on stderr for long work, with its total when known: only on a terminal,
    also under `--json` (stdout carries the JSON, stderr the bar)."""
    if not live_progress():
        yield Progress()
        return
    from rich.progress import (  # lazy: ~30 ms, only a terminal draws a bar
        BarColumn,
        MofNCompleteColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.progress import Progress as RichProgress  # lazy: as the columns above

    with RichProgress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console(),
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield Progress(
            lambda n: bar.advance(task, n),
            lambda t: bar.update(task, total=t),
            lambda d, t: bar.reset(task, total=t, description=d),
        )


# -- failures ---------------------------------------------------------------------------------


def failed(exc: BaseException) -> int | None:
    """A command's failure as the CLI words it: `error: <detail>` on stderr and the exit code
    (1, or 130 when interrupted); None for an exception that is a bug (its traceback shows).
    The one wording of every command's failures (`caseshelf.cli.root.run_app`)."""
    if isinstance(exc, CaseshelfError):
        fail(_placed(exc).detail)
        return 1
    if isinstance(exc, KeyboardInterrupt):
        fail("interrupted")
        return 130
    if isinstance(exc, OSError):
        fail(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
        return 1
    # AWS client failures that are not answers (no credentials, no endpoint) come from
    # botocore, which is imported only when AWS is used: name them without a traceback.
    if type(exc).__module__.startswith("botocore"):
        fail(f"AWS: {exc}")
        return 1
    return None


def _placed(exc: CaseshelfError) -> CaseshelfError:
    """A not-found error of a command on the embedded store with the store named, where the
    command read the store's services itself (`verify`, `gc`) rather than through the client,
    which names it already (`caseshelf.client.transport.InProcess.placed`)."""
    if not isinstance(exc, NotFound) or state().api:
        return exc
    if os.environ.get("CASESHELF_BACKEND", "local") not in ("", "local"):
        return exc
    return placed(exc, find_home())
