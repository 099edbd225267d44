"""A warm registry function reading the numbers of one version after another holds no more memory
after each: the allocator settings the template gives every function (`MALLOC_MMAP_THRESHOLD_`)
hand each version's large transient buffers back when they are freed, and X-Ray tracing keeps
nothing of an invocation (`caseshelf.api.app.make_tracer`; docs/decisions.md).

Measured in a fresh interpreter, the function's process: the registry handler under the
template's allocator settings and the environment Lambda sets (X-Ray tracing active, a new trace
header for each invocation, no garbage collection forced between them), against a moto server,
reading `/stats` of each version (every record of it, and the search index made and stored). The
figure is glibc's own count of the bytes malloc holds from the system (`mallinfo2()`: its heaps'
`arena` and its mapped blocks' `hblkhd`) after each version; bytes are counted, never timed.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from caseshelf.domain.identity import Identity
from caseshelf.services.registry import parse_dataset
from tests.conftest import REPO_ROOT, Backend, aws_backend
from tests.lambda_emulation import function_specs

pytestmark = pytest.mark.integration

VERSIONS = 8
CASES = 10_000
MIB = 1024 * 1024

try:
    ctypes.CDLL(None).mallinfo2  # noqa: B018 - glibc 2.33 or later
    GLIBC = True
except AttributeError:
    GLIBC = False

PROBE = """
import ctypes, json, os, sys, time, uuid

from tests.lambda_emulation import api_event
from caseshelf.api.app import tracer
from caseshelf.functions.registry import lambda_handler

assert tracer is not None, "X-Ray tracing is not active as on Lambda"


class MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks "
        "keepcost".split()
    ]


mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2


class Context:
    function_name = os.environ["AWS_LAMBDA_FUNCTION_NAME"]
    memory_limit_in_mb = int(os.environ["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"])
    invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
    function_version = "$LATEST"

    def __init__(self):
        self.aws_request_id = str(uuid.uuid4())

    def get_remaining_time_in_millis(self):
        return 29_000


heap = []
for label in sys.argv[1:]:
    event = api_event("GET", "/datasets/{id}/versions/{ref}/stats", {"id": "many", "ref": label})
    root = f"1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]}"
    os.environ["_X_AMZN_TRACE_ID"] = f"Root={root};Parent={uuid.uuid4().hex[:16]};Sampled=0"
    answer = lambda_handler(event, Context())
    assert answer["statusCode"] == 200, answer
    assert json.loads(answer["body"])["case_count"] == CASES, answer["body"][:300]
    held = mallinfo2()
    heap.append(held.arena + held.hblkhd)
print(json.dumps(heap))
"""


def allocator_settings() -> dict[str, str]:
    """The glibc malloc variables the template sets for the registry function."""
    variables = function_specs()["RegistryFunction"].variables
    return {k: str(v) for k, v in variables.items() if k.startswith("MALLOC_")}


def function_environment(b: Backend) -> dict[str, str]:
    """What Lambda sets for the function and the template's variables it needs here."""
    assert b.endpoint_url and b.settings.bucket and b.settings.table
    keep = ("PATH", "HOME", "LANG", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    return {
        **{k: os.environ[k] for k in keep if k in os.environ},
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "shared"), str(REPO_ROOT)]),
        "AWS_LAMBDA_FUNCTION_NAME": "caseshelf-RegistryFunction",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": b.endpoint_url,
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "CASESHELF_BACKEND": "aws",
        "CASESHELF_BUCKET": b.settings.bucket,
        "CASESHELF_TABLE": b.settings.table,
        "POWERTOOLS_SERVICE_NAME": "caseshelf",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        # the X-Ray SDK takes its Lambda context (a facade segment per trace header) from this
        "LAMBDA_TASK_ROOT": str(REPO_ROOT / "functions" / "registry"),
        "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
        **allocator_settings(),
    }


def seed(b: Backend) -> list[str]:
    """`VERSIONS` versions of `CASES` different cases each: their labels."""
    labels = [f"{v + 1}.0.0" for v in range(VERSIONS)]
    for v, label in enumerate(labels):
        cases: list[dict[str, Any]] = [
            {"id": f"c{i:07d}", "inputs": {"user": f"v{v} question {i} " + "z" * 60}}
            for i in range(CASES)
        ]
        body = {"id": "many", "version": label, "cases": cases}
        b.services.registry.register(Identity("acme", "alice"), parse_dataset(body))
    return labels


def heap_after_each(b: Backend, labels: list[str], tmp_path: Path) -> list[int]:
    probe = tmp_path / "probe.py"
    probe.write_text(f"CASES = {CASES}\n" + textwrap.dedent(PROBE), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(probe), *labels],
        env=function_environment(b),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    heap: list[int] = json.loads(proc.stdout.strip().splitlines()[-1])
    return heap


def test_the_template_holds_the_mmap_threshold() -> None:
    settings = allocator_settings()
    assert settings.get("MALLOC_MMAP_THRESHOLD_") == "131072", settings


@pytest.mark.skipif(not GLIBC, reason="mallinfo2 is glibc's (2.33 or later)")
def test_a_warm_registry_holds_its_heap_over_many_versions(
    aws_env: None, moto_server: str, tmp_path: Path
) -> None:
    b = aws_backend("moto_server", moto_server)
    heap = heap_after_each(b, seed(b), tmp_path)
    assert len(heap) == VERSIONS
    # The first two versions bring in what any request keeps (modules' tables, the registry's
    # roots); from then on a version's numbers must leave nothing behind but what the bounded
    # caches keep: less than one version's records in all (each is ~1 MiB here).
    grown = heap[-1] - heap[1]
    assert grown < 1 * MIB, [f"{h / MIB:.1f} MiB" for h in heap]
