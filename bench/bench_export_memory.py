"""Peak memory of an export against the size of the version: does it grow with the cases?

For each size, one fresh interpreter registers `n` GSM8K-shaped cases into an embedded store of
its own; then another fresh interpreter runs only the export of that version to a directory (as
`caseshelf export` does) and reports its peak RSS (`ru_maxrss`), and the growth of its RSS
during the export (from /proc: the high-water mark after, minus the RSS before). Target (the
issue's): peak RSS at the large size ≤ 2 times the peak at the small one. The issue's sizes are
100,000 and 1,000,000 cases; the defaults are 10,000 and 100,000, since one run at a million
cases takes tens of minutes on the development machine's disk (say so when reporting).

Every format is written as it is planned (a window of cases at a time), so any can be measured:
`--format parquet` (one row file, a row group per window) reaches a million cases in minutes,
where `case-dirs` writes four million files.

Usage: python bench/bench_export_memory.py [--small N] [--large N] [--format FMT]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, gsm8k_cases, peak_rss_mb, ratio, run_child

NAME = "export-memory"
TARGET = 2.0


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def register_child(home: str, n: int) -> dict[str, Any]:
    from caseshelf.bootstrap import build, load_settings
    from caseshelf.domain.identity import Identity
    from caseshelf.services.registry import parse_dataset

    svc = build(load_settings({}, home=home, tenant="bench"))
    cases, _ = gsm8k_cases(n)
    body = {"id": "m", "version": "1.0.0", "cases": cases}
    svc.registry.register(Identity("bench", "bench"), parse_dataset(body))
    return {"cases": n}


def export_child(home: str, out: str, fmt: str) -> dict[str, Any]:
    from caseshelf.bootstrap import build, load_settings
    from caseshelf.domain.identity import Identity
    from caseshelf.services.exports import ExportRequest

    svc = build(load_settings({}, home=home, tenant="bench"))
    Path("/proc/self/clear_refs").write_text("5")  # the high-water mark from here on
    before = rss_mb()
    t = time.perf_counter()
    res = svc.exports.export_version(
        Identity("bench", "bench"), "m", "1.0.0", ExportRequest(format=fmt), to=out
    )
    return {
        "cases": res.case_count,
        "files": res.file_count,
        "export_s": round(time.perf_counter() - t, 2),
        "peak_rss_mb": peak_rss_mb(),
        "rss_before_mb": round(before, 1),
        "growth_mb": round(hwm_mb() - before, 1),
    }


def measure(n: int, fmt: str) -> dict[str, Any]:
    me = Path(__file__).resolve()
    work = Path(tempfile.mkdtemp(prefix="bench-export-mem-"))
    try:
        home = str(work / "home")
        run_child([str(me), "--register", home, str(n)], timeout=3600)
        return run_child([str(me), "--export", home, str(work / "out"), fmt], timeout=3600)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument("--large", type=int, default=200_000)
    parser.add_argument("--format", default="case-dirs", help="the export format measured")
    parser.add_argument("--register", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--export", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.register:
        emit(register_child(args.register[0], int(args.register[1])))
        return 0
    if args.export:
        emit(export_child(*args.export))
        return 0
    small, large = measure(args.small, args.format), measure(args.large, args.format)
    peak = ratio(large["peak_rss_mb"], small["peak_rss_mb"])
    emit(
        {
            "bench": NAME,
            "format": args.format,
            "small": small,
            "large": large,
            "size_ratio": ratio(args.large, args.small),
            "peak_rss_ratio": peak,
            "growth_ratio": ratio(large["growth_mb"], max(small["growth_mb"], 0.1)),
            "target": TARGET,
            "pass": peak <= TARGET,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
