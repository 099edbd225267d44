"""The container-task on-ramps: Terminal-Bench and Harbor task trees -> a dataset version.

`POST /datasets/terminal-bench` and `POST /datasets/harbor` take where the tasks are (an upload,
an S3 prefix, or a small inline archive) and how to map them; the service reads the tree (archives
are checked before anything is used), maps every task and registers the version.
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict

from caseshelf import bootstrap
from caseshelf.api.app import (
    count,
    current_identity,
    logger,
    make_resolver,
    metrics,
    problems,
    tracer,
)
from caseshelf.domain.tasks import HARBOR, TERMINAL_BENCH
from caseshelf.services.tasks import TaskImportRequest, TaskImportResult

app = make_resolver(
    "caseshelf task on-ramps",
    description="Terminal-Bench and Harbor task directories imported as dataset versions.",
)

TAGS = ["tasks"]


class SkippedOut(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: str
    reason: str


class TaskImportOut(BaseModel):
    """What a task import registered, and every task it left out (`skip_invalid`)."""

    model_config = ConfigDict(extra="forbid")
    id: str
    version: str
    content_digest: str
    case_count: int
    created: bool
    skipped: list[SkippedOut]


def _out(res: TaskImportResult) -> TaskImportOut:
    rec = res.record
    return TaskImportOut(
        id=rec.name,
        version=rec.version,
        content_digest=rec.content_digest,
        case_count=rec.case_count,
        created=res.created,
        skipped=[SkippedOut(task=s.task, reason=s.reason) for s in res.skipped],
    )


def _run(fmt: str, body: TaskImportRequest) -> Response[TaskImportOut]:
    res = bootstrap.services().tasks.import_tasks(current_identity(app), fmt, body)
    if res.created:
        count("DatasetVersionsRegistered")
        count("CasesRegistered", res.case_count)
    return Response(
        status_code=201 if res.created else 200,
        content_type="application/json",
        body=_out(res),
    )


_RESPONSES: dict[int, OpenAPIResponse] = {
    200: {
        "description": "Already registered with the same content (`created: false`).",
        "content": {"application/json": {"model": TaskImportOut}},
    },
    **problems(400, 403, 404, 409, 413, ok=201, description="A new version was created."),
}


@app.post(
    "/datasets/terminal-bench",
    summary="Import Terminal-Bench tasks",
    description="Each task directory (task.yaml, docker-compose.yaml, run-tests.sh, tests/) "
    "becomes a case with a prebuilt image (a literal compose `image:` or `image_template`), a "
    "`tests-pass` grader and every file. A task without an image, or without tests, fails the "
    "import naming it, unless `skip_invalid` (then it is listed in `skipped`).",
    tags=TAGS,
    status_code=201,
    responses=_RESPONSES,
)
def import_terminal_bench(
    body: Annotated[TaskImportRequest, Body()],
) -> Response[TaskImportOut]:
    return _run(TERMINAL_BENCH, body)


@app.post(
    "/datasets/harbor",
    summary="Import Harbor tasks",
    description="Each task directory (task.toml, instruction.md, environment/, tests/) becomes "
    "a case with `[environment].docker_image` (else `image_template`), resources, network, a "
    "`reward-file` grader and every file; multi-step tasks are carried step by step.",
    tags=TAGS,
    status_code=201,
    responses=_RESPONSES,
)
def import_harbor(body: Annotated[TaskImportRequest, Body()]) -> Response[TaskImportOut]:
    return _run(HARBOR, body)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
