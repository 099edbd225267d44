"""Register a 100,000-case GSM8K-shaped dataset, then v2 of it with 1% of the cases changed.

Figures (each measured operation in a fresh interpreter, so its peak RSS is its own):
- embedded store: cases/s, peak RSS, and the wall time of `load file + parse_dataset + register`
  divided by the floor (`floor_parse_hash.py`: orjson parse + sha256 of each case's canonical
  JSON) measured in the same run: floor and register alternate, each register run is divided by
  the floor run just before it, median of 3. Target <= 2.5. The CPU-time ratio is shown too.
- the command users run: `caseshelf register FILE` in a process of its own on a fresh embedded
  store (a file of this size, over the client's 5 MiB, is uploaded and registered by the
  server's job through the streamed path, `register_stream`, in the same process), its wall and
  CPU time over a process running the floor script, both measured from outside (start-up and
  imports included), alternating with the runs above, median of 3. Shown beside the target.
- v2 with 1% changed: **all** new bytes v2 wrote (packs, manifest chunks, manifest root, index
  rows) / all bytes v1 wrote, on the embedded store and on moto (in-process `mock_aws`, bucket and
  table made like the template's). Target <= 0.03 with the changed cases in runs of 1,000
  (`runs`: a fix to one part of a benchmark); with every 100th case changed (`spread`) every
  manifest chunk holds a change, and the figure is reported beside it, without a target.
- moto: cases/s and peak RSS of the v1 registration.

Usage: python bench/bench_register.py [--cases N] [--runs R]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    BENCH_DIR,
    MOTO_ENV,
    REPO_ROOT,
    WriteCounter,
    bench_store,
    emit,
    median,
    peak_rss_mb,
    ratio,
    run_child,
    write_dataset,
)

NAME = "register"
WALL_TARGET = 2.5
DEDUP_TARGET = 0.03
CHANGED_EVERY = 100  # 1% of the cases


# -- children: one measured operation each ---------------------------------------------------

# A whole process timed from outside: its wall time and the CPU time (user + sys) it used.
PROCESS = """
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
wall = time.perf_counter() - t0
use = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"seconds": round(wall, 4), "cpu_seconds": round(use.ru_utime + use.ru_stime, 4),
                  "peak_rss_mb": round(use.ru_maxrss / 1024, 1)}))
