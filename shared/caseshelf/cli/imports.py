"""Import commands: benchmarks through recipes (the recipe registry is `caseshelf.cli.recipes`).

    caseshelf import SOURCE --recipe R [--dataset ID] [--version V | --bump K] [--limit N]
                            [--config C --split S] [--revision REV] [--kind K] [--num-proc N]
    caseshelf preview SOURCE --recipe R [--limit N]
    caseshelf import-bundle BUNDLE
    caseshelf benchmarks

SOURCE is a local path (`.gz`, `.bz2`, `.zst` too), an `s3://` or `https://` URL, or
`hf://owner/name` for a Hugging Face dataset. R is a recipe file (YAML or JSON) or the id of a
registered or catalog recipe (`id@version` pins one). With `--api`, a local file is uploaded
(`POST /uploads`, then a PUT to the URL it answers: S3's presigned URL, or the local server's
own) and the command follows the import job to its end.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from caseshelf.cli.common import (
    client,
    dumps,
    emit,
    fields_table,
    note,
    progress,
    say,
    short,
    state,
    table,
    wire,
)
from caseshelf.cli.registry import Bump, BumpKind, DatasetOpt, VersionOpt
from caseshelf.cli.root import abort, command
from caseshelf.domain.errors import BadRequest

SourceArg = Annotated[
    list[str],
    typer.Argument(
        metavar="SOURCE...",
        help="A file (local path, s3://, https://) or hf://owner/name; several files, a "
        "directory or a glob are read in turn (rows get _file and _row).",
        show_default=False,
    ),
]
RecipeOpt = Annotated[
    str,
    typer.Option(
        "--recipe",
        "-r",
        metavar="R",
        help="A recipe file (YAML/JSON) or a recipe id (registered or catalog; id@version).",
        show_default=False,
    ),
]
LimitOpt = Annotated[
    int | None,
    typer.Option(
        "--limit", min=1, help="Take only the first N rows (stamped).", show_default=False
    ),
]
ConfigOpt = Annotated[
    str | None, typer.Option("--config", help="Hugging Face config.", show_default=False)
]
SplitOpt = Annotated[
    str | None, typer.Option("--split", help="Hugging Face split.", show_default=False)
]
RevisionOpt = Annotated[
    str | None,
    typer.Option(
        "--revision", help="Hugging Face revision (branch, tag or sha).", show_default=False
    ),
]
KindOpt = Annotated[
    str | None,
    typer.Option(
        "--kind",
        help="The file's format when its name does not tell (jsonl, json, csv, parquet); "
        "json also reads a local directory of .json files, one record each.",
        show_default=False,
    ),
]
NumProcOpt = Annotated[
    int | None,
    typer.Option(
        "--num-proc",
        min=1,
        max=64,
        metavar="N",
        help="Processes to read, map and hash a plain local jsonl file with (default 1, or "
        "CASESHELF_NUM_PROC); the embedded store only.",
        show_default=False,
    ),
]

IdFieldOpt = Annotated[
    str | None,
    typer.Option(
        "--id-field",
        metavar="FIELD",
        help="The row field that holds the case id (overrides the recipe's; without one, "
        "ids are <dataset>-<row number>).",
        show_default=False,
    ),
]
WaitOpt = Annotated[
    float,
    typer.Option("--wait", metavar="SECONDS", help="With --api: how long to follow an upload."),
]


def load_recipe_file(path: Path) -> dict[str, Any]:
    import yaml  # lazy: ~20 ms, only a --recipe file is YAML

    from caseshelf.domain.boundedyaml import load_yaml  # lazy: ~12 ms more, as yaml

    try:
        doc = load_yaml(path.read_text(encoding="utf-8"), timestamps=True)
    except yaml.YAMLError as exc:
        raise BadRequest(f"{path}: not YAML or JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise BadRequest(f"{path}: a recipe is a mapping of keys")
    return doc


def recipe_spec(value: str) -> str | dict[str, Any]:
    """A recipe file's document, or an id (`id@version`) for the registry to resolve."""
    path = Path(value).expanduser()
    if path.is_file() or value.endswith((".yaml", ".yml", ".json")):
        return load_recipe_file(path)
    return value


def with_id_field(spec: str | dict[str, Any], id_field: str | None) -> str | dict[str, Any]:
    """The recipe with `--id-field` applied: a registered recipe is read and sent inline."""
    if id_field is None:
        return spec
    doc = dict(wire(client().recipe(spec))["recipe"]) if isinstance(spec, str) else dict(spec)
    doc["mapping"] = {**(doc.get("mapping") or {}), "id_field": id_field}
    return doc


