"""Manifests at scale: a diff and a page of cases at 1,000,000 cases, against the same at a tenth
(diff) and a hundredth (page) of the size. Cost follows the change, not the size.

The versions are stored once per run, before anything is timed, by the storage layer itself
(`PackWriter`, `ManifestBuilder`, `write_manifest`, the version row's commit: what a
registration writes, without its validation, which `bench_register.py` measures), a v2 reusing
the locations of v1's unchanged cases as a registration against v1 does. Embedded store.

Figures (each measured in a fresh interpreter, median of `--runs`):
- diff of two 1,000,000-case versions with 1% changed (10,000 cases, in 10 runs of 1,000):
  manifest bytes read / the two manifests' bytes (roots and every chunk each names), target
  <= 0.05; wall / the diff of two 100,000-case versions with the same 10,000 changes, target
  <= 2. (With every 100th case changed instead, every chunk holds a change and a diff reads
  both manifests whole: `bench_diff.py` shows it at 100,000 cases.)
- one page of 100 cases (from the middle) of a 1,000,000-case version / the same page of a
  10,000-case version: wall (target <= 2) and peak RSS (target <= 2).

Usage: python bench/bench_scale.py [--cases N] [--runs R]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, gsm8k_rows, iter_gsm8k_cases, median, peak_rss_mb, ratio, run_child

NAME = "scale"
DIFF_BYTES_TARGET = 0.05
DIFF_WALL_TARGET = 2.0
PAGE_TARGET = 2.0
PAGE = 100


class ManifestReads:
    """A BlobStore that counts the manifest bytes read (roots and chunks)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.manifest_bytes = 0

    def get(self, key: str) -> bytes:
        data = self._inner.get(key)
        if "/manifests/" in key:
            with self._lock:
                self.manifest_bytes += len(data)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def store_version(services: Any, name: str, version: str, cases: Any, base: dict) -> dict:
    """Store one version as a registration would (packs, format 3 manifest, version row);
    answers where its records are, by digest, for the next version to reuse."""
    from caseshelf.domain import layout
    from caseshelf.domain.canonical import canonical_json, content_digest, sha256_hex
    from caseshelf.domain.identity import Identity
    from caseshelf.domain.manifest import PENDING_PACK, ManifestBuilder
    from caseshelf.services.storage import PackWriter, write_manifest

    me = Identity("bench", "bench")
    reg = services.registry
    packs = PackWriter(reg.store, lambda h: layout.pack_key(me.tenant, h))
    builder = ManifestBuilder(description="bench", tags=[], shared_files=[])
    for case in cases:
        data = canonical_json(case, checked=True)
        digest = sha256_hex(data)
        loc = base.get(digest)
        if loc is not None:
            builder.add_case(
                case["id"], digest, case["tags"], loc.container, loc.offset, loc.length
            )
        else:
            number, offset = packs.append(data)
            builder.add_case(
                case["id"], digest, case["tags"], PENDING_PACK + str(number), offset, len(data)
            )
    packs.flush()
    builder.resolve_pending(packs.digest_of_pack)
    manifest = builder.build("")
    cdigest = content_digest(
        description="bench",
        tags=[],
        shared_files=[],
        case_digests=((cid, "sha256:" + d) for _, cid, d in manifest.iter_cases()),
    )
    manifest = replace(manifest, content_digest=cdigest)
    key = write_manifest(reg.store, me.tenant, manifest).key
    rec = reg.versions.new_record(
        me,
        name=name,
        version=version,
        content_digest=cdigest,
        manifest_key=key,
        case_count=len(manifest),
        bytes=manifest.case_bytes(),
        description="bench",
        tags=(),
        produced_by=None,
    )
    reg.versions.commit(rec)
    return manifest.locations_by_digest()


