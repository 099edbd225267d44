"""A local fake of the Hugging Face Hub and dataset viewer APIs, over real HTTP on loopback.

Responses are shaped like the viewer's documented examples (`../shared/data/hf-viewer/`):
`/splits` -> {splits, pending, failed}; `/parquet` -> {parquet_files, pending, failed, partial};
`/rows` -> {features, rows: [{row_idx, row, truncated_cells}], num_rows_total,
num_rows_per_page, partial}. The Hub side answers `/api/datasets/<repo>` (info with `sha` and
`siblings`), `/api/datasets?search=`, and `/datasets/<repo>/resolve/<rev>/<file>`.

Datasets can be gated (401 without the right token), failing (always 503), flaky (503 or 429 a
few times, then fine), failing from some `/rows` offset on, or partial (the viewer has only part
of them). Every request is counted by endpoint, so tests and the benchmark can check paging
arithmetic.
"""

from __future__ import annotations

import io
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import orjson

from tests.serving import server_thread

GOOD_TOKEN = "hf_good_token"


@dataclass
class FakeDataset:
    name: str
    splits: dict[tuple[str, str], list[dict[str, Any]]]
    sha: str = "0123456789abcdef0123456789abcdef01234567"
    gated: bool = False
    fail_status: int | None = None  # every request answers this
    flaky: int = 0  # the first N requests answer `flaky_status`
    flaky_status: int = 503
    fail_rows_from: int | None = None  # `/rows` pages at or past this offset always answer 503
    parquet: bool = False  # the viewer lists a parquet conversion
    partial: bool = False
    files: dict[str, bytes] = field(default_factory=dict)  # repo files by path


