"""Commands that start without typer: `ls`, the one a user runs to see what is there.

Importing typer, click and rich costs more than the whole of `ls` on an empty store. So `run`
first hands the command line to `run_fast`, which takes a command line it can read exactly
(the command's own options and the common ones, each once, every value well-formed) and runs the
command's one implementation (`ls`, which the typer command `ls` calls too) through the same
client. Any other command line, help, or one with a mistake in it, answers None and goes to the
typer app, which parses it and words its usage errors as for every command.
"""

from __future__ import annotations

import os

from caseshelf.cli.common import (
    api_hint,
    begin,
    client,
    emit,
    failed,
    note,
    short,
    state,
    table,
    wire,
)
from caseshelf.domain.errors import CaseshelfError

# `typing.TYPE_CHECKING` without importing typing (the CLI's start-up path imports this).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

PAGE_MAX = 1000

# The common options (`caseshelf.cli.root`): flags, and those that take a value.
_COMMON_FLAGS = {"--json": "json_out", "--verbose": "verbose", "-v": "verbose"}
_COMMON_VALUES = {
    "--api": "api",
    "--tenant": "tenant",
    "--principal": "principal",
    "--roles": "roles",
}
_COMMON_ENV = {
    "api": "CASESHELF_API",
    "tenant": "CASESHELF_TENANT",
    "principal": "CASESHELF_PRINCIPAL",
    "roles": "CASESHELF_ROLES",
}


def when(ts: str | None) -> str:
    return (ts or "").replace("T", " ").removesuffix("Z")[:19]


def clip(value: Any, width: int = 60) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        import orjson

        value = orjson.dumps(value).decode()
    value = " ".join(value.split())
    return value if len(value) <= width else value[: width - 1] + "…"


def ls(*, shared: bool, limit: int | None, cursor: str | None) -> None:
    """`caseshelf ls`: every page of datasets, or one page with `limit` or `cursor`. On the
    embedded store an answer the handler gave is printed again while the store and the code
    are unchanged (`caseshelf.cli.answers`)."""
    from caseshelf.cli import answers

    kept = answers.key(state(), "ls", {"shared": shared, "limit": limit, "cursor": cursor})
    out = answers.find(kept) if kept else None
    if out is not None and state().verbose:
        state().logs()
        from caseshelf.cli.logs import log

        log.debug("ls: the answer kept in %s (the store is unchanged since)", kept and kept["home"])
    if out is None:
        c = client()
        if limit is not None or cursor is not None:
            out = wire(c.list_datasets(shared=shared, cursor=cursor, limit=limit or 50))
        else:
            out = wire(list(c.datasets(shared=shared)))
        if kept:
            answers.keep(kept, out, state().settings())
    emit(out, lambda o: _render_ls(o, shared=shared))


def _render_ls(o: dict[str, Any], *, shared: bool) -> None:
    if not o["items"]:
        note("no datasets" + (" in _shared" if shared else ""))
    else:
        table(
            ("id", "latest", "digest", "cases", "versions", "updated", "description"),
            [
                [
                    d["id"],
                    d.get("latest") or "",
                    short(d.get("latest_digest")),
                    d.get("case_count"),
                    d["version_count"],
                    when(d["updated_at"]),
                    clip(d.get("description"), 40),
                ]
                for d in o["items"]
            ],
        )
    if o.get("next_cursor"):
        note(f"more: caseshelf ls --cursor {o['next_cursor']}{api_hint()}")


def _ls_args(words: Sequence[str]) -> dict[str, Any] | None:
    """`ls`'s own options (`--shared`, `--limit N`, `--cursor C`), or None where typer should
    read them (anything else, a repeated option, a limit out of range)."""
    found: dict[str, Any] = {"shared": False, "limit": None, "cursor": None}
    seen: set[str] = set()
    it = iter(words)
    for word in it:
        name, eq, value = word.partition("=")
        if name in seen or name not in ("--shared", "--limit", "--cursor"):
            return None
        seen.add(name)
        if name == "--shared":
            if eq:
                return None
            found["shared"] = True
            continue
        if not eq:
            nxt = next(it, None)
            if nxt is None or nxt.startswith("-"):
                return None
            value = nxt
        if name == "--limit":
            if not value.isdigit() or not 1 <= int(value) <= PAGE_MAX:
                return None
            found["limit"] = int(value)
        elif not value:
            return None
        else:
            found["cursor"] = value
    return found


_FAST: dict[str, tuple[Callable[[Sequence[str]], dict[str, Any] | None], Callable[..., None]]] = {
    "ls": (_ls_args, ls),
}


def run_fast(argv: Sequence[str]) -> int | None:
    """Run `argv` here when it is a command line this module reads exactly; its exit code.
    None: not one of them (the typer app runs it)."""
    common: dict[str, Any] = {}
    own: list[str] = []
    name: str | None = None
    it = iter(argv)
    for word in it:
        key, eq, value = word.partition("=")
        if key in _COMMON_FLAGS and not eq:
            if _COMMON_FLAGS[key] in common:
                return None
            common[_COMMON_FLAGS[key]] = True
        elif key in _COMMON_VALUES:
            if _COMMON_VALUES[key] in common:
                return None
            if not eq:
                nxt = next(it, None)
                if nxt is None or nxt.startswith("-"):
                    return None
                value = nxt
            common[_COMMON_VALUES[key]] = value
        elif name is None and not word.startswith("-"):
            name = word
        elif name is not None:
            own.append(word)
        else:
            return None
    if name not in _FAST:
        return None
    for key, var in _COMMON_ENV.items():  # as typer reads them (`caseshelf.cli.root`)
        if key not in common and os.environ.get(var):
            common[key] = os.environ[var]
    parse, command = _FAST[name]
    args = parse(own)
    if args is None:
        return None
    if common.get("api"):
        from caseshelf.client.transport import check_url

        try:
            check_url(common["api"])
        except CaseshelfError:
            return None  # the typer app words the usage error
    begin(**common)
    try:
        command(**args)
    except (Exception, KeyboardInterrupt) as exc:
        code = failed(exc)  # as the typer app words it
        if code is None:
            raise
        return code
    return 0
