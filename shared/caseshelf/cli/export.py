"""Export, pull and workspace commands.

    caseshelf export ID@REF [--to s3://bucket/prefix | --to ./dir] [--ids a,b] [--tags x,y]
                            [--limit N] [--shared DEST=FILE ...]
                            [--format case-dirs|harbor|inspect|jsonl|parquet]
                            [--secret-ref NAME] [--bundle] [--evalhub] [--json]
    caseshelf pull s3://bucket/prefix /test_data [--bundle] [--concurrency N] [--json]
    caseshelf workspace CASE_DIR WORKSPACE --config eval.yaml [--project-root DIR]
                            [--plugin-dir DIR ...]

`export` prints where the export is and EvalHub's `test_data_ref` (or why there is none);
`--evalhub` adds a benchmark snippet and a Kubernetes Secret template with the four keys EvalHub's
init container reads (placeholders only). `pull` runs in a pod and needs only S3 access (the
endpoint and region from the usual AWS settings); `workspace` fills one case's isolated workspace
by the `dataset.workspace.files` rules. What is left out is reported on stderr, naming the entry
and the reason. Export and pull show progress with totals (cases, files, bytes) on stderr, also
under `--json`: a bar on a terminal, a few plain lines otherwise.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from caseshelf.cli.common import (
    client,
    emit,
    err_console,
    fields_table,
    live_progress,
    note,
    say,
    warn,
    wire,
)
from caseshelf.cli.registry import parse_ref
from caseshelf.cli.root import command
from caseshelf.cli.subset import IdsOpt, LimitOpt, TagsOpt, split_list


def _shared(values: list[str] | None) -> list[dict[str, str]]:
    out = []
    for value in values or []:
        dest, sep, path = value.partition("=")
        if not sep or not dest or not path:
            raise typer.BadParameter(f"{value!r}: use DEST=FILE", param_hint="--shared")
        try:
            text = Path(path).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            out.append({"dest": dest, "base64": base64.b64encode(Path(path).read_bytes()).decode()})
            continue
        out.append({"dest": dest, "text": text})
    return out


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


class ProgressLines:
    """Progress of an export or a pull on stderr, with its totals: a rich bar on a terminal,
    otherwise a line at the start, about every tenth of the way, and at the end. Shown also
    under `--json` (stdout stays the JSON). When the file total is not known up front (an
    export streamed a chunk of cases at a time), the cases are the bar's total."""

    def __init__(self, verb: str) -> None:
        self.verb = verb
        self.cases = self.files = self.nbytes = 0
        self.done_cases = self.done_files = self.done_bytes = 0
        self._next = 0
        self._bar: Any = None
        self._task: Any = None
        self._started = False

    def __enter__(self) -> ProgressLines:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif self._started and exc[0] is None and self._done() < self._total():
            self._line()

    def _total(self) -> int:
        return self.files or self.cases

    def _done(self) -> int:
        return self.done_files if self.files else self.done_cases

    def start(self, cases: int, files: int, nbytes: int) -> None:
        self.cases, self.files, self.nbytes = cases, files, nbytes
        self._started = True
        if live_progress():
            from rich.progress import (  # lazy: ~30 ms, only a terminal draws a bar
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
            )

            self._bar = Progress(
                TextColumn(self.verb),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[what]}"),
                console=err_console(),
            )
            self._bar.start()
            self._task = self._bar.add_task(self.verb, total=self._total(), what=self._what())
        else:
            self._line()
            self._next = max(1, self._total() // 10)

    def _what(self) -> str:
        if self.files:
            return f"files of {self.cases} cases, {_size(self.done_bytes)} / {_size(self.nbytes)}"
        return f"cases, {self.done_files} files, {_size(self.done_bytes)}"

    def _line(self) -> None:
        if self.files:
            text = (
                f"{self.cases} cases, {self.done_files}/{self.files} files, "
                f"{_size(self.done_bytes)} / {_size(self.nbytes)}"
            )
        else:
            text = (
                f"{self.done_cases}/{self.cases} cases, {self.done_files} files, "
                f"{_size(self.done_bytes)}"
            )
        print(f"{self.verb}: {text}", file=sys.stderr, flush=True)

    def advance(self, files: int, nbytes: int, cases: int = 0) -> None:
        self.done_files += files
        self.done_bytes += nbytes
        self.done_cases += cases
        if self._bar is not None:
            step = files if self.files else cases
            self._bar.update(self._task, advance=step, what=self._what())
        elif self._done() >= self._total() or self._done() >= self._next:
            self._line()
            self._next = self._done() + max(1, self._total() // 10)


def wants_evalhub(prefix: str, evalhub: bool, secret_ref: str | None) -> bool:
    """Whether an export is meant for EvalHub, so a missing `test_data_ref` is worth a warning:
    one in S3 (where EvalHub reads), or one that asked (`--evalhub`, `--secret-ref`). An export
    into a local directory (`--to DIR`, or the embedded store's own) is for whoever reads that
    directory, and says nothing of EvalHub."""
    return evalhub or secret_ref is not None or prefix.startswith("s3://")


def evalhub_snippets(out: dict[str, Any], benchmark: str) -> str:
    """A benchmark entry of an EvalHub evaluation (`test_data_ref` as its API validates it) and
    the Secret its init container reads (`/var/run/secrets/test-data/<KEY>`), placeholders only."""
    import yaml  # lazy: ~20 ms, --evalhub only

    from caseshelf.domain.export import YamlDumper  # lazy: ~20 ms, --evalhub only
    from caseshelf.services.exports import EVALHUB_SECRET_KEYS  # lazy: ~160 ms, see `export`

    ref = out["test_data_ref"]
    entry = {
        "benchmarks": [
            {"id": benchmark, "provider_id": "<PROVIDER_ID>", "test_data_ref": ref},
        ]
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": ref["s3"]["secret_ref"]},
        "type": "Opaque",
        "stringData": {key: f"<{key}>" for key in EVALHUB_SECRET_KEYS},
    }
    return (
        "# EvalHub evaluation: a benchmark reading this export\n"
        + yaml.dump(entry, Dumper=YamlDumper, sort_keys=False)
        + "---\n# The Secret named by secret_ref (fill in the placeholders; never commit it)\n"
        + yaml.dump(secret, Dumper=YamlDumper, sort_keys=False)
    )


ToOpt = Annotated[
    str | None,
    typer.Option(
        "--to",
        metavar="s3://BUCKET/PREFIX|DIR",
        help="Where to write (default: the registry's exports prefix).",
    ),
]
SharedOpt = Annotated[
    list[str] | None,
    typer.Option("--shared", metavar="DEST=FILE", help="Add FILE to every case at DEST (repeat)."),
]
FormatOpt = Annotated[
    str,
    typer.Option(
        "--format",
        metavar="FORMAT",
        help="case-dirs | harbor | inspect | jsonl | parquet.",
    ),
]
SecretRefOpt = Annotated[
    str | None,
    typer.Option(
        "--secret-ref",
        metavar="NAME",
        help="The Kubernetes Secret EvalHub reads S3 credentials from (default: "
        "CASESHELF_EVALHUB_SECRET_REF).",
    ),
]
BundleOpt = Annotated[
    bool,
    typer.Option("--bundle", help="Also write <prefix>.bundle.tar.gz beside (not in) the prefix."),
]
EvalhubOpt = Annotated[
    bool,
    typer.Option(
        "--evalhub",
        help="Print an EvalHub benchmark snippet and the Secret template it needs.",
    ),
]


def export(
    ref: Annotated[str, typer.Argument(metavar="ID@REF", help="ID alone means latest.")],
    to: ToOpt = None,
    ids: IdsOpt = None,
    tags: TagsOpt = None,
    limit: LimitOpt = None,
    shared: SharedOpt = None,
    fmt: FormatOpt = "case-dirs",
    secret_ref: SecretRefOpt = None,
    bundle: BundleOpt = False,
    evalhub: EvalhubOpt = False,
) -> None:
    """Export a version for evaluation pods and harnesses (per-case directories by
    default)."""
    # What `export` checks and reports with, off the start-up of `pull`, `workspace` and help.
    from caseshelf.domain.export import check_format  # lazy: ~20 ms, as said above
    from caseshelf.services.exports import check_secret_ref  # lazy: ~160 ms, as said above
    from caseshelf.services.pull import reporting  # lazy: ~55 ms, as said above

    name, _ = parse_ref(ref)
    check_format(fmt)
    if secret_ref is not None:
        check_secret_ref(secret_ref)
    subset = {
        "ids": split_list(ids, "--ids"),
        "tags": split_list(tags, "--tags"),
        "limit": limit,
    }
    subset = {k: v for k, v in subset.items() if v is not None}
    local = to if to is not None and not to.startswith("s3://") else None
    body: dict[str, Any] = {"format": fmt, "shared_files": _shared(shared)}
    if subset:
        body["subset"] = subset
    if secret_ref is not None:
        body["secret_ref"] = secret_ref
    if bundle:
        body["bundle"] = True
    with ProgressLines("exporting") as bar, reporting(bar):
        out = wire(client().export(ref, body, to=to))
    _export_warnings(out, name, evalhub=evalhub, secret_ref=secret_ref)
    emit(out, lambda o: _show_export(o, local=local))


def _export_warnings(
    out: dict[str, Any], name: str, *, evalhub: bool, secret_ref: str | None
) -> None:
    """What an export left out, why it has no test_data_ref, and with --evalhub the snippets,
    on stderr."""
    for w in out.get("warnings") or []:
        warn(w)
    hidden = (out.get("warning_count") or 0) - len(out.get("warnings") or [])
    if hidden > 0:
        warn(f"... and {hidden} more")
    if out.get("test_data_ref_problem") and wants_evalhub(
        str(out.get("prefix") or ""), evalhub, secret_ref
    ):
        warn(out["test_data_ref_problem"])
    if evalhub and out.get("test_data_ref"):
        sys.stderr.write(evalhub_snippets(out, name))
        sys.stderr.flush()
    elif evalhub:
        warn("--evalhub: no snippet without a test_data_ref (see above)")


def _show_export(o: dict[str, Any], *, local: str | None) -> None:
    rows: list[tuple[str, Any]] = [
        ("export", o["export_id"]),
        ("format", o.get("format")),
        ("prefix", o["prefix"]),
        ("cases", o["case_count"]),
        ("files", o["file_count"]),
        ("bytes", o.get("bytes")),
        ("manifest", o["manifest_key"]),
        ("reused", "yes" if o["reused"] else "no"),
    ]
    if local is None and o.get("bundle_key"):  # a local --to: unpacked, not shown
        rows.append(("bundle", o["bundle_key"]))
    fields_table(rows)
    if o.get("test_data_ref"):
        s3 = o["test_data_ref"]["s3"]
        note(
            f"test_data_ref: {{s3: {{bucket: {s3['bucket']}, key: {s3['key']}, "
            f"secret_ref: {s3['secret_ref']}}}}}"
        )


def pull_cmd(
    source: Annotated[str, typer.Argument(metavar="s3://BUCKET/PREFIX")],
    dest: Annotated[Path, typer.Argument(metavar="DIR", help="e.g. /test_data")],
    bundle: Annotated[
        bool,
        typer.Option("--bundle", help="One GET of <prefix>.bundle.tar.gz instead of one per file."),
    ] = False,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, max=128, help="Parallel downloads.")
    ] = 16,
) -> None:
    """Download an export into DIR, verified against its manifest (pod side)."""
    with ProgressLines("pulling") as bar:
        out = client().pull(source, dest, concurrency=concurrency, bundle=bundle, progress=bar)
    emit(out, lambda o: fields_table([(k, v) for k, v in o.items()]))


