#!/usr/bin/env python3
"""Rewrite dataset YAML files to the inputs + expectations envelope (see docs/migration.md).

    python scripts/migrate_dataset_envelope.py [--check] [PATH ...]

Each PATH is a file or a directory (searched for *.yaml / *.yml); with no PATH, the current
directory. Files that are not datasets are left untouched. `--check` writes nothing and exits 1
when a file would change. Exit 2 when a file cannot be migrated (the message names the item id).
"""

from __future__ import annotations

import argparse
import sys

from caseshelf.domain.errors import CaseshelfError
from caseshelf.services.migrate import migrate_paths, summarise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["."], metavar="PATH")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 on changes")
    args = parser.parse_args(argv)
    try:
        results = migrate_paths(args.paths, check=args.check)
    except CaseshelfError as exc:
        print(f"error: {exc.detail}", file=sys.stderr)
        return 2
    lines, code = summarise(results, check=args.check)
    for stream, line in lines:
        print(line, file=sys.stderr if stream == "err" else sys.stdout)
    return code


if __name__ == "__main__":
    sys.exit(main())
