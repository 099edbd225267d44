"""Registry commands: register, validate, ls, versions, get, cases, tag, rm, revive, download,
serve, gc."""

from __future__ import annotations

import shlex
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from caseshelf.cli import answers
from caseshelf.cli.common import (
    api_hint,
    client,
    emit,
    fields_table,
    json_mode,
    note,
    progress,
    say,
    short,
    state,
    stop_on_signals,
    table,
    warn,
    wire,
)
from caseshelf.cli.logs import log
from caseshelf.cli.root import abort, command
from caseshelf.domain.errors import CaseshelfError
from caseshelf.services.bulk import gc_paused

PAGE_MAX = 1000


# -- ID@REF ---------------------------------------------------------------------------------


def parse_ref(value: str, *, what: str = "ID@REF") -> tuple[str, str]:
    """`ID` or `ID@REF`, strictly (`caseshelf.client.parse_ref`); a bad one is a usage error."""
    from caseshelf.client.refs import parse_ref as parse  # lazy: client, ~15 ms; kept ls skips

    try:
        return parse(value, what=what)
    except CaseshelfError as exc:
        raise typer.BadParameter(exc.detail, param_hint=what) from None


def parse_version(value: str, *, what: str = "ID@VERSION") -> tuple[str, str]:
    """`ID@VERSION` with an explicit version label (changes never guess which version)."""
    from caseshelf.client.refs import parse_version as parse  # lazy: as in parse_ref

    try:
        return parse(value, what=what)
    except CaseshelfError as exc:
        raise typer.BadParameter(exc.detail, param_hint=what) from None


# -- dataset files --------------------------------------------------------------------------


class SearchIn(StrEnum):
    """What `cases --search` looks in (the cases route's `by`)."""

    any = "any"
    id = "id"
    tag = "tag"
    text = "text"


class BumpKind(StrEnum):
    major = "major"
    minor = "minor"
    patch = "patch"


Bump = Annotated[
    BumpKind | None,
    typer.Option(
        "--bump",
        help="Take the next semver label instead of a fixed version.",
        show_default=False,
    ),
]
VersionOpt = Annotated[
    str | None,
    typer.Option("--version", help="The version label (overrides the file's).", show_default=False),
]
DatasetOpt = Annotated[
    str | None,
    typer.Option(
        "--dataset", metavar="ID", help="The dataset id (overrides the file's).", show_default=False
    ),
]
BaseOpt = Annotated[
    str | None,
    typer.Option(
        "--base",
        metavar="REF",
        help="Reuse the stored cases of this version (default: the latest live one).",
        show_default=False,
    ),
]
DeletedOpt = Annotated[
    bool,
    typer.Option(
        "--deleted", "--include-deleted", help="Also resolve deleted (tombstoned) versions."
    ),
]
FileArg = Annotated[
    Path,
    typer.Argument(
        metavar="FILE", help="A dataset file: .json, .jsonl or .yaml.", show_default=False
    ),
]


def load_body(
    file: Path,
    *,
    dataset: str | None,
    version: str | None,
    bump: BumpKind | str | None,
    base: str | None,
) -> dict[str, Any]:
    """The dataset document from `file`, with the command-line overrides applied."""
    from caseshelf.services.loaders import (  # lazy: ~130 ms, register/validate only
        load_dataset,
        with_overrides,
    )

    if version is not None and bump is not None:
        raise typer.BadParameter("give either --version or --bump, not both")
    doc, notices = load_dataset(file)
    for line in notices:  # deprecated shapes still load; say so once per file and code
        warn(line)
    body = with_overrides(
        doc, dataset=dataset, version=version, bump=None if bump is None else str(bump), base=base
    )
    if "id" not in body:
        raise typer.BadParameter(f"{file} names no dataset id; give --dataset ID")
    if body.get("version") is None and body.get("bump") is None:
        raise typer.BadParameter(f"{file} names no version; give --version LABEL or --bump")
    return body


