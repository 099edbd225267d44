"""Cold start: a fresh interpreter importing the registry handler module, against one importing
only what any Powertools REST handler needs (boto3, pydantic, the Powertools event handler).

Each figure is the median wall time of several fresh interpreters, the two kinds interleaved so
that machine noise hits both alike. Target: ratio <= 1.5. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO_ROOT, emit, median

TARGET = 1.5
BASELINE = "import boto3, pydantic, aws_lambda_powertools.event_handler"
HANDLER = (
    "import importlib.util as u; "
    "s = u.spec_from_file_location('app', 'functions/registry/app.py'); "
    "m = u.module_from_spec(s); s.loader.exec_module(m); assert callable(m.lambda_handler)"
)


def once(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True)
    return time.perf_counter() - start


def main(runs: int) -> int:
    once(BASELINE)  # warm the file cache for both
    once(HANDLER)
    base: list[float] = []
    handler: list[float] = []
    for _ in range(runs):
        base.append(once(BASELINE))
        handler.append(once(HANDLER))
    b, h = median(base), median(handler)
    ratio = round(h / b, 3)
    print(f"baseline import {b * 1000:.0f} ms, registry handler import {h * 1000:.0f} ms")
    emit(
        {
            "bench": "cold_start",
            "baseline_ms": round(b * 1000, 1),
            "handler_ms": round(h * 1000, 1),
            "ratio": ratio,
            "target": TARGET,
            "runs": runs,
            "pass": ratio <= TARGET,
        }
    )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    sys.exit(main(parser.parse_args().runs))
