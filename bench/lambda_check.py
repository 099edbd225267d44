"""`make lambda-check`: the functions in the Lambda emulation (tests/lambda_emulation.py) at the
sizes users reach, each figure printed against its limit.

    python bench/lambda_check.py                 # every check, the issue's sizes
    python bench/lambda_check.py --only layer coldstart answers
    python bench/lambda_check.py --scale 0.1     # every size a tenth (a quick look)

Checks:
- layer: the arm64 / Python 3.12 layer as `sam build` makes it (shared/Makefile, wheels from
  PyPI) against Lambda's 262,144,000-byte limit, 80% of it and 200 MB; every module compiled.
- coldstart: each function's init phase (Lambda's "Init Duration") and first request, median
  of three cold starts, against 1 s.
- answers: the largest page the API accepts of 8 KiB cases (cases, diff) and a subset with
  its cases of tool-call cases, in bytes as the function answers, against 5 MB and Lambda's
  6,291,556-byte response limit.
- body: a dataset document just over what fits in an event: the project's own 413 naming
  `POST /uploads`, or Lambda's refusal.
- export: `case-dirs` exports of 2,000 and 10,000 cases (`--export-cases 100000` for the
  largest) as the API runs them: the route's 202 against 29 s, the job's parts through the
  export worker to the end, each invocation's memory, duration and /tmp against 80% of the
  worker's, and the job's wall against `aws s3 cp --recursive` of the same tree (<= 1.5).
- download: a version's download at 100,000 and 1,000,000 cases (of ~200 bytes, no files):
  the route's 202 against 29 s, then its job's parts through the export worker, whose peak
  memory is held against 1,024 MB and longest invocation against 80% of its Timeout.
- cache: a warm registry function reading 100 different 200,000-case versions, its RSS peak (and
  the cgroup's, page cache included) against 60% of its memory.

Every check runs even when one before it failed; the exit code is 1 when any figure missed its
limit (a crash of the check itself counts as a miss, with its error printed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tests.lambda_emulation import (  # noqa: E402
    LAYER_LIMIT,
    LAYER_MAKEFILE,
    RESPONSE_LIMIT,
    ApiAnswer,
    Emulation,
    api_event,
    moto_stack,
    tree_bytes,
)

MB = 1_000_000
ANSWER_BUDGET = 5 * MB
COLD_START_MS = 1000.0


@dataclass
class Figure:
    name: str
    value: float
    limit: float
    unit: str
    note: str = ""
    failed: bool = False  # the operation did not succeed, whatever the figure

    @property
    def ok(self) -> bool:
        return not self.failed and self.value <= self.limit

    def line(self) -> str:
        verdict = "ok  " if self.ok else "MISS"
        places = 2 if self.unit == "x" else 0  # a ratio, to two places
        return (
            f"{verdict} {self.name:<52} {self.value:>14,.{places}f} {self.unit:<6} "
            f"limit {self.limit:>14,.{places}f}  {self.note}"
        )


# -- set-up --------------------------------------------------------------------------------------


@contextmanager
def moto_server() -> Iterator[str]:
    import logging

    from moto.server import ThreadedMotoServer

    from tests.moto_infra import free_port, make_moto_dynamodb_atomic

    make_moto_dynamodb_atomic()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@contextmanager
def emulation(scratch: Path) -> Iterator[Emulation]:
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1"
    )
    with (
        moto_server() as url,
        moto_stack(url) as (bucket, table),
        Emulation(endpoint_url=url, bucket=bucket, table=table, scratch=scratch) as emu,
    ):
        yield emu


def services(emu: Emulation) -> Any:
    """The project's services on the emulation's bucket and table, in this process (to seed
    data quickly; the checks themselves go through the functions)."""
    from caseshelf.bootstrap import build, load_settings

    settings = load_settings(
        {},
        backend="aws",
        bucket=emu.refs["DataBucket"],
        table=emu.refs["IndexTable"],
        endpoint_url=emu.endpoint_url,
        region="us-east-1",
    )
    return build(settings)


def seed(emu: Emulation, name: str, version: str, cases: list[dict[str, Any]]) -> None:
    from caseshelf.domain.identity import Identity
    from caseshelf.services.registry import parse_dataset

    body = {"id": name, "version": version, "cases": cases}
    services(emu).registry.register(Identity("acme", "alice"), parse_dataset(body))


def text_cases(n: int, size: int, *, offset: int = 0, salt: str = "") -> list[dict[str, Any]]:
    pad = "z" * max(0, size - 64)
    return [
        {"id": f"c{i:07d}", "inputs": {"user": f"{salt}question {i} {pad}"}}
        for i in range(offset, offset + n)
    ]


def call(emu: Emulation, function: str, method: str, resource: str, **kw: Any) -> ApiAnswer:
    params = kw.pop("params", {})
    return emu.call(function, api_event(method, resource, params, **kw))


def describe(answer: ApiAnswer) -> str:
    o = answer.outcome
    if o.kind != "ok":
        return f"{o.kind}: {o.error.get('errorMessage', o.error)}"[:140]
    return f"HTTP {answer.status}"


# -- the checks -----------------------------------------------------------------------------------


def find_python312() -> str | None:
    """A Python 3.12 that runs (pyenv's interpreters before its shims: a shim of a version not
    selected fails)."""
    candidates = [
        str(p) for p in sorted(Path("/root/.pyenv/versions").glob("3.12*/bin/python3.12"))
    ]
    candidates += [p for p in [shutil.which("python3.12")] if p]
    for python in candidates:
        if subprocess.run([python, "-c", "pass"], capture_output=True, check=False).returncode == 0:
            return python
    return None


def check_layer(_: Emulation | None, scale: float) -> list[Figure]:
    """The layer as `sam build` builds it for the template's runtime (arm64, Python 3.12)."""
    python = find_python312()
    if python is None:
        raise RuntimeError("no python3.12 to build the layer with (the functions' runtime)")
    with tempfile.TemporaryDirectory(prefix="caseshelf-layer-") as tmp:
        subprocess.run(
            ["make", "--no-print-directory", "-f", str(LAYER_MAKEFILE), "build-CaseshelfLayer"],
            env={**os.environ, "ARTIFACTS_DIR": tmp, "PYTHON": python},
            check=True,
        )
        root = Path(tmp) / "python"
        size = tree_bytes(root)
        parts = sorted(
            ((tree_bytes(p) if p.is_dir() else p.stat().st_size, p.name) for p in root.iterdir()),
            reverse=True,
        )[:6]
        sources = list(root.rglob("*.py"))
        compiled = sum(
            1 for s in sources if (s.parent / "__pycache__" / f"{s.stem}.cpython-312.pyc").is_file()
        )
    largest = ", ".join(f"{name} {n / MB:.1f} MB" for n, name in parts)
    return [
        Figure("layer bytes (80% of Lambda's limit)", size, LAYER_LIMIT * 0.8, "B", largest),
        Figure("layer bytes (200 MB)", size, 200 * MB, "B"),
        Figure("layer modules without a .pyc", len(sources) - compiled, 0, ""),
    ]