def _register_file(
    file: Path,
    *,
    dataset: str | None,
    version: str | None,
    bump: BumpKind | str | None,
    base: str | None,
    dry_run: bool = False,
) -> tuple[str | None, dict[str, Any]]:
    """`register` (with `dry_run`, `validate`) of a FILE larger than one request body: handed
    to the client as a file (`Client.register_file`), uploaded and read by the server's job a
    window of cases at a time, on the embedded store as over HTTP; the dataset id where the
    command line names it, and the answer."""
    from caseshelf.client.core import STREAM_FILE_BYTES  # lazy: as in parse_ref
    from caseshelf.services.loaders import refuse_row_file  # lazy: ~130 ms, register/validate only

    if version is not None and bump is not None:
        raise typer.BadParameter("give either --version or --bump, not both")
    refuse_row_file(file)
    if file.suffix.lower() in (".jsonl", ".ndjson"):
        if dataset is None:
            raise typer.BadParameter(f"{file} names no dataset id; give --dataset ID")
        if version is None and bump is None:
            raise typer.BadParameter(f"{file} names no version; give --version LABEL or --bump")
    size = file.stat().st_size
    verb = "validating" if dry_run else "registering"
    note(f"{file.name}: {size} bytes, over {STREAM_FILE_BYTES >> 20} MiB: {verb} it as a file")
    with progress(f"uploading {file.name}", total=size) as bar:
        out = wire(
            client().register_file(
                file,
                dataset=dataset,
                version=version,
                bump=None if bump is None else str(bump),
                base=base,
                dry_run=dry_run,
                progress=bar.advance,
            )
        )
    return out.get("id", dataset), out


def _large(file: Path) -> bool:
    """FILE is registered from the file (`_register_file`), not parsed here whole."""
    from caseshelf.client.core import STREAM_FILE_BYTES  # lazy: as in parse_ref

    try:
        return file.stat().st_size > STREAM_FILE_BYTES
    except OSError:
        return False  # (the whole-document path words the error)


def _case_count(body: dict[str, Any]) -> int | None:
    cases = body.get("cases")
    return len(cases) if isinstance(cases, list) else None


# -- rendering ------------------------------------------------------------------------------


def when(ts: str | None) -> str:
    """A timestamp as `YYYY-MM-DD HH:MM:SS`."""
    return (ts or "").replace("T", " ").removesuffix("Z")[:19]


