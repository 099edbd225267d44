"""The floor for registration: parse a dataset file with orjson and sha256 each case's canonical
JSON (sorted keys), nothing else. Registration cannot be faster than this; the register benchmark
reports its wall time as a multiple of it.

Usage: python bench/floor_parse_hash.py DATASET.json   (prints one JSON line)
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, peak_rss_mb


def main(path: str) -> None:
    start, cpu = time.perf_counter(), time.process_time()
    doc = orjson.loads(Path(path).read_bytes())
    digests = [
        hashlib.sha256(orjson.dumps(case, option=orjson.OPT_SORT_KEYS)).hexdigest()
        for case in doc["cases"]
    ]
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    emit(
        {
            "op": "floor",
            "cases": len(digests),
            "seconds": round(elapsed, 4),
            "cpu_seconds": round(cpu, 4),
            "peak_rss_mb": peak_rss_mb(),
        }
    )


if __name__ == "__main__":
    main(sys.argv[1])