def check_coldstart(emu: Emulation, scale: float) -> list[Figure]:
    import importlib

    first = importlib.import_module("tests.lambda.test_cold_start").FIRST_REQUESTS
    figures = []
    for function in sorted(emu.specs):
        env = emu.env(function)
        inits, firsts = [], []
        for _ in range(3):
            env.stop()
            outcome = env.invoke(first[function])
            if outcome.kind != "ok" or outcome.init_ms is None or outcome.duration_ms is None:
                raise RuntimeError(
                    f"{function}: {outcome.kind} {outcome.error} {outcome.log[-2000:]}"
                )
            inits.append(outcome.init_ms)
            firsts.append(outcome.duration_ms)
        init, req = statistics.median(inits), statistics.median(firsts)
        figures.append(
            Figure(
                f"cold start {function} (init)",
                init,
                COLD_START_MS,
                "ms",
                f"first request {req:.0f} ms",
            )
        )
    return figures


def check_answers(emu: Emulation, scale: float) -> list[Figure]:
    n = max(10, int(1000 * scale))
    seed(emu, "wide", "1.0.0", text_cases(n, 8192))
    seed(emu, "wide", "2.0.0", text_cases(n, 8192, salt="v2 "))
    p = {"id": "wide", "ref": "1.0.0"}
    figures = []
    cases = call(
        emu,
        "RegistryFunction",
        "GET",
        "/datasets/{id}/versions/{ref}/cases",
        params=p,
        query={"limit": str(n)},
    )
    diff = call(
        emu,
        "DiffFunction",
        "GET",
        "/datasets/{id}/diff",
        params={"id": "wide"},
        query={"base": "1.0.0", "candidate": "2.0.0", "limit": str(n)},
    )
    tools = max(10, int(3800 * scale))
    seed(emu, "tools", "1.0.0", tool_call_cases(tools))
    subset = call(
        emu,
        "SubsetFunction",
        "POST",
        "/datasets/{id}/versions/{ref}/subset",
        params={"id": "tools", "ref": "1.0.0"},
        query={"cases": "true"},
        body={},
    )
    for label, answer in (
        (f"GET cases limit={n} (8 KiB cases)", cases),
        (f"GET diff limit={n} (8 KiB cases)", diff),
        (f"subset?cases=true ({tools} tool-call cases)", subset),
    ):
        size = (
            len(answer.outcome.answer)
            if answer.outcome.kind == "ok"
            else answer.outcome.error.get("size", RESPONSE_LIMIT + 1)
        )
        figures.append(Figure(f"answer bytes: {label}", size, ANSWER_BUDGET, "B", describe(answer)))
    return figures


