"""Run every `bench/bench_*.py`, each as its own process, and summarise their verdicts.

Each benchmark's output passes straight through; its last line is one JSON object
`{"bench": NAME, ...figures..., "pass": true|false}`. The summary table at the end lists every
benchmark with pass/fail and its figures. The exit code is 0 even when a target is missed (the
table says so); it is 1 only when a benchmark crashed or printed no verdict.

Usage: python bench/run_all.py [NAME_FILTER ...]   (e.g. `run_all.py register coldstart`)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent


def run(script: Path) -> tuple[dict[str, Any] | None, float, int]:
    """Run one benchmark, echoing its output; (its verdict, seconds, exit code)."""
    print(f"\n=== {script.name} ===", flush=True)
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    last = None
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if line.strip():
            last = line.strip()
    code = proc.wait()
    elapsed = time.perf_counter() - start
    verdict = None
    if last is not None:
        try:
            parsed = json.loads(last)
            verdict = parsed if isinstance(parsed, dict) and "bench" in parsed else None
        except json.JSONDecodeError:
            verdict = None
    return verdict, elapsed, code


def figures(verdict: dict[str, Any]) -> str:
    shown = []
    for key, value in verdict.items():
        if key in {"bench", "pass"} or isinstance(value, dict | list):
            continue
        shown.append(f"{key}={value}")
    return " ".join(shown)


def main(filters: list[str]) -> int:
    scripts = sorted(BENCH_DIR.glob("bench_*.py"))
    if filters:
        scripts = [s for s in scripts if any(f in s.stem for f in filters)]
    rows: list[tuple[str, str, float, str]] = []
    broken = False
    for script in scripts:
        verdict, elapsed, code = run(script)
        if verdict is None or code != 0:
            broken = True
            rows.append((script.stem, "ERROR", elapsed, f"exit code {code}, no JSON verdict"))
            continue
        status = "PASS" if verdict.get("pass") is True else "FAIL"
        rows.append((str(verdict["bench"]), status, elapsed, figures(verdict)))

    print("\n=== summary ===")
    width = max((len(r[0]) for r in rows), default=5)
    print(f"{'bench':<{width}}  result  time     figures")
    for name, status, elapsed, shown in rows:
        print(f"{name:<{width}}  {status:<6}  {elapsed:6.1f}s  {shown}")
    passed = sum(1 for r in rows if r[1] == "PASS")
    print(f"\n{passed}/{len(rows)} benchmarks met their targets")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