def clip(value: Any, width: int = 60) -> str:
    """A value as one line of at most `width` characters (JSON if it is no string)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        value = orjson.dumps(value).decode()
    value = " ".join(value.split())
    return value if len(value) <= width else value[: width - 1] + "…"


def _version_rows(items: list[dict[str, Any]]) -> list[list[Any]]:
    return [
        [
            v["version"],
            short(v["content_digest"]),
            v["case_count"],
            ", ".join(v.get("version_tags") or []),
            when(v["created_at"]),
            v["created_by"],
            "deleted" if v.get("deleted_at") else "live",
        ]
        for v in items
    ]


VERSION_COLUMNS = ("version", "digest", "cases", "tags", "created", "by", "state")


def _show_version(v: dict[str, Any]) -> None:
    fields_table(
        [
            ("id", v["id"]),
            ("version", v["version"]),
            ("owner", v.get("owner")),
            ("content_digest", v["content_digest"]),
            ("cases", v["case_count"]),
            ("bytes", v.get("bytes")),
            ("description", v.get("description")),
            ("tags", ", ".join(v.get("tags") or [])),
            ("version_tags", ", ".join(v.get("version_tags") or [])),
            ("created", f"{when(v['created_at'])} by {v['created_by']}"),
            *(
                [("deleted", f"{when(v['deleted_at'])} by {v.get('deleted_by') or ''}")]
                if v.get("deleted_at")
                else []
            ),
            *([("produced_by", v["produced_by"])] if v.get("produced_by") else []),
        ]
    )


def _user_text(case: dict[str, Any]) -> Any:
    user = (case.get("inputs") or {}).get("user")
    if isinstance(user, list):
        return " | ".join(str(u) for u in user)
    return user


def _case_rows(items: list[dict[str, Any]]) -> list[list[Any]]:
    return [
        [
            c["id"],
            clip(_user_text(c)),
            clip((c.get("expectations") or {}).get("ground_truth"), 30),
            ", ".join(c.get("tags") or []),
        ]
        for c in items
    ]


# -- commands -------------------------------------------------------------------------------


def register(
    file: FileArg,
    dataset: DatasetOpt = None,
    version: VersionOpt = None,
    bump: Bump = None,
    base: BaseOpt = None,
) -> None:
    """Register a dataset version from FILE (idempotent for the same content)."""
    if _large(file):
        # On the embedded store the upload's job runs in this process: the whole document
        # is parsed there, and the collector would rescan it for every window of cases.
        with gc_paused():
            _, out = _register_file(file, dataset=dataset, version=version, bump=bump, base=base)
    else:
        body = load_body(file, dataset=dataset, version=version, bump=bump, base=base)
        n = _case_count(body)
        with progress(f"registering {body['id']}", total=n) as bar, gc_paused():

            def uploading(size: int) -> None:
                # Over the API's request limit: the client sends it through an upload.
                note(f"{body['id']}: {size} bytes, over the API's request limit: uploading")
                bar.restart(f"uploading {body['id']}", size)

            out = wire(client().register(body, progress=bar.advance, total=uploading))
            if n is not None:
                bar.restart(f"registered {body['id']}", n)
                bar.advance(out["case_count"])

    def render(o: dict[str, Any]) -> None:
        verb = "registered" if o["created"] else "unchanged, already registered"
        say(f"{verb} {o['id']}@{o['version']}  {o['content_digest']}  {o['case_count']} cases")

    emit(out, render)


def validate(
    file: FileArg,
    dataset: DatasetOpt = None,
    version: VersionOpt = None,
    bump: Bump = None,
    base: BaseOpt = None,
) -> None:
    """Check FILE as `register` would, without storing anything.

    Exits 1 when registering it would conflict with a registered version.
    """
    if _large(file):
        with gc_paused():  # (as `register` of a large file)
            name, out = _register_file(
                file, dataset=dataset, version=version, bump=bump, base=base, dry_run=True
            )
    else:
        body = load_body(file, dataset=dataset, version=version, bump=bump, base=base)
        name = body["id"]
        with progress(f"validating {name}"), gc_paused():
            out = wire(client().validate(body))
    label = f"{name}@{out['version']}" if name else out["version"]

    def render(o: dict[str, Any]) -> None:
        say(f"valid {label}  {o['content_digest']}  {o['case_count']} cases")

    emit(out, render)
    if out.get("would_conflict"):
        abort(
            f"{label} is already registered with other content; "
            "registering this file would conflict: register it with --bump minor (the next "
            "label) or another --version"
        )


def ls(
    shared: Annotated[
        bool, typer.Option("--shared", help="List the _shared tenant's datasets.")
    ] = False,
    limit: Annotated[
        int | None,
        typer.Option("--limit", min=1, max=PAGE_MAX, help="One page of this size."),
    ] = None,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="Continue from a next_cursor.")
    ] = None,
) -> None:
    """List datasets (every page, unless --limit or --cursor asks for one)."""
    kept = answers.key(state(), "ls", {"shared": shared, "limit": limit, "cursor": cursor})
    out = answers.find(kept) if kept else None
    if out is not None:
        state().logs()
        log.debug("ls: the answer kept in %s (the store is unchanged since)", kept and kept["home"])
    else:
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


def versions(
    name: Annotated[str, typer.Argument(metavar="ID", help="The dataset id.")],
    all_: Annotated[
        bool, typer.Option("--all", help="Include deleted (tombstoned) versions.")
    ] = False,
) -> None:
    """List the versions of a dataset, newest first."""
    if "@" in name:
        raise typer.BadParameter(f"{name!r}: give the dataset id alone", param_hint="ID")
    dataset_id, _ = parse_ref(name, what="ID")
    items = wire(list(client().versions(dataset_id, include_deleted=all_)))["items"]

    def render(o: dict[str, Any]) -> None:
        if not o["items"]:
            note(f"{dataset_id} has no live versions (see --all)")
            return
        table(VERSION_COLUMNS, _version_rows(o["items"]))

    emit({"items": items, "next_cursor": None}, render)


def get(
    ref: Annotated[str, typer.Argument(metavar="ID@REF", help="ID alone means latest.")],
    deleted: DeletedOpt = False,
) -> None:
    """Show one version's metadata."""
    parse_ref(ref)
    emit(wire(client().get(ref, include_deleted=deleted)), _show_version)


