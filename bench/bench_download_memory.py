"""Peak memory of a version's download against the size of the version: does it grow with it?

For each size, one fresh interpreter registers `n` GSM8K-shaped cases into an embedded store of
its own; then another fresh interpreter runs only the download (`RegistryService.download`: the
document rendered a window of cases at a time and streamed to the store, as it is to S3 by a
multipart upload) and reports its peak RSS (`ru_maxrss`) and the growth of its RSS during the
download. Target (the issue's): peak RSS at the large size ≤ 2 times the peak at the small one,
both measured in the same run. The issue's sizes are 100,000 and 1,000,000 cases; the defaults
are 20,000 and 200,000 so that `make bench` stays short (say so when reporting).

Usage: python bench/bench_download_memory.py [--small N] [--large N]
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

from bench_export_memory import hwm_mb, rss_mb
from common import emit, peak_rss_mb, ratio, run_child

NAME = "download-memory"
TARGET = 2.0


def download_child(home: str) -> dict[str, Any]:
    from caseshelf.bootstrap import build, load_settings
    from caseshelf.domain import layout
    from caseshelf.domain.identity import Identity

    # A store published at a URL (as `caseshelf serve` publishes it): the download answers a
    # URL, so what is measured is the rendering and the streamed write alone.
    settings = load_settings(
        {}, home=home, tenant="bench", public_url="http://127.0.0.1:9", presign_local_downloads=True
    )
    svc = build(settings)
    Path("/proc/self/clear_refs").write_text("5")  # the high-water mark from here on
    before = rss_mb()
    t = time.perf_counter()
    got = svc.registry.download(Identity("bench", "bench"), "m", "1.0.0")
    seconds = time.perf_counter() - t
    rec = svc.registry.get_version(Identity("bench", "bench"), "m", "1.0.0")
    info = svc.store.head(layout.download_key("bench", rec.content_digest))
    assert got.url is not None and info is not None
    return {
        "cases": rec.case_count,
        "document_mb": round(info.size / 2**20, 1),
        "download_s": round(seconds, 2),
        "peak_rss_mb": peak_rss_mb(),
        "rss_before_mb": round(before, 1),
        "growth_mb": round(hwm_mb() - before, 1),
    }


def measure(n: int) -> dict[str, Any]:
    me = Path(__file__).resolve()
    work = Path(tempfile.mkdtemp(prefix="bench-download-mem-"))
    try:
        home = str(work / "home")
        run_child(
            [str(Path(me.parent, "bench_export_memory.py")), "--register", home, str(n)],
            timeout=3600,
        )
        return run_child([str(me), "--download", home], timeout=3600)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument("--large", type=int, default=200_000)
    parser.add_argument("--download", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.download:
        emit(download_child(args.download))
        return 0
    small = measure(args.small)
    large = measure(args.large)
    peak = ratio(large["peak_rss_mb"], small["peak_rss_mb"])
    emit(
        {
            "bench": NAME,
            "small": small,
            "large": large,
            "size_ratio": ratio(args.large, args.small),
            "peak_rss_ratio": peak,
            "target": TARGET,
            "pass": peak <= TARGET,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
