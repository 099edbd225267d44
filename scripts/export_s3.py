#!/usr/bin/env python3
"""Export a version or a case tree for evaluation pods and harnesses, to S3 or a local directory.

    python scripts/export_s3.py ID@REF --to s3://bucket/prefix [--ids a,b] [--tags x] [--limit N]
    python scripts/export_s3.py --config eval.yaml --to s3://bucket/prefix|DIR
                                [--project-root DIR] [--plugin-dir DIR ...]
    (both) [--format case-dirs|harbor|inspect|jsonl|parquet] [--secret-ref NAME] [--bundle]

The first form exports a registered version (the store chosen by the CASESHELF_* settings); the
second exports an `eval.yaml` case tree as it is on disk: every case file byte for byte, file
symlinks only when their target is in an allowed root, and each `{dest, source}` shared file
materialized into every case (a pod has no project files to resolve it against). Warnings go to
stderr, naming the entry and the reason; the result (prefix, counts, `test_data_ref`, or
`test_data_ref_problem` when no secret_ref is known) is printed as JSON on stdout. Exit 1 on an
error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from caseshelf import bootstrap
from caseshelf.api import dto
from caseshelf.domain.errors import CaseshelfError
from caseshelf.domain.export import FORMATS
from caseshelf.domain.identity import Identity
from caseshelf.services.exports import ExportRequest, ExportService
from caseshelf.services.workspace import load_eval_config


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("ref", nargs="?", metavar="ID@REF", help="a registered version")
    parser.add_argument("--config", type=Path, help="an eval.yaml whose case tree is exported")
    parser.add_argument("--to", required=True, help="s3://bucket/prefix or a local directory")
    parser.add_argument("--ids", help="comma list of case ids (registered versions)")
    parser.add_argument("--tags", help="comma list of tags (registered versions)")
    parser.add_argument("--limit", type=int, help="the first N cases (registered versions)")
    parser.add_argument(
        "--project-root",
        type=Path,
        help="root of shared sources (default: as for an import, project_root_of)",
    )
    parser.add_argument("--plugin-dir", type=Path, action="append", help="an allowed plugin dir")
    parser.add_argument("--format", default="case-dirs", choices=FORMATS, help="the layout")
    parser.add_argument("--secret-ref", help="the Kubernetes Secret EvalHub reads S3 keys from")
    parser.add_argument("--bundle", action="store_true", help="also write <prefix>.bundle.tar.gz")
    args = parser.parse_args(argv)
    if (args.ref is None) == (args.config is None):
        parser.error("give either ID@REF or --config eval.yaml")
    try:
        svc = bootstrap.services()
        settings = svc.settings
        exports = ExportService(
            svc.registry,
            selection=svc.selection,
            bucket=settings.bucket if settings.backend == "aws" else None,
            store_for_bucket=lambda bucket: bootstrap.s3_store(settings, bucket),
            presign_expiry=settings.presign_expiry,
            warn=_warn,
            secret_ref=settings.evalhub_secret_ref,
        )
        if args.config is not None:
            config = load_eval_config(
                args.config, project_root=args.project_root, plugin_dirs=args.plugin_dir
            )
            res = exports.export_tree(
                config,
                to=args.to,
                tenant=settings.tenant,
                fmt=args.format,
                secret_ref=args.secret_ref,
                bundle=args.bundle,
            )
        else:
            name, _, ref = args.ref.partition("@")
            subset: dict[str, Any] = {
                k: v
                for k, v in (
                    ("ids", _split(args.ids)),
                    ("tags", _split(args.tags)),
                    ("limit", args.limit),
                )
                if v is not None
            }
            request = ExportRequest.model_validate(
                {
                    "subset": subset or None,
                    "format": args.format,
                    "secret_ref": args.secret_ref,
                    "bundle": args.bundle,
                }
            )
            identity = Identity(settings.tenant, settings.principal, frozenset(settings.roles))
            res = exports.export_version(identity, name, ref or "latest", request, to=args.to)
    except CaseshelfError as exc:
        print(f"error: {exc.detail}", file=sys.stderr)
        return 1
    except ValidationError as exc:
        print(f"error: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}", file=sys.stderr)
        return 1
    if res.test_data_ref_problem:
        _warn(res.test_data_ref_problem)
    print(json.dumps(dto.export_out(res).model_dump(mode="json"), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
