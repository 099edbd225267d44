"""Jobs of parts survive their workers' deaths, on the embedded store (its in-process queue) and
on moto (DynamoDB, S3 and the template's SQS queues): a part being written holds a lease on its
job; the export worker's scheduled sweep sends again a part whose lease ran out, and every part
of a job nothing of which is alive (messages never sent); past three sends the job fails naming
the part, and asking again reuses what was written. A worker's death is an exception no handler
catches (`Killed`: the heartbeat stops with it, the message is neither answered nor failed, as
with `kill -9`); time is the services' clock, moved by the test."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from caseshelf import bootstrap
from caseshelf.devserver import SWEEP_SECONDS
from caseshelf.domain import export_parts
from caseshelf.domain.layout import download_key
from caseshelf.gateway import deliver_queued, scheduled_event
from caseshelf.services.export_jobs import PART_RESUME_WITHIN_SECONDS, RUNNING_PK, PartJobs
from caseshelf.services.jobs import job_pk
from caseshelf.services.registry import parse_dataset
from tests.conftest import aws_backend
from tests.helpers import call_function, lambda_context, load_function
from tests.integration.test_export_jobs import (
    CASES,
    ME,
    PART,
    RecordingStore,
    Stack,
    _stack,
    assert_same_export,
    one_pass,
)
from tests.integration.test_job_leases import Clock
from tests.moto_infra import make_moto_dynamodb_atomic, schedule_seconds

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]


class Killed(BaseException):
    """The worker's process dies here: nothing of the job service gets to handle it."""


class LocalStack(Stack):
    """`Stack` on the embedded store: the export queue is the in-process `LocalQueue`."""

    def drain(self) -> None:
        def call(rule: Any, event: dict[str, Any]) -> None:
            record = event["Records"][0]
            doc = orjson.loads(record["body"])
            queue = record["eventSourceARN"].rsplit(":", 1)[-1]
            self.delivered[(queue, doc["part"])] += 1
            load_function(rule.module).lambda_handler(
                event, lambda_context(rule.function, rule.memory_mb)
            )

        deliver_queued(bootstrap.services().local_queues, call)


@pytest.fixture
def embedded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    settings = bootstrap.load_settings({}, home=str(tmp_path / "home"))
    plain = bootstrap.build(settings)
    store = RecordingStore(plain.store)
    services = bootstrap.build(settings, store=store, index=plain.index)  # type: ignore[arg-type]
    monkeypatch.setattr(export_parts, "MAX_PART_CASES", PART)
    cases = [{"id": f"q{i}", "inputs": {"user": f"question {i}"}} for i in range(CASES)]
    services.registry.register(ME, parse_dataset({"id": "qa", "version": "1.0.0", "cases": cases}))
    bootstrap.use(services)
    try:
        yield LocalStack(None, store, None, {})  # type: ignore[arg-type]
    finally:
        bootstrap.use(None)


