"""The floor for registration and import: parse, build each case's canonical JSON (sorted keys)
and sha256 it, nothing else. Registration or an import cannot be faster than this; the register
and import-floor benchmarks report their wall time as a multiple of it.

- a dataset document: parse it whole with orjson, then dump and hash each of its cases;
- `--rows`: a GSM8K-shaped jsonl file, one row a line, each row built into the case the
  `recipes/gsm8k.yaml` import registers (id, prompt, ground truth after `####`, solution,
  grader) before it is dumped and hashed.

Usage: python bench/floor_parse_hash.py DATASET.json   (prints one JSON line)
       python bench/floor_parse_hash.py --rows ROWS.jsonl
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, peak_rss_mb

GRADERS = [{"id": "answer-match", "config": {"mode": "numeric"}}]


def document_digests(path: str) -> list[str]:
    doc = orjson.loads(Path(path).read_bytes())
    return [
        hashlib.sha256(orjson.dumps(case, option=orjson.OPT_SORT_KEYS)).hexdigest()
        for case in doc["cases"]
    ]


def row_case(index: int, row: dict[str, Any]) -> dict[str, Any]:
    answer = row["answer"]
    return {
        "id": f"gsm8k-{index}",
        "env": {"kind": "prompt"},
        "inputs": {"user": row["question"]},
        "expectations": {
            "ground_truth": answer.rpartition("####")[2].strip(),
            "details": {"solution": answer},
        },
        "graders": GRADERS,
    }


def row_digests(path: str) -> list[str]:
    digests = []
    with open(path, "rb") as fh:
        for index, line in enumerate(fh):
            case = row_case(index, orjson.loads(line))
            digests.append(
                hashlib.sha256(orjson.dumps(case, option=orjson.OPT_SORT_KEYS)).hexdigest()
            )
    return digests


def main(argv: list[str]) -> None:
    start, cpu = time.perf_counter(), time.process_time()
    digests = row_digests(argv[1]) if argv[0] == "--rows" else document_digests(argv[0])
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
    main(sys.argv[1:])
