"""Where one `caseshelf import` process spends its CPU, a row at a time: the breakdown
`bench_import_floor.py --stages` prints beside its ratios.

Each stage runs in a fresh interpreter on the same GSM8K-shaped jsonl and reports its CPU
seconds (user + sys, `time.process_time`); a stage's cost is the difference from the one before:

- `parse`: the file read a chunk at a time (`_lines`) and each line parsed by orjson;
- `strict`: the rows as the import reads them (`_jsonl`): `parse` plus the check that orjson
  kept every key and integer exactly (`caseshelf.domain.strictjson.parsed_exactly`);
- `mapped`: those rows through the recipe into canonical records and their digests
  (`record_batches`), in batches;
- the whole import (`caseshelf import`, a process) less `startup` (the same command on one row)
  and `mapped` is the storing: packs, the id check, manifest chunks, the index and the commit.

Usage: python bench/import_stages.py STAGE ROWS.jsonl   (prints one JSON line: stage, rows, cpu)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import IO

import orjson
import yaml

from caseshelf.adapters.sources import _jsonl, _lines
from caseshelf.domain.mapping import record_batches
from caseshelf.domain.recipe import parse_recipe

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO_ROOT, emit

RECIPE = REPO_ROOT / "recipes" / "gsm8k.yaml"
STAGES = ("parse", "strict", "mapped")


def run(stage: str, path: str) -> int:
    """The rows the stage went through."""
    rows = 0
    if stage == "parse":
        with open(path, "rb") as fh:
            for lines in _lines(fh):
                for line in lines:
                    if line:
                        orjson.loads(line)
                        rows += 1
        return rows

    def opened() -> IO[bytes]:
        return open(path, "rb")

    source = _jsonl(opened, path)
    if stage == "strict":
        for _ in source:
            rows += 1
        return rows
    recipe = parse_recipe(yaml.safe_load(RECIPE.read_text(encoding="utf-8")))
    for batch in record_batches(source, recipe, max_case_bytes=1 << 30):
        rows += len(batch.ids)
    return rows


def main(argv: list[str]) -> None:
    stage, path = argv
    if stage not in STAGES:
        raise SystemExit(f"stage is one of {', '.join(STAGES)}, not {stage!r}")
    cpu = time.process_time()
    rows = run(stage, path)
    emit({"stage": stage, "rows": rows, "cpu_s": round(time.process_time() - cpu, 4)})


if __name__ == "__main__":
    main(sys.argv[1:])
