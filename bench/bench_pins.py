"""Datasets as code: a pinned version loaded from the verified cache, `check` of a lock file, and
`sync` into the cache, each against what a user would otherwise run, the ratio in the same run.

One JSON line per benchmark, then the verdict line. Every side runs as its own process, the two
sides alternate, and each figure is the median over `--runs` rounds:

1. `load`: `cs.load(pin)` of `--cases` GSM8K-shaped cases from a warm cache (the lock read, every
   case parsed and hashed again, the content digest recomputed: the cache serves nothing it has
   not verified) ÷ `orjson.loads` of every line of a local jsonl file of the same cases, each
   timed around the call in a fresh interpreter (a script imports caseshelf once, whatever
   number of loads it makes). Target <= 1.5. The whole processes' times are reported beside
   (`process_*`: the interpreter's start and `import caseshelf` added to both).
2. `check`: `caseshelf check --api URL` of a lock with `--pins` pins (one dataset each) against
   `caseshelf serve` ÷ `caseshelf ls --api URL` of the same registry. Target <= 2 (one request
   for every pin, not one a pin).
3. `sync`: `caseshelf sync` of a `--cases` version from a registry on a moto S3 server (a
   separate process, real HTTP; the AWS backend, its bucket and table on that server) into an
   empty cache ÷ `aws s3 cp` of the version's jsonl export from the same server. Target <= 1.5.
   Both artifacts exist before the timing starts (the export was written, the download document
   rendered once by an untimed sync). Both sides run from compiled bytecode, as installed
   packages do: an untimed run of each writes it to a private cache dir (an editable checkout
   under PYTHONDONTWRITEBYTECODE would otherwise compile every module of ours on every run).

Usage: python bench/bench_pins.py [--cases N] [--pins N] [--runs R] [--only load,check,sync]
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MOTO_ENV, REPO_ROOT, emit, gsm8k_cases, median, ratio, template_table

NAME = "pins"
TARGETS = {"load": 1.5, "check": 2.0, "sync": 1.5}
CLI = [sys.executable, "-m", "caseshelf.cli"]
PY = [sys.executable, "-c"]
# Each side prints the seconds of its operation alone (the interpreter and its imports are a
# script's start-up, paid once however many loads it makes); the whole process is timed too.
LOAD = """
import caseshelf, sys, time
cs = caseshelf.connect()
t = time.perf_counter()
cases = cs.load("gsm8k-bench")
print(time.perf_counter() - t)
assert len(cases) == int(sys.argv[1])
"""
READ = """
import orjson, sys, time
t = time.perf_counter()
with open(sys.argv[1], "rb") as fh:
    cases = [orjson.loads(line) for line in fh]
