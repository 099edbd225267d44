"""Export a version as per-case directories, locally and through S3 (a moto server over HTTP).

1. Local: 10,000 GSM8K-shaped cases (input.yaml, annotations.yaml, reference.md and one shared
   file each) exported to a fresh directory by `ExportService.export_version` (version lookup,
   ranged case reads, planning, YAML, writing, atomic rename). Baseline, in the same run: write
   the same bytes to the same number of files (same directories) with plain `open/write`.
   Figure: median export wall / median baseline wall (target <= 2).
2. S3: `--s3-cases` cases (default 1,000: 4,002 objects) exported to `s3://bench/export` on a
   moto server (a separate process, real HTTP) with `--concurrency` uploads, then pulled back by
   the pod side both ways: per object (listing + parallel GETs, each verified) and the bundle
   (the manifest and `bundle.tar.gz`: two GETs). Figures: objects/s for export and pull, the
   bundle pull wall against the per-object pull wall (both include writing and verifying the
   files), and the bundle's single GET alone. No target: reported.

Usage: python bench/bench_export.py [--cases N] [--runs R] [--s3-cases N] [--concurrency C]
"""

from __future__ import annotations

import argparse
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

from common import emit, gsm8k_cases, median, ratio

NAME = "export"
WALL_TARGET = 2.0
SHARED = {"dest": "GRADING.md", "text": "Answer with the final number only.\n" * 4}


def register(home: Path, n: int) -> tuple[Any, Any]:
    from caseshelf.bootstrap import build, load_settings
    from caseshelf.domain.identity import Identity
    from caseshelf.services.registry import parse_dataset

    me = Identity("bench", "bench")
    svc = build(load_settings({}, home=str(home), tenant="bench"))
    cases, _ = gsm8k_cases(n)
    body = {"id": "gsm8k-bench", "version": "1.0.0", "cases": cases, "shared_files": [SHARED]}
    svc.registry.register(me, parse_dataset(body))
    return svc, me


def files_of(root: Path) -> list[tuple[str, bytes]]:
    return [
        (str(p.relative_to(root)), p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()
    ]


def write_baseline(dest: Path, files: list[tuple[str, bytes]]) -> None:
    made: set[str] = set()
    dest.mkdir()
    for rel, data in files:
        parent = rel.rpartition("/")[0]
        if parent and parent not in made:
            (dest / parent).mkdir(parents=True, exist_ok=True)
            made.add(parent)
        with open(dest / rel, "wb") as fh:
            fh.write(data)


def local_part(work: Path, n: int, runs: int) -> dict[str, Any]:
    from caseshelf.bootstrap import build

    svc, me = register(work / "home", n)
    exports_s, base_s = [], []
    files: list[tuple[str, bytes]] = []
    for run in range(runs):
        fresh = build(svc.settings, store=svc.store, index=svc.index)  # no manifest cached
        # The first run exports first (its output is the bytes the baseline writes); later runs
        # alternate, so neither side always meets a warmer page cache.
        order = ("baseline", "export") if run % 2 else ("export", "baseline")
        for which in order:
            out = work / f"{which}-{run}"
            # Flush what the previous step left dirty, so each side pays only for its own I/O.
            os.sync()
            t = time.perf_counter()
            if which == "export":
                res = fresh.exports.export_version(me, "gsm8k-bench", "1.0.0", to=str(out))
                exports_s.append(time.perf_counter() - t)
                if not files:
                    files = files_of(out)
                    assert res.file_count == 4 * n and len(files) == 4 * n + 1
            else:
                write_baseline(out, files)
                base_s.append(time.perf_counter() - t)
            shutil.rmtree(out)
    export_wall, base_wall = median(exports_s), median(base_s)
    return {
        "cases": n,
        "files": len(files),
        "bytes": sum(len(d) for _, d in files),
        "export_s": round(export_wall, 3),
        "baseline_s": round(base_wall, 3),
        "wall_ratio": ratio(export_wall, base_wall),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def s3_part(work: Path, n: int, concurrency: int) -> dict[str, Any]:
    import boto3
    from botocore.config import Config

    from caseshelf.adapters.s3 import S3BlobStore
    from caseshelf.services.pull import pull

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        endpoint = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        os.environ.update(
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
        )
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            config=Config(max_pool_connections=concurrency * 2),
        )
        client.create_bucket(Bucket="bench")
        store = S3BlobStore(client, "bench")
        svc, me = register(work / "home-s3", n)
        svc.exports.store_for_bucket = lambda bucket: store
        svc.exports.concurrency = concurrency
        t = time.perf_counter()
        res = svc.exports.export_version(me, "gsm8k-bench", "1.0.0", to="s3://bench/export")
        export_s = time.perf_counter() - t
        objects = res.file_count + 2
        t = time.perf_counter()
        got = pull(store, "export/", work / "pulled", concurrency=concurrency)
        pull_s = time.perf_counter() - t
        assert got.file_count == res.file_count
        t = time.perf_counter()
        pull(store, "export/", work / "pulled-bundle", bundle=True)
        bundle_s = time.perf_counter() - t
        t = time.perf_counter()
        store.get("export/bundle.tar.gz")
        bundle_get_s = time.perf_counter() - t
        same = files_of(work / "pulled") == files_of(work / "pulled-bundle")
    finally:
        server.terminate()
        server.wait(timeout=10)
    return {
        "cases": n,
        "objects": objects,
        "concurrency": concurrency,
        "export_s": round(export_s, 3),
        "export_objects_per_s": round(objects / export_s, 1),
        "pull_s": round(pull_s, 3),
        "pull_objects_per_s": round(got.file_count / pull_s, 1),
        "bundle_pull_s": round(bundle_s, 3),
        "bundle_vs_objects": ratio(bundle_s, pull_s),
        "bundle_get_s": round(bundle_get_s, 3),
        "bundle_identical": same,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--s3-cases", type=int, default=1_000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-export-"))
    try:
        local = local_part(work, args.cases, args.runs)
        print(f"local: {local}", file=sys.stderr)
        s3 = s3_part(work, args.s3_cases, args.concurrency)
        print(f"s3: {s3}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    emit(
        {
            "bench": NAME,
            "local": local,
            "s3": s3,
            "wall_ratio": local["wall_ratio"],
            "target": WALL_TARGET,
            "pass": local["wall_ratio"] <= WALL_TARGET and bool(s3["bundle_identical"]),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