def _draft_source(sources: str | list[str], kind: str | None) -> tuple[str, dict[str, Any]]:
    """(a dataset id, the draft recipe's source) for SOURCE: its name and kind (a directory's
    from the first file in it whose name tells)."""
    from caseshelf.domain.recipe_draft import draft_name  # lazy: ~10 ms, drafts only
    from caseshelf.services.imports import kind_of  # lazy: ~40 ms, drafts only

    source = sources if isinstance(sources, str) else sources[0]
    if kind is None and Path(source).is_dir():
        files = sorted(p.name for p in Path(source).rglob("*") if p.is_file())
        kind = next((k for k in map(_kind_or_none, files) if k is not None), None)
    if source.startswith("hf://"):
        dataset = source.removeprefix("hf://").strip("/")
        return draft_name(dataset.rsplit("/", 1)[-1]), {"kind": "huggingface", "dataset": dataset}
    name = Path(source.split("?", 1)[0].rstrip("/")).name.split(".")[0]
    return draft_name(name), {"kind": kind or kind_of(source)}


def draft(source: str | list[str], body: dict[str, Any], id_field: str | None) -> dict[str, Any]:
    """A recipe drafted from the fields of SOURCE's first rows (`caseshelf preview` without
    `--recipe`), and the preview of its cases: `{recipe, preview}`."""
    from caseshelf.domain.recipe_draft import draft_recipe  # lazy: ~10 ms, drafts only

    name, src = _draft_source(source, body["source"].get("kind"))
    rest = {k: v for k, v in body.items() if k != "source"}
    probe = {**draft_recipe(name, src["kind"], [], id_field=id_field), "source": src}
    fields = wire(client().preview(body["source"], recipe=probe, **rest))["fields"]
    recipe = {**draft_recipe(name, src["kind"], fields, id_field=id_field), "source": src}
    shown = wire(client().preview(body["source"], recipe=recipe, **rest))
    return {"recipe": recipe, "preview": shown}


def _kind_or_none(name: str) -> str | None:
    from caseshelf.services.imports import kind_of  # lazy: ~40 ms, drafts only

    try:
        return kind_of(name)
    except BadRequest:
        return None


def _show_draft(sources: list[str], out: dict[str, Any]) -> None:
    import yaml  # lazy: ~20 ms, drafts only

    recipe, p = out["recipe"], out["preview"]
    source = " ".join(sources)
    name = shlex.join(sources)
    sys.stdout.write(
        f"# A recipe drafted from the fields of {source}: check the fields it chose, then\n"
        f"#   caseshelf import {name} --recipe recipe.yaml\n"
    )
    sys.stdout.write(yaml.safe_dump(recipe, sort_keys=False, allow_unicode=True))
    sys.stdout.flush()
    m = recipe["mapping"]
    if "id_field" in m:
        ids = f"ids from field {m['id_field']!r}"
    elif "id_template" in m:
        ids = f"ids {m['id_template']} (the file and the row in it)"
    else:
        ids = f"ids {recipe['id']}-<row number> (--id-field FIELD names an id field)"
    note(f"fields: {', '.join(p['fields'])}; {ids}")
    if recipe["source"]["kind"] == "csv" and any(
        f.strip().isdigit() or len(f) > 64 for f in p["fields"]
    ):
        note(
            "the first line looks like data, not column names: for a CSV without a header "
            + escape("row set source.header: false and source.columns: [name, ...]")
        )
    for err in p["errors"][:3]:
        note(f"row {err['row']} does not map: {err['detail']}")
    note(
        f"{len(p['cases'])} of {len(p['rows'])} rows mapped; save the recipe with "
        f"`caseshelf preview {name} > recipe.yaml`, then `caseshelf import {name} "
        f"--recipe recipe.yaml`"
    )


def _is_local(source: str) -> bool:
    return "://" not in source


def _one_or_list(sources: list[str]) -> str | list[str]:
    """SOURCE... as the source's `url`: one, or the list of several (read in this order)."""
    return sources[0] if len(sources) == 1 else sources


def _one_local_file(sources: list[str]) -> Path:
    """The one local file an import over --api uploads; several, or a directory or a glob, are
    read only where the files are."""
    path = Path(sources[0]).expanduser()
    if len(sources) > 1 or not path.is_file():
        raise typer.BadParameter(
            "over --api a local source is uploaded, one file at a time: import each file, or "
            "give s3:// or https:// URLs, or run the import without --api where the files are"
        )
    return path


