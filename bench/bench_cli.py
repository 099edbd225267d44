"""The `caseshelf` command: start-up, and the memory `cases --all --json` holds.

- start-up: `caseshelf ls` on an empty embedded store, whole process, ÷ `python -c "import
  sqlite3, json"`, the two run alternately, median of `--runs` each. Target: <= 0.3 s wall
  (the ratio is shown). `ls` prints the handler's kept answer while the store is unchanged
  (`caseshelf.cli.answers`), as on an empty store listed before; beside it, the first `ls` after
  the store changed (the stamp renewed as a write renews it), which runs the handler, and the
  handler path's floor: the CPU time of importing what it cannot do without (pydantic and
  Powertools' event handler) ÷ the same baseline. Then `python -X importtime` names the
  heaviest imports of `ls`.
- memory: peak RSS of `caseshelf cases ID --all --json > /dev/null` on a version of `--big`
  cases ÷ the same on one of `--small` cases (both imported from GSM8K-shaped jsonl through
  `recipes/gsm8k.yaml`), and the same for `--jsonl`. Target: <= 2 (reads hold a bounded window,
  not the version). Also the same ratio for `download ID -o -` once the document is stored
  (the embedded store streams it a MiB at a time).

Usage: python bench/bench_cli.py [--runs N] [--small N] [--big N] [--skip-memory]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO_ROOT, emit, gsm8k_jsonl, median, ratio

NAME = "cli"
WALL_TARGET = 0.3
MEMORY_TARGET = 2.0
BIN = Path(sys.executable).parent
CLI = (
    [str(BIN / "caseshelf")]
    if (BIN / "caseshelf").exists()
    else [sys.executable, "-m", "caseshelf.cli"]
)
BASELINE = [sys.executable, "-c", "import sqlite3, json"]
# What `ls` cannot start without while it runs the registry function's handler (one code path):
# the function's resolver (Powertools' event handler) and one pydantic model built and used (the
# first build imports pydantic's plugin loader, and with it importlib.metadata), with plugin
# discovery off as the command has it.
FLOOR_CODE = """
import os
os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
import sqlite3, json, aws_lambda_powertools.event_handler
from pydantic import BaseModel
class Model(BaseModel):
    x: int
Model(x=1)
"""
FLOOR = [sys.executable, "-c", FLOOR_CODE]


def child_env(home: Path) -> dict[str, str]:
    # Bytecode is written and read as an installed package has it (a shell that turns it off
    # would time the compiler, not the command).
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CASESHELF_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    env["CASESHELF_HOME"] = str(home)
    return env


def run(
    argv: list[str], env: dict[str, str], *, stdout: Any = subprocess.DEVNULL
) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MiB, CPU seconds) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=REPO_ROOT, stdout=stdout, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} failed ({proc.returncode}): {err[-2000:]}")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def heaviest_imports(env: dict[str, str], top: int = 10) -> list[tuple[str, float]]:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "caseshelf.cli", "ls"],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            _, cumulative, name = line.split("|", 2)
            if not name.startswith("  "):  # top-level imports only
                rows.append((name.strip(), int(cumulative) / 1e6))
    return sorted(rows, key=lambda r: -r[1])[:top]


def renew_stamp(home: Path) -> None:
    """Change the store's index as any write does (`caseshelf.adapters.sqlite_stamp`)."""
    with sqlite3.connect(home / "index.sqlite") as conn:
        conn.execute("UPDATE stamp SET value = lower(hex(randomblob(16)))")


def startup(runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="caseshelf-bench-cli-") as tmp:
        home = Path(tmp) / ".caseshelf"
        env = child_env(home)
        # An empty store (`ls` reads, so it never makes one); bytecode written once, as an
        # installed package has it; the first `ls` keeps its answer (`caseshelf.cli.answers`).
        run([*CLI, "init", tmp], env)
        run([*CLI, "ls"], env)
        run([*CLI, "ls"], env)
        ours, base, ours_cpu, base_cpu, floor_cpu, changed, changed_cpu = [], [], [], [], [], [], []
        for _ in range(runs):
            wall, _, cpu = run(BASELINE, env)
            base.append(wall)
            base_cpu.append(cpu)
            wall, _, cpu = run([*CLI, "ls"], env)
            ours.append(wall)
            ours_cpu.append(cpu)
            floor_cpu.append(run(FLOOR, env)[2])
            renew_stamp(home)
            wall, _, cpu = run([*CLI, "ls"], env)
            changed.append(wall)
            changed_cpu.append(cpu)
        imports = heaviest_imports(env)
    wall, floor = median(ours), median(base)
    return {
        "ls_s": round(wall, 3),
        "baseline_s": round(floor, 3),
        "startup_ratio": ratio(wall, floor),
        # CPU time (user + sys) says the same with less of a busy machine's noise.
        "ls_cpu_s": round(median(ours_cpu), 3),
        "baseline_cpu_s": round(median(base_cpu), 3),
        "startup_cpu_ratio": ratio(median(ours_cpu), median(base_cpu)),
        # The first `ls` after the store changed runs the handler: what every `ls` cost before
        # answers were kept.
        "changed_ls_s": round(median(changed), 3),
        "changed_ratio": ratio(median(changed), floor),
        "changed_cpu_ratio": ratio(median(changed_cpu), median(base_cpu)),
        # The imports the handler path cannot do without, ÷ the same baseline: its floor.
        "floor_cpu_s": round(median(floor_cpu), 3),
        "floor_cpu_ratio": ratio(median(floor_cpu), median(base_cpu)),
        "heaviest_imports": [[n, round(s, 3)] for n, s in imports],
    }


