"""The export Lambda: materialize a version for evaluation pods and harnesses (per-case
directories, Harbor task packages, inspect_ai samples, jsonl or parquet rows).

Starts the export's job (`caseshelf.services.export_jobs`): the parts go to the export queue and
the export worker (`caseshelf.functions.export_worker`) writes them under the tenant's
`t/<tenant>/exports/<export id>/` of the registry bucket. Asking again for the same version,
subset, shared files and format answers the existing export, or its job while it runs. Status
codes for errors come from `caseshelf.api.errors`.
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
    make_resolver,
    problems,
)
from caseshelf.api.job_dto import JobOut, job_out
from caseshelf.api.routes import DatasetIdPath, RefPath
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
    "files, format): when that export is complete already the answer is it (`reused`, 200). "
    "Otherwise the export runs as a job (202, `Location: /jobs/{id}`): its parts (ranges of "
    "cases) are written by the export workers, each on its own, and the last to finish writes "
    "the manifest; follow it with `GET /jobs/{id}`, whose `progress` counts the parts and "
    "cases written and whose `result`, once `succeeded`, is this route's 200 answer (or, once "
    "`failed`, `error` names the part and the reason). The same export asked for while its job "
    "runs answers that job. `test_data_ref` is EvalHub's `{s3: {bucket, key, secret_ref}}` "
    "when a `secret_ref` is known (the request's or the deployment's); otherwise "
    "`test_data_ref_problem` says why there is none. A case the format cannot carry fails the "
    "job, naming the case and the field; nothing of it looks complete (no manifest).",
    tags=TAGS,
    responses={
        202: {
            "description": "The export's job, started (or under way already).",
            "content": {"application/json": {"model": JobOut}},
        },
        **problems(400, 403, 404, 409, 413, 507, description="The export, complete already."),
    },
)
def export(
    id: DatasetIdPath, ref: RefPath, body: Annotated[ExportRequest, Body()]
) -> Response[dto.ExportOut | JobOut]:
    started = bootstrap.services().export_jobs.start(current_identity(app), id, ref, body)
    if started.result is not None:
        count("ExportsReused")
        return Response(
            status_code=200, content_type="application/json", body=dto.export_out(started.result)
        )
    assert started.job is not None
    job = job_out(started.job)
    count("ExportJobsStarted")
    return Response(
        status_code=202,
        content_type="application/json",
        body=job,
        headers={"Location": job.url},
    )


@instrumented
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
