"""`caseshelf verify`: re-hash what versions reference, on the store itself (like `gc`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from caseshelf.cli.common import emit, note, progress, say, state, table
from caseshelf.cli.root import command
from caseshelf.domain.identity import Identity


def verify(
    ref: Annotated[
        str | None,
        typer.Argument(
            metavar="[ID[@REF]]",
            help="One version (ID@REF), or every version of a dataset (ID).",
            show_default=False,
        ),
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="Every dataset version of every tenant.")
    ] = False,
) -> None:
    """Re-hash every object a version references; report what is missing or corrupt.

    Exit code 1 when anything is. Versions that are tombstoned are checked too (their
    objects are kept).
    """
    from caseshelf import bootstrap  # lazy: ~100 ms off `verify --help`
    from caseshelf.cli.registry import parse_ref  # lazy: ~12 ms (sqlite3, orjson) off it too
    from caseshelf.services.verify import (  # lazy: ~10 ms off help
        dataset_versions,
        verify_versions,
    )

    st = state()
    if st.api:
        raise typer.BadParameter(
            "verify works on the store itself (CASESHELF_HOME, or CASESHELF_BACKEND=aws); "
            "drop --api"
        )
    if (ref is None) == (not every):
        raise typer.BadParameter("name one dataset (ID or ID@REF), or give --all")
    settings = st.settings()
    svc = bootstrap.build(settings)
    if every:
        records = list(dataset_versions(svc.index, svc.index.list_tenants()))
    else:
        assert ref is not None
        name, r = parse_ref(ref)
        identity = Identity(settings.tenant, settings.principal, frozenset(settings.roles))
        if "@" in ref:
            records = [svc.registry.get_version(identity, name, r, include_deleted=True)]
        else:
            _, found = svc.registry.versions.find(identity, name)
            records = sorted(found, key=lambda rec: rec.seq)
    with progress("verifying", total=len(records)) as bar:
        report = verify_versions(
            svc.store, records, on_version=lambda _r: bar.advance(), index=svc.index
        )
    out = report.to_dict()

    def render(o: dict[str, Any]) -> None:
        if o["problems"]:
            table(
                ("version", "problem", "object", "detail"),
                [[p["version"], p["kind"], p["key"], p["detail"]] for p in o["problems"]],
            )
        say(
            f"{'ok' if o['ok'] else 'PROBLEMS'}: {o['version_count']} version(s), "
            f"{o['objects_checked']} objects and {o['records_checked']} records checked "
            f"({o['bytes_hashed']} bytes hashed); {o['problem_count']} problem(s)"
        )
        if not o["ok"]:
            note("a damaged version cannot be read; restore its objects or register it again")

    emit(out, render)
    if not report.ok:
        raise typer.Exit(1)


def register_commands(app: typer.Typer) -> None:
    command(app, "verify")(verify)
