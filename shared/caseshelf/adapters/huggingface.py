"""Hugging Face: the dataset viewer (`/splits`, `/parquet`, `/rows`) and the Hub (dataset info,
search, files), over plain HTTP with an injectable fetch.

- Rows come from the parquet conversion when the viewer lists it complete (one fetch per
  parquet file), else from `/rows`, paged 100 at a time up to `num_rows_total`. A response with
  `partial: true` is never taken as the whole dataset.
- The Hub's dataset info gives the revision sha that is recorded in provenance.
- 401/403 become an error that explains gated access; 429, 5xx and network errors are retried
  with backoff, then become `Upstream` (502).
- Both base URLs come from settings (`HF_ENDPOINT`, `CASESHELF_HF_VIEWER_URL`); a token, when
  there is one, is sent only to those two hosts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import orjson

from caseshelf.adapters.sources import Rows, parquet_rows, rows_of_file
from caseshelf.domain.errors import BadRequest, Forbidden, NotFound, Upstream

PAGE = 100
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class StaticToken:
    """One token for everyone: `HF_TOKEN` on a workstation."""

    value: str | None = None

    def token(self, tenant: str) -> str | None:
        return self.value or None


@dataclass
class SecretsManagerTokens:
    """On AWS: the tenant's secret `<prefix><tenant>` first, then `<prefix>_shared`, read
    through Powertools parameters (cached for `max_age` seconds). A missing secret is None."""

    prefix: str = "caseshelf/hf-token/"
    max_age: int = 300
    get_secret: Callable[[str], str | None] | None = None

    def _get(self, name: str) -> str | None:
        if self.get_secret is not None:
            return self.get_secret(name)
        from aws_lambda_powertools.utilities import parameters  # lazy: boto3, [aws] extra

        try:
            value = parameters.get_secret(name, max_age=self.max_age)
        except parameters.exceptions.GetParameterError:
            return None
        return value if isinstance(value, str) else None

    def token(self, tenant: str) -> str | None:
        for name in (f"{self.prefix}{tenant}", f"{self.prefix}_shared"):
            value = self._get(name)
            if value:
                return value.strip()
        return None


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


Fetch = Callable[[str, dict[str, str], float], HttpResponse]


def urllib_fetch(url: str, headers: dict[str, str], timeout: float) -> HttpResponse:
    """GET with urllib; any HTTP status is an answer, a network failure an OSError. (urllib's
    HTTP client is imported here, on the first request: an import from a local file makes
    none, and `urllib.request` with `http.client` cost it ~10 ms of start-up.)"""
    import urllib.error  # lazy: with urllib.request, as said above
    import urllib.request  # lazy: ~10-20 ms with http.client, on the first request

    req = urllib.request.Request(url, headers=headers, method="GET")  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
            return HttpResponse(resp.status, resp.read(), dict(resp.headers))
    except urllib.error.HTTPError as exc:
        body = exc.read() if exc.fp is not None else b""
        return HttpResponse(exc.code, body, dict(exc.headers or {}))


@dataclass
class FetchStats:
    """What a client asked for, by endpoint (the benchmark and tests read it)."""

    requests: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str) -> None:
        self.requests[kind] = self.requests.get(kind, 0) + 1


@dataclass
class HfRows:
    """Rows of one Hugging Face source plus where they came from."""

    rows: Rows
    provenance: dict[str, Any]


class HuggingFace:
    def __init__(
        self,
        hub_url: str,
        viewer_url: str,
        *,
        fetch: Fetch = urllib_fetch,
        sleep: Callable[[float], None] = time.sleep,
        attempts: int = 4,
        backoff: float = 0.5,
        timeout: float = 60.0,
    ) -> None:
        self.hub_url = hub_url.rstrip("/")
        self.viewer_url = viewer_url.rstrip("/")
        self.fetch = fetch
        self.sleep = sleep
        self.attempts = attempts
        self.backoff = backoff
        self.timeout = timeout
        self.stats = FetchStats()

    # -- HTTP ------------------------------------------------------------------------------

    def _headers(self, url: str, token: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "caseshelf"}
        host = urlsplit(url).netloc
        if token and host in (urlsplit(self.hub_url).netloc, urlsplit(self.viewer_url).netloc):
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def get(self, url: str, *, token: str | None, what: str, kind: str) -> bytes:
        last = ""
        for attempt in range(self.attempts):
            if attempt:
                self.sleep(self.backoff * 2 ** (attempt - 1))
            self.stats.count(kind)
            try:
                resp = self.fetch(url, self._headers(url, token), self.timeout)
            except OSError as exc:
                last = f"network error ({type(exc).__name__})"
                continue
            if 200 <= resp.status < 300:
                return resp.body
            if resp.status in (401, 403):
                raise _gated(what, self.hub_url, token_sent=bool(token), status=resp.status)
            if resp.status == 404:
                raise NotFound(f"Hugging Face has no {what}", status=404)
            if resp.status in RETRY_STATUSES:
                last = f"HTTP {resp.status}"
                continue
            raise Upstream(
                f"Hugging Face answered HTTP {resp.status} for {what}: {_error_text(resp.body)}"
            )
        raise Upstream(
            f"Hugging Face failed for {what} after {self.attempts} attempts ({last}); "
            "nothing was imported",
            attempts=self.attempts,
        )

    def get_json(self, url: str, *, token: str | None, what: str, kind: str) -> Any:
        body = self.get(url, token=token, what=what, kind=kind)
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            raise Upstream(f"Hugging Face sent something other than JSON for {what}") from None

    # -- Hub -------------------------------------------------------------------------------

    def dataset_info(
        self, dataset: str, *, revision: str | None = None, token: str | None = None
    ) -> dict[str, Any]:
        path = f"/api/datasets/{_repo(dataset)}"
        if revision:
            path += f"/revision/{quote(revision, safe='')}"
        info = self.get_json(
            self.hub_url + path, token=token, what=f"dataset {dataset!r}", kind="info"
        )
        if not isinstance(info, dict) or not isinstance(info.get("sha"), str):
            raise Upstream(f"Hugging Face sent dataset info for {dataset!r} without a sha")
        return info

    def search(self, query: str, *, limit: int = 20, token: str | None = None) -> list[dict]:
        url = f"{self.hub_url}/api/datasets?{urlencode({'search': query, 'limit': limit})}"
        found = self.get_json(url, token=token, what=f"datasets matching {query!r}", kind="search")
        return found if isinstance(found, list) else []

    def files(
        self, dataset: str, *, revision: str | None = None, token: str | None = None
    ) -> tuple[str, list[str]]:
        """(revision sha, file names) of a dataset repo."""
        info = self.dataset_info(dataset, revision=revision, token=token)
        names = [s["rfilename"] for s in info.get("siblings") or [] if "rfilename" in s]
        return info["sha"], names

    def download(self, dataset: str, revision: str, file: str, *, token: str | None) -> bytes:
        url = (
            f"{self.hub_url}/datasets/{_repo(dataset)}/resolve/{quote(revision, safe='')}/"
            f"{quote(file)}"
        )
        return self.get(url, token=token, what=f"file {file!r} of {dataset!r}", kind="file")

    # -- viewer ----------------------------------------------------------------------------

    def splits(self, dataset: str, *, token: str | None = None) -> list[dict[str, str]]:
        url = f"{self.viewer_url}/splits?{urlencode({'dataset': dataset})}"
        body = self.get_json(url, token=token, what=f"splits of {dataset!r}", kind="splits")
        return [
            {"config": s["config"], "split": s["split"]}
            for s in body.get("splits") or []
            if isinstance(s, dict) and "config" in s and "split" in s
        ]

    def parquet_files(
        self, dataset: str, config: str, split: str, *, token: str | None = None
    ) -> list[dict[str, Any]] | None:
        """The complete parquet conversion of one split, or None when there is none (or only a
        partial one)."""
        q = urlencode({"dataset": dataset, "config": config, "split": split})
        try:
            body = self.get_json(
                f"{self.viewer_url}/parquet?{q}",
                token=token,
                what=f"parquet files of {dataset!r}",
                kind="parquet",
            )
        except NotFound:
            return None
        if body.get("partial") or body.get("pending") or body.get("failed"):
            return None
        files = [
            f
            for f in body.get("parquet_files") or []
            if f.get("config") == config and f.get("split") == split and f.get("url")
        ]
        return files or None

    def rows_page(
        self,
        dataset: str,
        config: str,
        split: str,
        offset: int,
        length: int = PAGE,
        *,
        token: str | None = None,
    ) -> dict[str, Any]:
        q = urlencode(
            {
                "dataset": dataset,
                "config": config,
                "split": split,
                "offset": offset,
                "length": length,
            }
        )
        return self.get_json(
            f"{self.viewer_url}/rows?{q}",
            token=token,
            what=f"rows {offset}-{offset + length} of {dataset!r} {config}/{split}",
            kind="rows",
        )

    def iter_rows(
        self,
        dataset: str,
        config: str,
        split: str,
        *,
        limit: int | None = None,
        token: str | None = None,
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """Every row of a split through `/rows`, 100 at a time to `num_rows_total` (or to an
        explicit `limit`). A short page or a partial dataset without a limit is an error."""
        offset = 0
        total: int | None = None
        while True:
            want = PAGE if limit is None else min(PAGE, limit - offset)
            if total is not None:
                want = min(want, total - offset)
            if want <= 0:
                return
            page = self.rows_page(dataset, config, split, offset, want, token=token)
            if total is None:
                total = int(page.get("num_rows_total", 0))
                if page.get("partial") and (limit is None or limit > total):
                    raise BadRequest(
                        f"the dataset viewer serves only part of {dataset!r} {config}/{split} "
                        f"({total} rows, partial); import its files (source.file) or give an "
                        "explicit limit",
                        field="source",
                    )
                want = min(want, total - offset)
                if want <= 0:
                    return
            rows = page.get("rows") or []
            if len(rows) < want:
                raise Upstream(
                    f"the dataset viewer sent {len(rows)} rows at offset {offset} of "
                    f"{dataset!r} {config}/{split}; expected {want} of {total}"
                )
            for item in rows[:want]:
                yield offset, item["row"]
                offset += 1

    # -- one source ------------------------------------------------------------------------

    def resolve_split(
        self, dataset: str, config: str | None, split: str | None, *, token: str | None
    ) -> tuple[str, str]:
        if config and split:
            return config, split
        available = self.splits(dataset, token=token)
        matches = [
            s
            for s in available
            if (config is None or s["config"] == config) and (split is None or s["split"] == split)
        ]
        if len(matches) == 1:
            return matches[0]["config"], matches[0]["split"]
        listing = ", ".join(f"{s['config']}/{s['split']}" for s in available) or "none"
        raise BadRequest(
            f"{dataset!r}: say which config and split to import (available: {listing})",
            field="source.split",
        )

    def open_source(
        self,
        dataset: str,
        *,
        config: str | None = None,
        split: str | None = None,
        revision: str | None = None,
        file: str | None = None,
        limit: int | None = None,
        token: str | None = None,
        prefer_rows: bool = False,
    ) -> HfRows:
        """Rows of a Hub dataset, pinned to the revision sha the Hub reports. `prefer_rows`
        skips the parquet fast path (a preview needs a few rows, not whole files)."""
        info = self.dataset_info(dataset, revision=revision, token=token)
        sha = info["sha"]
        prov: dict[str, Any] = {"kind": "huggingface", "dataset": dataset, "revision": sha}
        if file is not None:
            data = self.download(dataset, sha, file, token=token)
            prov.update(file=file, via="file")
            return HfRows(rows_of_file(data, file), prov)
        if revision is not None:
            current = self.dataset_info(dataset, token=token)["sha"]
            if current != sha:
                raise BadRequest(
                    f"{dataset!r}@{revision} is not the current revision ({current}); the "
                    "dataset viewer serves only the current one: give source.file to read that "
                    "revision's file",
                    field="source.revision",
                )
        config, split = self.resolve_split(dataset, config, split, token=token)
        prov.update(config=config, split=split)
        files = None if prefer_rows else self.parquet_files(dataset, config, split, token=token)
        if files:
            prov["via"] = "parquet"
            return HfRows(self._parquet_rows(files, limit=limit, token=token), prov)
        prov["via"] = "rows"
        return HfRows(self.iter_rows(dataset, config, split, limit=limit, token=token), prov)

    def _parquet_rows(
        self, files: list[dict[str, Any]], *, limit: int | None, token: str | None
    ) -> Rows:
        index = 0
        for f in files:
            if limit is not None and index >= limit:
                return
            data = self.get(f["url"], token=token, what=f"parquet file {f['url']}", kind="file")
            for _, row in parquet_rows(data, name=f.get("filename") or f["url"]):
                yield index, row
                index += 1


def requests_for(rows: int) -> int:
    """How many `/rows` requests paging `rows` rows takes."""
    return math.ceil(rows / PAGE)


def _repo(dataset: str) -> str:
    return "/".join(quote(p, safe="") for p in dataset.split("/"))


def _error_text(body: bytes) -> str:
    try:
        doc = orjson.loads(body)
        if isinstance(doc, dict) and isinstance(doc.get("error"), str):
            return str(doc["error"])[:300]
    except orjson.JSONDecodeError:
        pass
    return body[:300].decode("utf-8", "replace")


def _gated(what: str, hub_url: str, *, token_sent: bool, status: int) -> Forbidden:
    sent = "the token caseshelf sent was refused" if token_sent else "caseshelf sent no token"
    return Forbidden(
        f"Hugging Face refused access to {what} (HTTP {status}; {sent}). The dataset is gated or "
        f"private: accept its terms on {hub_url} with the account whose token caseshelf uses, "
        "then set HF_TOKEN (local) or the Secrets Manager secret caseshelf/hf-token/<tenant> "
        "(AWS) to that account's read token",
        gated=True,
        upstream_status=status,
    )
