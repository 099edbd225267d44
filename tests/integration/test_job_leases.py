"""Import jobs survive their worker's death, on the embedded store and on moto: a running job
holds a lease its worker renews; a redelivered event (S3, EventBridge or a Lambda retry) for a
job whose lease expired resumes it, the scheduled sweep resumes what nothing redelivered, and a
job whose worker died on every attempt fails with the reason. A worker's death is simulated by
an exception no handler catches (the heartbeat stops with it, as with `kill -9`)."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from caseshelf import bootstrap
from caseshelf.domain.identity import Identity
from caseshelf.domain.subset import SubsetRequest
from caseshelf.services.jobs import JobService, UploadRequest, job_pk
from caseshelf.services.registry import parse_dataset
from tests.helpers import call_function, run_queued, s3_event

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]

ME = Identity("acme", "alice")
ROWS = "".join(
    json.dumps({"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"}) + "\n"
    for i in range(6)
)


class Killed(BaseException):
    """The worker's process dies here: nothing of the job service gets to handle it."""


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def services(installed_services: bootstrap.Services) -> bootstrap.Services:
    return installed_services


@pytest.fixture
def clock(services: bootstrap.Services) -> Clock:
    clock = Clock()
    services.jobs.clock = clock
    return clock


def dying_imports(jobs: JobService, deaths: int) -> list[int]:
    """Make the next `deaths` imports die mid-way; the list counts the attempts made."""
    real = jobs.imports.run
    attempts: list[int] = []

    def run(*args: Any, **kwargs: Any) -> Any:
        attempts.append(1)
        if len(attempts) <= deaths:
            raise Killed()
        return real(*args, **kwargs)

    jobs.imports.run = run  # type: ignore[method-assign]
    return attempts


def upload(services: bootstrap.Services, dataset: str = "leased") -> dict[str, Any]:
    req = UploadRequest.model_validate(
        {"filename": "rows.jsonl", "recipe": "gsm8k", "dataset": dataset}
    )
    up = services.jobs.create_upload(ME, req)
    services.store.put(up.key, ROWS.encode())
    return up.job


def deliver(key: str) -> dict[str, Any]:
    _, out = call_function("importer", s3_event(key))
    [obj] = out["objects"]
    return obj


def job_state(services: bootstrap.Services, job_id: str) -> dict[str, Any]:
    job = services.index.get_item(job_pk(job_id), "JOB")
    assert job is not None
    return job


def test_a_redelivery_resumes_a_job_whose_worker_died_once_its_lease_expired(
    services: bootstrap.Services, clock: Clock
) -> None:
    job = upload(services)
    attempts = dying_imports(services.jobs, deaths=1)
    # Given a worker that died mid-import
    with pytest.raises(Killed):
        deliver(job["key"])
    dead = job_state(services, job["id"])
    assert dead["state"] == "running" and dead["attempts"] == 1 and dead["lease_until"]
    # When the event comes again while the lease holds, it is a duplicate
    clock.advance(services.jobs.lease_seconds / 2)
    assert deliver(job["key"])["status"] == "duplicate"
    # And once the lease has expired, the same event resumes the job
    clock.advance(services.jobs.lease_seconds)
    assert deliver(job["key"])["status"] == "succeeded"
    done = job_state(services, job["id"])
    assert done["state"] == "succeeded" and done["attempts"] == 2
    assert done["result"]["case_count"] == 6 and len(attempts) == 2
    # Exactly one version came of it, and the finished upload is gone
    versions = services.registry.list_versions(ME, "leased").items
    assert [v.version for v in versions] == ["1.0.0"]
    assert not services.store.exists(job["key"])


def test_a_job_whose_worker_dies_on_every_attempt_fails_with_the_reason(
    services: bootstrap.Services, clock: Clock
) -> None:
    job = upload(services)
    dying_imports(services.jobs, deaths=99)
    for _ in range(services.jobs.max_attempts):
        with pytest.raises(Killed):
            deliver(job["key"])
        clock.advance(services.jobs.lease_seconds + 1)
    # When the next retry comes after the last lease expired
    assert deliver(job["key"])["status"] == "failed"
    failed = job_state(services, job["id"])
    assert failed["state"] == "failed"
    assert failed["error"]["code"] == "LeaseExpired"
    assert "3 attempts" in failed["error"]["detail"]
    assert services.registry.list_datasets(ME).items == []
    # And a late duplicate changes nothing
    assert deliver(job["key"])["status"] == "duplicate"