def setup(home: str, n: int) -> None:
    """Store every version the figures need (not timed)."""
    from caseshelf.bootstrap import build, load_settings

    services = build(load_settings({}, home=home))
    rows, _ = gsm8k_rows()
    for name, size, every, layout in (
        ("big", n, 100, "runs"),
        ("mid", n // 10, 10, "runs"),
        ("small", n // 100, 0, "runs"),
    ):
        base = store_version(services, name, "1.0.0", iter_gsm8k_cases(rows, size), {})
        if every:
            cases = iter_gsm8k_cases(rows, size, changed_every=every, layout=layout)
            store_version(services, name, "1.1.0", cases, base)
        del base
    emit({"op": "setup", "peak_rss_mb": peak_rss_mb()})


def manifest_bytes(services: Any, name: str, version: str) -> int:
    """A version's manifest: its root and every chunk it names."""
    from caseshelf.domain import layout
    from caseshelf.domain.identity import Identity

    reg = services.registry
    rec = reg.get_version(Identity("bench", "bench"), name, version)
    total = reg.store.head(rec.manifest_key).size
    for key in reg.root(rec).chunk_keys:
        total += reg.store.head(layout.chunk_key(rec.tenant, key)).size
    return int(total)


def child_diff(home: str, name: str) -> None:
    from caseshelf.bootstrap import build, build_adapters, load_settings
    from caseshelf.domain.identity import Identity

    settings = load_settings({}, home=home)
    store, index = build_adapters(settings)
    counting = ManifestReads(store)
    services = build(settings, store=counting, index=index)
    start = time.perf_counter()
    res = services.diff.diff_versions(Identity("bench", "bench"), name, "1.0.0", "1.1.0")
    wall = time.perf_counter() - start
    emit(
        {
            "op": f"diff-{name}",
            "s": round(wall, 4),
            "summary": res.summary,
            "manifest_bytes_read": counting.manifest_bytes,
            "manifest_bytes_both": manifest_bytes(services, name, "1.0.0")
            + manifest_bytes(services, name, "1.1.0"),
            "peak_rss_mb": peak_rss_mb(),
        }
    )


def child_page(home: str, name: str) -> None:
    from caseshelf.bootstrap import build, load_settings
    from caseshelf.domain.identity import Identity
    from caseshelf.domain.paging import encode_position

    services = build(load_settings({}, home=home))
    me = Identity("bench", "bench")
    reg = services.registry
    count = reg.get_version(me, name, "1.0.0").case_count
    start = time.perf_counter()
    body, _ = reg.case_page_json(me, name, "1.0.0", cursor=encode_position(count // 2), limit=PAGE)
    wall = time.perf_counter() - start
    assert body.count(b'"id":') == PAGE
    emit({"op": f"page-{name}", "s": round(wall, 5), "peak_rss_mb": peak_rss_mb()})


def main(n: int, runs: int) -> int:
    me = str(Path(__file__).resolve())
    result: dict[str, Any] = {"bench": NAME, "cases": n}
    with tempfile.TemporaryDirectory(prefix="caseshelf-bench-scale-") as home:
        t = time.perf_counter()
        built = run_child([me, "--child", "setup", home, str(n)], timeout=1200)
        print(f"setup (not timed): {time.perf_counter() - t:.1f} s, {built['peak_rss_mb']} MB")
        got: dict[str, list[dict[str, Any]]] = {}
        for _ in range(runs):
            for op, name in (
                ("diff", "big"),
                ("diff", "mid"),
                ("page", "big"),
                ("page", "small"),
            ):
                got.setdefault(f"{op}-{name}", []).append(
                    run_child([me, "--child", op, home, name])
                )

    def med(key: str, field: str) -> float:
        return median([r[field] for r in got[key]])

    big, mid = got["diff-big"][-1], got["diff-mid"][-1]
    assert big["summary"]["changed"] == mid["summary"]["changed"] == n // 100, big["summary"]
    result.update(
        {
            "diff_1m_s": med("diff-big", "s"),
            "diff_100k_s": med("diff-mid", "s"),
            "diff_wall_ratio": ratio(med("diff-big", "s"), med("diff-mid", "s")),
            "diff_manifest_bytes_read": big["manifest_bytes_read"],
            "diff_manifest_bytes_both": big["manifest_bytes_both"],
            "diff_bytes_ratio": ratio(big["manifest_bytes_read"], big["manifest_bytes_both"]),
            "diff_1m_peak_rss_mb": med("diff-big", "peak_rss_mb"),
            "page_1m_s": med("page-big", "s"),
            "page_10k_s": med("page-small", "s"),
            "page_wall_ratio": ratio(med("page-big", "s"), med("page-small", "s")),
            "page_1m_peak_rss_mb": med("page-big", "peak_rss_mb"),
            "page_10k_peak_rss_mb": med("page-small", "peak_rss_mb"),
            "page_rss_ratio": ratio(
                med("page-big", "peak_rss_mb"), med("page-small", "peak_rss_mb")
            ),
        }
    )
    print(
        f"diff, {n:,} cases, {n // 100:,} changed in runs of 1,000: {result['diff_1m_s']:.3f} s "
        f"vs {result['diff_100k_s']:.3f} s at {n // 10:,} cases with the same changes (ratio "
        f"{result['diff_wall_ratio']}); manifest bytes read {big['manifest_bytes_read']:,} of "
        f"{big['manifest_bytes_both']:,} (ratio {result['diff_bytes_ratio']}), peak RSS "
        f"{result['diff_1m_peak_rss_mb']} MB"
    )
    print(
        f"page of {PAGE}: {result['page_1m_s'] * 1000:.1f} ms at {n:,} cases vs "
        f"{result['page_10k_s'] * 1000:.1f} ms at {n // 100:,} "
        f"(ratio {result['page_wall_ratio']}); "
        f"peak RSS {result['page_1m_peak_rss_mb']} vs {result['page_10k_peak_rss_mb']} MB "
        f"(ratio {result['page_rss_ratio']})"
    )
    result["targets"] = {
        "diff_bytes_ratio": DIFF_BYTES_TARGET,
        "diff_wall_ratio": DIFF_WALL_TARGET,
        "page_wall_ratio": PAGE_TARGET,
        "page_rss_ratio": PAGE_TARGET,
    }
    result["pass"] = (
        result["diff_bytes_ratio"] <= DIFF_BYTES_TARGET
        and result["diff_wall_ratio"] <= DIFF_WALL_TARGET
        and result["page_wall_ratio"] <= PAGE_TARGET
        and result["page_rss_ratio"] <= PAGE_TARGET
    )
    emit(result)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", choices=["setup", "diff", "page"])
    parser.add_argument("args", nargs="*")
    ns = parser.parse_args()
    if ns.child == "setup":
        setup(ns.args[0], int(ns.args[1]))
    elif ns.child == "diff":
        child_diff(*ns.args)
    elif ns.child == "page":
        child_page(*ns.args)
    else:
        sys.exit(main(ns.cases, ns.runs))
