"""The emulation itself gives a function what Lambda gives it, and refuses what Lambda refuses:
a probe function (tests/lambda/probe) reports its environment from inside the sandbox and uses
memory, /tmp and answer bytes up to each limit and one step past it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lambda_emulation import (
    REQUEST_LIMIT,
    RESPONSE_LIMIT,
    ExecutionEnvironment,
    FunctionSpec,
    runtime_dir,
)

PROBE = Path(__file__).resolve().parent / "probe"
MEMORY_MB = 128
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def probe(layer: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExecutionEnvironment]:
    spec = FunctionSpec(
        logical_id="Probe",
        code_dir=PROBE,
        handler="app.handler",
        memory_mb=MEMORY_MB,
        timeout_s=29,
        tmp_mb=512,
        variables={},
        events={},
    )
    env = ExecutionEnvironment(
        spec,
        layer=layer,
        runtime=runtime_dir(),
        variables={"CASESHELF_BACKEND": "aws"},
        endpoint_url="http://127.0.0.1:9",
        scratch=tmp_path_factory.mktemp("probe"),
    )
    yield env
    env.stop()


@pytest.fixture(scope="module")
def report(probe: ExecutionEnvironment) -> dict[str, object]:
    outcome = probe.invoke({})
    assert outcome.kind == "ok", (outcome.error, outcome.log)
    assert outcome.cold and outcome.init_ms is not None
    data: dict[str, object] = outcome.json()
    return data


def test_file_system_is_lambdas(report: dict[str, object]) -> None:
    assert report["root"] == "EROFS" and report["task"] == "EROFS" and report["opt"] == "EROFS"
    assert report["tmp"] == "writable" and report["tmp_bytes"] == 512 * MiB
    assert report["cwd"] == "/var/task"
    assert report["dev_shm"] is False
    # multiprocessing's primitives need /dev/shm: they cannot be made, as on Lambda
    assert str(report["semaphore"]).startswith(("FileNotFoundError", "OSError", "PermissionError"))
    assert report["uid"] != 0


def test_environment_is_lambdas(report: dict[str, object]) -> None:
    env = report["env"]
    assert isinstance(env, dict)
    assert "HOME" not in env
    assert env["AWS_LAMBDA_FUNCTION_NAME"] == report["function_name"] == "caseshelf-Probe"
    assert env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == str(MEMORY_MB)
    assert report["memory_limit_in_mb"] == MEMORY_MB
    assert env["LAMBDA_TASK_ROOT"] == "/var/task" and env["_HANDLER"] == "app.handler"
    assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == "us-east-1"
    assert env["AWS_LAMBDA_RUNTIME_API"].startswith("127.0.0.1:")
    assert env["CASESHELF_BACKEND"] == "aws"
    assert env["_X_AMZN_TRACE_ID"].startswith("Root=1-")  # set per invocation by the runtime
    assert 0 < int(str(report["remaining_ms"])) <= 29_000


def test_memory_up_to_memory_size_and_not_past_it(probe: ExecutionEnvironment) -> None:
    assert probe.limits is not None or probe.invoke({}).kind == "ok"
    below = probe.invoke({"allocate_mb": MEMORY_MB // 2})
    assert below.kind == "ok", below.log
    assert below.peak_bytes is None or below.peak_bytes <= MEMORY_MB * MiB
    over = probe.invoke({"allocate_mb": MEMORY_MB * 2})
    if over.kind == "function-error":  # the rlimit stand-in (no cgroup): a MemoryError
        assert over.error["errorType"] == "MemoryError"
        pytest.xfail("no cgroup could be made: memory is bounded by RLIMIT_AS, not killed")
    assert over.kind == "crashed" and over.oom, (over.kind, over.error)
    after = probe.invoke({})
    assert after.kind == "ok" and after.cold  # Lambda starts a fresh environment


def test_tmp_holds_its_size_and_not_a_byte_more(probe: ExecutionEnvironment) -> None:
    fits = probe.invoke({"fill_tmp": 512 * MiB - MiB})
    assert fits.kind == "ok" and fits.json() == {"error": None}, fits.log
    over = probe.invoke({"fill_tmp": 512 * MiB + 1})
    assert over.kind == "ok" and over.json() == {"error": "ENOSPC"}, over.log


def test_answer_at_the_response_limit_and_one_byte_past(probe: ExecutionEnvironment) -> None:
    # the answer is a JSON string: its quotes are two of its bytes
    at = probe.invoke({"answer_bytes": RESPONSE_LIMIT - 2})
    assert at.kind == "ok" and len(at.answer) == RESPONSE_LIMIT
    past = probe.invoke({"answer_bytes": RESPONSE_LIMIT - 1})
    assert past.kind == "too-large"
    assert past.error["errorMessage"] == (
        f"Response payload size exceeded maximum allowed payload size ({RESPONSE_LIMIT} bytes)."
    )
    # the runtime client cannot post its answer and exits: the next call starts cold
    nxt = probe.invoke({})
    assert nxt.kind == "ok" and nxt.cold


def test_event_at_the_request_limit_and_one_byte_past(probe: ExecutionEnvironment) -> None:
    base = len(b'{"pad": ""}')
    at = probe.invoke({"pad": "p" * (REQUEST_LIMIT - base)})
    assert at.kind == "ok" and at.json()["request_len"] == REQUEST_LIMIT - base
    past = probe.invoke({"pad": "p" * (REQUEST_LIMIT - base + 1)})
    assert past.kind == "refused"
    assert past.error["errorType"] == "RequestEntityTooLargeException"