print(time.perf_counter() - t)
assert len(cases) == int(sys.argv[2])
"""


def run(argv: list[str], cwd: Path, env: dict[str, str], said: list[float] | None = None) -> float:
    """Wall seconds of one process (a failure stops the benchmark); with `said`, the number the
    process printed last is added to it."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("CASESHELF_")}
    full.update(env)
    full["PYTHONPATH"] = str(REPO_ROOT / "shared")
    t = time.perf_counter()
    proc = subprocess.run(argv, env=full, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode not in (0,):
        sys.stderr.write(proc.stderr[-4000:])
        raise RuntimeError(f"{argv[:4]} failed with exit code {proc.returncode}")
    if said is not None:
        said.append(float(proc.stdout.split()[-1]))
    return wall


def alternate(runs: int, a: tuple[list[float], list[str]], b: tuple[list[float], list[str]],
              cwd: Path, env: dict[str, str], before: Any = None) -> None:  # fmt: skip
    for i in range(runs):
        for box, argv in (a, b) if i % 2 == 0 else (b, a):
            if before is not None:
                before()
            box.append(run(argv, cwd, env))


REGISTER = """
import caseshelf, orjson, sys
with open(sys.argv[1], "rb") as fh:
    caseshelf.connect().register(orjson.loads(fh.read()))
"""


def register_big(work: Path, n: int, env: dict[str, str]) -> None:
    """`n` GSM8K-shaped cases as one document through the client in process (a file path would
    go through an upload, whose job the AWS backend runs only where S3 events reach a Lambda)."""
    cases, _ = gsm8k_cases(n)
    doc = {"id": "gsm8k-bench", "version": "1.0.0", "description": "bench", "cases": cases}
    path = work / f"dataset-{n}.json"
    path.write_bytes(orjson.dumps(doc))
    run([*PY, REGISTER, str(path)], work, env)


def repo(work: Path, name: str) -> Path:
    root = work / name
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'evals'\n")
    return root


def load_part(work: Path, n: int, runs: int) -> dict[str, Any]:
    env = {"CASESHELF_HOME": str(work / "home-load"), "CASESHELF_CACHE": str(work / "cache")}
    register_big(work, n, env)
    evals = repo(work, "evals-load")
    run([*CLI, "pin", "gsm8k-bench@1.0.0"], evals, env)
    run([*CLI, "sync"], evals, env)
    (entry,) = (work / "cache" / "versions").iterdir()
    jsonl = work / "cases.jsonl"
    shutil.copyfile(entry / "cases.jsonl", jsonl)  # the same cases, the same bytes
    ours: list[float] = []
    base: list[float] = []
    ours_wall: list[float] = []
    base_wall: list[float] = []
    for i in range(runs):
        sides = [
            (ours_wall, ours, [*PY, LOAD, str(n)]),
            (base_wall, base, [*PY, READ, str(jsonl), str(n)]),
        ]
        for wall, said, argv in sides if i % 2 == 0 else reversed(sides):
            wall.append(run(argv, evals, env, said))
    return {
        "bench": "pins-load",
        "cases": n,
        "bytes": jsonl.stat().st_size,
        "cs_load_s": round(median(ours), 3),
        "orjson_jsonl_s": round(median(base), 3),
        "ratio": ratio(median(ours), median(base)),
        "process_cs_load_s": round(median(ours_wall), 3),
        "process_orjson_s": round(median(base_wall), 3),
        "process_ratio": ratio(median(ours_wall), median(base_wall)),
        "target": TARGETS["load"],
    }


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
def process(argv: list[str], env: dict[str, str]) -> Iterator[None]:
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("CASESHELF_")}, **env}
    full["PYTHONPATH"] = str(REPO_ROOT / "shared")
    proc = subprocess.Popen(argv, env=full, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def check_part(work: Path, pins: int, runs: int) -> dict[str, Any]:
    import caseshelf

    home = work / "home-check"
    with caseshelf.connect(home=home) as cs:
        for i in range(pins):
            cases = [{"id": f"c{j}", "inputs": {"user": f"{i} {j}"}} for j in range(20)]
            cs.register(f"ds-{i:03d}", cases=cases, version="1.0.0")
            cs.tag(f"ds-{i:03d}@1.0.0", ["stable"])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {"CASESHELF_CACHE": str(work / "cache-check")}
    evals = repo(work, "evals-check")
    with process([*CLI, "serve", "--port", str(port)], {"CASESHELF_HOME": str(home)}):
        wait_for(port)
        for i in range(pins):
            run([*CLI, "pin", f"ds-{i:03d}@stable", "--api", url], evals, env)
        ours: list[float] = []
        base: list[float] = []
        alternate(
            runs,
            (ours, [*CLI, "check", "--strict", "--api", url]),
            (base, [*CLI, "ls", "--api", url]),
            evals,
            env,
        )
    return {
        "bench": "pins-check",
        "pins": pins,
        "caseshelf_check_s": round(median(ours), 3),
        "caseshelf_ls_s": round(median(base), 3),
        "ratio": ratio(median(ours), median(base)),
        "target": TARGETS["check"],
    }


def sync_part(work: Path, n: int, runs: int) -> dict[str, Any]:
    import boto3

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    aws_env = {**MOTO_ENV, "AWS_ENDPOINT_URL": endpoint}
    aws_env.pop("AWS_SESSION_TOKEN", None)
    bucket, table = "bench", "bench-index"
    env = {
        **aws_env,
        "CASESHELF_BACKEND": "aws",
        "CASESHELF_BUCKET": bucket,
        "CASESHELF_TABLE": table,
    }
    aws = [str(Path(sys.executable).parent / "aws"), "--endpoint-url", endpoint]
    moto = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with process(moto, {}):
        wait_for(port)
        keys = {"region_name": "us-east-1", "endpoint_url": endpoint}
        creds = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
        boto3.client("s3", **keys, **creds).create_bucket(Bucket=bucket)
        boto3.client("dynamodb", **keys, **creds).create_table(TableName=table, **template_table())
        register_big(work, n, env)
        run([*CLI, "export", "gsm8k-bench@1.0.0", "--format", "jsonl", "--to",
             f"s3://{bucket}/jsonl"], work, env)  # fmt: skip
        evals = repo(work, "evals-sync")
        run([*CLI, "pin", "gsm8k-bench@1.0.0"], evals, env)
        env.update({"PYTHONPYCACHEPREFIX": str(work / "pycache"), "PYTHONDONTWRITEBYTECODE": ""})
        warm = {**env, "CASESHELF_CACHE": str(work / "cache-warm")}
        run([*CLI, "sync"], evals, warm)  # renders the download document once, untimed
        copy = work / "copy.jsonl"
        cp = [*aws, "s3", "cp", "--quiet", f"s3://{bucket}/jsonl/cases.jsonl", str(copy)]
        run(cp, evals, env)  # untimed too: both sides' bytecode is written
        cache = work / "cache-sync"
        env["CASESHELF_CACHE"] = str(cache)

        def empty() -> None:
            shutil.rmtree(cache, ignore_errors=True)
            copy.unlink(missing_ok=True)

        ours: list[float] = []
        base: list[float] = []
        alternate(
            runs,
            (ours, [*CLI, "sync"]),
            (base, cp),
            evals,
            env,
            before=empty,
        )
    return {
        "bench": "pins-sync",
        "cases": n,
        "caseshelf_sync_s": round(median(ours), 3),
        "aws_s3_cp_s": round(median(base), 3),
        "ratio": ratio(median(ours), median(base)),
        "target": TARGETS["sync"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--pins", type=int, default=50)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", default="load,check,sync")
    args = parser.parse_args()
    only = set(args.only.split(","))
    results = []
    with tempfile.TemporaryDirectory(prefix="caseshelf-bench-pins-") as tmp:
        work = Path(tmp)
        if "load" in only:
            results.append(load_part(work, args.cases, args.runs))
            emit(results[-1])
        if "check" in only:
            results.append(check_part(work, args.pins, args.runs))
            emit(results[-1])
        if "sync" in only:
            results.append(sync_part(work, args.cases, args.runs))
            emit(results[-1])
    failed = [r["bench"] for r in results if r["ratio"] > r["target"]]
    emit({"bench": NAME, "ok": not failed, "over_target": failed})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
