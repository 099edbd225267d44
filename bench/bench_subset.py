"""Subset of a 100,000-case version: by tags + limit, and by a seeded sample of 1,000.

On the embedded store and on moto (in-process `mock_aws`), each in a fresh interpreter that
registers the version once and then, alternating, measures on freshly built services (so the
manifest is not cached):
- `select_subset` by tags + limit, and by `sample=1000`;
- the baseline: load the version's cases whole (every case read and parsed).

Figures: wall ratio subset / baseline for each selection (target <= 0.05), the CPU-time ratio
beside it (the process's CPU, in-process moto's included: steadier than the wall on a loaded
machine), and the objects and bytes each read. A warm figure (root already cached, as in a warm
Lambda) is reported too.

Usage: python bench/bench_subset.py [--cases N] [--runs R]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_diff import CountingStore
from common import MOTO_ENV, bench_store, child_main, emit, gsm8k_cases, median, ratio, run_child

NAME = "subset"
WALL_TARGET = 0.05
SELECTIONS: dict[str, dict[str, Any]] = {
    "tags_limit": {"tags": ["level-3", "hard"], "limit": 5000},
    "sample": {"sample": 1000, "seed": 2026},
}


def tagged_cases(n: int) -> list[dict[str, Any]]:
    cases, _ = gsm8k_cases(n)
    for i, case in enumerate(cases):
        case["tags"] = ["gsm8k", f"level-{i % 5}"] + (["hard"] if i % 7 == 0 else [])
    return cases


def measure(settings: Any, store: Any, index: Any, n: int, runs: int) -> dict[str, Any]:
    from caseshelf.bootstrap import build
    from caseshelf.domain.identity import Identity
    from caseshelf.domain.subset import SubsetRequest
    from caseshelf.services.registry import parse_dataset

    me = Identity("bench", "bench")
    name = "subset-bench"
    counting = CountingStore(store)
    services = build(settings, store=counting, index=index)
    body = {"id": name, "version": "1.0.0", "cases": tagged_cases(n)}
    rec = services.registry.register(me, parse_dataset(body)).record

    def load_whole() -> None:
        fresh = build(settings, store=counting, index=index)
        got = list(fresh.registry.case_records(rec, list(range(rec.case_count))))
        assert len(got) == n

    times: dict[str, list[float]] = {k: [] for k in SELECTIONS}
    cpu: dict[str, list[float]] = {k: [] for k in SELECTIONS}
    reads: dict[str, tuple[int, int]] = {}
    selected: dict[str, int] = {}
    base_times: list[float] = []
    base_cpu: list[float] = []
    warm: dict[str, float] = {}
    for _ in range(runs):
        counting.reset()
        t, c = time.perf_counter(), time.process_time()
        load_whole()
        base_times.append(time.perf_counter() - t)
        base_cpu.append(time.process_time() - c)
        base_reads = (counting.reads, counting.case_bytes + counting.manifest_bytes)
        for key, selection in SELECTIONS.items():
            fresh = build(settings, store=counting, index=index)
            request = SubsetRequest.model_validate(selection)
            counting.reset()
            t, c = time.perf_counter(), time.process_time()
            res = fresh.selection.select_subset(me, name, "1.0.0", request)
            times[key].append(time.perf_counter() - t)
            cpu[key].append(time.process_time() - c)
            reads[key] = (counting.reads, counting.case_bytes + counting.manifest_bytes)
            assert res.subset.stamp is not None
            selected[key] = res.subset.stamp.selected
            t = time.perf_counter()
            fresh.selection.select_subset(me, name, "1.0.0", request)
            warm[key] = time.perf_counter() - t
    base_s, base_cpu_s = median(base_times), median(base_cpu)
    out: dict[str, Any] = {
        "baseline_s": round(base_s, 4),
        "baseline_cpu_s": round(base_cpu_s, 4),
        "baseline_object_reads": base_reads[0],
        "baseline_bytes_read": base_reads[1],
    }
    for key in SELECTIONS:
        s = median(times[key])
        out[key] = {
            "selected": selected[key],
            "subset_s": round(s, 4),
            "wall_ratio": ratio(s, base_s),
            "cpu_s": round(median(cpu[key]), 4),
            "cpu_ratio": ratio(median(cpu[key]), base_cpu_s),
            "warm_s": round(warm[key], 4),
            "object_reads": reads[key][0],
            "bytes_read": reads[key][1],
        }
    return out


def child(backend: str, n: int, runs: int) -> None:
    with bench_store(backend, "caseshelf-bench-subset-") as (settings, store, index):
        emit({"op": backend, **measure(settings, store, index, n, runs)})


def main(n: int, runs: int) -> int:
    me = str(Path(__file__).resolve())
    result: dict[str, Any] = {"bench": NAME, "cases": n}
    ok = True
    for backend in ("embedded", "moto"):
        env = MOTO_ENV if backend == "moto" else None
        got = run_child([me, "--child", backend, "--cases", str(n), "--runs", str(runs)], env=env)
        result[f"{backend}_baseline_s"] = got["baseline_s"]
        for key in SELECTIONS:
            fig = got[key]
            print(
                f"{backend} {key}: {fig['selected']} selected in {fig['subset_s']:.4f} s "
                f"(warm {fig['warm_s']:.4f} s) vs loading all {got['baseline_s']:.3f} s: ratio "
                f"{fig['wall_ratio']} (CPU {fig['cpu_s']:.4f} s of {got['baseline_cpu_s']:.3f} s: "
                f"{fig['cpu_ratio']}); {fig['object_reads']} object reads, "
                f"{fig['bytes_read']:,} bytes (baseline {got['baseline_object_reads']} reads, "
                f"{got['baseline_bytes_read']:,} bytes)"
            )
            result[f"{backend}_{key}_s"] = fig["subset_s"]
            result[f"{backend}_{key}_warm_s"] = fig["warm_s"]
            result[f"{backend}_{key}_wall_ratio"] = fig["wall_ratio"]
            result[f"{backend}_{key}_cpu_ratio"] = fig["cpu_ratio"]
            result[f"{backend}_{key}_bytes_read"] = fig["bytes_read"]
            ok = ok and fig["wall_ratio"] <= WALL_TARGET
    result["targets"] = {"wall_ratio": WALL_TARGET}
    result["pass"] = ok
    emit(result)
    return 0


if __name__ == "__main__":
    child_main(__doc__, child, main)
