"""A re-import against a base: memory follows the base and the change, not the new input.

Figure: peak RSS of re-importing 1,000,000 GSM8K-shaped rows (`recipes/gsm8k.yaml`) with 1% of
them changed (every 100th row's answer), against the version the first import of the same rows
registered, ÷ peak RSS of that first import. Goal: <= 1.5 (`RSS_GOAL`). The re-import is a bump
against the base: it reuses the base's records, copies the ones it supersedes and keeps its
delta against the base (`caseshelf.domain.diff.ChangeAgainstBase`); it reads its base a chunk at a
time while its batches line up with it (the whole base only once one does not), so it holds a
window of the base and of the new input besides the change.

Each import runs in a fresh interpreter on the embedded store (the first one on an empty home,
the re-import on that home after it), whole process; peak RSS is the process's plus its largest
child's (an import maps rows in a worker process), and `self_rss_mb` the process's alone (where
the registration runs). Beside each, wall and CPU time (user + sys of the process tree). Both
from compiled bytecode in a private cache dir (one untimed warm-up import writes it). Median of R
runs, a fresh home each.

`--src DIR` runs the children on the `caseshelf` package under DIR (a checkout's `shared/`
directory) instead of the installed one: the figure of another tree, measured beside this one.

Usage: python bench/bench_rebase.py [--rows N] [--runs R] [--src DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO_ROOT, emit, gsm8k_jsonl, median, ratio, run_child

NAME = "rebase"
RSS_GOAL = 1.5
CHANGED_EVERY = 100  # 1% of the rows changed
RECIPE = REPO_ROOT / "recipes" / "gsm8k.yaml"

IMPORT = """
import resource, sys, time
t0 = time.perf_counter()
import yaml
import caseshelf
from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.identity import Identity
from caseshelf.services.imports import parse_import
svc = build(load_settings({}, home=sys.argv[2]))
recipe = yaml.safe_load(open(sys.argv[3], encoding="utf-8"))
done = svc.imports.run(
    Identity("local", "local"), parse_import({"recipe": recipe, "source": {"url": sys.argv[1]}})
)
usage = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
import json
res = done.result
print(json.dumps({
    "cases": res.record.case_count, "version": res.record.version,
    "reused": res.stats.cases_reused, "superseded": res.stats.superseded_copied,
    "rss_mb": round(sum(u.ru_maxrss for u in usage) / 1024, 1),
    "self_rss_mb": round(usage[0].ru_maxrss / 1024, 1),
    "cpu_s": round(sum(u.ru_utime + u.ru_stime for u in usage), 3),
    "inner_s": round(time.perf_counter() - t0, 3),
    "package": caseshelf.__file__,
}))
"""


def import_child(data: Path, home: Path, env: dict[str, str]) -> dict[str, Any]:
    start = time.perf_counter()
    out = run_child(["-c", IMPORT, str(data), str(home), str(RECIPE)], env=env, timeout=3600)
    return {**out, "wall_s": round(time.perf_counter() - start, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--src", type=Path, help="run on the caseshelf package under this dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="caseshelf-bench-rebase-") as tmp:
        work = Path(tmp)
        first_data, again_data = work / "v1.jsonl", work / "v2.jsonl"
        note = gsm8k_jsonl(first_data, args.rows)
        gsm8k_jsonl(again_data, args.rows, changed_every=CHANGED_EVERY)
        env = {"PYTHONPYCACHEPREFIX": str(work / "pycache"), "PYTHONDONTWRITEBYTECODE": ""}
        if args.src is not None:
            env["PYTHONPATH"] = str(args.src.resolve())
        import_child(first_data, work / "home-warm-up", env)
        firsts: list[dict[str, Any]] = []
        agains: list[dict[str, Any]] = []
        for i in range(args.runs):
            home = work / f"home-{i}"
            first = import_child(first_data, home, env)
            again = import_child(again_data, home, env)
            changed = args.rows // CHANGED_EVERY
            assert first["cases"] == again["cases"] == args.rows, (first, again)
            assert again["reused"] == args.rows - changed, again
            firsts.append(first)
            agains.append(again)

    def med(runs: list[dict[str, Any]], key: str) -> float:
        return round(median([r[key] for r in runs]), 3)

    figures: dict[str, Any] = {"bench": NAME, "rows": args.rows, "changed": args.rows // 100}
    for side, runs in (("first", firsts), ("again", agains)):
        for key in ("rss_mb", "self_rss_mb", "wall_s", "cpu_s"):
            figures[f"{side}_{key}"] = med(runs, key)
    figures["superseded"] = agains[0]["superseded"]
    figures["rss_ratio"] = ratio(figures["again_rss_mb"], figures["first_rss_mb"])
    figures["self_rss_ratio"] = ratio(figures["again_self_rss_mb"], figures["first_self_rss_mb"])
    figures["package"] = firsts[0]["package"]
    if note:
        figures["note"] = note
    print(
        f"re-import of {args.rows:,} rows with 1% changed ÷ first import, peak RSS: "
        f"{figures['rss_ratio']} ({figures['again_rss_mb']} MB vs {figures['first_rss_mb']} MB; "
        f"the registering process alone {figures['self_rss_ratio']}: "
        f"{figures['again_self_rss_mb']} MB vs {figures['first_self_rss_mb']} MB; "
        f"goal <= {RSS_GOAL})",
        file=sys.stderr,
    )
    figures["goal"] = RSS_GOAL
    figures["pass"] = figures["rss_ratio"] <= RSS_GOAL
    emit(figures)


if __name__ == "__main__":
    main()
