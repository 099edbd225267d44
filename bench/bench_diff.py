"""Diff two 100,000-case versions with 1% of the cases changed (one field each).

On the embedded store and on moto (in-process `mock_aws`, bucket and table made from the
template's properties), each in a fresh interpreter that registers the two versions once and
then, alternating, measures:
- `diff_versions` (manifests, digest comparison, ranged reads of the changed cases, field-level
  changes) on freshly built services, so no manifest is cached;
- the baseline: load both versions whole (every case read and parsed) and compare every case
  canonically.

Figures: wall ratio diff / baseline (target <= 0.1), object reads, and the case bytes the diff
read / the case bytes of both versions (target <= 0.05). Manifest bytes are reported apart
(`manifest_bytes_read`): they are read by every diff whatever the change.

v1.1.0 is registered against v1.0.0, so it keeps its change against it (`caseshelf.delta/1`:
the diff plans from it without reading a chunk) and copies of the 1,000 records it superseded
(`superseded_copied`; registration pays those reads once, `register_v2_s`), and the diff reads
the changed cases' earlier forms from them. The diff of two versions without a kept change (any
pair not registered one against the other) is measured too, `alternatives`: from the chunks
that differ with the copies (`chunks`), and without the copies with the configured read plan
(the backend's gap and reads in flight, as `bootstrap.build` sets them), the other backend's
gap and the other number of reads in flight. On the embedded store, a
`latency_probe` replays the copy-less diff's reads against a store that waits `PROBE_LATENCY_S`
per request, as a remote store does, to show what reads in flight buy where a request waits
rather than computes (in-process moto does not wait: its requests cost client and emulator CPU,
which threads do not overlap).

Usage: python bench/bench_diff.py [--cases N] [--runs R]
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MOTO_ENV, bench_store, child_main, emit, gsm8k_cases, median, ratio, run_child

NAME = "diff"
PROBE_LATENCY_S = 0.005
WALL_TARGET = 0.1
BYTES_TARGET = 0.05
CHANGED_EVERY = 100  # 1% of the cases, one field (the ground truth) each


class CountingStore:
    """A BlobStore that counts the objects read and the bytes they brought, by area (reads may
    run on several threads at once)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.reads = 0
        self.case_bytes = 0
        self.manifest_bytes = 0
        self.other_bytes = 0

    def _count(self, key: str, data: bytes) -> bytes:
        with self._lock:
            self.reads += 1
            if "/packs/" in key:
                self.case_bytes += len(data)
            elif "/manifests/" in key:
                self.manifest_bytes += len(data)
            else:
                self.other_bytes += len(data)
        return data

    def get(self, key: str) -> bytes:
        return self._count(key, self._inner.get(key))

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        return self._count(key, self._inner.get_range(key, offset, length))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class SlowStore(CountingStore):
    """A store whose every read first waits `latency` seconds, as a request to a remote store
    waits on the network (the part of a request that reads in flight together overlap)."""

    def __init__(self, inner: Any, latency: float) -> None:
        super().__init__(inner)
        self.latency = latency

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        time.sleep(self.latency)
        return super().get_range(key, offset, length)


def latency_probe(settings: Any, store: Any, index: Any) -> dict[str, Any]:
    """The copy-less diff's reads against a store with `PROBE_LATENCY_S` per request: narrow
    reads one at a time, narrow reads in flight together, and wide spans (once each)."""
    from caseshelf.bootstrap import build
    from caseshelf.domain.identity import Identity
    from caseshelf.services.diff import DiffService
    from caseshelf.services.storage import LOCAL_MAX_GAP_BYTES, REMOTE_READ_WORKERS
    from caseshelf.services.storage import MAX_GAP_BYTES as REMOTE_MAX_GAP_BYTES

    me = Identity("bench", "bench")
    slow = SlowStore(store, PROBE_LATENCY_S)
    out: dict[str, Any] = {"latency_s": PROBE_LATENCY_S}
    for label, gap, workers in (
        ("narrow_sequential", LOCAL_MAX_GAP_BYTES, 1),
        ("narrow_concurrent", LOCAL_MAX_GAP_BYTES, REMOTE_READ_WORKERS),
        ("wide_concurrent", REMOTE_MAX_GAP_BYTES, REMOTE_READ_WORKERS),
    ):
        fresh = build(settings, store=slow, index=index)
        diff = DiffService(
            fresh.registry,
            max_gap_bytes=gap,
            read_workers=workers,
            read_copies=False,
            use_deltas=False,
        )
        slow.reset()
        t = time.perf_counter()
        diff.diff_versions(me, "gsm8k-bench", "1.0.0", "1.1.0")
        out[label] = {"diff_s": round(time.perf_counter() - t, 3), "object_reads": slow.reads}
    return out


