"""Local runs are quiet on a terminal: the CLI, the embedded client and `caseshelf serve` print
no Powertools JSON log documents, no CloudWatch EMF metric blobs and no Lambda ARNs; `--verbose`
or `CASESHELF_LOG_LEVEL` shows more, as human lines. On Lambda (AWS_LAMBDA_FUNCTION_NAME set)
the functions keep their structured logs and metrics. Importing the library configures no
logging of the process it is imported into."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT, http_call
from tests.moto_infra import free_port

pytestmark = pytest.mark.e2e

EXAMPLE = REPO_ROOT / "examples" / "arith.yaml"


def json_documents(text: str) -> list[dict[str, object]]:
    """The lines of `text` that are JSON objects (a structured log line, an EMF blob)."""
    found = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            found.append(doc)
    return found


def assert_human(stderr: str) -> None:
    assert json_documents(stderr) == [], stderr
    assert "_aws" not in stderr and "CloudWatchMetrics" not in stderr, stderr
    assert "arn:aws:lambda" not in stderr, stderr


def environ(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CASESHELF_", "POWERTOOLS_", "AWS_LAMBDA", "LAMBDA_"))
    }
    return {**env, **extra}


def cli(home: Path, *args: str | Path, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "caseshelf.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environ(CASESHELF_HOME=str(home), **extra),
        timeout=180,
        check=False,
    )


def test_cli_commands_print_human_lines_only_and_more_when_asked(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    commands: list[tuple[str | Path, ...]] = [
        ("register", EXAMPLE),
        ("ls",),
        ("get", "arith"),
        ("cases", "arith", "--limit", "2"),
        ("diff", "arith@1.0.0", "arith@1.0.0"),
        ("export", "arith@1.0.0", "--to", work / "out"),
        ("info",),
        ("get", "missing"),
    ]
    # When commands run on a fresh store, quietly
    for args in commands:
        proc = cli(home, *args, cwd=work)
        # Then stderr holds human lines only, and stdout no metric blob
        assert_human(proc.stderr)
        assert "_aws" not in proc.stdout, proc.stdout
        if args[-1] == "missing":
            assert proc.returncode == 1 and proc.stderr.startswith("error: no dataset")
        else:
            assert proc.returncode == 0, proc.stderr
            assert "debug:" not in proc.stderr and "info:" not in proc.stderr
    # When the same reads run with --verbose, or CASESHELF_LOG_LEVEL
    verbose = cli(home, "get", "arith", "--verbose", cwd=work)
    debug = cli(home, "-v", "cases", "arith", cwd=work)
    by_env = cli(home, "get", "arith", cwd=work, CASESHELF_LOG_LEVEL="debug")
    info = cli(home, "get", "arith", cwd=work, CASESHELF_LOG_LEVEL="INFO")
    # Then there is more, still as human lines
    for proc in (verbose, debug, by_env, info):
        assert proc.returncode == 0, proc.stderr
        assert_human(proc.stderr)
        assert f"info: the store at {home} (CASESHELF_HOME)" in proc.stderr
    for proc in (verbose, debug, by_env):
        assert "debug: GET /datasets/arith/versions/latest" in proc.stderr
        assert ": 200, answered by RegistryFunction (" in proc.stderr
    assert "debug:" not in info.stderr
    # And a level that is none is a usage error naming it
    bad = cli(home, "ls", cwd=work, CASESHELF_LOG_LEVEL="chatty")
    assert bad.returncode == 1 and "CASESHELF_LOG_LEVEL='chatty' is not a log level" in bad.stderr


def test_the_local_server_logs_requests_as_lines_and_prints_no_metrics(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "caseshelf.cli", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        # (faulthandler: a server that does not stop shows its threads, below)
        env=environ(
            CASESHELF_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1"
        ),
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # printed once the server listens
        assert first.startswith("caseshelf API on"), first + (
            proc.stderr.read() if proc.stderr else ""
        )
        url = f"http://127.0.0.1:{port}"
        # When it answers reads, a miss and a registration (each counts a metric on Lambda)
        assert http_call(f"{url}/datasets").status == 200
        assert http_call(f"{url}/datasets/nope").status == 404
        doc = {"id": "one", "version": "1.0.0", "cases": [{"id": "a", "inputs": {"user": "q"}}]}
        assert http_call(f"{url}/datasets", "POST", doc).status == 201
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler writes every thread's stack
            pytest.fail(f"the server did not stop on SIGINT; its threads:\n{proc.communicate()[1]}")
    # Then neither stream carries a metric blob or a JSON log document
    assert_human(err)
    assert "_aws" not in out and json_documents(out) == [], out
    assert '"GET /datasets/nope HTTP/1.1" 404' in err


FUNCTION = """
from caseshelf.api.app import count, instrumented, logger
from caseshelf.gateway import FakeLambdaContext

@instrumented
def handler(event, context):
    logger.info("hello from a function", extra={"things": 2})
    logger.warning("something to see")
    count("Things", 2)
    return {"statusCode": 200, "body": ""}

handler({}, FakeLambdaContext(function_name="RegistryFunction"))
"""


def test_on_lambda_the_functions_keep_structured_logs_and_metrics() -> None:
    lambda_env = environ(
        AWS_LAMBDA_FUNCTION_NAME="RegistryFunction", POWERTOOLS_TRACE_DISABLED="true"
    )
    on_lambda = subprocess.run(
        [sys.executable, "-c", FUNCTION],
        capture_output=True,
        text=True,
        env=lambda_env,
        timeout=120,
        check=True,
    )
    logs = json_documents(on_lambda.stderr)
    hello = next(d for d in logs if d.get("message") == "hello from a function")
    assert hello["things"] == 2 and str(hello["function_arn"]).startswith("arn:aws:lambda:")
    metrics = [d for d in json_documents(on_lambda.stdout) if "_aws" in d]
    assert metrics and metrics[0]["Things"] == [2.0]
    # Off Lambda the same function prints a warning as a plain line, and no metrics
    local = subprocess.run(
        [sys.executable, "-c", FUNCTION],
        capture_output=True,
        text=True,
        env=environ(),
        timeout=120,
        check=True,
    )
    assert local.stdout == ""
    assert local.stderr.strip() == "something to see"


IMPORTS = """
import logging, warnings
logging.basicConfig(level=logging.DEBUG)
root_handler = logging.getLogger().handlers[0]
filters = list(warnings.filters)
import caseshelf.api.app, caseshelf.client, caseshelf.devserver, caseshelf.bootstrap
import caseshelf
caseshelf.connect()
lib = logging.getLogger("caseshelf")
print(len(lib.handlers), lib.level, lib.propagate, len(root_handler.filters),
      warnings.filters == filters)
"""


def test_importing_the_library_configures_no_logging(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", IMPORTS],
        capture_output=True,
        text=True,
        env=environ(CASESHELF_HOME=str(tmp_path / "home")),
        timeout=120,
        check=True,
    )
    assert proc.stdout.split() == ["0", "0", "True", "0", "True"], proc.stderr
