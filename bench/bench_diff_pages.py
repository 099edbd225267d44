"""Paging through a diff of two versions that share nothing: every case changed, so no chunk is
shared and every entry is a changed case. Embedded store.

The versions are stored once per run, before anything is measured, as `bench_scale.py` stores
them (`store_version`: what a registration writes, without its validation). Then, each in a
fresh interpreter:

- `pages-N-kept|fresh`: every page of the diff of the N-case pair, `limit=1000`, through the
  service the route calls (`DiffService.diff_versions(cursor=..., limit=...)`), each page's
  entries turned into the route's wire model and dropped: peak RSS of the whole series, and
  wall per page; `kept` with the service keeping the last plan for the next page (a warm
  process, as the route runs), `fresh` planning every page again (a cold one);
- `whole-N`: the one-answer diff (every entry at once, what the route answered before paging,
  `dto.diff_out` of it): the baseline, at the smaller size only where the larger one would not
  fit the run's time.

Figures: peak RSS of paging the large pair ÷ paging the small pair (memory follows the versions'
ids and digests, which each page's plan holds, not the entries listed: target <= the size ratio,
and the paged RSS well under the one-answer diff's), and paged ÷ one-answer peak RSS at the
small size (target <= 0.5); and the wall of every page with the plan kept ÷ planned afresh.
With `--sample K`, the large pair's series is K pages spread over the diff (first, last and
between) instead of every page: each page holds only its own entries and at most one plan, so
the peak of a series is the peak of its largest page. `--sample 0` pages through the whole
large diff with the plan kept (~2 minutes at 1,000,000 cases; the plan-a-page series still
samples 5 pages).

Usage: python bench/bench_diff_pages.py [--small N] [--large M] [--sample K]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import store_version
from common import emit, gsm8k_rows, iter_gsm8k_cases, peak_rss_mb, ratio, run_child

NAME = "diff_pages"
LIMIT = 1000
WHOLE_TARGET = 0.5
RSS_LIMIT_MB = 1024


def setup(home: str, sizes: list[int]) -> None:
    from caseshelf.bootstrap import build, load_settings

    services = build(load_settings({}, home=home))
    rows, _ = gsm8k_rows()
    for n in sizes:
        name = f"d{n}"
        base = store_version(services, name, "1.0.0", iter_gsm8k_cases(rows, n), {})
        del base
        # Every case changed: no record and no chunk is shared with 1.0.0.
        store_version(services, name, "1.1.0", iter_gsm8k_cases(rows, n, changed_every=1), {})
    emit({"op": "setup", "peak_rss_mb": peak_rss_mb()})


def child_pages(home: str, n: int, sample: int, keep: bool) -> None:
    from caseshelf.api import dto
    from caseshelf.bootstrap import build, load_settings
    from caseshelf.domain.identity import Identity
    from caseshelf.domain.paging import encode_diff_position
    from caseshelf.services.diff import DiffService

    services = build(load_settings({}, home=home))
    me = Identity("bench", "bench")
    name = f"d{n}"
    reg = services.registry
    diff = DiffService(
        reg, max_gap_bytes=reg.read_gap, read_workers=reg.read_workers, keep_last_plan=keep
    )
    base = services.registry.get_version(me, name, "1.0.0")
    cand = services.registry.get_version(me, name, "1.1.0")
    starts: list[int] | None = None
    if sample:
        step = max(n // LIMIT // max(sample - 1, 1), 1) * LIMIT
        starts = sorted({*range(0, n, step), ((n - 1) // LIMIT) * LIMIT})[:sample]
    pages = entries = answer_bytes = 0
    biggest = 0
    start = time.perf_counter()
    cursor: str | None = None
    while True:
        if starts is not None:
            if pages == len(starts):
                break
            cursor = encode_diff_position(base.content_digest, cand.content_digest, starts[pages])
        res = diff.diff_versions(me, name, "1.0.0", "1.1.0", cursor=cursor, limit=LIMIT)
        body = dto.diff_out(res).model_dump_json()
        assert res.changed is not None
        pages += 1
        entries += len(res.changed)
        answer_bytes += len(body)
        biggest = max(biggest, len(body))
        del body
        cursor = res.next_cursor
        if starts is None and not cursor:
            break
    wall = time.perf_counter() - start
    if starts is None:
        assert entries == n, (entries, n)
    emit(
        {
            "op": f"pages-{n}-{'kept' if keep else 'fresh'}",
            "pages": pages,
            "entries": entries,
            "s": round(wall, 2),
            "s_per_page": round(wall / pages, 3),
            "largest_answer_bytes": biggest,
            "peak_rss_mb": peak_rss_mb(),
        }
    )


def child_whole(home: str, n: int) -> None:
    from caseshelf.api import dto
    from caseshelf.bootstrap import build, load_settings
    from caseshelf.domain.identity import Identity

    services = build(load_settings({}, home=home))
    start = time.perf_counter()
    res = services.diff.diff_versions(Identity("bench", "bench"), f"d{n}", "1.0.0", "1.1.0")
    body = dto.diff_out(res).model_dump_json()
    wall = time.perf_counter() - start
    assert res.changed is not None and len(res.changed) == n
    emit(
        {
            "op": f"whole-{n}",
            "s": round(wall, 2),
            "answer_bytes": len(body),
            "peak_rss_mb": peak_rss_mb(),
        }
    )


def main(small: int, large: int, sample: int) -> int:
    me = str(Path(__file__).resolve())
    with tempfile.TemporaryDirectory(prefix="caseshelf-bench-diff-pages-") as home:
        t = time.perf_counter()
        built = run_child([me, "--child", "setup", home, str(small), str(large)], timeout=1800)
        print(f"setup (not measured): {time.perf_counter() - t:.1f} s, {built['peak_rss_mb']} MB")
        whole = run_child([me, "--child", "whole", home, str(small)], timeout=1200)
        runs = {}
        for keep in ("fresh", "kept"):
            runs[f"small-{keep}"] = run_child(
                [me, "--child", "pages", home, str(small), "0", keep], timeout=1800
            )
            # Every page of the large diff only with the plan kept (planning each page of
            # 1,000,000 cases again would take ~50 minutes).
            pages = str(sample) if keep == "kept" else str(sample or 5)
            runs[f"large-{keep}"] = run_child(
                [me, "--child", "pages", home, str(large), pages, keep], timeout=1800
            )
        paged_small, paged_large = runs["small-kept"], runs["large-kept"]
    result: dict[str, Any] = {
        "bench": NAME,
        "small": small,
        "large": large,
        "limit": LIMIT,
        "whole_small": whole,
        "pages": runs,
        "kept_vs_fresh_wall_ratio": ratio(paged_small["s"], runs["small-fresh"]["s"]),
        "paged_vs_whole_rss_ratio": ratio(paged_small["peak_rss_mb"], whole["peak_rss_mb"]),
        "large_vs_small_paged_rss_ratio": ratio(
            paged_large["peak_rss_mb"], paged_small["peak_rss_mb"]
        ),
        "size_ratio": ratio(large, small),
    }
    print(
        f"one-answer diff of {small:,} x 100% changed: {whole['s']} s, "
        f"{whole['answer_bytes']:,} bytes, peak RSS {whole['peak_rss_mb']} MB"
    )
    for label, p in runs.items():
        n = small if label.startswith("small") else large
        what = "every page" if p["entries"] == n else f"{p['pages']} pages spread over the diff"
        plan = "the plan kept between pages" if label.endswith("kept") else "a plan a page"
        print(
            f"paged diff of {n:,} x 100% changed ({what}, {LIMIT} entries each, {plan}): "
            f"{p['s_per_page']} s a page, largest answer {p['largest_answer_bytes']:,} bytes, "
            f"peak RSS {p['peak_rss_mb']} MB"
        )
    print(
        f"paged / one-answer peak RSS at {small:,}: {result['paged_vs_whole_rss_ratio']} "
        f"(target <= {WHOLE_TARGET}); paged {large:,} / {small:,}: "
        f"{result['large_vs_small_paged_rss_ratio']} (sizes {result['size_ratio']}); "
        f"every page at {small:,}, plan kept / a plan a page, wall: "
        f"{result['kept_vs_fresh_wall_ratio']}"
    )
    result["targets"] = {
        "paged_vs_whole_rss_ratio": WHOLE_TARGET,
        "large_paged_peak_rss_mb": RSS_LIMIT_MB,
    }
    result["pass"] = (
        result["paged_vs_whole_rss_ratio"] <= WHOLE_TARGET
        and max(runs["large-kept"]["peak_rss_mb"], runs["large-fresh"]["peak_rss_mb"])
        <= RSS_LIMIT_MB
    )
    emit(result)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        op, home, *rest = sys.argv[2:]
        if op == "setup":
            setup(home, [int(x) for x in rest])
        elif op == "pages":
            child_pages(home, int(rest[0]), int(rest[1]), rest[2] == "kept")
        else:
            child_whole(home, int(rest[0]))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--sample", type=int, default=5)
    args = parser.parse_args()
    sys.exit(main(args.small, args.large, args.sample))
