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

`--s3` exports to a moto S3 server (its own process, real HTTP) instead of a directory.

Usage: python bench/bench_export_memory.py [--small N] [--large N] [--format FMT] [--s3]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MOTO_ENV, emit, gsm8k_cases, peak_rss_mb, ratio, run_child

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


def measure(n: int, fmt: str, endpoint: str | None) -> dict[str, Any]:
    """One size: `endpoint` set, the export goes to `s3://bench/out-<n>` on that S3 server."""
    me = Path(__file__).resolve()
    work = Path(tempfile.mkdtemp(prefix="bench-export-mem-"))
    try:
        home = str(work / "home")
        run_child([str(me), "--register", home, str(n)], timeout=3600)
        to = f"s3://bench/out-{n}" if endpoint else str(work / "out")
        env = {**MOTO_ENV, "AWS_ENDPOINT_URL": endpoint} if endpoint else None
        return run_child([str(me), "--export", home, to, fmt], env=env, timeout=3600)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@contextmanager
def s3_server(wanted: bool) -> Iterator[str | None]:
    """A moto S3 server of its own (another process, real HTTP) with the bucket `bench`."""
    if not wanted:
        yield None
        return
    import boto3

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ).create_bucket(Bucket="bench")
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument("--large", type=int, default=200_000)
    parser.add_argument("--format", default="case-dirs", help="the export format measured")
    parser.add_argument("--s3", action="store_true", help="export to a moto S3 server")
    parser.add_argument("--register", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--export", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.register:
        emit(register_child(args.register[0], int(args.register[1])))
        return 0
    if args.export:
        emit(export_child(*args.export))
        return 0
    with s3_server(args.s3) as endpoint:
        small = measure(args.small, args.format, endpoint)
        large = measure(args.large, args.format, endpoint)
    peak = ratio(large["peak_rss_mb"], small["peak_rss_mb"])
    emit(
        {
            "bench": NAME,
            "format": args.format,
            "target_kind": "s3 (moto server)" if args.s3 else "directory",
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