def baseline(services: Any, me: Any, name: str) -> dict[str, int]:
    """Load both versions whole and compare every case canonically."""
    import orjson

    from caseshelf.domain.canonical import canonical_json

    reg = services.registry
    loaded = []
    for ref in ("1.0.0", "1.1.0"):
        rec = reg.get_version(me, name, ref)
        n = len(reg.manifest(rec))
        loaded.append({c["id"]: c for _, c in reg.case_records(rec, list(range(n)))})
    base, cand = loaded
    changed = 0
    for cid, case in cand.items():
        other = base.get(cid)
        if other is not None and canonical_json(other, checked=True) != canonical_json(
            case, checked=True
        ):
            changed += 1
    # Keep the comparison honest: the diff's own answer must be the same.
    return {"changed": changed, "bytes": len(orjson.dumps(list(cand.values())))}


def measure(settings: Any, store: Any, index: Any, n: int, runs: int) -> dict[str, Any]:
    from caseshelf.bootstrap import build
    from caseshelf.domain.identity import Identity
    from caseshelf.services.registry import parse_dataset

    me = Identity("bench", "bench")
    name = "gsm8k-bench"
    counting = CountingStore(store)
    services = build(settings, store=counting, index=index)
    recs, register_s = [], []
    for version, every in (("1.0.0", 0), ("1.1.0", CHANGED_EVERY)):
        cases, _ = gsm8k_cases(n, changed_every=every)
        body = {"id": name, "version": version, "description": "bench", "cases": cases}
        parsed = parse_dataset(body)
        t0 = time.perf_counter()
        done = services.registry.register(me, parsed)
        register_s.append(time.perf_counter() - t0)
        recs.append(done.record)
    copied = done.stats.superseded_copied
    case_bytes_both = recs[0].bytes + recs[1].bytes

    diffs, bases = [], []
    for _ in range(runs):
        fresh = build(settings, store=counting, index=index)
        counting.reset()
        t = time.perf_counter()
        res = fresh.diff.diff_versions(me, name, "1.0.0", "1.1.0")
        wall = time.perf_counter() - t
        assert res.summary["changed"] == n // CHANGED_EVERY, res.summary
        assert all(len(c.changes) == 1 for c in res.changed or [])
        diffs.append(
            {
                "s": wall,
                "reads": counting.reads,
                "case_bytes": counting.case_bytes,
                "manifest_bytes": counting.manifest_bytes,
            }
        )
        fresh = build(settings, store=counting, index=index)
        counting.reset()
        t = time.perf_counter()
        got = baseline(fresh, me, name)
        bases.append(
            {
                "s": time.perf_counter() - t,
                "reads": counting.reads,
                "case_bytes": counting.case_bytes,
            }
        )
        assert got["changed"] == n // CHANGED_EVERY
    diff_s = median([d["s"] for d in diffs])
    base_s = median([b["s"] for b in bases])
    last = diffs[-1]
    # A diff without superseded copies, and the read planner's trades for it (median of `runs`
    # each): the configured plan, the other number of reads in flight, and the other backend's
    # gap (narrow: few bytes, a request per changed case; wide: a few span requests, many more
    # bytes).
    from caseshelf.services.diff import DiffService
    from caseshelf.services.storage import LOCAL_MAX_GAP_BYTES, REMOTE_READ_WORKERS
    from caseshelf.services.storage import MAX_GAP_BYTES as REMOTE_MAX_GAP_BYTES

    gap, workers = services.diff.max_gap_bytes, services.diff.read_workers
    other_gap = LOCAL_MAX_GAP_BYTES if gap == REMOTE_MAX_GAP_BYTES else REMOTE_MAX_GAP_BYTES
    alternatives = {
        "chunks": (gap, workers, True),
        "no_copies": (gap, workers, False),
        "no_copies_other_workers": (gap, 1 if workers > 1 else REMOTE_READ_WORKERS, False),
        "no_copies_other_gap": (other_gap, workers, False),
    }
    others: dict[str, Any] = {}
    for label, (alt_gap, alt_workers, copies) in alternatives.items():
        walls = []
        for _ in range(runs):
            fresh = build(settings, store=counting, index=index)
            alt = DiffService(
                fresh.registry,
                max_gap_bytes=alt_gap,
                read_workers=alt_workers,
                read_copies=copies,
                use_deltas=False,
            )
            counting.reset()
            t = time.perf_counter()
            alt.diff_versions(me, name, "1.0.0", "1.1.0")
            walls.append(time.perf_counter() - t)
        others[label] = {
            "max_gap_bytes": alt_gap,
            "read_workers": alt_workers,
            "diff_s": round(median(walls), 4),
            "wall_ratio": ratio(median(walls), base_s),
            "object_reads": counting.reads,
            "bytes_ratio": ratio(counting.case_bytes, case_bytes_both),
        }
    return {
        "max_gap_bytes": gap,
        "read_workers": workers,
        "alternatives": others,
        "register_v1_s": round(register_s[0], 2),
        "register_v2_s": round(register_s[1], 2),
        "superseded_copied": copied,
        "diff_s": round(diff_s, 4),
        "baseline_s": round(base_s, 4),
        "wall_ratio": ratio(diff_s, base_s),
        "object_reads": last["reads"],
        "baseline_object_reads": bases[-1]["reads"],
        "case_bytes_read": last["case_bytes"],
        "manifest_bytes_read": last["manifest_bytes"],
        "case_bytes_both_versions": case_bytes_both,
        "bytes_ratio": ratio(last["case_bytes"], case_bytes_both),
    }