def parquet_bytes(rows: list[dict[str, Any]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows)
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


class FakeHub:
    def __init__(self) -> None:
        self.datasets: dict[str, FakeDataset] = {}
        self.counts: Counter[str] = Counter()
        self.tokens_seen: list[str | None] = []
        self._parquet: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = server_thread(self.server)

    def add(self, ds: FakeDataset) -> FakeDataset:
        self.datasets[ds.name] = ds
        if ds.parquet:
            for (config, split), rows in ds.splits.items():
                key = f"{ds.name}/{config}/{split}/0000.parquet"
                self._parquet[key] = parquet_bytes(rows)
        return ds

    def start(self) -> FakeHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reset_counts(self) -> None:
        with self._lock:
            self.counts.clear()

    # -- the HTTP side ---------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_GET(self) -> None:
                status, body, ctype = hub.answer(self.path, self.headers.get("Authorization"))
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def _json(self, status: int, doc: Any) -> tuple[int, bytes, str]:
        return status, orjson.dumps(doc), "application/json"

    def _gate(self, ds: FakeDataset, auth: str | None) -> tuple[int, bytes, str] | None:
        with self._lock:
            self.tokens_seen.append(auth)
        if ds.fail_status is not None:
            return self._json(ds.fail_status, {"error": "upstream is down"})
        if ds.flaky > 0:
            ds.flaky -= 1
            return self._json(ds.flaky_status, {"error": "try again"})
        if ds.gated and auth != f"Bearer {GOOD_TOKEN}":
            return self._json(
                401, {"error": "Access to dataset is restricted. You must be authenticated."}
            )
        return None

    def answer(self, path: str, auth: str | None) -> tuple[int, bytes, str]:
        parts = urlsplit(path)
        q = {k: v[0] for k, v in parse_qs(parts.query).items()}
        route = parts.path
        if route in ("/rows", "/splits", "/parquet"):
            with self._lock:
                self.counts[route.strip("/")] += 1
            ds = self.datasets.get(q.get("dataset", ""))
            if ds is None:
                return self._json(404, {"error": "The dataset does not exist."})
            answer = {
                "/rows": self._rows,
                "/splits": self._splits,
                "/parquet": self._parquet_answer,
            }
            return self._gate(ds, auth) or answer[route](ds, q)
        if route.startswith("/files/"):
            with self._lock:
                self.counts["file"] += 1
            data = self._parquet.get(unquote(route.removeprefix("/files/")))
            if data is None:
                return self._json(404, {"error": "no such file"})
            return 200, data, "application/octet-stream"
        if route == "/api/datasets":
            with self._lock:
                self.counts["search"] += 1
            term = q.get("search", "").lower()
            found = [{"id": n, "downloads": 1} for n in sorted(self.datasets) if term in n.lower()]
            return self._json(200, found[: int(q.get("limit", "20"))])
        if route.startswith("/api/datasets/"):
            with self._lock:
                self.counts["info"] += 1
            rest = unquote(route.removeprefix("/api/datasets/"))
            name, _, revision = rest.partition("/revision/")
            ds = self.datasets.get(name)
            if ds is None:
                return self._json(404, {"error": "Repository not found"})
            denied = self._gate(ds, auth)
            if denied:
                return denied
            if revision and revision not in (ds.sha, "main"):
                return self._json(404, {"error": "Revision not found"})
            siblings = [{"rfilename": f} for f in sorted(ds.files)]
            return self._json(
                200, {"id": name, "sha": ds.sha, "gated": ds.gated, "siblings": siblings}
            )
        if route.startswith("/datasets/"):
            with self._lock:
                self.counts["file"] += 1
            rest = unquote(route.removeprefix("/datasets/"))
            repo, _, tail = rest.partition("/resolve/")
            ds = self.datasets.get(repo)
            if ds is None:
                return self._json(404, {"error": "Repository not found"})
            denied = self._gate(ds, auth)
            if denied:
                return denied
            _rev, _, file = tail.partition("/")
            if file not in ds.files:
                return self._json(404, {"error": "Entry not found"})
            return 200, ds.files[file], "application/octet-stream"
        return self._json(404, {"error": f"no route {route}"})

    def _splits(self, ds: FakeDataset, q: dict[str, str]) -> tuple[int, bytes, str]:
        splits = [{"dataset": ds.name, "config": c, "split": s} for c, s in ds.splits]
        return self._json(200, {"splits": splits, "pending": [], "failed": []})

    def _parquet_listing(self, ds: FakeDataset) -> list[dict[str, Any]]:
        out = []
        for (config, split), _rows in ds.splits.items():
            key = f"{ds.name}/{config}/{split}/0000.parquet"
            out.append(
                {
                    "dataset": ds.name,
                    "config": config,
                    "split": split,
                    "url": f"{self.url}/files/{key}",
                    "filename": f"{ds.name.split('/')[-1]}-{split}.parquet",
                    "size": len(self._parquet.get(key, b"")),
                }
            )
        return out

    def _parquet_answer(self, ds: FakeDataset, q: dict[str, str]) -> tuple[int, bytes, str]:
        if not ds.parquet:
            return self._json(404, {"error": "The parquet conversion does not exist."})
        files = [
            f
            for f in self._parquet_listing(ds)
            if f["config"] == q.get("config", f["config"])
            and f["split"] == q.get("split", f["split"])
        ]
        return self._json(
            200, {"parquet_files": files, "pending": [], "failed": [], "partial": ds.partial}
        )

    def _rows(self, ds: FakeDataset, q: dict[str, str]) -> tuple[int, bytes, str]:
        rows = ds.splits.get((q.get("config", ""), q.get("split", "")))
        if rows is None:
            return self._json(404, {"error": "The config or the split does not exist."})
        offset = int(q.get("offset", "0"))
        if ds.fail_rows_from is not None and offset >= ds.fail_rows_from:
            return self._json(503, {"error": "upstream is down"})
        length = min(int(q.get("length", "100")), 100)
        page = rows[offset : offset + length]
        first = rows[0] if rows else {}
        features = [
            {"feature_idx": i, "name": k, "type": {"dtype": "string", "_type": "Value"}}
            for i, k in enumerate(first)
        ]
        return self._json(
            200,
            {
                "features": features,
                "rows": [
                    {"row_idx": offset + i, "row": r, "truncated_cells": []}
                    for i, r in enumerate(page)
                ],
                "num_rows_total": len(rows),
                "num_rows_per_page": 100,
                "partial": ds.partial,
            },
        )


def gsm8k_like(n: int) -> list[dict[str, Any]]:
    """`n` distinct GSM8K-shaped rows (question, answer with a `####` final line)."""
    return [
        {"question": f"Row {i}: what is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"}
        for i in range(n)
    ]


def standard_hub() -> FakeHub:
    """The datasets most tests use: small, paged, parquet-backed, gated, failing, flaky."""
    hub = FakeHub()
    hub.add(FakeDataset("openai/gsm8k", {("main", "test"): gsm8k_like(250)}))
    hub.add(FakeDataset("acme/parq", {("default", "test"): gsm8k_like(120)}, parquet=True))
    hub.add(FakeDataset("acme/gated", {("default", "test"): gsm8k_like(5)}, gated=True))
    hub.add(FakeDataset("acme/down", {("default", "test"): gsm8k_like(5)}, fail_status=503))
    hub.add(FakeDataset("acme/flaky", {("default", "test"): gsm8k_like(5)}, flaky=2))
    hub.add(
        FakeDataset(
            "acme/throttled", {("default", "test"): gsm8k_like(5)}, flaky=2, flaky_status=429
        )
    )
    hub.add(
        FakeDataset("acme/dies-midway", {("default", "test"): gsm8k_like(250)}, fail_rows_from=100)
    )
    hub.add(FakeDataset("acme/huge", {("default", "train"): gsm8k_like(30)}, partial=True))
    hub.add(
        FakeDataset(
            "acme/multi",
            {("a", "train"): gsm8k_like(2), ("a", "test"): gsm8k_like(2)},
            files={"data/test.jsonl": b'{"question": "q", "answer": "a\\n#### 1"}\n'},
        )
    )
    return hub.start()