"""


def _timed_process(argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    return run_child(["-c", PROCESS, *argv], env=env)


def _cli_register(path: Path) -> dict[str, Any]:
    """`caseshelf register FILE` on a fresh embedded store, as a user runs it: with the byte
    code cache an installed package has (a `PYTHONDONTWRITEBYTECODE` in the environment would
    have every run compile the whole package, ~1 s of start-up no user pays)."""
    cli = str(Path(sys.executable).with_name("caseshelf"))
    with tempfile.TemporaryDirectory(prefix="caseshelf-bench-cli-") as home:
        env = {"CASESHELF_HOME": home, "PYTHONDONTWRITEBYTECODE": ""}
        return _timed_process([cli, "register", str(path)], env=env)


def _register_pair(registry: Any, counter: Any, v1: str, v2: str, v2_spread: str) -> dict:
    """Time `load + parse_dataset + register` of v1, then register v2 (for the bytes ratio),
    counting what each wrote; then the spread v2 against v1 as a dataset of its own."""

    from caseshelf.domain.identity import Identity
    from caseshelf.services.bulk import gc_paused
    from caseshelf.services.loaders import load_dataset_file
    from caseshelf.services.registry import parse_dataset

    me = Identity("bench", "bench")
    counter.reset()
    start, cpu = time.perf_counter(), time.process_time()
    with gc_paused():  # as the registry function's handler and the CLI run a registration
        body = parse_dataset(load_dataset_file(v1))
        first = registry.register(me, body)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    rss = peak_rss_mb()
    v1_bytes, v1_areas = counter.total, dict(counter.by_area)
    cases = first.record.case_count
    del body
    counter.reset()
    second = registry.register(me, parse_dataset(load_dataset_file(v2)))
    v2_bytes, v2_areas, v2_index = counter.total, dict(counter.by_area), counter.index_bytes
    assert first.created and second.created
    # (v1 again under another name writes no new pack: its packs are the same bytes)
    registry.register(me, parse_dataset({**load_dataset_file(v1), "id": "gsm8k-spread"}))
    counter.reset()
    third = registry.register(
        me, parse_dataset({**load_dataset_file(v2_spread), "id": "gsm8k-spread"})
    )
    assert third.created
    return {
        "cases": cases,
        "seconds": round(elapsed, 4),
        "cpu_seconds": round(cpu, 4),
        "cases_per_s": round(cases / elapsed),
        "peak_rss_mb": rss,
        "v1_case_bytes": first.stats.case_bytes_written,
        "v2_case_bytes": second.stats.case_bytes_written,
        "v2_cases_reused": second.stats.cases_reused,
        "v1_all_bytes": v1_bytes,
        "v1_by_area": v1_areas,
        "v2_all_bytes": v2_bytes,
        "v2_by_area": v2_areas,
        "v2_index_bytes": v2_index,
        "v2_spread_all_bytes": counter.total,
        "v2_spread_by_area": dict(counter.by_area),
    }


def child(backend: str, v1: str, v2: str, v2_spread: str) -> None:
    """Registration alone (the registry over the store's adapters), on `backend`."""
    from caseshelf.services.registry import RegistryService

    with bench_store(backend) as (_settings, store, index):
        counter = WriteCounter(store, index)
        registry = RegistryService(counter.store, counter.index)
        got = _register_pair(registry, counter, v1, v2, v2_spread)
        emit({"op": f"register-{backend}", **got})


# -- the parent -----------------------------------------------------------------------------


def _aws_adapters_present() -> bool:
    pkg = REPO_ROOT / "shared" / "caseshelf" / "adapters"
    return (pkg / "s3.py").is_file() and (pkg / "dynamodb.py").is_file()


def main(n: int, runs: int) -> int:
    me = str(Path(__file__).resolve())
    floor_script = str(BENCH_DIR / "floor_parse_hash.py")
    with tempfile.TemporaryDirectory(prefix="caseshelf-bench-data-") as tmp:
        v1, v2 = Path(tmp) / "v1.json", Path(tmp) / "v2.json"
        v2_spread = Path(tmp) / "v2-spread.json"
        note = write_dataset(v1, n=n, version="1.0.0")
        write_dataset(v2, n=n, version="1.1.0", changed_every=CHANGED_EVERY, layout="runs")
        write_dataset(v2_spread, n=n, version="1.1.0", changed_every=CHANGED_EVERY)
        if note:
            print(f"note: {note}")
        print(f"dataset: {n} cases, {v1.stat().st_size / 1e6:.1f} MB of JSON")

        _cli_register(v1)  # once unmeasured: the byte code cache written, the file cached
        floors, regs, floor_procs, clis = [], [], [], []
        for i in range(runs):
            floor = run_child([floor_script, str(v1)])
            reg = run_child([me, "--child", "embedded", str(v1), str(v2), str(v2_spread)])
            floor_proc = _timed_process([sys.executable, floor_script, str(v1)])
            cli = _cli_register(v1)
            floors.append(floor)
            regs.append(reg)
            floor_procs.append(floor_proc)
            clis.append(cli)
            print(
                f"run {i + 1}: floor {floor['seconds']:.3f} s, register {reg['seconds']:.3f} s "
                f"({reg['cases_per_s']} cases/s, peak RSS {reg['peak_rss_mb']} MB); "
                f"floor process {floor_proc['seconds']:.3f} s, `caseshelf register` "
                f"{cli['seconds']:.3f} s (peak RSS {cli['peak_rss_mb']} MB)"
            )
        floor_s = median([f["seconds"] for f in floors])
        reg_s = median([r["seconds"] for r in regs])
        # Each register run over the floor run just before it (so both met the same machine
        # load), median over the runs; the CPU-time ratio alongside, which a busy machine
        # disturbs less.
        per_run = [ratio(r["seconds"], f["seconds"]) for r, f in zip(regs, floors, strict=True)]
        last = regs[-1]
        result: dict[str, Any] = {
            "bench": NAME,
            "cases": n,
            "runs": runs,
            "floor_s": round(floor_s, 3),
            "embedded_register_s": round(reg_s, 3),
            "embedded_cases_per_s": round(n / reg_s),
            "embedded_peak_rss_mb": median([r["peak_rss_mb"] for r in regs]),
            "floor_peak_rss_mb": median([f["peak_rss_mb"] for f in floors]),
            "embedded_wall_ratio": round(median(per_run), 3),
            "embedded_wall_ratio_per_run": per_run,
            "embedded_cpu_ratio": ratio(
                median([r["cpu_seconds"] for r in regs]), median([f["cpu_seconds"] for f in floors])
            ),
            "cli_wall_ratio": round(
                median(
                    [
                        ratio(c["seconds"], f["seconds"])
                        for c, f in zip(clis, floor_procs, strict=True)
                    ]
                ),
                3,
            ),
            "cli_cpu_ratio": ratio(
                median([c["cpu_seconds"] for c in clis]),
                median([f["cpu_seconds"] for f in floor_procs]),
            ),
            "cli_register_s": round(median([c["seconds"] for c in clis]), 3),
            "floor_process_s": round(median([f["seconds"] for f in floor_procs]), 3),
            "cli_peak_rss_mb": median([c["peak_rss_mb"] for c in clis]),
            "embedded_v2_case_bytes_ratio": ratio(last["v2_case_bytes"], last["v1_case_bytes"]),
            "embedded_v2_bytes_ratio": ratio(last["v2_all_bytes"], last["v1_all_bytes"]),
            "embedded_v2_spread_bytes_ratio": ratio(
                last["v2_spread_all_bytes"], last["v1_all_bytes"]
            ),
            "embedded_v1_bytes_by_area": last["v1_by_area"],
            "embedded_v2_bytes_by_area": {**last["v2_by_area"], "index": last["v2_index_bytes"]},
            "embedded_v2_spread_bytes_by_area": last["v2_spread_by_area"],
        }
        print(
            f"v2, 1% changed in runs of 1,000: all new bytes {last['v2_all_bytes']:,} of v1's "
            f"{last['v1_all_bytes']:,} (ratio {result['embedded_v2_bytes_ratio']}; "
            f"{result['embedded_v2_bytes_by_area']}); every 100th changed: ratio "
            f"{result['embedded_v2_spread_bytes_ratio']} ({last['v2_spread_by_area']})"
        )
        ok = (
            result["embedded_wall_ratio"] <= WALL_TARGET
            and result["embedded_v2_bytes_ratio"] <= DEDUP_TARGET
        )
        if _aws_adapters_present():
            moto = run_child(
                [me, "--child", "moto", str(v1), str(v2), str(v2_spread)], env=MOTO_ENV
            )
            print(
                f"moto: register {moto['seconds']:.3f} s ({moto['cases_per_s']} cases/s, "
                f"peak RSS {moto['peak_rss_mb']} MB)"
            )
            result["moto_cases_per_s"] = moto["cases_per_s"]
            result["moto_peak_rss_mb"] = moto["peak_rss_mb"]
            result["moto_v2_bytes_ratio"] = ratio(moto["v2_all_bytes"], moto["v1_all_bytes"])
            result["moto_v2_spread_bytes_ratio"] = ratio(
                moto["v2_spread_all_bytes"], moto["v1_all_bytes"]
            )
            ok = ok and result["moto_v2_bytes_ratio"] <= DEDUP_TARGET
        else:
            print("moto: the S3/DynamoDB adapters are not there yet; moto figures skipped")
            result["moto_skipped"] = True
            ok = False
        result["targets"] = {
            "embedded_wall_ratio": WALL_TARGET,
            "v2_bytes_ratio": DEDUP_TARGET,
            "cli_wall_ratio": "(shown)",
        }
        if note:
            result["note"] = note
        result["pass"] = ok
        emit(result)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", choices=["embedded", "moto"])
    parser.add_argument("files", nargs="*")
    args = parser.parse_args()
    if args.child:
        child(args.child, *args.files)
    else:
        sys.exit(main(args.cases, args.runs))
