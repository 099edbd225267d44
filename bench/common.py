"""Helpers shared by the benchmarks: timing, peak memory, child processes, the stores a child
measures on, and the dataset.

Every measured operation runs in a fresh interpreter (`run_child`), so its peak RSS is its own and
no cache or allocator state leaks between runs. A child prints one JSON object on its last line of
stdout; the parent collects those and reports medians.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
SHARED_DATA = (REPO_ROOT / ".." / "shared" / "data").resolve()
GSM8K = SHARED_DATA / "gsm8k" / "test.jsonl"
BACKENDS = ("embedded", "moto")
# Dummy credentials for a child on moto; nothing that could reach a real account.
MOTO_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


# -- measuring ------------------------------------------------------------------------------


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (ru_maxrss is KiB on Linux)."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if sys.platform == "darwin":  # bytes there
        kib //= 1024
    return round(kib / 1024, 1)


@contextmanager
def stopwatch() -> Iterator[dict[str, float]]:
    """`with stopwatch() as t: ...` then `t["s"]` is the elapsed wall time in seconds."""
    box: dict[str, float] = {}
    start = time.perf_counter()
    try:
        yield box
    finally:
        box["s"] = time.perf_counter() - start


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def emit(result: dict[str, Any]) -> None:
    """The one JSON line a child (or a benchmark) ends with."""
    print(json.dumps(result, sort_keys=False), flush=True)


def run_child(
    argv: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 600
) -> dict[str, Any]:
    """Run `argv` in a fresh interpreter and return the JSON object on its last stdout line."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc = subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=REPO_ROOT,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise RuntimeError(f"child {argv} failed with exit code {proc.returncode}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if not lines:
        raise RuntimeError(f"child {argv} printed nothing")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def ratio(num: float, den: float) -> float:
    return round(num / den, 3) if den else float("inf")


# -- the stores a child measures on ----------------------------------------------------------


def template_table() -> dict[str, Any]:
    """The IndexTable properties of `infra/template.yaml` that a moto table needs."""
    import yaml

    class CfnLoader(yaml.SafeLoader):
        pass

    def any_tag(loader: yaml.SafeLoader, _suffix: str, node: yaml.Node) -> Any:
        if isinstance(node, yaml.ScalarNode):
            return loader.construct_scalar(node)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node)
        return loader.construct_mapping(node)  # type: ignore[arg-type]

    CfnLoader.add_multi_constructor("!", any_tag)
    doc = yaml.load((REPO_ROOT / "infra" / "template.yaml").read_text(), Loader=CfnLoader)
    props = doc["Resources"]["IndexTable"]["Properties"]
    return {
        "AttributeDefinitions": props["AttributeDefinitions"],
        "KeySchema": props["KeySchema"],
        "BillingMode": props["BillingMode"],
    }


@contextmanager
def bench_store(backend: str, prefix: str = "caseshelf-bench-") -> Iterator[tuple[Any, Any, Any]]:
    """(settings, blob store, index) of a fresh store: the embedded one in a temporary
    directory, or (`moto`) an in-process moto bucket and table made like the template's."""
    from caseshelf.bootstrap import build_adapters, load_settings

    if backend == "embedded":
        with tempfile.TemporaryDirectory(prefix=prefix) as home:
            settings = load_settings({}, home=home)
            yield (settings, *build_adapters(settings))
        return
    import boto3
    from moto import mock_aws

    with mock_aws():
        bucket, table = "caseshelf-bench", "caseshelf-bench-index"
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=bucket)
        boto3.client("dynamodb", region_name="us-east-1").create_table(
            TableName=table, **template_table()
        )
        settings = load_settings({}, backend="aws", bucket=bucket, table=table)
        yield (settings, *build_adapters(settings))