def memory(small: int, big: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="caseshelf-bench-cli-") as tmp:
        env = child_env(Path(tmp) / "home")
        recipe = str(REPO_ROOT / "recipes" / "gsm8k.yaml")
        for label, n in (("small", small), ("big", big)):
            rows = Path(tmp) / f"{label}.jsonl"
            gsm8k_jsonl(rows, n)
            run([*CLI, "import", str(rows), "--recipe", recipe, "--dataset", label], env)
            rows.unlink()
            with open(os.devnull, "wb") as sink:
                wall, rss, _ = run([*CLI, "cases", label, "--all", "--json"], env, stdout=sink)
                lines_wall, lines_rss, _ = run(
                    [*CLI, "cases", label, "--all", "--jsonl"], env, stdout=sink
                )
                # The first download renders the version's document into the store (the
                # registry service's work); the second streams that stored document.
                run([*CLI, "download", label, "-o", "-"], env, stdout=sink)
                _, download_rss, _ = run([*CLI, "download", label, "-o", "-"], env, stdout=sink)
            out[label] = {
                "cases": n,
                "peak_rss_mb": round(rss, 1),
                "seconds": round(wall, 2),
                "jsonl_peak_rss_mb": round(lines_rss, 1),
                "jsonl_seconds": round(lines_wall, 2),
                "download_peak_rss_mb": round(download_rss, 1),
            }
    out["memory_ratio"] = ratio(out["big"]["peak_rss_mb"], out["small"]["peak_rss_mb"])
    out["jsonl_memory_ratio"] = ratio(
        out["big"]["jsonl_peak_rss_mb"], out["small"]["jsonl_peak_rss_mb"]
    )
    out["download_memory_ratio"] = ratio(
        out["big"]["download_peak_rss_mb"], out["small"]["download_peak_rss_mb"]
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--big", type=int, default=1_000_000)
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    figures = startup(args.runs)
    print(
        f"caseshelf ls: {figures['ls_s']} s (target <= {WALL_TARGET}); ÷ baseline "
        f"{figures['baseline_s']} s = {figures['startup_ratio']}"
    )
    print(
        f"  CPU: {figures['ls_cpu_s']} s ÷ {figures['baseline_cpu_s']} s = "
        f"{figures['startup_cpu_ratio']}; floor (Powertools' event handler + a pydantic model): "
        f"{figures['floor_cpu_s']} s = {figures['floor_cpu_ratio']}"
    )
    print(
        f"  the first ls after the store changed (the handler answers): "
        f"{figures['changed_ls_s']} s = {figures['changed_ratio']} "
        f"(CPU {figures['changed_cpu_ratio']})"
    )
    for name, seconds in figures["heaviest_imports"]:
        print(f"  import {name}: {seconds} s")
    ok = figures["ls_s"] <= WALL_TARGET
    if not args.skip_memory:
        mem = memory(args.small, args.big)
        figures["memory"] = mem
        print(
            f"cases --all --json peak RSS: {mem['big']['peak_rss_mb']} MiB at {args.big} ÷ "
            f"{mem['small']['peak_rss_mb']} MiB at {args.small} = {mem['memory_ratio']} "
            f"(target <= {MEMORY_TARGET}); --jsonl: {mem['big']['jsonl_peak_rss_mb']} ÷ "
            f"{mem['small']['jsonl_peak_rss_mb']} MiB = {mem['jsonl_memory_ratio']}"
        )
        print(
            f"download -o - (the stored document streamed) peak RSS: "
            f"{mem['big']['download_peak_rss_mb']} ÷ {mem['small']['download_peak_rss_mb']} MiB = "
            f"{mem['download_memory_ratio']}"
        )
        ok = ok and mem["memory_ratio"] <= MEMORY_TARGET
    emit({"bench": NAME, **figures, "pass": ok})
    return 0


if __name__ == "__main__":
    sys.exit(main())
