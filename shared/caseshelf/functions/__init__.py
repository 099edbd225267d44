"""The Lambda functions of the API, inside the package: one module per function
(`caseshelf.functions.registry`, `.subset`, `.diff`, `.export`, `.export_worker`, `.importer`,
`.tasks`), each with its `lambda_handler`, and the tables of what invokes them: the functions
(API routes, S3 object keys, schedules, SQS queues) and the queues (their dead-letter queue and
how many deliveries a message gets before it goes there).

`infra/template.yaml` deploys them: each function's `functions/<name>/app.py` is a one-line
import of its module here, and the template stays the source of truth for deployment. The
table below is what the embedded client, `caseshelf serve` and the OpenAPI document route by,
so an installed package needs no source tree; `tests/unit/test_route_table.py` fails when it and
the template's events differ.

Importing this module imports no function: it is data.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Function:
    """A function of the template: its logical id, the module holding its `lambda_handler`, its
    `MemorySize`, its API routes (method, resource path), the S3 object keys whose
    `Object Created` events it receives (EventBridge key patterns: `{"wildcard": …}`,
    `{"prefix": …}` or an exact key), whether a `Schedule` runs it, and the queues (logical ids)
    whose messages it consumes through an SQS event source (batch size 1)."""

    name: str
    module: str
    memory_mb: int
    routes: tuple[tuple[str, str], ...] = ()
    object_keys: tuple[str | dict[str, str], ...] = ()
    scheduled: bool = False
    queues: tuple[str, ...] = ()
    handler: str = "lambda_handler"


@dataclass(frozen=True)
class QueueSpec:
    """An SQS queue of the template (logical id): its dead-letter queue and `maxReceiveCount`
    (its `RedrivePolicy`), or none (a dead-letter queue itself)."""

    name: str
    dead_letter: str | None = None
    max_receive_count: int = 0


EXPORT_QUEUE = "ExportQueue"
EXPORT_DEAD_LETTER_QUEUE = "ExportDeadLetterQueue"
# Import jobs started through the API (task imports): one message a job, for the importer.
IMPORT_QUEUE = "ImportJobQueue"
IMPORT_DEAD_LETTER_QUEUE = "ImportJobDeadLetterQueue"

QUEUES: tuple[QueueSpec, ...] = (
    QueueSpec(EXPORT_QUEUE, dead_letter=EXPORT_DEAD_LETTER_QUEUE, max_receive_count=3),
    QueueSpec(EXPORT_DEAD_LETTER_QUEUE),
    QueueSpec(IMPORT_QUEUE, dead_letter=IMPORT_DEAD_LETTER_QUEUE, max_receive_count=3),
    QueueSpec(IMPORT_DEAD_LETTER_QUEUE),
)


FUNCTIONS: tuple[Function, ...] = (
    Function(
        "RegistryFunction",
        "caseshelf.functions.registry",
        memory_mb=1024,
        routes=(
            ("POST", "/datasets"),
            ("POST", "/datasets/validate"),
            ("GET", "/datasets"),
            ("GET", "/datasets/{id}"),
            ("GET", "/datasets/{id}/versions"),
            ("GET", "/datasets/{id}/versions/{ref}"),
            ("GET", "/datasets/{id}/versions/{ref}/cases"),
            ("GET", "/datasets/{id}/versions/{ref}/cases/{position}"),
            ("GET", "/datasets/{id}/versions/{ref}/download"),
            ("PUT", "/datasets/{id}/versions/{ref}/tags"),
            ("GET", "/datasets/{id}/tags"),
            ("POST", "/datasets/{id}/tags"),
            ("DELETE", "/datasets/{id}/tags/{tag}"),
            ("DELETE", "/datasets/{id}/versions/{ref}"),
            ("POST", "/datasets/{id}/versions/{ref}/revive"),
            ("GET", "/datasets/{id}/versions/{ref}/files/{digest}"),
            ("GET", "/datasets/{id}/versions/{ref}/stats"),
            ("POST", "/refs/resolve"),
            ("GET", "/me"),
        ),
    ),
    Function(
        "SubsetFunction",
        "caseshelf.functions.subset",
        memory_mb=1024,
        routes=(("POST", "/datasets/{id}/versions/{ref}/subset"),),
    ),
    Function(
        "DiffFunction",
        "caseshelf.functions.diff",
        memory_mb=2048,
        routes=(("GET", "/datasets/{id}/diff"),),
    ),
    Function(
        "ExportFunction",
        "caseshelf.functions.export",
        memory_mb=1024,
        routes=(("POST", "/datasets/{id}/versions/{ref}/exports"),),
    ),
    Function(
        "ExportWorkerFunction",
        "caseshelf.functions.export_worker",
        memory_mb=2048,
        scheduled=True,
        queues=(EXPORT_QUEUE, EXPORT_DEAD_LETTER_QUEUE),
    ),
    Function(
        "ImporterFunction",
        "caseshelf.functions.importer",
        memory_mb=2048,
        routes=(
            ("GET", "/benchmarks"),
            ("POST", "/benchmarks/preview"),
            ("POST", "/benchmarks/import"),
            ("POST", "/benchmarks/publish"),
            ("GET", "/benchmarks/hf/search"),
            ("GET", "/benchmarks/hf/splits"),
            ("GET", "/benchmarks/hf/files"),
            ("POST", "/recipes"),
            ("POST", "/recipes/validate"),
            ("POST", "/bundles"),
            ("GET", "/recipes"),
            ("GET", "/recipes/{id}"),
            ("GET", "/recipes/{id}/versions"),
            ("GET", "/recipes/{id}/versions/{ref}"),
            ("DELETE", "/recipes/{id}/versions/{ref}"),
            ("POST", "/recipes/{id}/versions/{ref}/revive"),
            ("POST", "/uploads"),
            ("GET", "/jobs/{id}"),
        ),
        object_keys=({"wildcard": "t/*/uploads/*"}, {"wildcard": "t/*/imports/*"}),
        scheduled=True,
        queues=(IMPORT_QUEUE, IMPORT_DEAD_LETTER_QUEUE),
    ),
    Function(
        "TasksFunction",
        "caseshelf.functions.tasks",
        memory_mb=1024,
        routes=(
            ("POST", "/datasets/terminal-bench"),
            ("POST", "/datasets/harbor"),
        ),
    ),
)

__all__ = [
    "EXPORT_DEAD_LETTER_QUEUE",
    "EXPORT_QUEUE",
    "FUNCTIONS",
    "IMPORT_DEAD_LETTER_QUEUE",
    "IMPORT_QUEUE",
    "QUEUES",
    "Function",
    "QueueSpec",
]
