"""`caseshelf pin`, `unpin`, `update`, `check`, `sync` and `cache ls|prune`: the dataset versions
an eval repository runs on, pinned by content digest in `caseshelf.lock`, checked in CI and
served offline from the verified local cache (`caseshelf.client.pins`, docs/datasets-as-code.md).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from caseshelf.cli.common import client, emit, escape, json_mode, note, say, short, table, wire
from caseshelf.cli.root import command
from caseshelf.client.cache import Cache, parse_size
from caseshelf.client.pins import LOCK_ENV, CheckOut, PinCheckOut, Pins
from caseshelf.domain.lockfile import Pin

LockOpt = Annotated[
    Path | None,
    typer.Option(
        "--lock",
        envvar=LOCK_ENV,
        metavar="PATH",
        help="The lock file (default: caseshelf.lock beside the nearest pyproject.toml or .git, "
        "else in the working directory).",
        show_default=False,
    ),
]
Format = Literal["text", "json", "markdown"]


def _pins(lock: Path | None) -> Pins:
    return client().pins(lock)


def _digest(d: str) -> str:
    return short(d) + "…"


def _what(pin: Pin) -> str:
    """`1,319 cases`, or for a subset `200 of 1,319 cases (tags easy, limit 200)`."""
    if pin.subset is None:
        return f"{pin.cases:,} cases"
    sel = pin.subset.model_dump(exclude_none=True, exclude={"total", "selected"})
    how = ", ".join(
        f"{k} {','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in sel.items()
    )
    return f"{pin.subset.selected:,} of {pin.subset.total:,} cases ({how})"


def _pin_line(verb: str, name: str, pin: Pin) -> str:
    return (
        f"{verb} {escape(name)}  {escape(pin.ref)} -> {pin.version}  {_digest(pin.digest)}  "
        f"{_what(pin)}"
    )


def pin(
    ref: Annotated[str, typer.Argument(metavar="ID@REF", help="A label, tag, latest or digest.")],
    as_: Annotated[
        str | None,
        typer.Option("--as", metavar="NAME", help="The pin's name (default: the dataset id)."),
    ] = None,
    ids: Annotated[
        str | None, typer.Option("--ids", metavar="A,B", help="Subset: exactly these case ids.")
    ] = None,
    tags: Annotated[
        str | None,
        typer.Option("--tags", metavar="T,U", help="Subset: cases carrying any of these tags."),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", help="Subset: the first N cases.", min=1)
    ] = None,
    sample: Annotated[
        int | None, typer.Option("--sample", help="Subset: N cases by the seeded rule.", min=1)
    ] = None,
    seed: Annotated[str | None, typer.Option("--seed", help="Seed of --sample.")] = None,
    lock: LockOpt = None,
) -> None:
    """Pin a version in caseshelf.lock: the version REF resolves to, by content digest (with
    --ids/--tags/--limit/--sample, that subset of it)."""
    out = client().pin(
        ref,
        name=as_,
        ids=_split(ids),
        tags=_split(tags),
        limit=limit,
        sample=sample,
        seed=_seed(seed),
        lock=lock,
    )

    def show(o: Any) -> None:
        verb = "pinned" if out.previous is None else "re-pinned" if out.changed else "unchanged"
        say(_pin_line(verb, out.name, out.pin))
        if out.previous is not None and out.changed:
            note(f"(was {out.previous.version} {_digest(out.previous.digest)})")

    emit(wire(out), show)


def _split(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


def _seed(text: str | None) -> int | str | None:
    if text is None:
        return None
    return int(text) if text.lstrip("-").isdigit() else text


def unpin(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The pin to take out.")],
    lock: LockOpt = None,
) -> None:
    """Take a pin out of caseshelf.lock."""
    out = client().unpin(name, lock=lock)
    emit(
        wire(out),
        lambda o: say(
            f"unpinned {escape(out.name)} (was {out.pin.version} {_digest(out.pin.digest)}) "
            f"from {escape(out.lock)}"
        ),
    )


def update(
    names: Annotated[
        list[str] | None,
        typer.Argument(metavar="[NAME]...", help="Pins to resolve again (default: every pin)."),
    ] = None,
    lock: LockOpt = None,
) -> None:
    """Resolve pins again and rewrite caseshelf.lock; print what changed."""
    out = client().update(*(names or []), lock=lock)

    def show(o: Any) -> None:
        for c in out.pins:
            before, after = c.before, c.after
            if not c.changed:
                say(f"{escape(c.name)}: unchanged ({after.version} {_digest(after.digest)})")
                continue
            say(
                f"{escape(c.name)}: {escape(after.ref_part)} {before.version} -> {after.version}  "
                f"{_digest(before.digest)} -> {_digest(after.digest)}  "
                f"{before.cases:,} -> {after.cases:,} cases"
            )
        say(f"wrote {escape(out.lock)}" if out.written else f"{escape(out.lock)} unchanged")

    emit(wire(out), show)


def check(
    strict: Annotated[
        bool,
        typer.Option("--strict", help="Also fail when a pinned ref has moved since it was locked."),
    ] = False,
    format_: Annotated[
        Format,
        typer.Option("--format", help="text, json (as --json) or markdown (for a PR comment)."),
    ] = "text",
    lock: LockOpt = None,
) -> None:
    """Check every pin against the registry in one request: exit 1, one line per problem, when a
    pinned version is gone, deleted or other content than locked (--strict: or a ref moved)."""
    out = client().check(strict=strict, lock=lock)
    if json_mode() or format_ == "json":
        sys.stdout.write(out.model_dump_json(indent=2) + "\n")
    elif format_ == "markdown":
        sys.stdout.write(check_markdown(out))
    else:
        _check_text(out)
    if not out.ok:
        raise typer.Exit(1)


def _check_text(out: CheckOut) -> None:
    for line in out.problems:
        say(escape(line))
    if not out.strict:
        for c in out.pins:
            if c.status == "moved" and c.problem:
                note(f"{c.problem} (a problem with --strict)")
    if out.ok:
        n = len(out.pins)
        say(
            f"ok: {n} pin{'s' if n != 1 else ''} of {escape(out.lock)} verified against "
            f"{escape(out.registry)}"
        )


_STATUS = {
    "ok": "ok",
    "moved": "moved",
    "gone": "gone",
    "tombstoned": "deleted",
    "mismatch": "other content",
}


def check_markdown(out: CheckOut) -> str:
    """The check as GitHub-flavoured markdown: a table of every pin and the problems."""
    head = "passed" if out.ok else f"failed: {len(out.problems)} problem(s)"
    lines = [
        f"### caseshelf check {'--strict ' if out.strict else ''}{head}",
        "",
        f"`{out.lock}` against `{out.registry}`",
        "",
        "| pin | ref | locked | now | status |",
        "|---|---|---|---|---|",
    ]
    for c in out.pins:
        lines.append(
            f"| {_md(c.name)} | `{_md(c.ref)}` | {_md(c.version)} `{short(c.digest)}` | "
            f"{_now(c)} | {_md(_state(c, out.strict))} |"
        )
    if out.problems:
        lines += ["", *[f"- {_md(p)}" for p in out.problems]]
    return "\n".join(lines) + "\n"


def _now(c: PinCheckOut) -> str:
    if c.now_version is None or c.now_digest is None:
        return "—"
    return f"{_md(c.now_version)} `{short(c.now_digest)}`"


def _state(c: PinCheckOut, strict: bool) -> str:
    state = _STATUS[c.status]
    if c.status == "moved" and c.diff is not None:
        d = c.diff
        state += f": {d.changed:,} changed, {d.added:,} added, {d.removed:,} removed"
    if c.status == "moved" and not strict:
        state += " (allowed without --strict)"
    return state


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def sync(lock: LockOpt = None) -> None:
    """Put every pinned version into the local cache, verified: loads need no registry after."""
    out = client().sync(lock=lock)

    def show(o: Any) -> None:
        for p in out.pins:
            how = "fetched" if p.source == "registry" else "cached already"
            say(
                f"synced {escape(p.name)}  {p.version}  {_digest(p.digest)}  {p.cases:,} cases  "
                f"({how})"
            )
        say(f"{len({p.digest for p in out.pins})} version(s) in {escape(out.cache)}")

    emit(wire(out), show)


def cache_ls() -> None:
    """The versions in the local cache, the most recently used first."""
    cache = Cache.from_env()
    entries = cache.entries()
    used = sum(e.bytes for e in entries)
    data = {
        "cache": str(cache.root),
        "max_bytes": cache.max_bytes,
        "bytes": used,
        "items": [e.model_dump() for e in entries],
    }

    def show(o: Any) -> None:
        if not entries:
            say(f"the cache at {escape(str(cache.root))} is empty")
            return
        rows = [
            [short(e.digest), f"{e.cases:,}", _size(e.bytes), _ago(e.last_used), e.description]
            for e in entries
        ]
        table(("digest", "cases", "size", "last used", "description"), rows)
        say(f"{_size(used)} of {_size(cache.max_bytes)} in {escape(str(cache.root))}")

    emit(data, show)


def cache_prune(
    max_size: Annotated[
        str | None,
        typer.Option(
            "--max-size",
            metavar="SIZE",
            help="Evict the least recently used until under this (e.g. 2G; default the bound).",
        ),
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Remove every cached version.")] = False,
) -> None:
    """Evict the least recently used versions until the cache is under its bound."""
    cache = Cache.from_env()
    if all_:
        gone = cache.clear()
    else:
        gone = cache.evict(max_bytes=parse_size(max_size, what="--max-size") if max_size else None)
    data = {"cache": str(cache.root), "removed": gone}
    emit(data, lambda o: say(f"removed {len(gone)} version(s) from {escape(str(cache.root))}"))


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _ago(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def register_commands(app: typer.Typer) -> None:
    command(app, "pin")(pin)
    command(app, "unpin")(unpin)
    command(app, "update")(update)
    command(app, "check")(check)
    command(app, "sync")(sync)
    cache = typer.Typer(help="The local cache of pinned versions: ls, prune.", no_args_is_help=True)
    app.add_typer(cache, name="cache")
    command(cache, "ls")(cache_ls)
    command(cache, "prune")(cache_prune)