@pytest.fixture
def on_moto(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    """`test_export_jobs`' stack on moto in process: the template's queues, the worker fed
    from them."""
    from moto import mock_aws

    make_moto_dynamodb_atomic()
    with mock_aws():
        yield from _stack(aws_backend("moto", None), monkeypatch)


@pytest.fixture(params=["embedded", "moto"])
def rig(request: pytest.FixtureRequest) -> Stack:
    """The embedded store, or moto, with `qa@1.0.0` of `CASES` cases: 4 parts of 3 cases."""
    stack: Stack = request.getfixturevalue("embedded" if request.param == "embedded" else "on_moto")
    return stack


@pytest.fixture
def clock(rig: Stack) -> Clock:
    clock = Clock()
    services = bootstrap.services()
    services.export_jobs.clock = clock
    services.download_jobs.clock = clock
    return clock


@dataclass
class Dying:
    """Deaths still to come of a patched method, and those that came."""

    times: int
    deaths: int = 0


def kill(jobs: PartJobs, method: str, part: int | None, times: int) -> Dying:
    """Make `jobs.<method>` (a part's write, or the finish) die the next `times` times (for part
    `part` only, when given)."""
    real = getattr(jobs, method)
    dying = Dying(times)

    def die(*args: Any) -> Any:
        if (part is None or args[2] == part) and dying.times > 0:
            dying.times -= 1
            dying.deaths += 1
            raise Killed()
        return real(*args)

    setattr(jobs, method, die)
    return dying


def sweep() -> list[dict[str, Any]]:
    status, out = call_function("export_worker", scheduled_event("ExportWorkerFunction"))
    assert status == 0
    swept: list[dict[str, Any]] = out["swept"]
    return swept


def job_item(job_id: str) -> dict[str, Any]:
    job = bootstrap.services().index.get_item(job_pk(job_id), "JOB")
    assert job is not None
    return job


def lease_seconds() -> float:
    return bootstrap.services().export_jobs.lease_seconds


def parts_sweep_period_seconds() -> float:
    """How often the parts' sweep runs, at most: the export worker's `SweepParts` schedule (on
    AWS) and the local server's own period."""
    return max(schedule_seconds("ExportWorkerFunction", "SweepParts"), SWEEP_SECONDS)


@pytest.mark.parametrize("phase", [0.0, 0.5, 0.99], ids=["tick-at-death", "mid", "tick-before"])
def test_a_part_whose_worker_died_is_sent_again_within_120_s(
    rig: Stack, clock: Clock, phase: float
) -> None:
    period = parts_sweep_period_seconds()
    assert lease_seconds() + period <= PART_RESUME_WITHIN_SECONDS == 120
    kill(bootstrap.services().export_jobs, "_write_part", part=0, times=1)
    _, job = rig.export()
    # Given a part's worker killed right after it took its lease: the latest expiry
    with pytest.raises(Killed):
        rig.drain()
    died = clock.now
    # When the sweep runs on its schedule, whatever the schedule's phase against the death
    at, resent_after = phase * period, None
    while at <= PART_RESUME_WITHIN_SECONDS:
        clock.now = died + timedelta(seconds=at)
        if sweep():
            resent_after = at
            break
        at += period
    # Then the part was sent again within the bound, and the job ends
    assert resent_after is not None
    rig.drain()
    assert rig.job(job["id"])["state"] == "succeeded"


def test_a_part_whose_worker_died_is_sent_again_and_the_export_is_the_same(
    rig: Stack, clock: Clock, tmp_path: Path
) -> None:
    kill(bootstrap.services().export_jobs, "_write_part", part=2, times=1)
    status, job = rig.export()
    assert status == 202
    # Given the worker of part 2 killed mid-part: its lease is on the job, its message gone
    with pytest.raises(Killed):
        rig.drain()
    rig.drain()  # the parts after it
    dead = job_item(job["id"])
    assert dead["state"] == "running" and dead["parts_done"] == [0, 1, 3]
    assert set(dead["part_leases"]) == {"2"}
    # When the sweep runs while the lease holds, nothing is sent
    assert sweep() == []
    clock.advance(lease_seconds() - 1)
    assert sweep() == []
    # Once it ran out, part 2 alone is sent again, and counted
    clock.advance(2)
    assert sweep() == [{"job_id": job["id"], "status": "resent"}]
    assert job_item(job["id"])["part_sends"] == {"2": 1}
    assert sweep() == []  # sent: not again while it waits for its worker
    rig.drain()
    # Then the job finished with the export an undisturbed run writes, and no part ran twice
    done = rig.job(job["id"])
    assert done["state"] == "succeeded", done
    assert {n: rig.delivered[("ExportQueue", n)] for n in range(4)} == {0: 1, 1: 1, 2: 2, 3: 1}
    prefix = done["result"]["manifest_key"].removesuffix("manifest.json")
    assert_same_export(rig, prefix, one_pass(rig, tmp_path))
    # And the sweep forgets the ended job
    assert sweep() == []
    assert bootstrap.services().index.list_items(RUNNING_PK) == []


def test_a_job_whose_parts_were_never_sent_gets_them_from_the_sweep(
    rig: Stack, clock: Clock, tmp_path: Path
) -> None:
    jobs = bootstrap.services().export_jobs
    real = jobs._send

    def died(job_id: str, parts: list[int]) -> None:
        jobs._send = real  # type: ignore[method-assign]
        raise Killed()

    jobs._send = died  # type: ignore[method-assign]
    # Given a route that died after writing the job, before sending its parts
    with pytest.raises(Killed):
        rig.export()
    [(job_id, row)] = bootstrap.services().index.list_items(RUNNING_PK)
    assert row["kind"] == "export" and job_item(job_id)["state"] == "running"
    rig.drain()
    assert not rig.delivered
    # When a lease has passed with nothing of the job alive, every part is sent
    assert sweep() == []
    clock.advance(lease_seconds() + 1)
    assert sweep() == [{"job_id": job_id, "status": "resent"}]
    assert job_item(job_id)["part_sends"] == {str(n): 1 for n in range(4)}
    rig.drain()
    done = rig.job(job_id)
    assert done["state"] == "succeeded", done
    prefix = done["result"]["manifest_key"].removesuffix("manifest.json")
    assert_same_export(rig, prefix, one_pass(rig, tmp_path))


def test_a_part_whose_worker_dies_on_every_send_fails_the_job_naming_it(
    rig: Stack, clock: Clock
) -> None:
    dying = kill(bootstrap.services().export_jobs, "_write_part", part=1, times=99)
    _, job = rig.export()
    with pytest.raises(Killed):
        rig.drain()
    rig.drain()
    # Sent again twice, dying each time
    for sends in (1, 2):
        clock.advance(lease_seconds() + 1)
        assert sweep() == [{"job_id": job["id"], "status": "resent"}]
        assert job_item(job["id"])["part_sends"] == {"1": sends}
        with pytest.raises(Killed):
            rig.drain()
    assert dying.deaths == 3
    # The sweep after the third death fails the job, naming the part, its cases, what to do
    clock.advance(lease_seconds() + 1)
    assert sweep() == [{"job_id": job["id"], "status": "failed"}]
    failed = rig.job(job["id"])
    assert failed["state"] == "failed"
    assert failed["error"]["code"] == "PartFailed" and failed["error"]["part"] == 1
    detail = failed["error"]["detail"]
    assert "part 1 (cases 3-5) was sent 3 times" in detail
    assert "the worker stopped without an answer" in detail
    assert "ask for the export again to resume it" in detail
    # Nothing looks complete; asked again, only part 1 is written, the rest is reused
    keys = [o.key for o in rig.store.list("t/acme/exports/")]
    assert keys and not [k for k in keys if k.endswith("manifest.json")]
    dying.times = 0
    rig.store.written.clear()
    status, rerun = rig.export()
    assert status == 202 and rerun["id"] != job["id"]
    rig.drain()
    assert rig.job(rerun["id"])["state"] == "succeeded"
    case_files = [k for k in rig.store.written if "/q" in k and ".parts/" not in k]
    assert {k.split("/")[4] for k in case_files} == {"q3", "q4", "q5"}


def test_a_finish_whose_worker_died_is_run_again_and_a_download_ends(
    rig: Stack, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export_parts, "DOWNLOAD_PART_CASES", PART)
    services = bootstrap.services()
    kill(services.download_jobs, "_finish", part=None, times=1)
    rec = services.registry.get_version(ME, "qa", "1.0.0")
    started = services.download_jobs.start(ME, "qa", "1.0.0")
    assert started.job is not None
    job_id = started.job["id"]
    # Given the invocation finishing the document killed: every part recorded, none leased
    with pytest.raises(Killed):
        rig.drain()
    dead = job_item(job_id)
    assert dead["parts_done"] == [0, 1, 2, 3] and set(dead["part_leases"]) == {"finish"}
    # Asked again while the finish's lease holds, the request joins the job, sending nothing
    assert services.download_jobs.start(ME, "qa", "1.0.0").job["id"] == job_id  # type: ignore[index]
    assert sweep() == []
    # Once it ran out, the last part is sent again, and its delivery finishes the document
    clock.advance(lease_seconds() + 1)
    assert sweep() == [{"job_id": job_id, "status": "resent"}]
    assert job_item(job_id)["part_sends"] == {"finish": 1}
    rig.drain()
    done = rig.job(job_id)
    assert done["state"] == "succeeded", done
    doc = services.store.get(download_key(rec.tenant, rec.content_digest))
    assert doc == services.registry.render_version(rec)


def test_asking_again_for_an_export_whose_workers_died_resumes_it(
    rig: Stack, clock: Clock, tmp_path: Path
) -> None:
    kill(bootstrap.services().export_jobs, "_write_part", part=0, times=1)
    _, job = rig.export()
    with pytest.raises(Killed):
        rig.drain()
    rig.drain()
    # Asked again while the lease holds: the running job, nothing sent
    status, same = rig.export()
    assert status == 202 and same["id"] == job["id"]
    assert job_item(job["id"])["part_sends"] == {}
    # Asked again after it: the same job, its dead part sent again, and it ends
    clock.advance(lease_seconds() + 1)
    status, same = rig.export()
    assert status == 202 and same["id"] == job["id"]
    assert job_item(job["id"])["part_sends"] == {"0": 1}
    rig.drain()
    assert rig.job(job["id"])["state"] == "succeeded"


def test_a_lease_is_renewed_by_its_holder_only(rig: Stack, clock: Clock) -> None:
    jobs = bootstrap.services().export_jobs
    kill(jobs, "_write_part", part=3, times=1)
    _, job = rig.export()
    with pytest.raises(Killed):
        rig.drain()
    rig.drain()
    held = job_item(job["id"])["part_leases"]["3"]
    clock.advance(10)
    assert jobs.renew_lease(job["id"], "3", held["worker"]) is True
    renewed = job_item(job["id"])["part_leases"]["3"]
    assert renewed["until"] > held["until"]
    assert jobs.renew_lease(job["id"], "3", "someone-else") is False
    # A duplicate delivery while the lease holds is turned away
    assert jobs.run_part(job["id"], 3).status == "ignored"
    assert job_item(job["id"])["state"] == "running"


def test_reading_a_job_whose_workers_stopped_sends_its_parts_again(
    rig: Stack, clock: Clock
) -> None:
    kill(bootstrap.services().export_jobs, "_write_part", part=1, times=1)
    _, job = rig.export()
    with pytest.raises(Killed):
        rig.drain()
    if isinstance(rig, LocalStack):  # the process holding the queue died: its messages too
        queue = bootstrap.services().local_queues["ExportQueue"]
        while queue.take() is not None:
            pass
    # Read while the lease holds: running, nothing sent
    assert rig.job(job["id"])["state"] == "running"
    assert job_item(job["id"])["part_sends"] == {}
    # Read once it ran out (what the embedded client does as it follows the job): the parts not
    # done are sent again, and the job ends
    clock.advance(lease_seconds() + 1)
    assert rig.job(job["id"])["state"] == "running"
    assert job_item(job["id"])["part_sends"] == {"1": 1, "2": 1, "3": 1}
    rig.drain()
    assert rig.job(job["id"])["state"] == "succeeded"
