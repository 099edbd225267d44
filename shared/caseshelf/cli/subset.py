"""Subset and diff commands.

    caseshelf subset ID@REF [--ids a,b] [--tags x,y] [--limit N] [--sample N --seed S]
                            [--register-as ID[@VERSION] [--bump minor]] [--cases] [--json]
    caseshelf diff A@REF [B@]REF [--summary-only] [--include-deleted]
                                 [--format text|json|jsonl|markdown] [--ui-url URL]

`subset` prints the selected case ids on stdout, one a line (the cases as JSON lines with
`--cases`), and its stamp on stderr, so the ids pipe cleanly. `diff` prints a coloured, git-like
view; `--json` prints the wire answer of either; `diff --format markdown` a pull-request comment
(`Client.diff_markdown`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from enum import StrEnum
from typing import Annotated, Any

import orjson
import typer
from rich.markup import escape
from rich.text import Text

from caseshelf.cli.common import client, emit, json_mode, note, out_console, say, short, wire
from caseshelf.cli.registry import BumpKind, parse_ref, parse_version
from caseshelf.cli.root import command
from caseshelf.domain.paging import MAX_PAGE
from caseshelf.domain.textdiff import Segment, around_changes, marked, word_diff

# A display value longer than this is cut (the whole value with `--full` or in `--json`).
VALUE_WIDTH = 160
UI_URL_ENV = "CASESHELF_UI_URL"


class DiffFormat(StrEnum):
    text = "text"
    json = "json"
    jsonl = "jsonl"
    markdown = "markdown"


# Unchanged text kept either side of a changed word in a cut value.
CONTEXT = 40


# The selection options `export` takes too (its `subset`).
IdsOpt = Annotated[str | None, typer.Option("--ids", metavar="A,B", help="Exactly these case ids.")]
TagsOpt = Annotated[
    str | None, typer.Option("--tags", metavar="X,Y", help="Cases with any of these tags.")
]
LimitOpt = Annotated[
    int | None, typer.Option("--limit", min=1, help="The first N, in dataset order.")
]


def split_list(value: str | None, what: str) -> list[str] | None:
    """`a,b` as `["a", "b"]` (None stays None); an option given with no value is refused."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise typer.BadParameter(f"{value!r}: give at least one value", param_hint=what)
    return items


def _seed(value: str | None) -> int | str | None:
    # The sample rule hashes the seed's text, so 7 and "7" draw the same sample; a number is
    # kept a number in the stamp.
    if value is None:
        return None
    return int(value) if value.isdigit() and len(value) < 19 else value


def _register_as(value: str | None, bump: BumpKind | None) -> dict[str, Any] | None:
    if value is None:
        if bump is not None:
            raise typer.BadParameter("--bump goes with --register-as", param_hint="--bump")
        return None
    if "@" in value:
        if bump is not None:
            raise typer.BadParameter(
                "give either ID@VERSION or --bump, not both", param_hint="--register-as"
            )
        name, version = parse_version(value, what="--register-as")
        return {"id": name, "version": version}
    name, _ = parse_ref(value, what="--register-as")
    return {"id": name, "bump": (bump or BumpKind.minor).value}


def _stamp_line(out: dict[str, Any]) -> str:
    stamp = out["stamp"]
    if stamp is None:
        return f"the whole version: {len(out['case_ids'])} cases (no selection, no stamp)"
    chosen = ", ".join(
        f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}"
        for k in ("ids", "tags", "limit", "sample", "seed")
        if (v := stamp.get(k)) is not None
    )
    return (
        f"selected {stamp['selected']} of {stamp['total']} cases of "
        f"{stamp['id']}@{stamp['version']} ({short(stamp['content_digest'])}): {chosen}"
    )