def tool_call_cases(n: int) -> list[dict[str, Any]]:
    """Agent cases whose turns carry tool calls and results as JSON text: quotes everywhere,
    escaped once in the case and again in the API's answer."""
    call_ = json.dumps({"name": "edit", "arguments": {"path": "/src/app.py", "patch": "x"}})
    result = json.dumps({"ok": True, "lines": ['"quoted" line'] * 40})
    return [
        {
            "id": f"t{i:06d}",
            "inputs": {
                "user": f"fix bug {i}",
                "messages": [
                    {"role": "user", "content": f"fix bug {i}"},
                    {"role": "assistant", "content": call_},
                    {"role": "tool", "content": result},
                ],
            },
        }
        for i in range(n)
    ]


def check_body(emu: Emulation, scale: float) -> list[Figure]:
    """A 17,000-case document of ~6.06 MB: the project's 413 pointing to /uploads, or not."""
    size, target = 356, 6_060_000
    for _ in range(3):  # the per-case size that makes the document ~6.06 MB
        body = json.dumps({"id": "big", "version": "1.0.0", "cases": text_cases(17000, size)})
        size += (target - len(body)) // 17000
    answer = call(emu, "RegistryFunction", "POST", "/datasets", raw_body=body)
    own = answer.outcome.kind == "ok" and answer.status == 413 and b"/uploads" in answer.body
    event = len(json.dumps(api_event("POST", "/datasets", raw_body=body)))
    return [
        Figure(
            f"POST /datasets of {len(body):,} B (event {event:,} B): not the project's 413",
            0 if own else 1,
            0,
            "",
            describe(answer),
        )
    ]


EXPORT_SIZES = (2000, 10000)
EXPORT_RATIO = 1.5  # the export job's wall against `aws s3 cp --recursive` of its tree


def check_export(
    emu: Emulation, scale: float, sizes: tuple[int, ...] = EXPORT_SIZES
) -> list[Figure]:
    """`case-dirs` exports run as the API runs them: the route's 202 against API Gateway's
    29 s, then every part of the job through the export worker (from the export queue) to the
    end, each invocation's memory, duration and /tmp against 80% of the worker's, and the whole
    job's wall against `aws s3 cp --recursive` of the same tree to the same server."""
    figures = []
    for n in sizes:
        n = max(10, int(n * scale))
        name = f"exp{n}"
        seed_stream(emu, name, n, 400)
        figures += _export_job(emu, name, n)
    return figures