def test_the_sweep_resumes_what_no_redelivery_did_and_starts_lost_events(
    services: bootstrap.Services, clock: Clock
) -> None:
    died = upload(services, "died")
    lost = upload(services, "lost")  # its object-created event never arrives
    dying_imports(services.jobs, deaths=1)
    with pytest.raises(Killed):
        deliver(died["key"])
    # Nothing is swept while the lease holds and the lost upload is fresh
    status, out = call_function("importer", sweep_event())
    assert (status, out) == (0, {"swept": []})
    clock.advance(services.jobs.lease_seconds + 1)
    _, out = call_function("importer", sweep_event())
    assert sorted(o["status"] for o in out["swept"]) == ["succeeded", "succeeded"]
    assert job_state(services, died["id"])["attempts"] == 2
    assert job_state(services, lost["id"])["attempts"] == 1
    # Swept again: nothing left to do
    assert call_function("importer", sweep_event())[1] == {"swept": []}


def test_a_worker_that_lost_its_lease_cannot_overwrite_the_new_attempt(
    services: bootstrap.Services, clock: Clock
) -> None:
    job = upload(services)
    jobs = services.jobs
    claimed = jobs._claim(job_state(services, job["id"]))
    assert claimed is not None
    clock.advance(jobs.lease_seconds + 1)
    again = jobs._claim(job_state(services, job["id"]))
    assert again is not None and again["worker"] != claimed["worker"]
    assert jobs._finish(job["id"], claimed["worker"], "failed", error={"detail": "x"}) is False
    assert jobs.renew(job["id"], claimed["worker"]) is False
    assert job_state(services, job["id"])["state"] == "running"
    assert jobs._finish(job["id"], again["worker"], "succeeded", result={}) is True


def test_reading_a_job_whose_worker_died_and_whose_upload_is_gone_fails_it(
    services: bootstrap.Services, clock: Clock
) -> None:
    job = upload(services)
    dying_imports(services.jobs, deaths=1)
    with pytest.raises(Killed):
        deliver(job["key"])
    services.store.delete(job["key"])  # e.g. expired by the bucket's lifecycle rule
    assert services.jobs.get(ME, job["id"])["state"] == "running"  # the lease still holds
    clock.advance(services.jobs.lease_seconds + 1)
    got = services.jobs.get(ME, job["id"])
    assert got["state"] == "failed" and "input object is gone" in got["error"]["detail"]


def test_a_live_worker_keeps_renewing_its_lease(services: bootstrap.Services) -> None:
    # Given a short lease and an import that waits until the test has seen two renewals
    jobs = services.jobs
    jobs.lease_seconds = 0.4
    job = upload(services)
    gate = threading.Event()
    real = jobs.imports.run

    def slow(*args: Any, **kwargs: Any) -> Any:
        assert gate.wait(30)
        return real(*args, **kwargs)

    jobs.imports.run = slow  # type: ignore[method-assign]
    worker = threading.Thread(target=deliver, args=(job["key"],))
    worker.start()
    try:
        seen: set[str] = set()
        deadline = time.monotonic() + 20
        while len(seen) < 3 and time.monotonic() < deadline:
            lease = job_state(services, job["id"]).get("lease_until")
            if lease:
                seen.add(lease)
            time.sleep(0.05)
        # Then the lease moved forward while the import ran, and no other worker took it
        assert len(seen) >= 3
        assert deliver(job["key"])["status"] == "duplicate"
    finally:
        gate.set()
        worker.join(30)
    assert job_state(services, job["id"])["state"] == "succeeded"


def sweep_event() -> dict[str, Any]:
    from caseshelf.devserver import scheduled_event

    return scheduled_event("ImporterFunction")


def sweep_period_seconds() -> float:
    """How often the sweep runs, at most: the template's `SweepJobs` schedule (on AWS) and the
    local server's own period."""
    from caseshelf.devserver import SWEEP_SECONDS
    from tests.moto_infra import schedule_seconds

    return max(schedule_seconds("ImporterFunction", "SweepJobs"), SWEEP_SECONDS)


@pytest.mark.parametrize("phase", [0.0, 0.5, 0.99], ids=["tick-at-death", "mid", "tick-before"])
def test_a_job_whose_worker_died_is_resumed_within_120_s(
    services: bootstrap.Services, clock: Clock, phase: float
) -> None:
    from caseshelf.services.jobs import RESUME_WITHIN_SECONDS

    period = sweep_period_seconds()
    assert services.jobs.lease_seconds + period <= RESUME_WITHIN_SECONDS
    job = upload(services)
    dying_imports(services.jobs, deaths=1)
    # Given a worker killed right after it took (or renewed) its lease: the latest expiry
    with pytest.raises(Killed):
        deliver(job["key"])
    died = clock.now
    # When the sweep runs on its schedule, whatever the schedule's phase against the death
    at = phase * period
    resumed_after = None
    while at <= RESUME_WITHIN_SECONDS:
        clock.now = died + timedelta(seconds=at)
        call_function("importer", sweep_event())
        if job_state(services, job["id"])["state"] != "running":
            resumed_after = at
            break
        at += period
    # Then it was taken up again (and finished) within the bound
    assert resumed_after is not None, job_state(services, job["id"])
    done = job_state(services, job["id"])
    assert done["state"] == "succeeded" and done["attempts"] == 2


