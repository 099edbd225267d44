"""Peak memory of `caseshelf register FILE` against the size of FILE: does it grow with the input?

A JSON Lines file of SWE-bench-sized cases (~20 KB each: a problem statement, a repository at a
commit, a gold patch and a test patch, FAIL_TO_PASS lists) is built in a temporary directory,
with a slice of its first 10% beside it. Each is registered by the `caseshelf register` command
itself, in a child process on a fresh embedded store; the figure is the peak RSS of that whole
CLI process (`ru_maxrss` of the reaped child), and its wall time. Target (the issue's): peak RSS
of the whole file / peak RSS of the 10% slice <= 1.5.

The issue's file is 100,000 cases (2.1 GB); the default here is 25,000 cases (~0.5 GB) to keep a
run near a minute on the development machine; `--cases 100000` runs the full size.

Usage: python bench/bench_register_stream.py [--cases N] [--runs R]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, median, ratio, run_child

NAME = "register-stream"
TARGET = 1.5

# The child: run the CLI (as a user would) and report the CLI process's peak RSS and wall time.
CHILD = """
import json, os, resource, subprocess, sys, time
cli = os.path.join(os.path.dirname(sys.executable), "caseshelf")
env = {**os.environ, "CASESHELF_HOME": sys.argv[2]}
t0 = time.perf_counter()
subprocess.run(
    [cli, "register", sys.argv[1], "--dataset", "swe", "--version", "1.0.0"],
    env=env, check=True, stdout=subprocess.DEVNULL,
)
wall = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"wall_s": round(wall, 2), "peak_rss_mb": round(rss, 1)}))
"""


def swe_case(i: int) -> dict[str, Any]:
    """One case of about 20 KB shaped like a SWE-bench row (the text is distinct per case)."""
    seed = hashlib.sha256(str(i).encode()).hexdigest()
    words = " ".join(hashlib.sha256(f"{i}:{k}".encode()).hexdigest()[:12] for k in range(160))
    patch = "\n".join(
        f"+    value_{k} = compute({seed[k % 64]!r}, {k})  # {words[k * 7 : k * 7 + 40]}"
        for k in range(130)
    )
    return {
        "id": f"project__repo-{i:06d}",
        "inputs": {"user": f"Issue {i}: the parser fails on nested input. {words}"},
        "expectations": {
            "ground_truth": f"diff --git a/src/mod.py b/src/mod.py\n{patch}",
            "details": {
                "test_patch": f"diff --git a/tests/test_mod.py b/tests/test_mod.py\n{patch[:6000]}",
                "FAIL_TO_PASS": [f"tests/test_mod.py::test_case_{k}" for k in range(20)],
                "PASS_TO_PASS": [f"tests/test_mod.py::test_other_{k}" for k in range(40)],
            },
        },
        "env": {"kind": "repo", "source": {"git": "https://example.org/project/repo", "ref": seed}},
        "image": f"registry.example.org/swe/project-repo:{seed[:12]}",
        "tags": ["project", "python"],
        "metadata": {"created_at": "2023-01-01T00:00:00Z", "version": f"{i % 7}.{i % 3}"},
    }


def write_files(tmp: Path, n: int) -> tuple[Path, Path, float]:
    """The whole file and its 10% slice; the whole file's size in MB."""
    whole, part = tmp / "swe.jsonl", tmp / "swe-10pct.jsonl"
    cut = max(1, n // 10)
    with whole.open("wb") as fw, part.open("wb") as fp:
        for i in range(n):
            line = orjson.dumps(swe_case(i)) + b"\n"
            fw.write(line)
            if i < cut:
                fp.write(line)
    return whole, part, whole.stat().st_size / 1e6


def measure(path: Path, runs: int) -> dict[str, float]:
    got = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="caseshelf-bench-home-") as home:
            got.append(run_child(["-c", CHILD, str(path), home], timeout=3600))
    return {
        "wall_s": median([g["wall_s"] for g in got]),
        "peak_rss_mb": median([g["peak_rss_mb"] for g in got]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=25_000)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="caseshelf-bench-swe-") as tmp:
        whole, part, mb = write_files(Path(tmp), args.cases)
        small = measure(part, args.runs)
        large = measure(whole, args.runs)
    rss_ratio = ratio(large["peak_rss_mb"], small["peak_rss_mb"])
    print(
        f"register of a {mb:,.0f} MB jsonl ({args.cases:,} SWE-bench-sized cases): "
        f"{large['wall_s']} s, peak RSS {large['peak_rss_mb']} MB; its 10% slice: "
        f"{small['wall_s']} s, {small['peak_rss_mb']} MB; ratio {rss_ratio} "
        f"(target <= {TARGET}: {'met' if rss_ratio <= TARGET else 'NOT met'})",
        file=sys.stderr,
    )
    emit(
        {
            "bench": NAME,
            "cases": args.cases,
            "file_mb": round(mb, 1),
            "whole": large,
            "slice_10pct": small,
            "peak_rss_ratio": rss_ratio,
            "target": TARGET,
            "pass": rss_ratio <= TARGET,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