def workspace(
    case_dir: Annotated[Path, typer.Argument(metavar="CASE_DIR")],
    target: Annotated[Path, typer.Argument(metavar="WORKSPACE")],
    config: Annotated[Path, typer.Option("--config", metavar="EVAL_YAML", help="The eval config.")],
    project_root: Annotated[
        Path | None,
        typer.Option(
            "--project-root",
            help="Root that shared sources resolve against (default: the directory above "
            "eval/ for eval/<name>/eval.yaml, else the config's directory).",
        ),
    ] = None,
    plugin_dir: Annotated[
        list[Path] | None,
        typer.Option("--plugin-dir", help="Another allowed plugin directory (repeat)."),
    ] = None,
) -> None:
    """Provision one case's workspace: input + answers always, then workspace.files."""
    from caseshelf.services.workspace import (  # lazy: ~30 ms, workspace only
        load_eval_config,
        provision_workspace,
    )

    cfg = load_eval_config(config, project_root=project_root, plugin_dirs=plugin_dir)
    written = provision_workspace(case_dir, target, cfg, warn=warn)

    def render(o: dict[str, Any]) -> None:
        for f in o["files"]:
            say(escape(f))

    emit({"workspace": str(target), "files": written}, render)


def register_commands(app: typer.Typer) -> None:
    command(app, "export")(export)
    command(app, "pull")(pull_cmd)
    command(app, "workspace")(workspace)