def cases(
    ref: Annotated[str, typer.Argument(metavar="ID@REF", help="ID alone means latest.")],
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=PAGE_MAX, help="Cases per page.")
    ] = 100,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="Continue from a next_cursor.")
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Page through every case.")] = False,
    jsonl: Annotated[
        bool, typer.Option("--jsonl", help="With --all: one case per line (JSON Lines).")
    ] = False,
    deleted: DeletedOpt = False,
    search: Annotated[
        str | None,
        typer.Option(
            "--search", "-q", help="Only the cases that hold this text (not case-sensitive)."
        ),
    ] = None,
    search_in: Annotated[
        SearchIn, typer.Option("--by", help="What --search looks in: id, tag, text or any.")
    ] = SearchIn.any,
) -> None:
    """Show the cases of a version, one page at a time (or --all); --search finds cases by
    id, tag or text.

    A search page reads on from its cursor within a budget, so it may hold fewer cases than
    --limit and still name a next cursor; `scanned_to` says how far it read.
    """
    parse_ref(ref)
    c = client()
    if jsonl and not all_:
        raise typer.BadParameter("--jsonl goes with --all", param_hint="--jsonl")
    if search is not None and not search.strip():
        raise typer.BadParameter("give the text to look for", param_hint="--search")
    if all_:
        if cursor is not None:
            raise typer.BadParameter("--all starts from the first case; drop --cursor")
        _all_cases(
            ref,
            page=limit if limit != 100 else PAGE_MAX,
            deleted=deleted,
            jsonl=jsonl,
            search=(search, search_in.value) if search is not None else None,
        )
        return
    if search is None:
        out = wire(c.list_cases(ref, cursor=cursor, limit=limit, include_deleted=deleted))
    else:
        out = wire(
            c.search_cases(
                ref,
                search,
                by=search_in.value,
                cursor=cursor,
                limit=limit,
                include_deleted=deleted,
            )
        )
    again = "" if search is None else f" --search {shlex.quote(search)} --by {search_in}"

    def render(o: dict[str, Any]) -> None:
        table(("id", "user", "ground_truth", "tags"), _case_rows(o["items"]))
        if search is not None:
            note(
                f"{len(o['items'])} match(es) in cases {o['scanned_from']}-"
                f"{o['scanned_to']} of {o['case_count']}"
            )
        if o.get("next_cursor"):
            note(f"more: caseshelf cases {ref}{again} --cursor {o['next_cursor']}{api_hint()}")

    emit(out, render)


def rm(ref: Annotated[str, typer.Argument(metavar="ID@VERSION")]) -> None:
    """Delete a version (a tombstone: hidden, content kept; `revive` undoes it)."""
    name, version = parse_version(ref)
    out = wire(client().delete(f"{name}@{version}"))
    emit(out, lambda o: say(f"deleted {o['id']}@{o['version']} (revive undoes it)"))


def revive(ref: Annotated[str, typer.Argument(metavar="ID@VERSION")]) -> None:
    """Restore a deleted version."""
    name, version = parse_version(ref)
    out = wire(client().revive(f"{name}@{version}"))
    emit(out, lambda o: say(f"revived {o['id']}@{o['version']}"))


def download(
    ref: Annotated[str, typer.Argument(metavar="ID@REF", help="ID alone means latest.")],
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            metavar="FILE",
            help="Where to write it ('-' for stdout; default: ID-VERSION.json here).",
            show_default=False,
        ),
    ] = None,
    deleted: DeletedOpt = False,
) -> None:
    """Download a whole version as one dataset JSON file that `register` accepts as is."""
    parse_ref(ref)
    to_stdout = output is not None and str(output) == "-"
    if to_stdout and json_mode():
        raise typer.BadParameter("-o - writes the document itself; drop --json")
    with progress(f"downloading {ref}") as bar:
        got = client().download(
            ref,
            to=sys.stdout.buffer if to_stdout else (output if output is not None else Path()),
            include_deleted=deleted,
            progress=bar.advance,
            total=bar.total,
        )
    if to_stdout:
        sys.stdout.flush()
        return
    emit(
        {"file": str(got.path), "bytes": got.size},
        lambda o: say(f"wrote {o['file']} ({o['bytes']} bytes)"),
    )


def serve(
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port.")] = 8000,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            metavar="NAME",
            help="Answer requests whose Host is NAME too (besides localhost, 127.0.0.1, "
            "[::1] and the --host address); repeatable.",
            show_default=False,
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="CASESHELF_SERVE_TOKEN",
            help="Bearer token every API call must carry (default: none on loopback; "
            "generated and printed once on any other --host).",
            show_default=False,
            show_envvar=True,
        ),
    ] = None,
) -> None:
    """Serve the local API (dev mode) on the embedded store, with Swagger UI at /swagger.

    Requests whose Host names another server are refused (421), and so are writes from
    another origin's pages (403) or that are not JSON (415). On any --host but loopback
    every API call needs the server's token (Authorization: Bearer ...)."""
    st = state()
    if st.api:
        raise typer.BadParameter("serve runs the API itself; drop --api")
    try:
        from caseshelf import devserver  # lazy: ~200 ms, serve only
    except ImportError as exc:
        abort(f"the local server is not available: {exc}")
    stop_on_signals()
    devserver.serve(st.settings(), host, port, allow_hosts=allow_host or (), token=token)


