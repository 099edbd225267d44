"""Export and pull, measured as a user runs them, each against the tool a user would otherwise use.

One JSON line per benchmark, then the verdict line. Every side runs as its own process, the two
sides alternate, and each figure is the median ratio over `--runs` rounds:

1. `dir`: the whole `caseshelf export ID@REF --to DIR` process (interpreter start, version
   lookup, ranged case reads, planning, YAML, writing, atomic rename) ÷ `cp -r` of the tree it
   wrote. Target ≤ 2. (The earlier benchmark timed `ExportService.export_version` inside a warm
   interpreter against a Python open/write loop of the same files: on this machine such a loop
   writes about 5x slower than `cp`, so it measured our code against a slow baseline and left out
   the process start a user pays; see docs/benchmarks.md.)
2. `s3`: `caseshelf export ID@REF --to s3://bench/ours-N` ÷ `aws s3 cp --recursive` of the same
   tree to the same moto server (a separate process, real HTTP). Target ≤ 1.
3. `pull`: `caseshelf pull s3://bench/ours-N DIR` ÷ `aws s3 sync s3://bench/ours-N DIR`. Target
   ≤ 1.
4. `job`: the export as the API runs it, a job of parts (the registry itself on the moto server:
   bucket and table from the template; the parts delivered to the export worker's handler in
   the CLI's process, as `caseshelf serve` and the embedded client deliver them):
   `caseshelf export ID@REF` of `--job-cases` cases (default 2,000; the figure of the issue is
   10,000: `--job-cases 10000`) ÷ `aws s3 cp --recursive` of the same tree to the same server.
   Each round exports one case fewer, so each is a new export (an export is content-addressed).
   Target ≤ 1.5.
5. `parquet`: `export_version(format="parquet")` of 100,000 GSM8K-shaped cases to a directory ÷
   `pyarrow.parquet.write_table` of the same rows, already in memory. Target ≤ 3. Both sides
   run in one interpreter after an untimed warm-up of each (a tiny `write_table`; one export),
   with the registered cases freed first. The CPU seconds of both sides are reported beside
   the wall times.

Usage: python bench/bench_export.py [--cases N] [--s3-cases N] [--parquet-cases N] [--runs R]
                                    [--job-cases N] [--only dir,s3,pull,job,parquet]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MOTO_ENV, REPO_ROOT, emit, gsm8k_cases, median, ratio

NAME = "export"
TARGETS = {"dir": 2.0, "s3": 1.0, "pull": 1.0, "job": 1.5, "parquet": 3.0}
SHARED = {"dest": "GRADING.md", "text": "Answer with the final number only.\n" * 4}
CLI = [sys.executable, "-m", "caseshelf.cli"]


def register(home: Path, n: int) -> None:
    """`n` GSM8K-shaped cases with one shared file, registered through the CLI."""
    cases, _ = gsm8k_cases(n)
    body = {"id": "gsm8k-bench", "version": "1.0.0", "cases": cases, "shared_files": [SHARED]}
    path = home.parent / f"dataset-{n}.json"
    path.write_text(json.dumps(body))
    run([*CLI, "register", str(path)], home)


def run(argv: list[str], home: Path, env: dict[str, str] | None = None) -> float:
    """Wall seconds of one process (its output discarded; a failure stops the benchmark)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("CASESHELF_")}
    full.update(CASESHELF_HOME=str(home), **(env or {}))
    t = time.perf_counter()
    proc = subprocess.run(argv, env=full, cwd=REPO_ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise RuntimeError(f"{argv[:4]} failed with exit code {proc.returncode}")
    return wall


def tree_stats(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def dir_part(work: Path, n: int, runs: int) -> dict[str, Any]:
    home = work / "home-dir"
    home.mkdir()
    register(home, n)
    ref = work / "ref"  # the tree `cp -r` copies: what the export writes
    run([*CLI, "export", "gsm8k-bench@1.0.0", "--to", str(ref)], home)
    files, size = tree_stats(ref)
    ours, cp = [], []
    for i in range(runs):
        out, copy = work / f"dir-{i}", work / f"cp-{i}"
        sides = [
            (ours, [*CLI, "export", "gsm8k-bench@1.0.0", "--to", str(out)]),
            (cp, ["cp", "-r", str(ref), str(copy)]),
        ]
        for box, argv in sides if i % 2 == 0 else reversed(sides):
            box.append(run(argv, home))
        assert tree_stats(out) == (files, size)
        shutil.rmtree(out)
        shutil.rmtree(copy)
    return {
        "bench": "export-dir",
        "cases": n,
        "files": files,
        "bytes": size,
        "caseshelf_export_s": round(median(ours), 3),
        "cp_r_s": round(median(cp), 3),
        "files_per_s": round(files / median(ours)),
        "ratio": ratio(median(ours), median(cp)),
        "target": TARGETS["dir"],
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def s3_parts(work: Path, n: int, runs: int) -> list[dict[str, Any]]:
    import boto3

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    env = {**MOTO_ENV, "AWS_ENDPOINT_URL": endpoint}
    env.pop("AWS_SESSION_TOKEN", None)
    aws = [str(Path(sys.executable).parent / "aws"), "--endpoint-url", endpoint]
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        s3.create_bucket(Bucket="bench")
        home = work / "home-s3"
        home.mkdir()
        register(home, n)
        tree = work / "tree"
        run([*CLI, "export", "gsm8k-bench@1.0.0", "--to", str(tree)], home)
        objects, size = tree_stats(tree)
        up_ours, up_aws, down_ours, down_aws = [], [], [], []
        for i in range(runs):
            ours = [*CLI, "export", "gsm8k-bench@1.0.0", "--to", f"s3://bench/ours-{i}"]
            theirs = [*aws, "s3", "cp", "--recursive", "--quiet", str(tree), f"s3://bench/aws-{i}/"]
            pairs = [(up_ours, ours), (up_aws, theirs)]
            for box, argv in pairs if i % 2 == 0 else reversed(pairs):
                box.append(run(argv, home, env))
            pull = [*CLI, "pull", f"s3://bench/ours-{i}", str(work / f"pulled-{i}")]
            sync = [*aws, "s3", "sync", "--quiet", f"s3://bench/ours-{i}", str(work / f"sync-{i}")]
            pairs = [(down_ours, pull), (down_aws, sync)]
            for box, argv in pairs if i % 2 == 0 else reversed(pairs):
                box.append(run(argv, home, env))
            same = tree_stats(work / f"pulled-{i}") == tree_stats(work / f"sync-{i}")
            assert same, "the pull and the sync disagree"
            shutil.rmtree(work / f"pulled-{i}")
            shutil.rmtree(work / f"sync-{i}")
    finally:
        server.terminate()
        server.wait(timeout=10)
    return [
        {
            "bench": "export-s3",
            "cases": n,
            "objects": objects,
            "bytes": size,
            "caseshelf_export_s": round(median(up_ours), 3),
            "aws_s3_cp_recursive_s": round(median(up_aws), 3),
            "ratio": ratio(median(up_ours), median(up_aws)),
            "target": TARGETS["s3"],
        },
        {
            "bench": "export-pull",
            "cases": n,
            "objects": objects,
            "caseshelf_pull_s": round(median(down_ours), 3),
            "aws_s3_sync_s": round(median(down_aws), 3),
            "ratio": ratio(median(down_ours), median(down_aws)),
            "target": TARGETS["pull"],
        },
    ]


def moto_server() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    return server, f"http://127.0.0.1:{port}"


def job_part(work: Path, n: int, runs: int) -> dict[str, Any]:
    """The API's export job (parts on a queue, the worker's handler, the manifest last) to S3
    on the moto server, against `aws s3 cp --recursive` of the same tree."""
    import boto3

    sys.path.insert(0, str(REPO_ROOT))
    from tests.moto_infra import create_bucket, create_table

    server, endpoint = moto_server()
    env = {**MOTO_ENV, "AWS_ENDPOINT_URL": endpoint}
    env.pop("AWS_SESSION_TOKEN", None)
    registry = {
        **env,
        "CASESHELF_BACKEND": "aws",
        "CASESHELF_BUCKET": "registry",
        "CASESHELF_TABLE": "registry",
        "CASESHELF_TENANT": "bench",
    }
    aws = [str(Path(sys.executable).parent / "aws"), "--endpoint-url", endpoint]
    try:
        keys = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **keys)
        ddb = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1", **keys)
        create_bucket(s3, "registry")
        create_table(ddb, "registry")
        s3.create_bucket(Bucket="bench")
        home = work / "home-job"
        home.mkdir()
        cases, _ = gsm8k_cases(n)
        body = {"id": "gsm8k-bench", "version": "1.0.0", "cases": cases, "shared_files": [SHARED]}
        path = work / f"dataset-job-{n}.json"
        path.write_text(json.dumps(body))
        run([*CLI, "register", str(path)], home, registry)
        tree = work / "job-tree"
        run([*CLI, "export", "gsm8k-bench@1.0.0", "--to", str(tree)], home, registry)
        objects, size = tree_stats(tree)
        ours_s, aws_s = [], []
        for i in range(runs):
            ours = [*CLI, "export", "gsm8k-bench@1.0.0", "--limit", str(n - 1 - i)]
            theirs = [*aws, "s3", "cp", "--recursive", "--quiet", str(tree), f"s3://bench/job-{i}/"]
            pairs = [(ours_s, ours, registry), (aws_s, theirs, env)]
            for box, argv, e in pairs if i % 2 == 0 else reversed(pairs):
                box.append(run(argv, home, e))
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return {
        "bench": "export-job",
        "cases": n,
        "objects": objects,
        "bytes": size,
        "caseshelf_export_job_s": round(median(ours_s), 3),
        "aws_s3_cp_recursive_s": round(median(aws_s), 3),
        "ratio": ratio(median(ours_s), median(aws_s)),
        "target": TARGETS["job"],
    }


def parquet_part(work: Path, n: int, runs: int) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from caseshelf.bootstrap import build, load_settings
    from caseshelf.domain.identity import Identity
    from caseshelf.services.exports import ExportRequest
    from caseshelf.services.registry import parse_dataset

    me = Identity("bench", "bench")
    # Arrow's first parquet write in a process pays one-time set-up (codecs, pandas metadata
    # support): paid here, before either side is timed
    pq.write_table(pa.table({"warm": ["up"]}), str(work / "warm.parquet"), compression="zstd")
    home = work / "home-parquet"
    svc = build(load_settings({}, home=str(home), tenant="bench"))
    cases, _ = gsm8k_cases(n)
    svc.registry.register(me, parse_dataset({"id": "pq", "version": "1.0.0", "cases": cases}))
    del cases  # what a user's export process holds: not the 100,000 cases it registered
    gc.collect()
    # One untimed export first, as the baseline's warm-up write: the first export of a process
    # pays one-time set-up (Arrow's JSON reader and compute kernels, its memory pool growing to
    # a window's size, the thread pools)
    warm = build(svc.settings, store=svc.store, index=svc.index)
    warm.exports.export_version(
        me, "pq", "1.0.0", ExportRequest(format="parquet"), to=str(work / "pq-warm")
    )
    shutil.rmtree(work / "pq-warm")
    ours, base, ours_cpu, base_cpu = [], [], [], []
    for i in range(runs):
        fresh = build(svc.settings, store=svc.store, index=svc.index)  # no manifest cached
        t, c = time.perf_counter(), time.process_time()
        res = fresh.exports.export_version(
            me, "pq", "1.0.0", ExportRequest(format="parquet"), to=str(work / f"pq-{i}")
        )
        ours.append(time.perf_counter() - t)
        ours_cpu.append(time.process_time() - c)
        assert res.case_count == n
        table = pq.read_table(work / f"pq-{i}" / "cases.parquet")
        rows = table.to_pylist()
        in_memory = pa.Table.from_pylist(rows, schema=table.schema)
        del rows
        t, c = time.perf_counter(), time.process_time()
        pq.write_table(in_memory, str(work / f"pa-{i}.parquet"), compression="zstd")
        base.append(time.perf_counter() - t)
        base_cpu.append(time.process_time() - c)
        shutil.rmtree(work / f"pq-{i}")
        (work / f"pa-{i}.parquet").unlink()
    return {
        "bench": "export-parquet",
        "cases": n,
        "export_s": round(median(ours), 3),
        "write_table_s": round(median(base), 3),
        # CPU seconds of the process (every thread), for a loaded machine where wall time
        # follows the share of the cores each side got
        "export_cpu_s": round(median(ours_cpu), 3),
        "write_table_cpu_s": round(median(base_cpu), 3),
        "ratio": ratio(median(ours), median(base)),
        "target": TARGETS["parquet"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    # Each object costs the moto server ~6 ms on either side: 10,000 cases (40,001 objects, four
    # transfers a round, three rounds) take ~50 minutes of `make bench`; 2,000 take ~13 and give
    # the same ratios within noise.
    parser.add_argument("--s3-cases", type=int, default=2_000)
    parser.add_argument("--job-cases", type=int, default=2_000)
    parser.add_argument("--parquet-cases", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="dir,s3,pull,job,parquet")
    args = parser.parse_args()
    only = set(args.only.split(","))
    work = Path(tempfile.mkdtemp(prefix="bench-export-"))
    lines: list[dict[str, Any]] = []
    try:
        if "dir" in only:
            lines.append(dir_part(work, args.cases, args.runs))
            emit(lines[-1])
        if only & {"s3", "pull"}:
            for line in s3_parts(work, args.s3_cases, args.runs):
                lines.append(line)
                emit(line)
        if "job" in only:
            lines.append(job_part(work, args.job_cases, args.runs))
            emit(lines[-1])
        if "parquet" in only:
            lines.append(parquet_part(work, args.parquet_cases, args.runs))
            emit(lines[-1])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    emit(
        {
            "bench": NAME,
            **{line["bench"]: line["ratio"] for line in lines},
            "pass": all(line["ratio"] <= line["target"] for line in lines),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
