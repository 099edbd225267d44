"""The export worker Lambda: one part of an export job per SQS message (batch size 1), or of a
download job (the message's `kind`: `caseshelf.services.download_jobs`).

A message from the export queue is a part to write (`ExportJobService.run_part`,
`DownloadJobService.run_part`); a failure is
raised, so SQS delivers the message again after its visibility timeout, up to the queue's
`maxReceiveCount`, then moves it to the dead-letter queue. A message from the dead-letter queue
(`CASESHELF_EXPORT_DEAD_LETTER_ARN`) fails its job, naming the part
(`ExportJobService.dead_letter`). The template gives the worker a Timeout of 900 s, which the
parts' plan keeps each part well inside (`caseshelf.domain.export_parts`).

A scheduled event (the template's `SweepParts`, every minute; `caseshelf serve` runs it at start
and on the same period) sweeps the running jobs of parts (`sweep_part_jobs`): a part whose
worker stopped (its lease ran out) is sent again at once rather than after the queue's 90-minute
visibility timeout, and a part sent `MAX_SENDS` times fails its job, naming it.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from caseshelf import bootstrap
from caseshelf.api.app import count, instrumented, logger, report_swept
from caseshelf.functions import EXPORT_DEAD_LETTER_QUEUE
from caseshelf.services.export_jobs import PartJobs, message_of, sweep_part_jobs


def is_dead_letter(arn: str) -> bool:
    """Whether a record comes from the export dead-letter queue: the deployment's ARN, or the
    local queue's name (`caseshelf.gateway.queue_arn`)."""
    configured = bootstrap.services().settings.export_dead_letter_arn
    return bool(configured and arn == configured) or arn.endswith(":" + EXPORT_DEAD_LETTER_QUEUE)


def handle_record(record: dict[str, Any]) -> dict[str, Any]:
    services = bootstrap.services()
    try:
        job_id, part, kind = message_of(record.get("body") or "")
    except ValueError:
        logger.warning("export worker: not a part message", extra={"id": record.get("messageId")})
        return {"status": "ignored"}
    jobs: PartJobs = services.download_jobs if kind == "download" else services.export_jobs
    receives = int((record.get("attributes") or {}).get("ApproximateReceiveCount") or 1)
    if is_dead_letter(str(record.get("eventSourceARN") or "")):
        outcome = jobs.dead_letter(job_id, part, receives)
        logger.warning(
            "export part dead-lettered", extra={"job_id": job_id, "kind": kind, "part": part}
        )
        count("ExportPartsDeadLettered")
    else:
        outcome = jobs.run_part(job_id, part)
        logger.debug(
            "export part handled",
            extra={
                "job_id": job_id,
                "kind": kind,
                "part": part,
                "status": outcome.status,
                "receives": receives,
            },
        )
        count(f"ExportParts{outcome.status.capitalize()}")
    return {"job_id": job_id, "part": part, "status": outcome.status}


def is_sweep_event(event: dict[str, Any]) -> bool:
    """The template's scheduled sweep (an EventBridge `Scheduled Event`)."""
    return event.get("source") == "aws.events" and event.get("detail-type") == "Scheduled Event"


def sweep() -> dict[str, Any]:
    """Send again the parts whose worker stopped; fail the jobs whose part was sent too often."""
    services = bootstrap.services()
    outcomes = sweep_part_jobs(
        services.index,
        {"export": services.export_jobs, "download": services.download_jobs},
        services.export_jobs.clock,
        services.export_jobs.lease_seconds,
    )
    return report_swept(
        outcomes, message="job parts swept", metric="ExportPartsSwept", reason_key="parts"
    )


@instrumented
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if is_sweep_event(event):
        return sweep()
    return {"records": [handle_record(r) for r in event.get("Records") or []]}