def _source(
    source: str | list[str],
    *,
    config: str | None,
    split: str | None,
    revision: str | None,
    kind: str | None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"url": source}
    for key, value in (("config", config), ("split", split), ("revision", revision)):
        if value is not None:
            out[key] = value
    if kind is not None:
        out["kind"] = kind
    if not str(source).startswith("hf://") and (config or split or revision):
        raise typer.BadParameter("--config, --split and --revision go with an hf:// source")
    return out


def _target(
    dataset: str | None, version: str | None, bump: BumpKind | None, limit: int | None
) -> dict[str, Any]:
    if version is not None and bump is not None:
        raise typer.BadParameter("give either --version or --bump, not both")
    out: dict[str, Any] = {}
    if dataset is not None:
        out["dataset"] = dataset
    if version is not None:
        out["version"] = version
    if bump is not None:
        out["bump"] = str(bump)
    if limit is not None:
        out["limit"] = limit
    return out


def _show_import(out: dict[str, Any]) -> None:
    what = "new version" if out.get("created") else "already registered, unchanged"
    say(f"[bold]{out['id']}@{out['version']}[/]  {what}")
    src = out.get("produced_by", {}).get("source", {})
    where = src.get("url") or src.get("dataset") or ("inline" if src.get("inline") else "")
    pairs: list[tuple[str, Any]] = [
        ("version", out["version"]),
        ("cases", out["case_count"]),
        ("content digest", out["content_digest"]),
        ("rows read", out.get("rows_read")),
        ("source", f"{src.get('kind', '')} {where}".strip()),
    ]
    if src.get("revision"):
        pairs.append(("revision", src["revision"]))
    limit = out.get("produced_by", {}).get("limit")
    if limit is not None:
        pairs.append(("limit", f"{limit} (a partial import)"))
    fields_table(pairs)


def upload_and_follow(path: Path, body: dict[str, Any], wait: float) -> dict[str, Any]:
    """Upload a local file (`POST /uploads`, then a PUT to the URL it answers) and follow its
    job to the end; the job's `result`, plus `job_id`. `body` is the upload request without
    `filename` (a `kind: tasks` one too)."""
    c = client()
    with progress(f"importing {path.name}"):
        job = c.upload(
            path,
            body,
            wait=wait,
            on_upload=lambda up: note(f"uploading {path} as job {up.job_id}"),
        )
    return {**(job.result or {}), "job_id": job.id}


def _upload_rows(path: Path, body: dict[str, Any], wait: float) -> dict[str, Any]:
    """With --api: a local file of rows through an upload and its job, shown like an import."""
    upload_body: dict[str, Any] = {k: v for k, v in body.items() if k != "source"}
    fmt = body.get("source", {}).get("kind")
    if fmt is not None:
        upload_body["format"] = fmt
    result = upload_and_follow(path, {"kind": "benchmark", **upload_body}, wait)
    version = wire(client().get(f"{result['id']}@{result['version']}"))
    return {
        "id": result["id"],
        "version": result["version"],
        "content_digest": result["content_digest"],
        "case_count": result["case_count"],
        "created": result.get("created", True),
        "rows_read": result.get("rows_read", result["case_count"]),
        "produced_by": version.get("produced_by") or {},
        "job_id": result["job_id"],
    }


def _clipped(value: Any, width: int = 120) -> Any:
    """A row for a human preview: every string longer than `width` cut with an ellipsis."""
    if isinstance(value, str):
        return value if len(value) <= width else value[: width - 1] + "…"
    if isinstance(value, dict):
        return {k: _clipped(v, width) for k, v in value.items()}
    if isinstance(value, list):
        return [_clipped(v, width) for v in value]
    return value