def child(backend: str, n: int, runs: int) -> None:
    with bench_store(backend, "caseshelf-bench-diff-") as (settings, store, index):
        got = measure(settings, store, index, n, runs)
        if backend == "embedded":
            got["latency_probe"] = latency_probe(settings, store, index)
        emit({"op": backend, **got})


def main(n: int, runs: int) -> int:
    me = str(Path(__file__).resolve())
    result: dict[str, Any] = {"bench": NAME, "cases": n, "changed": n // CHANGED_EVERY}
    ok = True
    for backend in ("embedded", "moto"):
        env = MOTO_ENV if backend == "moto" else None
        got = run_child([me, "--child", backend, "--cases", str(n), "--runs", str(runs)], env=env)
        print(
            f"{backend}: diff {got['diff_s']:.3f} s vs baseline {got['baseline_s']:.3f} s "
            f"(ratio {got['wall_ratio']}), {got['object_reads']} object reads "
            f"(baseline {got['baseline_object_reads']}), case bytes read "
            f"{got['case_bytes_read']:,} of {got['case_bytes_both_versions']:,} "
            f"(ratio {got['bytes_ratio']}), manifests {got['manifest_bytes_read']:,} bytes; "
            f"registration v1 {got['register_v1_s']} s, v2 {got['register_v2_s']} s "
            f"({got['superseded_copied']:,} superseded records copied); read gap "
            f"{got['max_gap_bytes']:,} B, {got['read_workers']} read(s) in flight"
        )
        for label, alt in got["alternatives"].items():
            print(
                f"  ({label}: {alt['max_gap_bytes']:,} B gap, {alt['read_workers']} in flight: "
                f"{alt['diff_s']:.3f} s, ratio {alt['wall_ratio']}, {alt['object_reads']} reads, "
                f"bytes ratio {alt['bytes_ratio']})"
            )
        for key in (
            "diff_s",
            "baseline_s",
            "wall_ratio",
            "object_reads",
            "case_bytes_read",
            "manifest_bytes_read",
            "bytes_ratio",
            "max_gap_bytes",
            "read_workers",
            "register_v1_s",
            "register_v2_s",
            "superseded_copied",
        ):
            result[f"{backend}_{key}"] = got[key]
        result[f"{backend}_alternatives"] = got["alternatives"]
        if "latency_probe" in got:
            probe = got["latency_probe"]
            print(
                f"  (reads {probe['latency_s'] * 1000:.0f} ms slower each, as over a network: "
                + ", ".join(
                    f"{k.replace('_', ' ')} {v['diff_s']:.2f} s in {v['object_reads']} reads"
                    for k, v in probe.items()
                    if k != "latency_s"
                )
                + ")"
            )
            result["latency_probe"] = probe
        ok = ok and got["wall_ratio"] <= WALL_TARGET and got["bytes_ratio"] <= BYTES_TARGET
    result["targets"] = {"wall_ratio": WALL_TARGET, "bytes_ratio": BYTES_TARGET}
    result["pass"] = ok
    emit(result)
    return 0


if __name__ == "__main__":
    child_main(__doc__, child, main)
