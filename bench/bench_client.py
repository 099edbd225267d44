"""The Python client's reads against their floors, in the same run.

- `cases`: `list(cs.cases(ref, raw=True))` (plain dicts: the read itself; the default case
  models add their validation) over all N cases ÷ reading the same canonical records straight
  from the packs (the manifest loaded from the store, every record read and parsed), embedded (in
  process, through the function handler) and over the local API (`caseshelf serve` in its own
  process, real HTTP). Target: <= 1.5 each.
- `to_pandas`: `cs.to_pandas(ref)` ÷ `pandas.read_json(lines=True)` of the version's cases as a
  jsonl file. Target: <= 1.5.

The kinds run alternately, median of `--runs` each, each on a fresh client (no warm manifest).

Usage: python bench/bench_client.py [--cases N] [--runs R]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO_ROOT, emit, gsm8k_cases, median, ratio

NAME = "client"
TARGET = 1.5
REF = "gsm8k-bench@1.0.0"


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def floor_read(home: Path) -> int:
    """Every canonical record of the version, straight from the packs."""
    from caseshelf.bootstrap import build, load_settings
    from caseshelf.domain.identity import Identity
    from caseshelf.services.storage import LOCAL_MAX_GAP_BYTES, read_cases

    svc = build(load_settings({}, home=str(home)))
    rec = svc.registry.get_version(Identity("local", "local", frozenset()), *REF.split("@"))
    count = 0
    for _, chunk in svc.registry.iter_chunks(rec):  # the manifest's chunks, one at a time
        n = len(chunk)
        got = read_cases(svc.store, rec.tenant, chunk, range(n), max_gap=LOCAL_MAX_GAP_BYTES)
        count += len([orjson.loads(got[i]) for i in range(n)])
    return count


@contextmanager
def local_api(home: Path) -> Iterator[str]:
    """`caseshelf serve` on a free port over `home`, in its own process; its URL."""
    code = (
        "import sys; from caseshelf.bootstrap import load_settings; "
        "from caseshelf.devserver import make_server; "
        f"s = make_server(load_settings({{}}, home={str(home)!r}), '127.0.0.1', 0, quiet=True); "
        "print(s.url, flush=True); s.serve_forever()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError("the local server did not start")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    import caseshelf

    cases, note = gsm8k_cases(args.cases)
    with tempfile.TemporaryDirectory(prefix="caseshelf-bench-client-") as tmp:
        home = Path(tmp) / "home"
        with caseshelf.connect(home=home) as cs:
            cs.register("gsm8k-bench", cases=cases, version="1.0.0")
        jsonl = Path(tmp) / "cases.jsonl"
        jsonl.write_bytes(b"".join(orjson.dumps(c) + b"\n" for c in cases))
        del cases
        times: dict[str, list[float]] = {k: [] for k in ("floor", "embedded", "api", "pandas")}
        times |= {"read_json": []}
        with local_api(home) as url:
            # The server's first request loads the function (a cold start): not what is measured.
            with caseshelf.connect(url) as cs:
                cs.get(REF)
            for _ in range(args.runs):
                times["floor"].append(timed(lambda: floor_read(home)))
                with caseshelf.connect(home=home) as cs:
                    times["embedded"].append(
                        timed(lambda c=cs: sum(1 for _ in c.cases(REF, raw=True)))
                    )
                with caseshelf.connect(url) as cs:
                    times["api"].append(timed(lambda c=cs: sum(1 for _ in c.cases(REF, raw=True))))
                import pandas as pd

                times["read_json"].append(timed(lambda: pd.read_json(jsonl, lines=True)))
                with caseshelf.connect(home=home) as cs:
                    times["pandas"].append(timed(lambda c=cs: c.to_pandas(REF)))
    m = {k: round(median(v), 3) for k, v in times.items()}
    figures = {
        "cases": args.cases,
        "seconds": m,
        "cases_embedded_ratio": ratio(m["embedded"], m["floor"]),
        "cases_api_ratio": ratio(m["api"], m["floor"]),
        "to_pandas_ratio": ratio(m["pandas"], m["read_json"]),
        "target": TARGET,
    }
    ok = all(
        figures[k] <= TARGET for k in ("cases_embedded_ratio", "cases_api_ratio", "to_pandas_ratio")
    )
    for key in ("cases_embedded_ratio", "cases_api_ratio", "to_pandas_ratio"):
        print(f"{key}: {figures[key]}  (target <= {TARGET})")
    emit({"bench": NAME, **figures, **({"note": note} if note else {}), "pass": ok})
    return 0


if __name__ == "__main__":
    os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "caseshelf-bench")
    sys.exit(main())