def import_(
    sources: SourceArg,
    recipe: RecipeOpt,
    dataset: DatasetOpt = None,
    version: VersionOpt = None,
    bump: Bump = None,
    limit: LimitOpt = None,
    config: ConfigOpt = None,
    split: SplitOpt = None,
    revision: RevisionOpt = None,
    kind: KindOpt = None,
    num_proc: NumProcOpt = None,
    id_field: IdFieldOpt = None,
    wait: WaitOpt = 900.0,
) -> None:
    """Import a benchmark's rows through a recipe and register them as a dataset version."""
    if num_proc is not None and state().api:
        raise typer.BadParameter(
            "an import through --api runs on the server, which uses its own "
            "CASESHELF_NUM_PROC; drop --num-proc",
            param_hint="--num-proc",
        )
    state().num_proc = num_proc
    source = _one_or_list(sources)
    body = {
        "recipe": with_id_field(recipe_spec(recipe), id_field),
        "source": _source(source, config=config, split=split, revision=revision, kind=kind),
        **_target(dataset, version, bump, limit),
    }
    if state().api and any(map(_is_local, sources)):
        out = _upload_rows(_one_local_file(sources), body, wait)
    else:
        with progress("importing rows"):
            rest = {k: v for k, v in body.items() if k not in ("recipe", "source")}
            out = wire(client().import_(body["source"], recipe=body["recipe"], **rest))
    emit(out, _show_import)


def preview(
    sources: SourceArg,
    recipe: Annotated[
        str | None,
        typer.Option(
            "--recipe",
            "-r",
            metavar="R",
            help="A recipe file or id; without one, a recipe is drafted from the rows' "
            "fields and printed as YAML.",
            show_default=False,
        ),
    ] = None,
    limit: LimitOpt = None,
    config: ConfigOpt = None,
    split: SplitOpt = None,
    revision: RevisionOpt = None,
    kind: KindOpt = None,
    id_field: IdFieldOpt = None,
) -> None:
    """The first rows of a source, the fields found, and the cases they would become.

    Without --recipe: a recipe drafted from the fields (task, answer and id guessed by
    their names, the rest kept as metadata), printed as YAML to save and edit."""
    source = _one_or_list(sources)
    body: dict[str, Any] = {
        "source": _source(source, config=config, split=split, revision=revision, kind=kind),
    }
    if limit is not None:
        body["limit"] = limit
    if recipe is None:
        drafted = draft(source, body, id_field)
        emit(drafted, lambda o: _show_draft(sources, o))
        return
    body["recipe"] = with_id_field(recipe_spec(recipe), id_field)
    rest = {k: v for k, v in body.items() if k not in ("recipe", "source")}
    out = wire(client().preview(body["source"], recipe=body["recipe"], **rest))

    def render(p: dict[str, Any]) -> None:
        say(f"[bold]fields[/]  {escape(', '.join(p['fields']))}")
        failed = {err["row"]: err["detail"] for err in p["errors"]}
        cases = iter(p["cases"])
        for index, row in enumerate(p["rows"]):
            say(f"[bold]row {index}[/]")
            say(escape(dumps(_clipped(row))))
            if index in failed:
                say(f"[red]does not map:[/] {escape(failed[index])}")
            else:
                say("[bold]becomes[/]")
                say(escape(dumps(next(cases))))
        note(f"{len(p['cases'])} of {len(p['rows'])} rows mapped; nothing was registered")

    emit(out, render)


def import_bundle(
    file: Annotated[
        Path,
        typer.Argument(
            metavar="BUNDLE", help="An everdict bundle file (datasets and recipes together)."
        ),
    ],
) -> None:
    """Import a bundle's datasets and recipes, each validated as if registered alone."""
    out = wire(client().import_bundle(file))
    for line in out["warnings"]:
        note(f"warning: {line}")
    for section, n in out["skipped"].items():
        note(f"skipped {section}: {n} item(s); a dataset registry keeps no {section}")

    def render(o: dict[str, Any]) -> None:
        rows = [
            [
                r["kind"],
                f"{r['id']}@{r['version']}",
                r["status"],
                short(r.get("content_digest")),
            ]
            for r in o["results"]
        ]
        table(["kind", "item", "status", "digest"], rows)

    emit(out, render)
    conflicts = [r for r in out["results"] if r["status"] == "conflict"]
    if conflicts:
        abort("; ".join(f"{r['kind']} {r['id']}@{r['version']}: {r['message']}" for r in conflicts))


def benchmarks() -> None:
    """The first-party benchmark catalog (import one with `--recipe ID`)."""
    out = wire(client().benchmarks())

    def render(page: dict[str, Any]) -> None:
        rows = [
            [
                b["id"],
                b["version"],
                b["category"],
                b["source"].get("dataset", ""),
                b["description"][:70],
            ]
            for b in page["items"]
        ]
        table(["id", "version", "category", "source", "description"], rows)

    emit(out, render)


def register_commands(app: typer.Typer) -> None:
    command(app, "import")(import_)
    command(app, "preview")(preview)
    command(app, "import-bundle")(import_bundle)
    command(app, "benchmarks")(benchmarks)