def _export_job(emu: Emulation, name: str, n: int) -> list[Figure]:
    worker = emu.env("ExportWorkerFunction")
    for fn in ("ExportFunction", "ExportWorkerFunction"):
        emu.env(fn).stop()  # each measured from a fresh environment
    p = {"id": name, "ref": "1.0.0"}
    start = time.monotonic()
    started = call(
        emu,
        "ExportFunction",
        "POST",
        "/datasets/{id}/versions/{ref}/exports",
        params=p,
        body={"format": "case-dirs"},
    )
    answered_ms = (time.monotonic() - start) * 1000
    with tmp_peak(worker) as tmp:
        outcomes = emu.deliver("ExportQueue", "ExportWorkerFunction")
    wall = time.monotonic() - start
    job = started.json() if started.status == 202 else {}
    final = call(emu, "ImporterFunction", "GET", "/jobs/{id}", params={"id": job.get("id", "-")})
    state = final.json().get("state") if final.status == 200 else None
    failed = started.status != 202 or state != "succeeded" or any(o.kind != "ok" for o in outcomes)
    note = f"{describe(started)}, {len(outcomes)} parts, job {state}"
    spec, label = worker.spec, f"export case-dirs {n:,} cases"
    figures = [
        Figure(
            f"{label}: answered in",
            answered_ms,
            29_000,
            "ms",
            describe(started),
            failed=started.status != 202,
        ),
        Figure(
            f"{label}: worker peak memory",
            max((o.peak_bytes or 0 for o in outcomes), default=0),
            0.8 * spec.memory_mb * 2**20,
            "B",
            note,
            failed=failed,
        ),
        Figure(
            f"{label}: longest worker invocation",
            max((o.duration_ms or 0 for o in outcomes), default=0),
            0.8 * spec.timeout_s * 1000,
            "ms",
            note,
            failed=failed,
        ),
        Figure(
            f"{label}: worker /tmp peak",
            tmp.peak,
            0.8 * spec.tmp_mb * 2**20,
            "B",
            tmp.note,
            failed=failed,
        ),
    ]
    if not failed:
        theirs = aws_copy_seconds(emu, final.json()["result"]["prefix"], f"aws-{name}")
        figures.append(
            Figure(
                f"{label}: job wall / aws s3 cp",
                wall / theirs,
                EXPORT_RATIO,
                "x",
                f"{wall:.1f} s vs {theirs:.1f} s",
            )
        )
    return figures


@dataclass
class TmpPeak:
    peak: int = 0
    note: str = ""


@contextmanager
def tmp_peak(env: Any, every: float = 0.05) -> Iterator[TmpPeak]:
    """The most of the environment's /tmp in use while the block runs, looked at every `every`
    seconds (a sampled peak: a bench figure, not a bound)."""
    import threading

    got, done = TmpPeak(), threading.Event()

    def look() -> None:
        while not done.wait(every):
            path = env.tmp.path if env.tmp is not None else None
            if path is not None and path.is_mount():
                got.peak = max(got.peak, shutil.disk_usage(path).used)

    watcher = threading.Thread(target=look, daemon=True)
    watcher.start()
    try:
        yield got
    finally:
        done.set()
        watcher.join()
        got.note = "sampled every 50 ms" if got.peak else "no /tmp volume to look at (tmpfs)"


def aws_copy_seconds(emu: Emulation, prefix: str, to: str) -> float:
    """The wall of `aws s3 cp --recursive` uploading the tree under `prefix` (fetched first,
    untimed) to `s3://<bucket>/<to>/` of the same server: what a user would run instead."""
    aws = [str(Path(sys.executable).parent / "aws"), "--endpoint-url", emu.endpoint_url]
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    with tempfile.TemporaryDirectory(prefix="caseshelf-aws-cp-") as tmp:
        got = [*aws, "s3", "cp", "--recursive", "--quiet", prefix, tmp]
        subprocess.run(got, check=True, env=env, capture_output=True)
        bucket = emu.refs["DataBucket"]
        put = [*aws, "s3", "cp", "--recursive", "--quiet", tmp, f"s3://{bucket}/{to}/"]
        start = time.monotonic()
        subprocess.run(put, check=True, env=env, capture_output=True)
        return time.monotonic() - start


