"""A warm registry reading many different versions: does its memory stay within its function's?

One fresh interpreter registers `--versions` versions of `--cases` GSM8K-shaped cases each into
an embedded store; another, told its memory as Lambda tells a function
(AWS_LAMBDA_FUNCTION_MEMORY_SIZE, `--memory-mb`), reads every version's whole manifest and a
page of its cases, in turn, as a warm registry function serving them would. It reports its peak
RSS over the memory, the cache's accounted bytes over its bound, and how many entries the cache
dropped. Target (the issue's): peak RSS ≤ 60% of the memory. The issue's figure is 100 versions
of 200,000 cases on a 1,024 MB function; the defaults (100 versions of 5,000 cases, 256 MB) keep
`make bench` short while the versions together still outgrow the cache's bound several times.

Usage: python bench/bench_manifest_cache.py [--versions N] [--cases N] [--memory-mb MB]
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

NAME = "manifest-cache"
TARGET = 0.6


def register_child(home: str, versions: int, n: int) -> dict[str, Any]:
    from caseshelf.bootstrap import build, load_settings
    from caseshelf.domain.identity import Identity
    from caseshelf.services.registry import parse_dataset

    svc = build(load_settings({}, home=home, tenant="bench"))
    base, _ = gsm8k_cases(n)
    for v in range(versions):
        cases = [{**c, "id": f"v{v}-{c['id']}"} for c in base]
        body = {"id": f"d{v:03d}", "version": "1.0.0", "cases": cases}
        svc.registry.register(Identity("bench", "bench"), parse_dataset(body))
    return {"versions": versions, "cases": n}


def read_child(home: str, versions: int) -> dict[str, Any]:
    from caseshelf.bootstrap import build, load_settings
    from caseshelf.domain.identity import Identity

    settings = load_settings(None, home=home, tenant="bench")  # the memory from the environment
    svc = build(settings)
    me = Identity("bench", "bench")
    t = time.perf_counter()
    for v in range(versions):
        rec = svc.registry.get_version(me, f"d{v:03d}", "1.0.0")
        svc.registry.manifest(rec)
        svc.registry.case_page_json(me, f"d{v:03d}", "1.0.0", limit=1000)
    memory = settings.memory_mb
    cache = svc.registry.cache
    return {
        "read_s": round(time.perf_counter() - t, 2),
        "memory_mb": memory,
        "peak_rss_mb": peak_rss_mb(),
        "rss_share": ratio(peak_rss_mb(), memory),
        "cache_used_mb": round(cache.used / 2**20, 1),
        "cache_bound_mb": round(cache.limit / 2**20, 1),
        "cache_entries": len(cache),
        "evictions": cache.evictions,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--versions", type=int, default=100)
    parser.add_argument("--cases", type=int, default=5_000)
    parser.add_argument("--memory-mb", type=int, default=256)
    parser.add_argument("--register", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--read", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.register:
        home, versions, n = args.register
        emit(register_child(home, int(versions), int(n)))
        return 0
    if args.read:
        emit(read_child(args.read[0], int(args.read[1])))
        return 0
    me = str(Path(__file__).resolve())
    work = Path(tempfile.mkdtemp(prefix="bench-manifest-cache-"))
    try:
        home = str(work / "home")
        run_child([me, "--register", home, str(args.versions), str(args.cases)], timeout=3600)
        env = {"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(args.memory_mb)}
        got = run_child([me, "--read", home, str(args.versions)], env=env, timeout=3600)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    emit(
        {
            "bench": NAME,
            "versions": args.versions,
            "cases": args.cases,
            **got,
            "target": TARGET,
            "pass": got["rss_share"] <= TARGET and got["cache_used_mb"] <= got["cache_bound_mb"],
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
