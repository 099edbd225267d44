"""`caseshelf import` against its floor, and with `--num-proc 2` against one process.

Figures, each a whole process (interpreter start to exit, the CLI's console script on a fresh
embedded store) on the same GSM8K-shaped jsonl (`recipes/gsm8k.yaml`, each row distinct), runs
alternating, median of R:
- one process ÷ the floor (`floor_parse_hash.py --rows`: read the jsonl, build each case, dump
  its canonical JSON, sha256 it). Target <= 2.5 at 100,000 rows (and at 1,000,000:
  `--large-rows 1000000`).
- `--num-proc 2` ÷ one process: a second process pays only below 1.0.
Beside each wall time, the CPU time of the process tree (user + sys, a worker included). Every
run of the import must register the same content digest, with one process or two.

With `--stages`, where one process's CPU goes at `--rows`, in microseconds a row: parsing, the
strict-JSON check, mapping with canonical JSON and digests, storing; and its start-up
(`import_stages.py`).

Usage: python bench/bench_import_floor.py [--rows N] [--runs R] [--large-rows L] [--num-proc P]
       [--stages]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BENCH_DIR, REPO_ROOT, emit, gsm8k_jsonl, median, ratio

NAME = "import_floor"
FLOOR_TARGET = 2.5
RECIPE = REPO_ROOT / "recipes" / "gsm8k.yaml"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall and CPU seconds of a child process (and its own children), and its stdout."""
    cpu, start = children_cpu(), time.perf_counter()
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=REPO_ROOT, check=False, timeout=3600
    )
    wall, cpu = time.perf_counter() - start, children_cpu() - cpu
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise RuntimeError(f"{argv} failed with exit code {proc.returncode}")
    return wall, cpu, proc.stdout


def measure(rows: int, runs: int, num_proc: int, work: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    data = work / "rows.jsonl"
    note = gsm8k_jsonl(data, rows)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASESHELF_")}
    # Compiled bytecode in a private cache dir, written by the warm-up runs.
    env.update({"PYTHONPYCACHEPREFIX": str(work / "pycache"), "PYTHONDONTWRITEBYTECODE": ""})
    cli = str(Path(sys.executable).parent / "caseshelf")
    floor = [sys.executable, str(BENCH_DIR / "floor_parse_hash.py"), "--rows", str(data)]

    def run(who: str, home: str) -> tuple[float, float, str]:
        if who == "floor":
            return timed(floor, env)
        argv = [cli, "import", str(data), "--recipe", str(RECIPE), "--json"]
        if who == "many":
            argv += ["--num-proc", str(num_proc)]
        return timed(argv, {**env, "CASESHELF_HOME": str(work / home)})

    for who in ("floor", "one", "many"):  # warm-up: byte code written, the file cached
        run(who, f"home-warm-up-{who}")
    walls: dict[str, list[float]] = {"floor": [], "one": [], "many": []}
    cpus: dict[str, list[float]] = {"floor": [], "one": [], "many": []}
    digests: set[str] = set()
    order = ["floor", "one", "many"]
    for i in range(runs):
        for who in order[i % 3 :] + order[: i % 3]:  # each goes first in turn
            wall, cpu, out = run(who, f"home-{who}-{i}")
            walls[who].append(wall)
            cpus[who].append(cpu)
            if who != "floor":
                got = json.loads(out)
                assert got["case_count"] == rows, got
                digests.add(got["content_digest"])
    assert len(digests) == 1, digests  # one process or several: the same content
    wall = {who: median(values) for who, values in walls.items()}
    cpu = {who: median(values) for who, values in cpus.items()}
    result: dict[str, Any] = {
        "rows": rows,
        "floor_s": round(wall["floor"], 3),
        "one_s": round(wall["one"], 3),
        f"num_proc_{num_proc}_s": round(wall["many"], 3),
        "one_vs_floor": ratio(wall["one"], wall["floor"]),
        f"num_proc_{num_proc}_vs_one": ratio(wall["many"], wall["one"]),
        "floor_cpu_s": round(cpu["floor"], 3),
        "one_cpu_s": round(cpu["one"], 3),
        f"num_proc_{num_proc}_cpu_s": round(cpu["many"], 3),
        "one_vs_floor_cpu": ratio(cpu["one"], cpu["floor"]),
        "runs_s": {who: [round(x, 3) for x in values] for who, values in walls.items()},
        "content_digest": digests.pop(),
    }
    if note:
        result["note"] = note
    return result


def stages(
    rows: int, runs: int, one_cpu_s: float, floor_cpu_s: float, work: Path
) -> dict[str, Any]:
    """CPU microseconds a row in each stage of one import process (`import_stages.py`), medians
    of `runs`; `startup_s` is the CPU of the same command on one row."""
    data, one_row = work / "rows.jsonl", work / "one-row.jsonl"
    gsm8k_jsonl(one_row, 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASESHELF_")}
    env.update({"PYTHONPYCACHEPREFIX": str(work / "pycache"), "PYTHONDONTWRITEBYTECODE": ""})
    cli = str(Path(sys.executable).parent / "caseshelf")
    script = str(BENCH_DIR / "import_stages.py")
    cpu: dict[str, list[float]] = {"startup": [], "parse": [], "strict": [], "mapped": []}
    for i in range(runs):
        argv = [cli, "import", str(one_row), "--recipe", str(RECIPE), "--json"]
        cpu["startup"].append(timed(argv, {**env, "CASESHELF_HOME": str(work / f"one-{i}")})[1])
        for stage in ("parse", "strict", "mapped"):
            out = timed([sys.executable, script, stage, str(data)], env)[2]
            got = json.loads(out.strip().splitlines()[-1])
            assert got["rows"] == rows, got
            cpu[stage].append(got["cpu_s"])
    m = {stage: median(values) for stage, values in cpu.items()}
    per_row = 1e6 / rows
    return {
        "startup_s": round(m["startup"], 3),
        "us_a_row": {
            "parse": round(m["parse"] * per_row, 2),
            "strict_check": round((m["strict"] - m["parse"]) * per_row, 2),
            "mapping_canonical_digests": round((m["mapped"] - m["strict"]) * per_row, 2),
            "storing": round((one_cpu_s - m["startup"] - m["mapped"]) * per_row, 2),
            "floor": round(floor_cpu_s * per_row, 2),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--large-rows", type=int, default=0, help="e.g. 1000000; 0: skip")
    parser.add_argument("--large-runs", type=int, default=1)
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument(
        "--stages", action="store_true", help="also where one process's CPU goes, a row"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="caseshelf-bench-import-floor-") as tmp:
        small = measure(args.rows, args.runs, args.num_proc, Path(tmp) / "small")
        if args.stages:
            small["stages"] = stages(
                args.rows, args.runs, small["one_cpu_s"], small["floor_cpu_s"], Path(tmp) / "small"
            )
        emit({"bench": NAME, "size": "small", **small})
        figures: dict[str, Any] = {"bench": NAME, **small, "target": FLOOR_TARGET}
        ok = small["one_vs_floor"] <= FLOOR_TARGET
        if args.large_rows:
            large = measure(args.large_rows, args.large_runs, args.num_proc, Path(tmp) / "large")
            emit({"bench": NAME, "size": "large", **large})
            figures["large"] = large
            ok = ok and large["one_vs_floor"] <= FLOOR_TARGET
    figures["pass"] = ok
    emit(figures)


if __name__ == "__main__":
    main()
