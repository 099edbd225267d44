"""Cold starts in the emulation: what each function imports before and during its first request,
and how long its init phase takes. The figures are reported (`-rP`, or the junit properties),
never asserted: the machine's load decides them; `make lambda-check` holds them to 1 s."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.lambda_emulation import (
    Emulation,
    ExecutionEnvironment,
    Outcome,
    api_event,
    resolve_variables,
)

IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)\s*$", re.MULTILINE)

# A first request of each function: the route a user calls most, on data that need not exist.
FIRST_REQUESTS: dict[str, dict[str, Any]] = {
    "RegistryFunction": api_event(
        "GET", "/datasets/{id}/versions/{ref}", {"id": "qa", "ref": "latest"}
    ),
    "DiffFunction": api_event(
        "GET", "/datasets/{id}/diff", {"id": "qa"}, query={"base": "1.0.0", "candidate": "1.1.0"}
    ),
    "SubsetFunction": api_event(
        "POST", "/datasets/{id}/versions/{ref}/subset", {"id": "qa", "ref": "1.0.0"}, body={}
    ),
    "ExportFunction": api_event(
        "POST",
        "/datasets/{id}/versions/{ref}/exports",
        {"id": "qa", "ref": "1.0.0"},
        body={"format": "jsonl"},
    ),
    "TasksFunction": api_event(
        "POST", "/datasets/harbor", body={"upload_id": "0" * 32, "dataset": "qa"}
    ),
    "ImporterFunction": api_event("GET", "/jobs/{id}", {"id": "0" * 32}),
    # The export worker is fed by SQS: a delivery with no message is the least it is sent.
    "ExportWorkerFunction": {"Records": []},
}

# Modules a first request of these functions never needs (each is large to import).
NOT_ON_THE_COLD_PATH: dict[str, tuple[str, ...]] = {
    "RegistryFunction": ("pyarrow", "pandas", "numpy", "zstandard", "smart_open", "ruamel"),
    "DiffFunction": ("pyarrow", "pandas", "smart_open"),
    "SubsetFunction": ("pyarrow", "pandas", "smart_open"),
    "ImporterFunction": ("pyarrow", "pandas"),
}


def imported(log: str) -> dict[str, int]:
    """`-X importtime`'s report: every module imported, with its cumulative microseconds."""
    return {m.group(4): int(m.group(2)) for m in IMPORT_LINE.finditer(log)}


def outermost(log: str) -> dict[str, int]:
    """The imports no other import made (the handler's own, the runtime's), cumulative µs."""
    return {m.group(4): int(m.group(2)) for m in IMPORT_LINE.finditer(log) if not m.group(3)}


def profiled(emulation: Emulation, function: str) -> ExecutionEnvironment:
    """A fresh environment of `function` whose interpreter reports its imports."""
    spec = emulation.specs[function]
    variables = {**resolve_variables(spec, emulation.refs), "PYTHONPROFILEIMPORTTIME": "1"}
    return ExecutionEnvironment(
        spec,
        layer=emulation.layer,
        runtime=emulation.runtime,
        variables=variables,
        endpoint_url=emulation.endpoint_url,
        scratch=emulation.scratch / "profiled",
    )


@pytest.fixture(scope="module")
def cold_starts(emulation: Emulation) -> dict[str, Outcome]:
    """One cold start of each function, its first request, its imports reported."""
    outcomes = {}
    for function in sorted(emulation.specs):
        env = profiled(emulation, function)
        try:
            outcomes[function] = env.invoke(FIRST_REQUESTS[function])
        finally:
            env.stop()
    return outcomes


@pytest.mark.parametrize("function", sorted(FIRST_REQUESTS))
def test_cold_start(
    cold_starts: dict[str, Outcome], function: str, record_property: pytest.RecordProperty
) -> None:
    outcome = cold_starts[function]
    assert outcome.kind == "ok" and outcome.cold, (outcome.error, outcome.log[-3000:])
    answer = outcome.json()
    assert answer.get("statusCode", 200) < 500, answer
    assert outcome.init_ms is not None and outcome.duration_ms is not None
    modules = imported(outcome.log)
    assert "caseshelf.bootstrap" in modules, outcome.log[-3000:]  # the report is there
    top = sorted(((us, m) for m, us in outermost(outcome.log).items()), reverse=True)[:8]
    figures = {
        "init_ms": round(outcome.init_ms),
        "first_request_ms": round(outcome.duration_ms),
        "modules": len(modules),
        "largest_imports_ms": {m: round(us / 1000) for us, m in top},
    }
    record_property("cold_start", figures)
    print(f"{function} (with -X importtime): {figures}")
    heavy = sorted(m for m in modules if m.split(".")[0] in NOT_ON_THE_COLD_PATH.get(function, ()))
    assert heavy == [], f"{function}'s first request imports {heavy[:12]}"
