"""The API's one OpenAPI document, merged from every function's resolver.

python -m caseshelf.api.openapi --write docs/openapi.json   # regenerate
python -m caseshelf.api.openapi --check docs/openapi.json   # exit 1 when it drifted
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from aws_lambda_powertools.event_handler.openapi.merge import OpenAPIMerge

from caseshelf.api.app import API_VERSION, AUTHORIZER
from caseshelf.functions import FUNCTIONS

# Every function module whose routes make up the API.
# Functions with API routes (a queue worker has no resolver and no route).
FUNCTION_MODULES: list[str] = [fn.module for fn in FUNCTIONS if fn.routes]

TITLE = "caseshelf"
DESCRIPTION = (
    "A registry for evaluation datasets: versioned, content-addressed, diffable, exportable. "
    "Every route needs the authorizer; errors are application/problem+json."
)


def load_function(module: str) -> ModuleType:
    """The function module `module` (e.g. `caseshelf.functions.registry`), imported."""
    return importlib.import_module(module)


def merged_schema(modules: list[str] | None = None) -> str:
    """The merged OpenAPI document as JSON text (paths and components unioned; a path and
    method defined twice is an error)."""
    merge: OpenAPIMerge | None = None
    for rel in FUNCTION_MODULES if modules is None else modules:
        app: Any = load_function(rel).app
        schema = app.get_openapi_schema()
        if merge is None:
            components = schema.components
            schemes = components.securitySchemes if components is not None else None
            merge = OpenAPIMerge(
                title=TITLE,
                version=API_VERSION,
                description=DESCRIPTION,
                security_schemes=dict(schemes or {}),
                security=[{AUTHORIZER: []}],
                on_conflict="error",
            )
        merge.add_schema(schema)
    if merge is None:
        raise ValueError("no function modules to merge")
    return merge.get_openapi_json_schema() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m caseshelf.api.openapi", description=__doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="PATH", help="write the document to PATH")
    group.add_argument("--check", metavar="PATH", help="exit 1 when PATH differs")
    args = parser.parse_args(argv)
    text = merged_schema()
    if args.write:
        Path(args.write).write_text(text, encoding="utf-8")
        print(f"wrote {args.write}")
        return 0
    if args.check:
        current = Path(args.check).read_text(encoding="utf-8") if Path(args.check).exists() else ""
        if current != text:
            print(f"{args.check} is out of date: run `make openapi`", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
