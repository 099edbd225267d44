"""The container-task on-ramps: Terminal-Bench and Harbor task trees -> a dataset version.

`POST /datasets/terminal-bench` and `POST /datasets/harbor` take where the tasks are (an upload,
an S3 prefix, or a small inline archive) and how to map them; the service reads the tree (archives
are checked before anything is used), maps every task and registers the version.
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.utilities.typing import LambdaContext

from caseshelf import bootstrap
from caseshelf.api import dto
from caseshelf.api.app import count, current_identity, instrumented, make_resolver
from caseshelf.api.routes import created_response, created_responses
from caseshelf.domain.tasks import HARBOR, TERMINAL_BENCH
from caseshelf.services.tasks import TaskImportRequest

app = make_resolver(
    "caseshelf task on-ramps",
    description="Terminal-Bench and Harbor task directories imported as dataset versions.",
)

TAGS = ["tasks"]


def _run(fmt: str, body: TaskImportRequest) -> Response[dto.TaskImportOut]:
    res = bootstrap.services().tasks.import_tasks(current_identity(app), fmt, body)
    if res.created:
        count("DatasetVersionsRegistered")
        count("CasesRegistered", res.case_count)
    return created_response(res.created, dto.task_import_out(res))


_RESPONSES = created_responses(
    dto.TaskImportOut, 400, 403, 404, 409, 413, 507, description="A new version was created."
)


@app.post(
    "/datasets/terminal-bench",
    summary="Import Terminal-Bench tasks",
    description="Each task directory (task.yaml, docker-compose.yaml, tests/, an optional "
    "run-tests.sh) becomes a case with a prebuilt image (a literal compose `image:` or "
    "`image_template`), a `tests-pass` grader (the task's run-tests.sh, else the harness's "
    "default pytest runner over tests/test_outputs.py) and every file. A task without an image, "
    "or without tests, fails the import naming it, unless `skip_invalid` (then it is listed in "
    "`skipped`). Task directories with the same name get their relative paths as ids.",
    tags=TAGS,
    status_code=201,
    responses=_RESPONSES,
)
def import_terminal_bench(
    body: Annotated[TaskImportRequest, Body()],
) -> Response[dto.TaskImportOut]:
    return _run(TERMINAL_BENCH, body)


@app.post(
    "/datasets/harbor",
    summary="Import Harbor tasks",
    description="Each task directory (task.toml, instruction.md, environment/, tests/test.sh) "
    "becomes a case with `[environment].docker_image` (else `image_template`), resources, "
    "network, a `reward-file` grader and every file; multi-step tasks are carried step by step, "
    "each step pointing at the test.sh its verifier runs. A `registry.json` anywhere in the "
    "tree fills `metadata.catalog`.",
    tags=TAGS,
    status_code=201,
    responses=_RESPONSES,
)
def import_harbor(body: Annotated[TaskImportRequest, Body()]) -> Response[dto.TaskImportOut]:
    return _run(HARBOR, body)


@instrumented
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