def seed_stream(emu: Emulation, name: str, n: int, size: int) -> None:
    """`n` text cases registered a batch at a time (`register_stream`): a million cases never
    held at once by this process."""
    from caseshelf.domain.identity import Identity
    from caseshelf.services.registry import parse_head

    head = parse_head({"id": name, "version": "1.0.0"})
    batches = (text_cases(min(50_000, n - at), size, offset=at) for at in range(0, n, 50_000))
    services(emu).registry.register_stream(Identity("acme", "alice"), head, batches)


def check_download(emu: Emulation, scale: float) -> list[Figure]:
    """A version's download at 100,000 and 1,000,000 cases (of ~200 bytes, no files): the
    route's answer (202 and its job) against API Gateway's 29 s, the job's parts delivered to
    the export worker from the export queue, the worker's peak memory against 1,024 MB (the
    issue's bound; its MemorySize is 2,048) and its longest invocation against 80% of its
    Timeout; then the route answers the document."""
    figures = []
    for n in (100_000, 1_000_000):
        n = max(100, int(n * scale))
        name = f"dl{n}"
        seed_stream(emu, name, n, 200)
        for fn in ("RegistryFunction", "ExportWorkerFunction"):
            emu.env(fn).stop()  # each measured from a fresh environment
        route = "/datasets/{id}/versions/{ref}/download"
        p = {"id": name, "ref": "1.0.0"}
        started = call(emu, "RegistryFunction", "GET", route, params=p)
        outcomes = emu.deliver("ExportQueue", "ExportWorkerFunction")
        final = call(emu, "RegistryFunction", "GET", route, params=p)
        failed = (
            started.status != 202
            or not outcomes
            or any(o.kind != "ok" for o in outcomes)
            or final.status != 200
        )
        note = f"{describe(started)}, {len(outcomes)} parts, then {describe(final)}"
        oom = any(o.oom for o in outcomes)
        figures += [
            Figure(
                f"download {n:,} cases: the route answered in",
                started.outcome.duration_ms or 0,
                29_000,
                "ms",
                describe(started),
                failed=started.status != 202,
            ),
            Figure(
                f"download {n:,} cases: worker peak memory",
                max((o.peak_bytes or 0) for o in outcomes) if outcomes else 0,
                1024 * 1024 * 1024,
                "B",
                note + (" (OOM-killed)" if oom else ""),
                failed=failed,
            ),
            Figure(
                f"download {n:,} cases: longest worker invocation",
                max((o.duration_ms or 0) for o in outcomes) if outcomes else 0,
                0.8 * 900_000,
                "ms",
                note,
                failed=failed,
            ),
        ]
    return figures


def _mb(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**20:,.0f} MiB"


CACHE_VERSIONS = 100


def _read_versions(emu: Emulation, versions: int) -> tuple[ApiAnswer, str]:
    """Each version's stats and a page of its cases, in turn, on the warm registry function,
    printing its peaks every 10 versions: the last answer, and where the reads stopped when one
    failed."""
    last, slowest = None, 0.0
    for v in range(versions):
        p = {"id": "many", "ref": f"{v + 1}.0.0"}
        for route, query in (("/stats", {}), ("/cases", {"limit": "10"})):
            last = call(
                emu,
                "RegistryFunction",
                "GET",
                "/datasets/{id}/versions/{ref}" + route,
                params=p,
                query=query,
            )
            slowest = max(slowest, last.outcome.duration_ms or 0)
            if last.outcome.kind != "ok" or last.status != 200:
                return last, f" (at version {v + 1}, {route})"
        if v % 10 == 9 or v == versions - 1:
            o = last.outcome
            print(
                f"   read {v + 1} versions: RSS peak {_mb(o.rss_peak_bytes)}, cgroup peak "
                f"{_mb(o.peak_bytes)}, slowest request {slowest:,.0f} ms",
                flush=True,
            )
    assert last is not None
    return last, ""