def gc(
    delete: Annotated[
        bool, typer.Option("--delete", help="Remove what is found (default: only list it).")
    ] = False,
    grace_hours: Annotated[
        float | None,
        typer.Option(
            "--grace-hours",
            min=0,
            metavar="H",
            help="Spare objects younger than this (default: CASESHELF_GC_GRACE_SECONDS, 24 h).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Find (with --delete, remove) stored objects no committed version references.

    Such as the packs of a crashed registration; objects younger than the grace period are
    spared, and nothing is deleted while a registration of the same tenant is in flight.
    A tenant where a referenced object is missing is left untouched (exit code 1).
    """
    from caseshelf import bootstrap  # lazy: ~100 ms, gc only
    from caseshelf.services.gc import collect_garbage  # lazy: ~95 ms, gc only

    st = state()
    if st.api:
        raise typer.BadParameter(
            "gc works on the store itself (CASESHELF_HOME, or CASESHELF_BACKEND=aws); drop --api"
        )
    settings = st.settings()
    grace = settings.gc_grace_seconds if grace_hours is None else int(grace_hours * 3600)
    svc = bootstrap.build(settings)
    with progress("collecting garbage") as bar:
        report = collect_garbage(
            svc.store,
            svc.index,
            now=time.time(),
            grace_seconds=grace,
            delete=delete,
            on_tenant=lambda _t: bar.advance(),
        )
    out = report.to_dict()

    def render(o: dict[str, Any]) -> None:
        if o["orphans"]:
            table(
                ("key", "bytes", "age (h)"),
                [[x["key"], x["bytes"], f"{x['age_seconds'] / 3600:.1f}"] for x in o["orphans"]],
            )
        verb = "deleted" if o["deleted"] else "found"
        hours = grace / 3600
        say(
            f"{verb} {o['orphan_count']} unreferenced objects ({o['orphan_bytes']} bytes); "
            f"{o['referenced_count']} referenced; {o['fresh_count']} spared as younger than "
            f"{hours:g} h; tenants scanned: {o['tenant_count']}"
        )
        for problem in o["problems"]:
            note(f"warning: {problem}")
        if o["orphans"] and not o["deleted"]:
            note("run with --delete to remove them")
        if o["missing"]:
            note("referenced objects are missing: run `caseshelf verify --all`")

    emit(out, render)
    if report.missing:  # a damaged store: gc deleted nothing of those tenants
        raise typer.Exit(1)


def register_commands(app: typer.Typer) -> None:
    command(app, "register")(register)
    command(app, "validate")(validate)
    command(app, "ls")(ls)
    command(app, "versions")(versions)
    command(app, "get")(get)
    command(app, "cases")(cases)
    command(app, "rm")(rm)
    command(app, "revive")(revive)
    command(app, "download")(download)
    command(app, "serve")(serve)
    command(app, "gc")(gc)


def _all_cases(
    ref: str, *, page: int, deleted: bool, jsonl: bool, search: tuple[str, str] | None = None
) -> None:
    """Every case of a version (with `search`, (text, by): every match), written as it is read
    (one page held at a time): a table, the `{items, next_cursor}` document with --json, or one
    case per line with --jsonl."""
    c = client()
    meta = c.get(ref, include_deleted=deleted)
    pinned = f"{meta.id}@{meta.content_digest}"
    out = sys.stdout
    with progress(f"reading {meta.id}@{meta.version}", total=meta.case_count) as bar:
        if search is None:
            cases = c.cases(
                pinned, include_deleted=deleted, page_size=page, progress=bar.advance, raw=True
            )
        else:
            cases = c.search(
                pinned,
                search[0],
                by=search[1],
                include_deleted=deleted,
                progress=bar.advance,
                raw=True,
            )
        if jsonl:
            for case in cases:
                out.write(orjson.dumps(case).decode() + "\n")
        elif json_mode():
            out.write('{"items": [')
            for i, case in enumerate(cases):
                out.write(("," if i else "") + "\n  " + orjson.dumps(case).decode())
            out.write('\n], "next_cursor": null}\n')
        else:
            batch: list[dict[str, Any]] = []
            for case in cases:
                batch.append(case)
                if len(batch) >= PAGE_MAX:
                    table(("id", "user", "ground_truth", "tags"), _case_rows(batch))
                    batch = []
            if batch:
                table(("id", "user", "ground_truth", "tags"), _case_rows(batch))
    out.flush()
