"""The export Lambda: materialize a version for evaluation pods and harnesses (per-case
directories, Harbor task packages, inspect_ai samples, jsonl or parquet rows).

Writes only under the tenant's `t/<tenant>/exports/<export id>/` of the registry bucket (its role
allows nothing else); asking again for the same version, subset, shared files and format returns
the existing export. Status codes for errors come from `caseshelf.api.errors`.
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.utilities.typing import LambdaContext

from caseshelf import bootstrap
from caseshelf.api import dto
from caseshelf.api.app import (
    count,
    current_identity,
    instrumented,
    logger,
    make_resolver,
    problems,
)
from caseshelf.api.routes import DatasetIdPath, RefPath, created_response
from caseshelf.services.exports import ExportRequest

app = make_resolver(
    "caseshelf export",
    description="Exports of dataset versions for evaluation pods and harnesses.",
)

TAGS = ["export"]


@app.post(
    "/datasets/<id>/versions/<ref>/exports",
    summary="Export a version (case-dirs, harbor, inspect, jsonl or parquet)",
    description="Writes under `{prefix}/` (ending in `/`) the files of `format` (case-dirs: "
    "`{case dir}/input.yaml, answers.yaml, annotations.yaml, environment.yaml, reference.md`, "
    "companion and shared files), when `bundle` is set `{prefix}.bundle.tar.gz` beside the "
    "prefix, and, last, `manifest.json`. Content-addressed by (content digest, subset, shared "
    "files, format): asking again returns the existing export (`reused`, 200) without writing; "
    "a new export answers 201. `test_data_ref` is EvalHub's `{s3: {bucket, key, secret_ref}}` "
    "when a `secret_ref` is known (the request's or the deployment's); otherwise "
    "`test_data_ref_problem` says why there is none. A case the format cannot carry is a 400 "
    "naming the case and the field, before anything is written.",
    tags=TAGS,
    responses={
        201: {"description": "A new export was written."},
        **problems(400, 403, 404, 409, 413),
    },
)
def export(
    id: DatasetIdPath, ref: RefPath, body: Annotated[ExportRequest, Body()]
) -> Response[dto.ExportOut]:
    res = bootstrap.services().exports.export_version(current_identity(app), id, ref, body)
    if res.warning_count:
        logger.warning(
            "export left files out",
            extra={"export_id": res.export_id, "count": res.warning_count, "why": res.warnings},
        )
    count("ExportsReused" if res.reused else "ExportsWritten")
    return created_response(not res.reused, dto.export_out(res))


@instrumented
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
