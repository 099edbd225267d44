"""A version's life on S3 and DynamoDB that fail 5% of requests, against the same with no faults.

A moto server (its own process) sits behind two fault-injecting proxies (`tests/faultproxy.py`,
each its own process): one answers a seeded 5% of requests with a 500, throttling (`SlowDown`,
`ProvisionedThroughputExceededException`) or an object body cut mid-stream; the other forwards
everything, so both sides pay the same hop. Each round, on a fresh bucket and table, runs the
four commands a user runs, each `caseshelf` as its own process on the AWS backend:

    caseshelf register DATASET.json           (N cases, a companion file on every third)
    caseshelf import s3://.../rows.jsonl -r gsm8k
    caseshelf export ID@1.0.0 --to s3://.../pods/ID
    caseshelf pull s3://.../pods/ID DIR       (then checked: every file of the manifest there)

once behind each proxy, the two sides alternating which goes first. The figures: how many of
the faulty rounds succeeded (all four commands), and the median wall time of a faulty round ÷
that of a clean one. Targets: every round succeeds; ratio ≤ 1.5.

Usage: python bench/bench_faults.py [--cases N] [--runs R] [--rate 0.05]
(the issue's figure is `--cases 10000 --runs 10`; the default keeps `make bench` short)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MOTO_ENV, REPO_ROOT, emit, median, ratio, template_table

NAME = "faults"
TARGET = 1.5
CLI = [sys.executable, "-m", "caseshelf.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(port: int) -> None:
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port}")


@contextmanager
def process(argv: list[str], port: int) -> Iterator[str]:
    """A server process listening on `port`; its URL."""
    proc = subprocess.Popen(
        argv, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a moto server holding many objects exits slowly
            proc.kill()
            proc.wait()


def dataset(n: int) -> dict[str, Any]:
    cases = []
    for i in range(n):
        case: dict[str, Any] = {
            "id": f"case-{i:05d}",
            "inputs": {"user": f"A train leaves at {i % 24}:00 going {40 + i % 60} km/h. How far?"},
            "metadata": {"answer": str((40 + i % 60) * 3)},
        }
        if i % 3 == 0:
            case["files"] = {"notes.md": {"text": f"Worked example {i}.\n" * 8}}
        cases.append(case)
    return {"id": "faults-bench", "version": "1.0.0", "cases": cases}


def rows(n: int) -> bytes:
    return "".join(
        json.dumps({"question": f"What is {i} + {i}?", "answer": f"{i} + {i}\n#### {2 * i}"}) + "\n"
        for i in range(n)
    ).encode()


def fresh_store(moto: str, name: str, rows_body: bytes) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=moto, region_name="us-east-1")
    ddb = boto3.client("dynamodb", endpoint_url=moto, region_name="us-east-1")
    s3.create_bucket(Bucket=name)
    ddb.create_table(TableName=name, **template_table())
    s3.put_object(Bucket=name, Key="t/local/sources/rows.jsonl", Body=rows_body)


def one_round(work: Path, endpoint: str, moto: str, name: str, n: int) -> tuple[bool, float, str]:
    """The four commands behind `endpoint` on a fresh bucket and table `name`: (all succeeded,
    wall seconds, what failed)."""
    fresh_store(moto, name, rows(n))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CASESHELF_", "AWS_"))}
    env.update(MOTO_ENV)
    env.update(
        CASESHELF_BACKEND="aws",
        CASESHELF_BUCKET=name,
        CASESHELF_TABLE=name,
        AWS_ENDPOINT_URL=endpoint,
    )
    doc = work / "dataset.json"
    dest = work / f"pulled-{name}"
    steps = [
        [*CLI, "register", str(doc)],
        [*CLI, "import", f"s3://{name}/t/local/sources/rows.jsonl", "-r", "gsm8k"],
        [*CLI, "export", "faults-bench@1.0.0", "--to", f"s3://{name}/pods/faults-bench"],
        [*CLI, "pull", f"s3://{name}/pods/faults-bench", str(dest)],
    ]
    start = time.perf_counter()
    for argv in steps:
        proc = subprocess.run(argv, env=env, cwd=work, capture_output=True, text=True)
        if proc.returncode != 0:
            return False, time.perf_counter() - start, f"{argv[3]}: {proc.stderr.strip()[-400:]}"
    wall = time.perf_counter() - start
    manifest = json.loads((dest / "manifest.json").read_text())
    missing = [rel for rel in manifest["files"] if not (dest / rel).is_file()]
    shutil.rmtree(dest)
    if missing:
        return False, wall, f"pull: {len(missing)} file(s) of the manifest missing"
    return True, wall, ""


def faults_seen(proxy: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{proxy}/__faults", timeout=10) as resp:
        found: dict[str, int] = json.loads(resp.read())
        return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--rate", type=float, default=0.05)
    args = parser.parse_args()
    os.environ.update(MOTO_ENV)
    os.environ.pop("AWS_SESSION_TOKEN", None)
    moto_port, faulty_port, clean_port = free_port(), free_port(), free_port()
    moto_argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(moto_port)]
    proxy = [sys.executable, "-m", "tests.faultproxy", "--seed", "1"]
    faulty_s: list[float] = []
    clean_s: list[float] = []
    failures: list[str] = []
    with (
        tempfile.TemporaryDirectory(prefix="caseshelf-bench-faults-") as tmp,
        process(moto_argv, moto_port) as moto,
        process(
            [*proxy, "--upstream", moto, "--rate", str(args.rate), "--port", str(faulty_port)],
            faulty_port,
        ) as faulty,
        process(
            [*proxy, "--upstream", moto, "--rate", "0", "--port", str(clean_port)], clean_port
        ) as clean,
    ):
        work = Path(tmp)
        (work / "dataset.json").write_text(json.dumps(dataset(args.cases)))
        for i in range(args.runs):
            sides = [("faulty", faulty), ("clean", clean)]
            for side, endpoint in sides if i % 2 == 0 else reversed(sides):
                ok, wall, why = one_round(work, endpoint, moto, f"bench-{side}-{i}", args.cases)
                print(f"round {i} {side}: {'ok' if ok else 'FAILED'} {wall:.1f} s {why}")
                if side == "clean":
                    if not ok:
                        raise RuntimeError(f"a round without faults failed: {why}")
                    clean_s.append(wall)
                elif ok:
                    faulty_s.append(wall)
                else:
                    failures.append(why)
        injected = faults_seen(faulty)
    succeeded = len(faulty_s)
    figure = ratio(median(faulty_s), median(clean_s)) if faulty_s else float("inf")
    emit(
        {
            "bench": NAME,
            "cases": args.cases,
            "fault_rate": args.rate,
            "succeeded": f"{succeeded}/{args.runs}",
            "faulty_round_s": round(median(faulty_s), 3) if faulty_s else None,
            "clean_round_s": round(median(clean_s), 3),
            "ratio": figure,
            "target": TARGET,
            "requests_forwarded": injected.get("forwarded", 0),
            "faults_injected": {k: v for k, v in injected.items() if k != "forwarded"},
            "failures": failures[:3],
            "pass": succeeded == args.runs and figure <= TARGET,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
