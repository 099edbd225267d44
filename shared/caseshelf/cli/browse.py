"""`caseshelf stats`, `caseshelf file` and `caseshelf whoami`: what the web UI shows of a version
and of the caller, from the same routes (`…/stats`, `…/files/{digest}`, `/me`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from caseshelf.cli.common import client as cli_client
from caseshelf.cli.common import emit, fields_table, say, table, wire
from caseshelf.cli.registry import DeletedOpt, parse_ref
from caseshelf.cli.root import command


def _buckets(dist: dict[str, Any]) -> str:
    return ", ".join(f"{b['low']}-{b['high']}: {b['count']}" for b in dist["buckets"])


def _show_stats(o: dict[str, Any]) -> None:
    fields_table(
        [
            ("version", f"{o['id']}@{o['version']}"),
            ("content_digest", o["content_digest"]),
            ("cases", o["case_count"]),
            ("untagged", o["untagged"]),
            ("inputs", ", ".join(f"{k}: {v}" for k, v in o["input_kinds"].items())),
        ]
    )
    if o["tags"]:
        table(("tag", "cases"), [[t["tag"], t["cases"]] for t in o["tags"]], title="cases per tag")
    for name, title in (("input_length", "input length"), ("file_sizes", "file sizes (bytes)")):
        dist = o[name]
        if dist["count"]:
            say(
                f"{title}: {dist['count']} value(s), min {dist['min']}, max {dist['max']}, "
                f"mean {dist['mean']:.1f}; {_buckets(dist)}"
            )
    if o["shared_files"]:
        table(
            ("shared file", "digest", "bytes"),
            [[f["dest"], f["digest"], f["size"]] for f in o["shared_files"]],
        )


def stats(
    ref: Annotated[str, typer.Argument(metavar="ID@REF", help="ID alone means latest.")],
    deleted: DeletedOpt = False,
) -> None:
    """A version's numbers over every case: cases per tag, input lengths, file sizes."""
    parse_ref(ref)
    emit(wire(cli_client().stats(ref, include_deleted=deleted)), _show_stats)


def file(
    ref: Annotated[str, typer.Argument(metavar="ID@REF", help="ID alone means latest.")],
    digest: Annotated[
        str,
        typer.Argument(
            metavar="DIGEST", help="sha256:… of a companion or shared file of the version."
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Write the body there (default: stdout)."),
    ] = None,
    deleted: DeletedOpt = False,
) -> None:
    """One file of a version by its digest (checked against it), to stdout or a file."""
    parse_ref(ref)
    body = cli_client().file(ref, digest, include_deleted=deleted)
    if output is None or str(output) == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(body)
        sys.stdout.buffer.flush()
        return
    partial = output.with_name(output.name + ".partial")
    partial.write_bytes(body)
    partial.replace(output)  # a file that is there is whole
    say(f"wrote {len(body)} bytes to {output}")


def whoami() -> None:
    """Who the store or API takes you for: tenant, principal, roles, what they allow."""

    def render(o: dict[str, Any]) -> None:
        fields_table(
            [
                ("tenant", o["tenant"]),
                ("principal", o["principal"]),
                ("roles", ", ".join(o["roles"]) or "(none)"),
                ("admin", "yes" if o["admin"] else "no"),
                ("reads", ", ".join(o["reads"])),
                ("writes _shared", "yes" if o["writes_shared"] else "no"),
            ]
        )

    emit(wire(cli_client().me()), render)


def register_commands(app: typer.Typer) -> None:
    command(app, "stats")(stats)
    command(app, "file")(file)
    command(app, "whoami")(whoami)
