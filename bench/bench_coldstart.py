"""Cold start of the registry Lambda: a fresh interpreter importing `functions/registry/app.py`
(by path, as the Lambda runtime does) divided by a fresh interpreter importing only `boto3`,
`pydantic` and `aws_lambda_powertools.event_handler`, the least any Powertools REST handler
needs. Target: <= 1.5.

The two kinds run alternately (so machine noise hits both alike), median of `--runs` each, in wall
time and in CPU time (user + sys of the child, less sensitive to a busy machine). Then
`python -X importtime` names what the handler pulls in beyond the baseline: the top packages by
import time, and the heaviest single modules.

Usage: python bench/bench_coldstart.py [--runs N]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO_ROOT, emit, median, ratio

NAME = "coldstart"
TARGET = 1.5
HANDLER_PATH = REPO_ROOT / "functions" / "registry" / "app.py"
BASELINE = "import boto3, pydantic, aws_lambda_powertools.event_handler"
HANDLER = (
    "import importlib.util as u; "
    f"s = u.spec_from_file_location('app', {str(HANDLER_PATH)!r}); "
    "m = u.module_from_spec(s); s.loader.exec_module(m); assert callable(m.lambda_handler)"
)


def once(code: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of a fresh interpreter running `code`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def import_times(code: str) -> dict[str, tuple[int, int]]:
    """Module -> (self us, cumulative us), from `python -X importtime`."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    out: dict[str, tuple[int, int]] = {}
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        head, cumulative, name = line.split("|", 2)
        out[name.strip()] = (int(head.split(":")[-1]), int(cumulative))
    return out


def offenders(top: int = 8) -> dict[str, Any]:
    """What the handler imports that the baseline does not, heaviest first."""
    base = import_times(BASELINE)
    handler = import_times(HANDLER)
    extra = {name: t for name, t in handler.items() if name not in base}
    by_package: dict[str, int] = defaultdict(int)
    for name, (self_us, _) in extra.items():
        by_package[name.split(".")[0]] += self_us
    packages = sorted(by_package.items(), key=lambda kv: -kv[1])[:top]
    modules = sorted(extra.items(), key=lambda kv: -kv[1][1])[:top]
    return {
        "extra_modules": len(extra),
        "extra_import_ms": round(sum(s for s, _ in extra.values()) / 1000, 1),
        "top_packages_ms": {name: round(us / 1000, 1) for name, us in packages},
        "top_modules_cumulative_ms": {name: round(c / 1000, 1) for name, (_, c) in modules},
    }


def main(runs: int) -> int:
    if not HANDLER_PATH.is_file():
        print(f"{HANDLER_PATH} is not there yet")
        emit({"bench": NAME, "skipped": True, "pass": False})
        return 0
    once(BASELINE)  # warm the file cache (and .pyc files) for both
    once(HANDLER)
    base: list[tuple[float, float]] = []
    handler: list[tuple[float, float]] = []
    for _ in range(runs):
        base.append(once(BASELINE))
        handler.append(once(HANDLER))
    b_wall, h_wall = median([w for w, _ in base]), median([w for w, _ in handler])
    b_cpu, h_cpu = median([c for _, c in base]), median([c for _, c in handler])
    print(f"baseline import: {b_wall * 1000:.0f} ms wall, {b_cpu * 1000:.0f} ms CPU")
    print(f"registry handler import: {h_wall * 1000:.0f} ms wall, {h_cpu * 1000:.0f} ms CPU")
    extra = offenders()
    print(
        f"the handler imports {extra['extra_modules']} modules beyond the baseline "
        f"({extra['extra_import_ms']} ms of import time); heaviest packages:"
    )
    for name, ms in extra["top_packages_ms"].items():
        print(f"  {name:32s} {ms:8.1f} ms")
    wall_ratio = ratio(h_wall, b_wall)
    emit(
        {
            "bench": NAME,
            "runs": runs,
            "baseline_ms": round(b_wall * 1000, 1),
            "handler_ms": round(h_wall * 1000, 1),
            "ratio": wall_ratio,
            "cpu_ratio": ratio(h_cpu, b_cpu),
            "target": TARGET,
            "top_offenders_ms": extra["top_packages_ms"],
            "pass": wall_ratio <= TARGET,
        }
    )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    sys.exit(main(parser.parse_args().runs))