# -- queued jobs (subsets registered as versions, task imports) -----------------------------


def start_subset(services: bootstrap.Services) -> dict[str, Any]:
    cases = [{"id": f"c{i}", "inputs": {"user": f"q{i}"}} for i in range(5)]
    services.registry.register(ME, parse_dataset({"id": "qa", "version": "1.0.0", "cases": cases}))
    req = SubsetRequest.model_validate({"limit": 2, "register_as": {"id": "mini", "bump": "major"}})
    return services.jobs.start_subset(ME, "qa", "1.0.0", req)


def test_a_queued_job_whose_worker_died_is_sent_again_by_the_sweep(
    services: bootstrap.Services, clock: Clock
) -> None:
    jobs = services.jobs
    real = jobs._queued_subset
    deaths: list[int] = []

    def dying(*args: Any) -> Any:
        if not deaths:
            deaths.append(1)
            raise Killed()
        return real(*args)

    jobs._queued_subset = dying  # type: ignore[method-assign]
    job = start_subset(services)
    # Given its worker killed mid-job: its message taken, its lease on the job
    with pytest.raises(Killed):
        run_queued(services)
    assert job_state(services, job["id"])["state"] == "running"
    # The sweep leaves it while the lease holds, then sends it again, and the delivery resumes it
    assert call_function("importer", sweep_event())[1] == {"swept": []}
    clock.advance(jobs.lease_seconds + 1)
    _, out = call_function("importer", sweep_event())
    assert out == {"swept": [{"job_id": job["id"], "status": "resent"}]}
    assert run_queued(services) == 1
    done = job_state(services, job["id"])
    assert done["state"] == "succeeded" and done["attempts"] == 2
    assert done["result"]["registered"]["id"] == "mini"
    # And the sweep forgets it
    assert call_function("importer", sweep_event())[1] == {"swept": []}
    assert services.index.list_items("RUNNING#queued-jobs") == []


def test_a_queued_job_never_sent_is_sent_by_the_sweep_or_failed_after_three_sends(
    services: bootstrap.Services, clock: Clock
) -> None:
    jobs = services.jobs
    real = jobs.queue

    class Lost:
        def send(self, messages: Any) -> None:
            raise Killed()

    jobs.queue = lambda: Lost()  # type: ignore[assignment,return-value]
    # Given a route that died after writing the job, before sending its message
    with pytest.raises(Killed):
        start_subset(services)
    jobs.queue = real
    [(job_id, _)] = services.index.list_items("RUNNING#queued-jobs")
    assert job_state(services, job_id)["state"] == "pending"
    assert call_function("importer", sweep_event())[1] == {"swept": []}
    # When a lease has passed, the sweep sends it; each send lost, the third sweep fails it
    for _ in range(2):
        clock.advance(jobs.lease_seconds + 1)
        _, out = call_function("importer", sweep_event())
        assert out == {"swept": [{"job_id": job_id, "status": "resent"}]}
        assert services.local_queues["ImportJobQueue"].take() is not None  # lost again
    clock.advance(jobs.lease_seconds + 1)
    _, out = call_function("importer", sweep_event())
    assert out == {"swept": [{"job_id": job_id, "status": "failed"}]}
    failed = job_state(services, job_id)
    assert failed["error"]["code"] == "NotStarted" and "3 sends" in failed["error"]["detail"]
    # A job whose message waits a lease is sent again: of the two deliveries, one runs it
    job = start_subset_again(services)
    clock.advance(jobs.lease_seconds + 1)
    _, out = call_function("importer", sweep_event())
    assert {"job_id": job["id"], "status": "resent"} in out["swept"]
    assert run_queued(services) == 2  # the first send and the sweep's: one runs, one is a no-op
    assert job_state(services, job["id"])["state"] == "succeeded"


def start_subset_again(services: bootstrap.Services) -> dict[str, Any]:
    req = SubsetRequest.model_validate({"limit": 3, "register_as": {"id": "mini", "bump": "major"}})
    return services.jobs.start_subset(ME, "qa", "1.0.0", req)