def check_cache(emu: Emulation, scale: float, versions: int = CACHE_VERSIONS) -> list[Figure]:
    """A warm registry function reading 100 different versions of 200,000 cases (every case of
    each its own): each version's stats (its whole manifest) and a page of its cases."""
    n = max(100, int(200_000 * scale))
    for v in range(versions):
        seed(emu, "many", f"{v + 1}.0.0", text_cases(n, 120, salt=f"v{v} "))
        if v % 10 == 9:
            print(f"   seeded {v + 1} versions of {n:,} cases", flush=True)
    env = emu.env("RegistryFunction")
    env.stop()
    starts = env.cold_starts + 1  # the first read's; a later one means it was not warm
    last, where = _read_versions(emu, versions)
    assert last is not None
    memory = env.spec.memory_mb * 1024 * 1024
    o = last.outcome
    note = describe(last) + (" (OOM-killed)" if o.oom else "") + where
    failed = o.kind != "ok" or last.status != 200 or env.cold_starts != starts
    if env.cold_starts != starts:
        note += f" ({env.cold_starts - starts + 1} cold starts: not warm throughout)"
    return [
        Figure(
            f"warm registry, {versions} versions of {n:,} cases: RSS peak",
            o.rss_peak_bytes or 0,
            memory * 0.6,
            "B",
            note,
            failed=failed or o.rss_peak_bytes is None,
        ),
        Figure(
            f"warm registry, {versions} versions of {n:,} cases: cgroup peak",
            o.peak_bytes or 0,
            memory * 0.6,
            "B",
            "with the page cache the cgroup is charged",
            failed=failed,
        ),
    ]


Check = Callable[[Any, float], list[Figure]]
CHECKS: dict[str, Check] = {
    "layer": check_layer,
    "coldstart": check_coldstart,
    "answers": check_answers,
    "body": check_body,
    "export": check_export,
    "download": check_download,
    "cache": check_cache,
}


def run_checks(
    names: list[str], scale: float, checks: Mapping[str, Check] = CHECKS
) -> tuple[list[Figure], list[str]]:
    """Every check named, in one emulation: (the figures, the checks that could not finish)."""
    figures: list[Figure] = []
    crashed: list[str] = []
    with (
        tempfile.TemporaryDirectory(prefix="caseshelf-lambda-check-") as tmp,
        emulation(Path(tmp)) as emu,
    ):
        for name in names:
            print(f"\n== {name}", flush=True)
            try:
                got = checks[name](emu, scale)
            except Exception:  # a check that could not finish is reported, not hidden
                crashed.append(name)
                traceback.print_exc()
                continue
            for figure in got:
                print(figure.line(), flush=True)
            figures.extend(got)
    return figures, crashed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", choices=sorted(CHECKS), default=list(CHECKS))
    parser.add_argument("--scale", type=float, default=1.0, help="every size times this")
    parser.add_argument(
        "--cache-versions", type=int, default=CACHE_VERSIONS, help="versions the cache check reads"
    )
    parser.add_argument(
        "--export-cases",
        type=int,
        nargs="+",
        default=list(EXPORT_SIZES),
        help="the sizes the export check runs (100000: the issue's largest)",
    )
    args = parser.parse_args()
    checks: dict[str, Check] = {
        **CHECKS,
        "cache": partial(check_cache, versions=args.cache_versions),
        "export": partial(check_export, sizes=tuple(args.export_cases)),
    }
    figures, crashed = run_checks(args.only, args.scale, checks)
    print("\n== summary")
    for figure in figures:
        print(figure.line())
    for name in crashed:
        print(f"MISS {name}: the check itself failed (see its error above)")
    missed = [f for f in figures if not f.ok]
    tail = f"; {len(crashed)} checks could not finish" if crashed else ""
    print(f"\n{len(figures) - len(missed)} of {len(figures)} figures within their limits{tail}")
    return 1 if missed or crashed else 0


if __name__ == "__main__":
    sys.exit(main())
