"""The whole export in one of its formats, planned eagerly (pure): `plan_export` picks the
layout of `caseshelf.domain.export` (`case-dirs`) or of `caseshelf.domain.export_formats`
(`harbor`, `inspect`, `jsonl`, `parquet`). The services stream the same plan window by window
(`caseshelf.services.export_stream`); this eager form is the reference they are held to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from caseshelf.domain.errors import BadRequest
from caseshelf.domain.export import (
    FORMAT,
    ExportPlan,
    SharedEntry,
    check_format,
    export_id,
    plan_case,
)
from caseshelf.domain.export_formats import (
    export_org,
    harbor_manifest,
    harbor_manifest_file,
    harbor_task,
    plan_harbor_case,
    plan_rows,
)


def plan_export(
    *,
    dataset: Mapping[str, Any],
    content_digest: str,
    cases: Iterable[Mapping[str, Any]],
    shared_files: Sequence[SharedEntry],
    subset: Mapping[str, Any] | None = None,
    fmt: str = FORMAT,
    bodies: Mapping[str, bytes] | None = None,
) -> ExportPlan:
    """The whole export in format `fmt`. Case directories are distinct by construction (the id
    encoding is reversible); a repeated id is an error rather than a silent overwrite. A case the
    format cannot carry is a `BadRequest` naming the case and the field, raised before anything
    is written. `bodies` (stored file bodies by hex digest) needs to hold only the `.gitignore`
    and `.harborignore` files of a `harbor` export's tasks, which Harbor's digest reads."""
    check_format(fmt)
    plan = ExportPlan(
        export_id=export_id(content_digest, subset, shared_files, fmt),
        dataset=dict(dataset),
        content_digest=content_digest,
        subset=dict(subset) if subset is not None else None,
        shared_files=list(shared_files),
        format=fmt,
        cases=[],
    )
    if fmt in ("case-dirs", "harbor"):
        org = export_org(dataset)
        seen: set[str] = set()
        tasks: list[bytes] = []
        for case in cases:
            if fmt == "case-dirs":
                one = plan_case(case, shared_files, plan.warnings)
            else:
                one = plan_harbor_case(case, shared_files, plan.warnings, org)
                tasks.append(harbor_task(case, one, org, bodies or {}))
            if one.dir in seen:
                raise BadRequest(f"case {one.case_id!r} appears twice", case_id=one.case_id)
            seen.add(one.dir)
            plan.cases.append(one)
        if fmt == "harbor":
            body = harbor_manifest(
                dataset,
                tasks,
                content_digest=content_digest,
                export_id=plan.export_id,
                case_count=len(plan.cases),
                subset=subset,
            )
            plan.data_files = [harbor_manifest_file(body)]
        return plan
    plan.data_files, plan.rows = plan_rows(fmt, cases, shared_files, plan.warnings)
    return plan