def _clip(text: str, width: int = VALUE_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _render_diff_head(d: dict[str, Any], view: DiffView) -> None:
    b, c = d["base"], d["candidate"]
    same_id = b["id"] == c["id"]
    cand_name = c["version"] if same_id else f"{c['id']}@{c['version']}"
    say(
        f"[bold]diff {escape(b['id'])}@{escape(b['version'])} {short(b['content_digest'])} → "
        f"{escape(cand_name)} {short(c['content_digest'])}[/]"
    )
    meta = d["meta"]
    for ch in meta["changes"]:
        _render_change(ch, view, indent="")
    if meta["case_order_changed"]:
        say("[yellow]~ the cases come in another order[/]")


def _render_diff_entries(d: dict[str, Any], view: DiffView) -> None:
    """The entries of one page, in the diff's order: changed, added, removed."""
    for entry in d["changed"] or []:
        say(f"[yellow]~ {escape(entry['id'])}[/]")
        for ch in entry["changes"]:
            _render_change(ch, view, indent="    ")
    for item in d["added"] or []:
        say(f"[green]+ {escape(item['id'])}[/]  {escape(item['user'] or '')}")
    for item in d["removed"] or []:
        say(f"[red]- {escape(item['id'])}[/]  {escape(item['user'] or '')}")


def _render_diff_summary(d: dict[str, Any]) -> None:
    s = d["summary"]
    say(
        f"[green]{s['added']} added[/], [red]{s['removed']} removed[/], "
        f"[yellow]{s['changed']} changed[/], {s['unchanged']} unchanged"
    )


def _diff_lines(pages: Iterator[Any]) -> Iterator[bytes]:
    """JSON Lines of a diff: a head line (`kind: "diff"`: versions, summary, meta), then one
    line an entry (`kind` `changed`, `added` or `removed`), a page at a time."""
    for n, page in enumerate(pages):
        d = wire(page)
        if n == 0:
            head = {k: d[k] for k in ("base", "candidate", "summary", "meta")}
            yield orjson.dumps({"kind": "diff", **head})
        for kind in ("changed", "added", "removed"):
            for entry in d[kind] or ():
                yield orjson.dumps({"kind": kind, **entry})


def display_value(value: Any) -> str:
    """A JSON value as compact JSON with sorted keys (as `caseshelf.api.dto` shows it)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


class DiffView:
    """How changed values are drawn: cut around the change or whole (`--full`), and the
    word-level marks as colours or as `[-old-]{+new+}`."""

    def __init__(self, *, full: bool, color: bool | None) -> None:
        self.full = full
        self.color = out_console().is_terminal if color is None else color

    def line(self, indent: str, sign: str, style: str, segments: list[Segment]) -> None:
        """One `sign` line of `segments`: each run styled (colour) or marked (plain)."""
        if not self.full:
            segments = around_changes(segments, CONTEXT)
        if not self.color:
            say(f"{indent}{sign}  {escape(self._flat(marked(segments)))}")
            return
        text = Text(f"{indent}{sign}  ", style=style)
        for op, part in segments:
            text.append(self._flat(part), style=_MARK_STYLES[op] if op != "=" else style)
        self._console().print(text, highlight=False)

    def _flat(self, text: str) -> str:
        # A cut value is one line (newlines as `\n`); the whole value keeps its lines, indented.
        return text.replace("\n", "\n      ") if self.full else text.replace("\n", "\\n")

    def _console(self) -> Any:
        console = out_console()
        if console.is_terminal:
            return console
        # --color off a terminal: styles all the same
        from rich.console import Console  # lazy: ~35 ms these commands start without

        return Console(force_terminal=True, soft_wrap=True)

    def value(self, value: Any) -> str:
        text = value if isinstance(value, str) else display_value(value)
        return text if self.full else _clip(text.replace("\n", "\\n"))


_MARK_STYLES = {"-": "bold red reverse", "+": "bold green reverse"}


def _render_change(ch: dict[str, Any], view: DiffView, *, indent: str) -> None:
    say(f"{indent}[cyan]{escape(ch['path'])}[/]")
    if "before" in ch and "after" in ch:
        before, after = ch["before"], ch["after"]
        both_text = isinstance(before, str) and isinstance(after, str)
        if not both_text:
            before, after = display_value(before), display_value(after)
        if both_text or len(before) + len(after) > VALUE_WIDTH:
            view.line(indent, "~", "yellow", word_diff(before, after))
            return
    if "before" in ch:
        say(f"{indent}[red]-  {escape(view.value(ch['before']))}[/]")
    if "after" in ch:
        say(f"{indent}[green]+  {escape(view.value(ch['after']))}[/]")


def subset(
    ref: Annotated[str, typer.Argument(metavar="ID@REF", help="ID alone means latest.")],
    ids: IdsOpt = None,
    tags: TagsOpt = None,
    limit: LimitOpt = None,
    sample: Annotated[
        int | None, typer.Option("--sample", min=1, help="N cases by the seeded sample rule.")
    ] = None,
    seed: Annotated[
        str | None, typer.Option("--seed", help="Seed of the sample rule (default 0).")
    ] = None,
    register_as: Annotated[
        str | None,
        typer.Option(
            "--register-as",
            metavar="ID[@VERSION]",
            help="Register the selection as a derived version (no case bytes copied).",
        ),
    ] = None,
    bump: Annotated[
        BumpKind | None,
        typer.Option("--bump", help="With --register-as ID: the bump (default minor)."),
    ] = None,
    cases: Annotated[
        bool, typer.Option("--cases", help="Print the selected cases as JSON lines.")
    ] = False,
    include_deleted: Annotated[
        bool, typer.Option("--include-deleted", help="Allow a tombstoned version.")
    ] = False,
) -> None:
    """Select a stamped subset of a version: ids -> tags -> limit -> sample."""
    parse_ref(ref)
    body: dict[str, Any] = {
        "ids": split_list(ids, "--ids"),
        "tags": split_list(tags, "--tags"),
        "limit": limit,
        "sample": sample,
        "seed": _seed(seed),
        "register_as": _register_as(register_as, bump),
    }
    body = {k: v for k, v in body.items() if v is not None}
    out = wire(client().subset(ref, body, with_cases=cases, include_deleted=include_deleted))

    def render(o: dict[str, Any]) -> None:
        note(_stamp_line(o))
        if o["cases"] is not None:
            for case in o["cases"]:
                sys.stdout.write(orjson.dumps(case).decode() + "\n")
        else:
            sys.stdout.write("".join(f"{cid}\n" for cid in o["case_ids"]))
        sys.stdout.flush()
        reg = o.get("registered")
        if reg is not None:
            verb = "registered" if reg["created"] else "already registered"
            note(
                f"{verb} {reg['id']}@{reg['version']}  {reg['content_digest']}  "
                f"{reg['case_count']} cases"
            )

    emit(out, render)


SummaryOnlyOpt = Annotated[
    bool,
    typer.Option("--summary-only", help="Counts and metadata changes only (no case read)."),
]
DiffJsonlOpt = Annotated[
    bool,
    typer.Option(
        "--jsonl",
        help="JSON Lines, streamed a page at a time: a head line, then one an entry.",
    ),
]
PageSizeOpt = Annotated[
    int,
    typer.Option("--page-size", min=1, max=MAX_PAGE, help="Entries asked for a request."),
]
DiffFormatOpt = Annotated[
    DiffFormat,
    typer.Option(
        "--format",
        help="text (default), json (= --json), jsonl (= --jsonl), or markdown: a "
        "GitHub pull-request comment, at most 65,536 characters.",
    ),
]
UiUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--ui-url",
        envvar=UI_URL_ENV,
        metavar="URL",
        help=f"markdown: link the versions and cases to the web UI at URL (default ${UI_URL_ENV}).",
    ),
]
MaxCasesOpt = Annotated[
    int,
    typer.Option("--max-cases", min=0, help="markdown: changed, added and removed cases shown."),
]
FullOpt = Annotated[bool, typer.Option("--full", help="Whole values, not cut around the change.")]
ColorOpt = Annotated[
    bool | None,
    typer.Option(
        "--color/--no-color",
        help="Mark changed words with colours (default: on a terminal) or as [-old-]{+new+}.",
    ),
]


def diff(
    base: Annotated[str, typer.Argument(metavar="A@REF", help="The base version.")],
    candidate: Annotated[
        str,
        typer.Argument(
            metavar="[B@]REF", help="The candidate: a ref of A, or B@REF of another dataset."
        ),
    ],
    summary_only: SummaryOnlyOpt = False,
    include_deleted: Annotated[
        bool, typer.Option("--include-deleted", help="Allow tombstoned versions.")
    ] = False,
    jsonl: DiffJsonlOpt = False,
    page_size: PageSizeOpt = MAX_PAGE,
    fmt: DiffFormatOpt = DiffFormat.text,
    ui_url: UiUrlOpt = None,
    max_cases: MaxCasesOpt = 20,
    full: FullOpt = False,
    color: ColorOpt = None,
) -> None:
    """What changed between two versions: changed (field by field), added, removed.

    Read and printed a page of entries at a time (`--jsonl` for JSON Lines); `--json`
    prints one document with every entry; `--format markdown` a pull-request comment."""
    parse_ref(base, what="A@REF")
    if "@" in candidate:
        parse_ref(candidate, what="[B@]REF")
    else:
        parse_ref(f"{base.partition('@')[0]}@{candidate}", what="[B@]REF")
    if fmt is DiffFormat.markdown:
        text = client().diff_markdown(
            base,
            candidate,
            ui_url=ui_url or None,
            max_cases=max_cases,
            summary=summary_only,
            include_deleted=include_deleted,
        )
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    jsonl = jsonl or fmt is DiffFormat.jsonl
    if json_mode() or fmt is DiffFormat.json:  # one document, every entry joined
        out = client().diff(base, candidate, summary=summary_only, include_deleted=include_deleted)
        emit(wire(out))
        return
    pages = client().diff_pages(
        base, candidate, summary=summary_only, include_deleted=include_deleted, limit=page_size
    )
    if jsonl:
        for line in _diff_lines(pages):
            sys.stdout.write(line.decode() + "\n")
        sys.stdout.flush()
        return
    view = DiffView(full=full, color=color)
    last: dict[str, Any] | None = None
    for n, page in enumerate(pages):  # one page held at a time
        last = wire(page)
        if n == 0:
            _render_diff_head(last, view)
        _render_diff_entries(last, view)
    if last is not None:
        _render_diff_summary(last)


def register_commands(app: typer.Typer) -> None:
    command(app, "subset")(subset)
    command(app, "diff")(diff)
