"""The container-task on-ramps: Terminal-Bench and Harbor task trees -> a dataset version.

`POST /datasets/terminal-bench` and `POST /datasets/harbor` take where the tasks are (an upload,
an S3 prefix, or a small inline archive) and how to map them, check that place, and start an
import job (202, `Location: /jobs/{id}`): the importer's worker reads the tree member by member,
maps every task and registers the version (`caseshelf.services.jobs.JobService.run_queued`).
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.utilities.typing import LambdaContext

from caseshelf import bootstrap
from caseshelf.api.app import count, current_identity, instrumented, make_resolver, problems
from caseshelf.api.import_dto import JobOut, job_out
from caseshelf.domain.tasks import HARBOR, TERMINAL_BENCH
from caseshelf.services.tasks import TaskImportRequest

app = make_resolver(
    "caseshelf task on-ramps",
    description="Terminal-Bench and Harbor task directories imported as dataset versions.",
)

TAGS = ["tasks"]


def _run(fmt: str, body: TaskImportRequest) -> Response[JobOut]:
    job = job_out(bootstrap.services().jobs.start_tasks(current_identity(app), fmt, body))
    count("TaskImportJobsStarted")
    return Response(
        status_code=202, content_type="application/json", body=job, headers={"Location": job.url}
    )


_RESPONSES: dict[int, Any] = {
    202: {
        "description": "The import's job, started: follow it with `GET /jobs/{id}`; once "
        "`succeeded` its `result` is the version registered (`TaskImportOut`: id, version, "
        "content_digest, case_count, created, skipped), once `failed` its `error` names the "
        "invalid tasks (and `skip_invalid`) or the limit.",
        "content": {"application/json": {"model": JobOut}},
    },
    **problems(400, 403, 404, 413, 507),
}
_JOB = (
    " The import runs as a job (202, `Location: /jobs/{id}`): the archive is read member by "
    "member, the tasks mapped one at a time; `progress` counts the tasks read and mapped."
)


@app.post(
    "/datasets/terminal-bench",
    summary="Import Terminal-Bench tasks",
    description="Each task directory (task.yaml, docker-compose.yaml, tests/, an optional "
    "run-tests.sh) becomes a case with a prebuilt image (a literal compose `image:` or "
    "`image_template`), a `tests-pass` grader (the task's run-tests.sh, else the harness's "
    "default pytest runner over tests/test_outputs.py) and every file. A task without an image, "
    "or without tests, fails the import naming it, unless `skip_invalid` (then it is listed in "
    "`skipped`). Task directories with the same name get their relative paths as ids." + _JOB,
    tags=TAGS,
    status_code=202,
    responses=_RESPONSES,
)
def import_terminal_bench(
    body: Annotated[TaskImportRequest, Body()],
) -> Response[JobOut]:
    return _run(TERMINAL_BENCH, body)


@app.post(
    "/datasets/harbor",
    summary="Import Harbor tasks",
    description="Each task directory (task.toml, instruction.md, environment/, tests/test.sh) "
    "becomes a case with `[environment].docker_image` (else `image_template`), resources, "
    "network, a `reward-file` grader and every file; multi-step tasks are carried step by step, "
    "each step pointing at the test.sh its verifier runs. A `registry.json` anywhere in the "
    "tree fills `metadata.catalog`." + _JOB,
    tags=TAGS,
    status_code=202,
    responses=_RESPONSES,
)
def import_harbor(body: Annotated[TaskImportRequest, Body()]) -> Response[JobOut]:
    return _run(HARBOR, body)


@instrumented
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