def child_main(
    doc: str, child: Callable[[str, int, int], None], main: Callable[[int, int], int]
) -> None:
    """The command line of a benchmark run per backend in children: `--cases`, `--runs`, and
    `--child BACKEND` (what the parent passes a child)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", choices=list(BACKENDS))
    args = parser.parse_args()
    if args.child:
        child(args.child, args.cases, args.runs)
        sys.exit(0)
    sys.exit(main(args.cases, args.runs))


# -- the dataset ----------------------------------------------------------------------------


def gsm8k_rows() -> tuple[list[dict[str, str]], str | None]:
    """The GSM8K test rows, or synthetic rows of the same shape (with a note) when the shared
    data is absent."""
    if GSM8K.is_file():
        with GSM8K.open("rb") as fh:
            return [orjson.loads(line) for line in fh if line.strip()], None
    rows = []
    for i in range(1319):
        a, b = 3 + i % 97, 7 + i % 89
        rows.append(
            {
                "question": (
                    f"A farmer has {a} crates with {b} apples in each crate and sells "
                    f"{i % 11} crates at the market. How many apples does the farmer have left?"
                ),
                "answer": f"{a} - {i % 11} = <<{a}-{i % 11}={a - i % 11}>> crates.\n"
                f"#### {(a - i % 11) * b}",
            }
        )
    return rows, f"{GSM8K} is absent: synthetic GSM8K-shaped rows were used"


def final_answer(answer: str) -> str:
    return answer.rsplit("####", 1)[-1].strip()


# How the changed cases of a "v2" lie: every k-th case (`spread`), or in runs of this many
# consecutive cases spread evenly over the version (`runs`): a fix to one source, one category
# or one shard of a benchmark changes cases that sit together.
CHANGED_RUN = 1000


def is_changed(i: int, n: int, changed_every: int, layout: str) -> bool:
    """Whether case `i` of `n` is one of the `n // changed_every` changed ones."""
    if not changed_every:
        return False
    if layout == "spread":
        return i % changed_every == 0
    changed = n // changed_every
    runs = max(1, changed // CHANGED_RUN)
    stride = n // runs
    return i % stride < changed // runs and i // stride < runs


def gsm8k_cases(
    n: int, *, changed_every: int = 0, layout: str = "spread"
) -> tuple[list[dict[str, Any]], str | None]:
    """`n` distinct envelope cases shaped like GSM8K rows (cycling the 1319 rows, with a variant
    number in the question after the first pass). With `changed_every=k`, `n // k` cases get a
    different ground truth: the "v2 with 1% changed" of the benchmarks; `layout` says where
    they lie (`is_changed`)."""
    rows, note = gsm8k_rows()
    return list(iter_gsm8k_cases(rows, n, changed_every=changed_every, layout=layout)), note


def iter_gsm8k_cases(
    rows: list[dict[str, str]], n: int, *, changed_every: int = 0, layout: str = "spread"
) -> Iterator[dict[str, Any]]:
    """The cases of `gsm8k_cases`, one at a time (a million of them never held at once)."""
    for i in range(n):
        row = rows[i % len(rows)]
        variant = i // len(rows)
        question = row["question"] if variant == 0 else f"{row['question']} (variant {variant})"
        truth = final_answer(row["answer"])
        if is_changed(i, n, changed_every, layout):
            truth = f"{truth} (revised)"
        yield {
            "id": f"test-{i:06d}",
            "inputs": {"user": question},
            "expectations": {"ground_truth": truth},
            "metadata": {"row": i % len(rows), "source_index": i},
            "tags": ["gsm8k"],
        }


def write_dataset(
    path: Path,
    *,
    n: int,
    version: str,
    changed_every: int = 0,
    layout: str = "spread",
    dataset_id: str = "gsm8k-bench",
) -> str | None:
    """Write a dataset document (what `caseshelf register` takes) to `path`; returns the note."""
    cases, note = gsm8k_cases(n, changed_every=changed_every, layout=layout)
    doc = {
        "id": dataset_id,
        "version": version,
        "description": "GSM8K-shaped benchmark dataset",
        "tags": ["bench"],
        "cases": cases,
    }
    path.write_bytes(orjson.dumps(doc))
    return note


# -- counting what a registration writes ----------------------------------------------------


class WriteCounter:
    """Wraps a blob store and an index, counting every new byte written: objects stored (a
    put-if-absent that found the object already there writes nothing) and index rows (each
    row's document as JSON)."""

    def __init__(self, store: Any, index: Any) -> None:
        self.store = _CountingStore(store, self)
        self.index = _CountingIndex(index, self)
        self.reset()

    def reset(self) -> None:
        self.by_area: dict[str, int] = {}
        self.index_bytes = 0

    def add(self, key: str, size: int) -> None:
        area = "chunks" if "/manifests/chunks/" in key else key.split("/")[2]
        self.by_area[area] = self.by_area.get(area, 0) + size

    @property
    def total(self) -> int:
        return sum(self.by_area.values()) + self.index_bytes


class _CountingStore:
    def __init__(self, inner: Any, counter: WriteCounter) -> None:
        self._inner, self._counter = inner, counter

    def put_if_absent(self, key: str, data: bytes) -> bool:
        wrote = bool(self._inner.put_if_absent(key, data))
        if wrote:
            self._counter.add(key, len(data))
        return wrote

    def put(self, key: str, data: bytes, **kw: Any) -> None:
        self._inner.put(key, data, **kw)
        self._counter.add(key, len(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _CountingIndex:
    def __init__(self, inner: Any, counter: WriteCounter) -> None:
        self._inner, self._counter = inner, counter

    def _row(self, *parts: Any) -> None:
        from caseshelf.domain.keys import record_to_item
        from caseshelf.domain.versions import VersionRecord

        docs = [record_to_item(p) if isinstance(p, VersionRecord) else p for p in parts]
        self._counter.index_bytes += len(orjson.dumps(docs, default=str))

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or not name.startswith(("put", "update", "commit", "delete")):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._row(*args, *kwargs.values())
            return attr(*args, **kwargs)

        return counted


def gsm8k_jsonl(path: Path, n: int, *, changed_every: int = 0) -> str | None:
    """`n` distinct GSM8K rows (a variant number in the question after the first pass); with
    `changed_every=k`, every k-th row's final answer is one more."""
    rows, note = gsm8k_rows()
    with path.open("wb") as fh:
        for i in range(n):
            row = rows[i % len(rows)]
            variant = i // len(rows)
            question = row["question"] if variant == 0 else f"{row['question']} (variant {variant})"
            answer = row["answer"]
            if changed_every and i % changed_every == 0:
                work, _, final = answer.rpartition("####")
                answer = f"{work}#### {final.strip()}1"
            fh.write(orjson.dumps({"question": question, "answer": answer}) + b"\n")
    return note
