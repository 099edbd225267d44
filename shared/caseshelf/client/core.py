"""`Client`: every operation of the API as a method, over a transport.

A method builds one request (method, path, query, body) and reads the answer into the API's own
wire model (`caseshelf.api.dto`, `caseshelf.api.import_dto`): there is no third copy of any
shape. Errors are the API's typed errors, rebuilt from problem+json by the transport, the same
in process and over HTTP.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, TypeVar, cast, overload

from caseshelf.client.refs import parse_ref, parse_version
from caseshelf.client.transport import (
    Answer,
    Http,
    InProcess,
    Request,
    Transport,
    job_error,
    put_url,
)
from caseshelf.domain.errors import BadRequest, Corrupt, NotFound, TooLarge, Upstream
from caseshelf.domain.paging import MAX_PAGE
from caseshelf.extras import require

if TYPE_CHECKING:
    from pydantic import BaseModel

    from caseshelf.api.browse_dto import CaseSearchPageOut, MeOut, VersionStatsOut
    from caseshelf.api.dto import (
        CaseBriefOut,
        CaseChangesOut,
        DatasetOut,
        DiffOut,
        ExportOut,
        PageOut,
        RegisterOut,
        SubsetOut,
        TagMovesOut,
        TagsOut,
        TaskImportOut,
        ValidateOut,
        VersionOut,
    )
    from caseshelf.api.import_dto import (
        BenchmarkOut,
        BundleOut,
        HfDatasetOut,
        HfFilesOut,
        HfSplitOut,
        ImportOut,
        JobOut,
        PreviewOut,
        RecipeOut,
        RecipeRegisterOut,
        RecipeSummaryOut,
        RecipeValidateOut,
        RecipeVersionOut,
        UploadOut,
    )
    from caseshelf.api.refs_dto import RefResolvedOut
    from caseshelf.client.cache import Cache
    from caseshelf.client.pins import CheckOut, PinnedOut, Pins, SyncOut, UnpinnedOut, UpdateOut
    from caseshelf.domain.models import Case
    from caseshelf.services.pull import Progress as PullProgress

M = TypeVar("M", bound="BaseModel")
PAGE_MAX = 1000
NEXT_CURSOR_HEADER = "X-Next-Cursor"  # the cases route's (caseshelf.functions.registry)
JOB_POLL_SECONDS = 0.5
DOWNLOAD_CHUNK = 1 << 20  # what a streamed download holds at a time
# A dataset file larger than this is registered from the file (`register_file`: uploaded, then
# read by the server a window of cases at a time) rather than parsed here into one document.
STREAM_FILE_BYTES = 5 << 20

Progress = Callable[[int], None]


@dataclass(frozen=True)
class Downloaded:
    """A whole version as one dataset document: its file name, and its bytes or where they
    were written."""

    filename: str
    body: bytes | None = None
    path: Path | None = None
    size: int = 0


def _body(model: Any) -> Any:
    """A request body: a pydantic model as the JSON it stands for (fields left unset stay out,
    so server defaults apply), anything else as it is."""
    dump = getattr(model, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_unset=True, by_alias=True)
    return model


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


class Client:
    """The registry, from Python. Build one with `caseshelf.connect()`.

    Refs are `ID@REF` strings: `gsm8k@1.2.0`, `gsm8k@stable`, `gsm8k` (latest) or
    `gsm8k@sha256:<hex>`. Changes (`tag`, `delete`, `revive`) take `ID@VERSION`."""

    def __init__(self, transport: Transport, *, page_size: int = PAGE_MAX) -> None:
        self.transport = transport
        self.page_size = page_size
        self._cache: Cache | None = None

    def __repr__(self) -> str:
        return f"caseshelf.Client({self.transport!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.transport.close()

    @property
    def in_process(self) -> bool:
        return isinstance(self.transport, InProcess)

    # -- plumbing ----------------------------------------------------------------------------

    def call(
        self,
        method: str,
        *segments: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> Any:
        """One API call; its decoded JSON answer."""
        answer = self.transport.send(Request(method, segments, dict(query or {}), _body(body)))
        return answer.json()

    def _as(self, model: type[M], data: Any) -> M:
        """The answer read into its wire model (unknown keys are errors, as everywhere)."""
        return model.model_validate(data)

    def _page(self, item: type[Any], data: Any) -> PageOut[Any]:
        from caseshelf.api.dto import PageOut

        return PageOut[item].model_validate(data)  # type: ignore[valid-type]

    # -- datasets ------------------------------------------------------------------------------

    def register(
        self,
        dataset: str | Mapping[str, Any] | BaseModel | None = None,
        *,
        cases: Any = None,
        version: str | None = None,
        bump: str | None = None,
        base: str | None = None,
        description: str | None = None,
        tags: list[str] | None = None,
        shared_files: list[Any] | None = None,
        progress: Progress | None = None,
        total: Progress | None = None,
        wait: float = 900.0,
    ) -> RegisterOut:
        """Register a dataset version (idempotent for the same content under the same label).

        `dataset` is the dataset id, or a whole dataset document (`{id, version, cases, ...}`,
        as `register` in the API takes it). `cases` is a list of cases (dicts or models), a
        pandas DataFrame (flat columns, as `to_pandas` gives), or the path of a `.json`,
        `.jsonl` or `.yaml` file (a dataset document, or a bare list of cases). Bad input is a
        `BadRequest` naming the row (or case id) and the column (or field); nothing is
        registered.

        Over HTTP a document larger than one request body may be (`Http.max_body_bytes`, or
        the limit a 413 names) goes through `POST /uploads` as a `dataset` upload instead: the
        same answer and the same errors, after the server's job has registered it (`wait`
        seconds at most). `total(n)` is told its size in bytes and `progress(n)` each piece as
        it is sent. In process nothing caps the size. A `cases` file larger than
        `STREAM_FILE_BYTES` (with no `description`, `tags` or `shared_files` beside it) is
        registered from the file as it is (`register_file`), so no side holds all of it."""
        from caseshelf.api.dto import RegisterOut

        if (
            _large_file(cases)
            and (dataset is None or isinstance(dataset, str))
            and description is None
            and tags is None
            and shared_files is None
        ):  # read by the server a window at a time, not parsed here whole
            out = self.register_file(
                cases,
                dataset=dataset,
                version=version,
                bump=bump,
                base=base,
                progress=progress,
                wait=wait,
            )
            assert isinstance(out, RegisterOut)
            return out
        doc = self.dataset_document(
            dataset,
            cases=cases,
            version=version,
            bump=bump,
            base=base,
            description=description,
            tags=tags,
            shared_files=shared_files,
        )
        with _rows_named(cases):
            return self._register(doc, progress, total, wait)

    def _register(
        self, doc: dict[str, Any], progress: Progress | None, total: Progress | None, wait: float
    ) -> RegisterOut:
        from caseshelf.api.dto import RegisterOut

        http = self.transport if isinstance(self.transport, Http) else None
        if http is not None:
            import orjson

            data = orjson.dumps(doc)
            if not http.fits(data):
                return self._register_uploaded(data, progress, total, wait)
            try:
                return self._as(RegisterOut, self.call("POST", "datasets", body=doc))
            except TooLarge as exc:  # the server's limit is lower than ours: learn it, upload
                if not _body_limit(exc):
                    raise  # a case over the case limit: no upload makes it fit
                _learn_limit(http, exc)
                return self._register_uploaded(data, progress, total, wait)
        return self._as(RegisterOut, self.call("POST", "datasets", body=doc))

    def _register_uploaded(
        self,
        data: bytes,
        progress: Progress | None,
        total: Progress | None,
        wait: float,
    ) -> RegisterOut:
        """`register` through `POST /uploads` (kind `dataset`): the document is PUT to the
        upload URL and the server's job registers it as `POST /datasets` would; a failed job
        raises the error the route would have answered."""
        from caseshelf.api.dto import RegisterOut

        job = self._upload_document(data, progress, total, wait)
        return self._as(RegisterOut, job.result)

    def _upload_document(
        self,
        data: bytes,
        progress: Progress | None,
        total: Progress | None,
        wait: float,
        *,
        dry_run: bool = False,
    ) -> JobOut:
        """A dataset document through `POST /uploads` (kind `dataset`) and the job it starts,
        once succeeded; a failed job raises the error the route would have answered."""

        # A fixed name: the id is checked by the job, with the error POST /datasets gives.
        request: dict[str, Any] = {"kind": "dataset", "filename": "dataset.json"}
        if dry_run:
            request["dry_run"] = True
        up = self.create_upload(request)
        if not up.upload_url:
            raise TooLarge(
                f"the dataset document is {len(data)} bytes, over this API's request limit, "
                "and the API gives no upload URL",
                size=len(data),
            )
        if total is not None:
            total(len(data))
        put_url(up.upload_url, data, progress=progress)
        job = self.wait_for_job(up.job_id, wait=wait)
        if job.state == "failed":
            raise job_error(up.job_id, job.error)
        return job

    def register_file(
        self,
        path: str | Path,
        *,
        dataset: str | None = None,
        version: str | None = None,
        bump: str | None = None,
        base: str | None = None,
        dry_run: bool = False,
        progress: Progress | None = None,
        wait: float = 900.0,
    ) -> RegisterOut | ValidateOut:
        """Register (with `dry_run`, validate) a dataset file as it is: `.json`, `.jsonl` or
        `.yaml`, a dataset document or a bare list of cases, `dataset`/`version`/`bump`/`base`
        overriding its own. The file is uploaded (`POST /uploads`, kind `dataset`, sent 1 MiB at
        a time, `progress(n)` per piece) and the server's job reads it a window of cases at a
        time, so neither side holds the whole file: the way in for files of any size, the same
        in process and over HTTP. The answer and the errors are those of `POST /datasets`
        (`/validate`)."""
        from caseshelf.api.dto import RegisterOut, ValidateOut

        p = Path(path)
        if not p.is_file():
            raise BadRequest(f"{p}: no such file", field="file")
        request: dict[str, Any] = {"kind": "dataset", "filename": _upload_name(p, "dataset.json")}
        overrides = {"dataset": dataset, "version": version, "bump": bump, "base": base}
        request.update({k: v for k, v in overrides.items() if v is not None})
        if dry_run:
            request["dry_run"] = True
        up = self.create_upload(request)
        if not up.upload_url:
            raise BadRequest(
                "this API gives no upload URL, so a dataset file cannot be sent as it is: "
                "register it as a document (`register(...)`)"
            )
        self._put_file(up.upload_url, p, progress)
        job = self.wait_for_job(up.job_id, wait=wait)
        if job.state == "failed":
            raise job_error(up.job_id, job.error)
        if dry_run:
            return self._as(ValidateOut, job.result)
        return self._as(RegisterOut, job.result)

    def validate(
        self,
        dataset: str | Mapping[str, Any] | BaseModel | None = None,
        *,
        cases: Any = None,
        version: str | None = None,
        bump: str | None = None,
        base: str | None = None,
        description: str | None = None,
        tags: list[str] | None = None,
        shared_files: list[Any] | None = None,
    ) -> ValidateOut:
        """What `register` would do with the same arguments, storing nothing (over HTTP, a
        document above the body limit is checked through a `dataset` upload with `dry_run`)."""
        from caseshelf.api.dto import ValidateOut

        doc = self.dataset_document(
            dataset,
            cases=cases,
            version=version,
            bump=bump,
            base=base,
            description=description,
            tags=tags,
            shared_files=shared_files,
        )
        with _rows_named(cases):
            http = self.transport if isinstance(self.transport, Http) else None
            if http is None:
                return self._as(ValidateOut, self.call("POST", "datasets", "validate", body=doc))
            import orjson

            data = orjson.dumps(doc)
            if http.fits(data):
                try:
                    return self._as(
                        ValidateOut, self.call("POST", "datasets", "validate", body=doc)
                    )
                except TooLarge as exc:
                    if not _body_limit(exc):
                        raise
                    _learn_limit(http, exc)
            job = self._upload_document(data, None, None, 900.0, dry_run=True)
            return self._as(ValidateOut, job.result)

    def dataset_document(
        self,
        dataset: str | Mapping[str, Any] | BaseModel | None = None,
        *,
        cases: Any = None,
        version: str | None = None,
        bump: str | None = None,
        base: str | None = None,
        description: str | None = None,
        tags: list[str] | None = None,
        shared_files: list[Any] | None = None,
    ) -> dict[str, Any]:
        """The dataset document `register` sends (see there)."""
        if version is not None and bump is not None:
            raise BadRequest("give either version or bump, not both", field="bump")
        doc: dict[str, Any]
        if isinstance(dataset, str) or dataset is None:
            doc = {} if dataset is None else {"id": dataset}
        else:
            raw = _body(dataset)
            if not isinstance(raw, Mapping):
                raise BadRequest(
                    "dataset is an id or a dataset document (a mapping)", field="dataset"
                )
            doc = dict(raw)
        if cases is not None:
            doc.update(_cases_part(cases))
            if isinstance(dataset, str):
                doc["id"] = dataset
        overrides = {"description": description, "tags": tags, "shared_files": shared_files}
        doc.update(_drop_none(overrides))
        if version is not None:
            doc["version"] = version
            doc.pop("bump", None)
        if bump is not None:
            doc["bump"] = str(bump)
            doc.pop("version", None)
        if base is not None:
            doc["base"] = base
        if "id" not in doc:
            raise BadRequest("name the dataset: register('my-dataset', cases=...)", field="id")
        if doc.get("version") is None and doc.get("bump") is None:
            raise BadRequest("give version='1.0.0' or bump='minor'", field="version")
        if "cases" not in doc and "base" not in doc:
            raise BadRequest("give the cases: cases=[...], a DataFrame or a file", field="cases")
        return doc

    def datasets(self, *, shared: bool = False) -> Iterator[DatasetOut]:
        """Every dataset of your tenant (`shared=True`: the `_shared` ones), paged lazily."""
        cursor: str | None = None
        while True:
            page = self.list_datasets(shared=shared, cursor=cursor, limit=self.page_size)
            yield from page.items
            cursor = page.next_cursor
            if not cursor:
                return

    def list_datasets(
        self, *, shared: bool = False, cursor: str | None = None, limit: int = 50
    ) -> PageOut[DatasetOut]:
        """One page of datasets."""
        from caseshelf.api.dto import DatasetOut

        query = {"shared": shared, "cursor": cursor, "limit": limit}
        return self._page(DatasetOut, self.call("GET", "datasets", query=query))

    def dataset(self, name: str) -> DatasetOut:
        """One dataset's summary (latest version, counts)."""
        from caseshelf.api.dto import DatasetOut

        return self._as(DatasetOut, self.call("GET", "datasets", name))

    def versions(self, name: str, *, include_deleted: bool = False) -> Iterator[VersionOut]:
        """A dataset's versions, newest first, paged lazily."""
        cursor: str | None = None
        while True:
            page = self.list_versions(
                name, include_deleted=include_deleted, cursor=cursor, limit=self.page_size
            )
            yield from page.items
            cursor = page.next_cursor
            if not cursor:
                return

    def list_versions(
        self,
        name: str,
        *,
        include_deleted: bool = False,
        cursor: str | None = None,
        limit: int = 100,
    ) -> PageOut[VersionOut]:
        from caseshelf.api.dto import VersionOut

        query = {"include_deleted": include_deleted, "cursor": cursor, "limit": limit}
        return self._page(VersionOut, self.call("GET", "datasets", name, "versions", query=query))

    def get(self, ref: str, *, include_deleted: bool = False) -> VersionOut:
        """One version's metadata: version, content_digest, case_count, produced_by, ..."""
        from caseshelf.api.dto import VersionOut

        name, r = parse_ref(ref)
        query = {"include_deleted": include_deleted}
        return self._as(VersionOut, self.call("GET", "datasets", name, "versions", r, query=query))

    def list_cases(
        self,
        ref: str,
        *,
        cursor: str | None = None,
        limit: int = 100,
        include_deleted: bool = False,
    ) -> PageOut[dict[str, Any]]:
        """One page of a version's cases (canonical form), and the cursor of the next."""
        from caseshelf.api.dto import PageOut

        data = self._cases_page(ref, cursor=cursor, limit=limit, include_deleted=include_deleted)
        return PageOut[dict[str, Any]].model_construct(
            items=data["items"], next_cursor=data.get("next_cursor")
        )

    def _cases_page(
        self, ref: str, *, cursor: str | None, limit: int, include_deleted: bool
    ) -> dict[str, Any]:
        name, r = parse_ref(ref)
        query = {"cursor": cursor, "limit": limit, "include_deleted": include_deleted}
        data = self.call("GET", "datasets", name, "versions", r, "cases", query=query)
        if not isinstance(data, dict) or not isinstance(data.get("items"), list):
            raise Upstream("the API answered a page of cases without items")
        return data

    @overload
    def cases(
        self,
        ref: str,
        *,
        include_deleted: bool = False,
        page_size: int | None = None,
        progress: Progress | None = None,
        raw: Literal[False] = False,
    ) -> Iterator[Case]: ...

    @overload
    def cases(
        self,
        ref: str,
        *,
        include_deleted: bool = False,
        page_size: int | None = None,
        progress: Progress | None = None,
        raw: Literal[True],
    ) -> Iterator[dict[str, Any]]: ...

    def cases(
        self,
        ref: str,
        *,
        include_deleted: bool = False,
        page_size: int | None = None,
        progress: Progress | None = None,
        raw: bool = False,
    ) -> Iterator[Case] | Iterator[dict[str, Any]]:
        """A version's cases in dataset order, as the case model
        (`caseshelf.domain.models.Case`, like every other read of the client; `raw=True`: the
        canonical plain dicts, as stored, for speed), read lazily a page at a time (over HTTP
        the next page is fetched while this one is read: `_pages_ahead`). The version is
        pinned by its content digest first, so every page comes from the same content even if
        a tag moves meanwhile. `progress(n)` is called with each page's size."""
        plain = self._plain_cases(ref, include_deleted, page_size, progress)
        if raw:
            return plain
        from caseshelf.domain.models import Case

        return map(Case.model_validate, plain)

    def _plain_cases(
        self, ref: str, include_deleted: bool, page_size: int | None, progress: Progress | None
    ) -> Iterator[dict[str, Any]]:
        name, _ = parse_ref(ref)
        pinned = f"{name}@{self.get(ref, include_deleted=include_deleted).content_digest}"
        size = page_size or self.page_size
        if isinstance(self.transport, Http):
            pages = self._pages_ahead(pinned, size, include_deleted)
        else:
            pages = self._pages(pinned, size, include_deleted)
        for items in pages:
            if progress is not None:
                progress(len(items))
            for case in items:
                yield self._whole_case(case, include_deleted)

    @overload
    def case(
        self,
        ref: str,
        position: int,
        *,
        include_deleted: bool = False,
        raw: Literal[False] = False,
    ) -> Case: ...

    @overload
    def case(
        self, ref: str, position: int, *, include_deleted: bool = False, raw: Literal[True]
    ) -> dict[str, Any]: ...

    def case(
        self, ref: str, position: int, *, include_deleted: bool = False, raw: bool = False
    ) -> Case | dict[str, Any]:
        """The case at `position` (from 0, in dataset order) of a version, however large: one
        too large for an answer comes from the presigned URL the API gives for it. The case
        model (`raw=True`: the canonical plain dict)."""
        name, r = parse_ref(ref)
        query = {"include_deleted": include_deleted}
        data = self.call(
            "GET", "datasets", name, "versions", r, "cases", str(position), query=query
        )
        if isinstance(data, dict) and isinstance(data.get("url"), str) and "expires_in" in data:
            import orjson

            data = orjson.loads(self._fetch(data["url"], None, None))
        if not isinstance(data, dict):
            raise Upstream(f"the API answered the case at {position} with no case")
        if raw:
            return data
        from caseshelf.domain.models import Case

        return Case.model_validate(data)

    def _whole_case(self, item: Any, include_deleted: bool = False) -> Any:
        """A case of a page as it is, or, for the stub of a case too large for a page
        (`oversized`), the case itself from the route it names."""
        link = item.get("oversized") if isinstance(item, dict) else None
        if not isinstance(link, dict) or not isinstance(link.get("href"), str):
            return item
        _, _, name, _, ref, _, position = link["href"].split("/", 6)
        return self.case(f"{name}@{ref}", int(position), include_deleted=include_deleted, raw=True)

    def case_models(
        self, ref: str, *, include_deleted: bool = False, page_size: int | None = None
    ) -> Iterator[Case]:
        """The same as `cases(ref)` (kept for code written when `cases` gave dicts)."""
        return self.cases(ref, include_deleted=include_deleted, page_size=page_size)

    def _pages(
        self, ref: str, size: int, include_deleted: bool, *, cursor: str | None = None
    ) -> Iterator[list[Any]]:
        while True:
            page = self._cases_page(ref, cursor=cursor, limit=size, include_deleted=include_deleted)
            yield page["items"]
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def _pages_ahead(self, ref: str, size: int, include_deleted: bool) -> Iterator[list[Any]]:
        """Pages as `_pages` gives them, the next one asked for by a thread of its own as soon
        as this one has come (its cursor comes in the answer's `X-Next-Cursor` header), while
        this one is parsed and consumed: over HTTP the server's work and the client's overlap.
        At most one page waits ahead of the one being read, and one more is on its way.

        The thread sends the next request itself, before this one is parsed: parsing a page
        holds the GIL, so a request asked for from here, then parsed around, would only go out
        once the parse was done, and the client would wait for the server's whole answer every
        page (`bench/bench_client.py`)."""
        name, r = parse_ref(ref)
        segments = ("datasets", name, "versions", r, "cases")
        from caseshelf.client.prefetch import Prefetch

        def fetch(cursor: str | None) -> Answer:
            query = {"cursor": cursor, "limit": size, "include_deleted": include_deleted}
            return self.transport.send(Request("GET", segments, query))

        fetched = Prefetch(fetch, lambda answer: answer.header(NEXT_CURSOR_HEADER))
        try:
            for answer in fetched:
                page = answer.json()
                if not isinstance(page, dict) or not isinstance(page.get("items"), list):
                    raise Upstream("the API answered a page of cases without items")
                yield page["items"]
                cursor = page.get("next_cursor")
                if cursor and cursor != answer.header(NEXT_CURSOR_HEADER):
                    # an API without the header: the rest one page at a time
                    fetched.close()
                    yield from self._pages(ref, size, include_deleted, cursor=cursor)
                    return
                if not cursor:
                    return
        finally:
            fetched.close()

    def to_pandas(self, ref: str, *, include_deleted: bool = False) -> Any:
        """A version's cases as a pandas DataFrame, one row a case: `inputs` and
        `expectations` spread into flat columns (`inputs.user`, `expectations.ground_truth`),
        other fields as they are. Needs `caseshelf[pandas]`."""
        from caseshelf.client.frames import cases_frame

        return cases_frame(self.cases(ref, include_deleted=include_deleted, raw=True))

    def to_hf(self, ref: str, *, include_deleted: bool = False) -> Any:
        """A version's cases as a Hugging Face `datasets.Dataset` (the columns of `to_pandas`),
        whose fingerprint and `info` follow the content: the fingerprint is
        `hf_fingerprint(content_digest)` (so `datasets`' own cache keys, which start from it,
        are the same for the same content wherever it was loaded from, and differ for any other
        content), and `info` names `ID@VERSION`, the digest and where the version is. Needs
        `caseshelf[hf]`."""
        datasets = require("datasets", "to_hf")
        from caseshelf.client.frames import columns_of, hf_fingerprint, hf_info

        name, _ = parse_ref(ref)
        version = self.get(ref, include_deleted=include_deleted)
        digest = version.content_digest
        # One list per column, None where a case has no value: Arrow infers each column's type.
        built = datasets.Dataset.from_dict(
            columns_of(self.cases(f"{name}@{digest}", include_deleted=include_deleted, raw=True))
        )
        info = hf_info(
            datasets.DatasetInfo,
            name=name,
            version=version.version,
            content_digest=digest,
            description=version.description,
            location=self.version_location(name, digest),
        )
        info.features = built.features
        return datasets.Dataset(built.data, info=info, fingerprint=hf_fingerprint(digest))

    def version_location(self, name: str, content_digest: str) -> str:
        """Where a version is, pinned by its content digest: its API route over HTTP
        (`<API URL>/datasets/ID/versions/sha256:<hex>`), else `caseshelf:ID@sha256:<hex>` (the
        embedded store, or any other transport)."""
        if isinstance(self.transport, Http):
            return f"{self.transport.base_url}/datasets/{name}/versions/{content_digest}"
        return f"caseshelf:{name}@{content_digest}"

    def search_cases(
        self,
        ref: str,
        q: str,
        *,
        by: str = "any",
        cursor: str | None = None,
        limit: int = 100,
        include_deleted: bool = False,
    ) -> CaseSearchPageOut:
        """One page of a version's cases matching `q` (`by`: `id`, `tag`, `text` or `any`).
        A page searches on from `cursor` within a budget: it may hold fewer than `limit`
        matches and still have a `next_cursor`; `scanned_to` says how far it got."""
        from caseshelf.api.browse_dto import CaseSearchPageOut

        name, r = parse_ref(ref)
        query = {
            "q": q,
            "by": by,
            "cursor": cursor,
            "limit": limit,
            "include_deleted": include_deleted,
        }
        data = self.call("GET", "datasets", name, "versions", r, "cases", query=query)
        return self._as(CaseSearchPageOut, data)

    @overload
    def search(
        self,
        ref: str,
        q: str,
        *,
        by: str = "any",
        include_deleted: bool = False,
        progress: Callable[[int], None] | None = None,
        raw: Literal[False] = False,
    ) -> Iterator[Case]: ...

    @overload
    def search(
        self,
        ref: str,
        q: str,
        *,
        by: str = "any",
        include_deleted: bool = False,
        progress: Callable[[int], None] | None = None,
        raw: Literal[True],
    ) -> Iterator[dict[str, Any]]: ...

    def search(
        self,
        ref: str,
        q: str,
        *,
        by: str = "any",
        include_deleted: bool = False,
        progress: Callable[[int], None] | None = None,
        raw: bool = False,
    ) -> Iterator[Case] | Iterator[dict[str, Any]]:
        """Every case of a version matching `q`, in dataset order, read lazily page by page, as
        the case model (`raw=True`: plain dicts); `progress(n)` after each page with the number
        of cases it searched."""
        plain = self._plain_search(ref, q, by, include_deleted, progress)
        if raw:
            return plain
        from caseshelf.domain.models import Case

        return map(Case.model_validate, plain)

    def _plain_search(
        self,
        ref: str,
        q: str,
        by: str,
        include_deleted: bool,
        progress: Callable[[int], None] | None,
    ) -> Iterator[dict[str, Any]]:
        name, _ = parse_ref(ref)
        pinned = f"{name}@{self.get(ref, include_deleted=include_deleted).content_digest}"
        cursor: str | None = None
        while True:
            page = self.search_cases(
                pinned,
                q,
                by=by,
                cursor=cursor,
                limit=self.page_size,
                include_deleted=include_deleted,
            )
            if progress is not None:
                progress(page.scanned_to - page.scanned_from)
            for case in page.items:
                yield self._whole_case(case, include_deleted)
            cursor = page.next_cursor
            if not cursor:
                return

    def file(self, ref: str, digest: str, *, include_deleted: bool = False) -> bytes:
        """The body of one file of a version (a case's companion file or a shared file) by its
        digest, checked against that digest."""
        name, r = parse_ref(ref)
        answer = self.transport.send(
            Request(
                "GET",
                ("datasets", name, "versions", r, "files", digest),
                {"include_deleted": include_deleted},
            )
        )
        want = digest.removeprefix("sha256:")
        body = answer.body
        if hashlib.sha256(body).hexdigest() == want:
            return body
        # A binary body through API Gateway to a client that did not ask for bytes: base64.
        try:
            decoded = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            decoded = b""
        if hashlib.sha256(decoded).hexdigest() == want:
            return decoded
        raise Corrupt(f"the file answered for {digest} has another digest", digest=digest)

    def stats(self, ref: str, *, include_deleted: bool = False) -> VersionStatsOut:
        """A version's numbers over every case: cases per tag, input lengths, file sizes."""
        from caseshelf.api.browse_dto import VersionStatsOut

        name, r = parse_ref(ref)
        query = {"include_deleted": include_deleted}
        data = self.call("GET", "datasets", name, "versions", r, "stats", query=query)
        return self._as(VersionStatsOut, data)

    def me(self) -> MeOut:
        """Who the API takes you for: tenant, principal, roles, and what they allow."""
        from caseshelf.api.browse_dto import MeOut

        return self._as(MeOut, self.call("GET", "me"))

    def download(
        self,
        ref: str,
        *,
        to: str | Path | BinaryIO | None = None,
        include_deleted: bool = False,
        progress: Progress | None = None,
        total: Progress | None = None,
        wait: float = 3600.0,
    ) -> Downloaded:
        """The whole version as one dataset document that `register` takes as it is. With
        `to` (a file path, or a directory for the server's file name) it is written there,
        streamed from the presigned URL when the API gives one (the embedded store gives one
        of its own), a piece at a time, and `path` says where; `to` may also be a binary
        stream (`sys.stdout.buffer`), written as the pieces come. Else `body` holds it.
        `progress(n)` is called with bytes as they arrive, `total(n)` with the size once it is
        known.

        The API renders a document once, as a job (202): this follows the job to its end
        (`follow_job`; `wait` bounds the wait in seconds), raises the error of the part that
        failed, or asks again for the document it rendered."""
        name, r = parse_ref(ref)
        query = {"include_deleted": include_deleted}
        request = Request("GET", ("datasets", name, "versions", r, "download"), query)
        answer = self.transport.send(request)
        if answer.status == 202:
            answer = self._rendered(answer, request, wait)
        default = f"{name}-{r.replace(':', '-')}.json"
        # The document itself comes as an attachment; a presigned URL as a small JSON answer.
        disposition = answer.header("content-disposition")
        doc: Any = answer.json() if disposition is None else None
        if isinstance(doc, dict) and isinstance(doc.get("url"), str) and "cases" not in doc:
            filename = safe_filename(doc.get("filename"), default)
            if _is_stream(to):
                counted: list[int] = []

                def seen(n: int) -> None:
                    counted.append(n)
                    if progress is not None:
                        progress(n)

                self._fetch(doc["url"], to, seen, total)  # type: ignore[arg-type]
                return Downloaded(filename, size=sum(counted))
            target = _target(to, filename)  # type: ignore[arg-type]
            if target is None:
                body = self._fetch(doc["url"], None, progress, total)
                return Downloaded(filename, body=body, size=len(body))
            self._fetch(doc["url"], target, progress, total)
            return Downloaded(filename, path=target, size=target.stat().st_size)
        filename = _disposition_name(disposition, default)
        if total is not None:
            total(len(answer.body))
        if progress is not None:
            progress(len(answer.body))
        if _is_stream(to):
            to.write(answer.body)  # type: ignore[union-attr]
            return Downloaded(filename, size=len(answer.body))
        target = _target(to, filename)  # type: ignore[arg-type]
        if target is None:
            return Downloaded(filename, body=answer.body, size=len(answer.body))
        _write_whole(target, [answer.body])
        return Downloaded(filename, path=target, size=len(answer.body))

    def _rendered(self, started: Answer, request: Request, wait: float) -> Answer:
        """The download route's answer once the job its 202 answered has rendered the
        document."""
        from caseshelf.api.job_dto import JobOut  # lazy: pydantic, ~0.2 s

        job = self.follow_job(self._as(JobOut, started.json()).id, wait=wait)
        if job.state == "failed":
            raise job_error(job.id, job.error)
        answer = self.transport.send(request)
        if answer.status == 202:
            raise Upstream(
                f"job {job.id} rendered the document, but it was gone when asked for; ask again",
                job_id=job.id,
            )
        return answer

    def _fetch(
        self,
        url: str,
        target: Path | BinaryIO | None,
        progress: Progress | None,
        total: Progress | None = None,
    ) -> bytes:
        """GET `url` (presigned: no credentials of ours go with it; or one of the in-process
        store's own) a piece at a time, into `target` (a file, written whole or not at all; a
        binary stream) or, with none, answered whole."""
        transport = self.transport
        if isinstance(transport, InProcess) and transport.serves(url):
            fh, size = transport.open_url(url)
            with fh:
                if total is not None:
                    total(size)
                return _take(iter(lambda: fh.read(DOWNLOAD_CHUNK), b""), target, progress)
        http = transport if isinstance(transport, Http) else Http(url)
        with http.stream(url) as resp:
            length = resp.headers.get("content-length")
            if total is not None and length is not None and length.isdigit():
                total(int(length))
            return _take(resp.iter_bytes(DOWNLOAD_CHUNK), target, progress)

    def tag(self, ref: str, tags: list[str]) -> TagMovesOut:
        """Point `tags` at a version (`ID@VERSION`): each tag moves there from wherever it
        pointed, since a tag names at most one version. `.moves` says what moved from where,
        `.version` is the version after."""
        from caseshelf.api.dto import TagMovesOut

        name, v = parse_version(ref)
        body = {"version": v, "tags": list(tags)}
        return self._as(TagMovesOut, self.call("POST", "datasets", name, "tags", body=body))

    def untag(self, name: str, tags: list[str]) -> TagMovesOut:
        """Remove `tags` of dataset `name` (each pointed at no version after)."""
        from caseshelf.api.dto import TagMovesOut

        moves: list[Any] = []
        for tag in tags:
            out = self._as(TagMovesOut, self.call("DELETE", "datasets", name, "tags", tag))
            moves.extend(out.moves)
        return TagMovesOut(id=name, moves=moves, version=None)

    def set_tags(self, ref: str, tags: list[str]) -> VersionOut:
        """Replace a version's tags (`ID@VERSION`): each named tag moves here, each other tag
        it had is removed; `[]` clears them."""
        from caseshelf.api.dto import VersionOut

        name, v = parse_version(ref)
        data = self.call("PUT", "datasets", name, "versions", v, "tags", body={"tags": list(tags)})
        return self._as(VersionOut, data)

    def tags(self, name: str) -> TagsOut:
        """Where each tag of dataset `name` points, and its moves, newest first."""
        from caseshelf.api.dto import TagsOut

        return self._as(TagsOut, self.call("GET", "datasets", name, "tags"))

    def resolve_refs(
        self, refs: Iterable[str | Mapping[str, Any]], *, batch: int = 500
    ) -> list[RefResolvedOut]:
        """Many refs resolved at once (`POST /refs/resolve`, `batch` a request): each `ID@REF`,
        or `{ref, version, digest}` to have the version it was pinned to answered as well
        (`pinned`, tombstoned ones included). One answer a ref, in order: its `version` or its
        `problem`, and `moved` (the tag's last move) when the ref is a tag."""
        from caseshelf.api.refs_dto import RefsResolveOut

        queries = [{"ref": r} if isinstance(r, str) else dict(r) for r in refs]
        out: list[RefResolvedOut] = []
        for start in range(0, len(queries), batch):
            body = {"refs": queries[start : start + batch]}
            out.extend(
                self._as(RefsResolveOut, self.call("POST", "refs", "resolve", body=body)).items
            )
        return out

    def delete(self, ref: str) -> VersionOut:
        """Tombstone a version (`ID@VERSION`): hidden, content kept; `revive` undoes it."""
        from caseshelf.api.dto import VersionOut

        name, v = parse_version(ref)
        return self._as(VersionOut, self.call("DELETE", "datasets", name, "versions", v))

    def revive(self, ref: str) -> VersionOut:
        """Restore a tombstoned version (`ID@VERSION`)."""
        from caseshelf.api.dto import VersionOut

        name, v = parse_version(ref)
        return self._as(VersionOut, self.call("POST", "datasets", name, "versions", v, "revive"))

    # -- datasets as code: the lock file and the local cache -----------------------------------

    @property
    def cache(self) -> Cache:
        """The verified local cache of versions by content digest (`CASESHELF_CACHE`, else the
        user cache directory; `CASESHELF_CACHE_MAX` bounds it). Assign another to use it."""
        if self._cache is None:
            from caseshelf.client.cache import Cache

            self._cache = Cache.from_env()
        return self._cache

    @cache.setter
    def cache(self, value: Cache) -> None:
        self._cache = value

    def pins(self, lock: str | Path | None = None) -> Pins:
        """The lock file at `lock` (default: the nearest `caseshelf.lock`, see
        `caseshelf.client.pins.find_lock`) on this registry and this client's cache."""
        from caseshelf.client.pins import Pins

        return Pins(self, lock, self.cache)

    def pin(
        self,
        ref: str,
        *,
        name: str | None = None,
        ids: list[str] | None = None,
        tags: list[str] | None = None,
        limit: int | None = None,
        sample: int | None = None,
        seed: int | str | None = None,
        lock: str | Path | None = None,
    ) -> PinnedOut:
        """Pin `ref` in the lock file as `name` (default the dataset id): the version it
        resolves to and its content digest; with `ids`/`tags`/`limit`/`sample`, that subset of
        it (as `subset` selects it, stamped)."""
        from caseshelf.client.pins import selection_of

        sel = selection_of(ids=ids, tags=tags, limit=limit, sample=sample, seed=seed)
        return self.pins(lock).pin(ref, name=name, selection=sel)

    def unpin(self, name: str, *, lock: str | Path | None = None) -> UnpinnedOut:
        """Take pin `name` out of the lock file."""
        return self.pins(lock).unpin(name)

    def update(self, *names: str, lock: str | Path | None = None) -> UpdateOut:
        """Resolve the named pins (every pin when none is named) again and rewrite the lock
        file; `.pins` says what changed."""
        return self.pins(lock).update(names)

    def check(self, *, strict: bool = False, lock: str | Path | None = None) -> CheckOut:
        """Every pin against the registry in one request: `.ok`, and `.problems` (a pinned
        version gone, tombstoned or other content under its label; with `strict`, a ref that
        moved since it was locked, who moved it and the diff's counts)."""
        return self.pins(lock).check(strict=strict)

    def sync(self, *, lock: str | Path | None = None) -> SyncOut:
        """Every pinned version into the local cache, verified: loads need no registry after."""
        return self.pins(lock).sync()

    def load(self, name: str, *, lock: str | Path | None = None) -> list[dict[str, Any]]:
        """The cases of the version pin `name` of the nearest lock file pins (a subset pin: its
        selection), from the local cache when it holds them, verified; else fetched, verified
        and cached. Errors name the lock file, the line and the pin."""
        return self.pins(lock).load(name)

    # -- subset, diff, export ------------------------------------------------------------------

    def subset(
        self,
        ref: str,
        body: Mapping[str, Any] | BaseModel | None = None,
        *,
        ids: list[str] | None = None,
        tags: list[str] | None = None,
        limit: int | None = None,
        sample: int | None = None,
        seed: int | str | None = None,
        register_as: Mapping[str, Any] | str | None = None,
        with_cases: bool = False,
        include_deleted: bool = False,
        wait: float = 3600.0,
    ) -> SubsetOut:
        """A stamped selection of a version's cases: ids -> tags -> limit -> sample.
        `with_cases=True` answers the cases too (in process, with no size cap).
        `register_as` ("id", "id@1.0.0" or `{id, version | bump}`) registers the selection as a
        derived version: the API does that as a job, which this follows (at most `wait`
        seconds), raising the error it failed with; `.registered` is the version."""
        from caseshelf.api.dto import SubsetOut, SubsetRegisteredOut

        name, r = parse_ref(ref)
        request = dict(_body(body) or {})
        if isinstance(register_as, str):
            rid, at, rver = register_as.partition("@")
            register_as = {"id": rid, "version": rver} if at else {"id": rid, "bump": "minor"}
        fields = {
            "ids": ids,
            "tags": tags,
            "limit": limit,
            "sample": sample,
            "seed": seed,
            "register_as": register_as,
        }
        request.update(_drop_none(fields))
        query = {"cases": with_cases, "include_deleted": include_deleted}
        path = ("datasets", name, "versions", r, "subset")
        registered = None
        if request.get("register_as") is not None:
            # The registration's job, followed; then the selection of the version it pinned,
            # without register_as, answers the ids (and cases) as before.
            done = self._as(
                SubsetRegisteredOut,
                self._job_result(path, request, wait, query={"include_deleted": include_deleted}),
            )
            registered = done.registered
            path = ("datasets", done.parent.id, "versions", done.parent.version, "subset")
            request = {k: v for k, v in request.items() if k != "register_as"}
        data = self.call("POST", *path, query=query, body=request)
        out = self._as(SubsetOut, data).model_copy(update={"registered": registered})
        if not with_cases or out.cases is None:
            return out
        # The cases come a page at a time (as many as fit one answer): the rest of them, by
        # the cursor, with the same selection.
        cases = [self._whole_case(case) for case in out.cases]
        again = request
        cursor = out.cases_next_cursor
        while cursor:
            page = self._as(
                SubsetOut, self.call("POST", *path, query={**query, "cursor": cursor}, body=again)
            )
            cases.extend(self._whole_case(case) for case in page.cases or ())
            cursor = page.cases_next_cursor
        return out.model_copy(update={"cases": cases, "cases_next_cursor": None})

    def diff(
        self,
        base: str,
        candidate: str,
        *,
        summary: bool = False,
        include_deleted: bool = False,
        fields: bool = False,
        path: str | None = None,
    ) -> DiffOut:
        """What changed from `base` to `candidate` (`ID@REF` each; a bare REF as the candidate
        means the base's dataset): added, removed, changed field by field, every entry in one
        answer (the pages of `diff_pages` joined: for diffs that fit in memory; iterate
        `diff_pages` or `diff_entries` for large ones). `fields`: also which field paths
        changed and in how many cases; `path`: only the changes at that field path or under
        it (e.g. `/expectations/ground_truth`)."""
        pages = self.diff_pages(
            base,
            candidate,
            summary=summary,
            include_deleted=include_deleted,
            limit=MAX_PAGE,
            fields=fields,
            path=path,
        )
        first = next(pages)
        if summary:
            return first
        added, removed, changed = (
            list(first.added or ()),
            list(first.removed or ()),
            list(first.changed or ()),
        )
        for page in pages:
            added.extend(page.added or ())
            removed.extend(page.removed or ())
            changed.extend(page.changed or ())
        return first.model_copy(
            update={"added": added, "removed": removed, "changed": changed, "next_cursor": None}
        )

    def diff_pages(
        self,
        base: str,
        candidate: str,
        *,
        summary: bool = False,
        include_deleted: bool = False,
        limit: int | None = None,
        fields: bool = False,
        path: str | None = None,
    ) -> Iterator[DiffOut]:
        """The diff's answers page by page, each asked for when the previous one is consumed
        (one page held at a time): `summary` and `meta` of the whole diff on every page, and
        `limit` entries (server default 100, at most 1000) across `changed`, `added` and
        `removed`, in that order. The series is of the two versions the first page resolved,
        whatever `latest` or a tag names meanwhile (the cursor pins their content digests)."""
        from caseshelf.api.dto import DiffOut

        name, base_ref = parse_ref(base, what="base")
        if "@" in candidate:
            cand_name, cand_ref = parse_ref(candidate, what="candidate")
        else:
            cand_name, cand_ref = name, parse_ref(f"{name}@{candidate}", what="candidate")[1]
        query: dict[str, Any] = {
            "base": base_ref,
            "candidate": cand_ref,
            "candidate_id": cand_name if cand_name != name else None,
            "summary": summary,
            "include_deleted": include_deleted,
            "limit": limit,
            "fields": fields or None,
            "path": path,
        }
        cursor: str | None = None
        while True:
            data = self.call("GET", "datasets", name, "diff", query={**query, "cursor": cursor})
            page = self._as(DiffOut, data)
            yield page
            cursor = page.next_cursor
            if not cursor:
                return

    def diff_entries(
        self,
        base: str,
        candidate: str,
        *,
        include_deleted: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[str, CaseBriefOut | CaseChangesOut]]:
        """Every entry of the diff as `(kind, entry)`, kind `changed`, `added` or `removed`,
        in the diff's order, read a page at a time (`diff_pages`)."""
        for page in self.diff_pages(base, candidate, include_deleted=include_deleted, limit=limit):
            for c in page.changed or ():
                yield "changed", c
            for b in page.added or ():
                yield "added", b
            for b in page.removed or ():
                yield "removed", b

    def diff_markdown(
        self,
        base: str,
        candidate: str,
        *,
        ui_url: str | None = None,
        max_cases: int | None = None,
        limit: int | None = None,
        summary: bool = False,
        include_deleted: bool = False,
    ) -> str:
        """The diff as a GitHub-flavoured Markdown comment for a pull request
        (`caseshelf.domain.diff_markdown`): the counts, the fields that changed and how often,
        the first `max_cases` (default 20) changed, added and removed cases, before and after
        with the differing words marked, links into the UI at `ui_url` when given; at most
        `limit` characters (default GitHub's 65,536), rows left out whole and counted. The diff
        is read a page at a time; `summary` reads no case (counts and the version's own
        changes only)."""
        from caseshelf.domain.diff_markdown import (
            COMMENT_LIMIT,
            DEFAULT_MAX_CASES,
            render_diff_markdown,
        )

        pages = self.diff_pages(
            base, candidate, summary=summary, include_deleted=include_deleted, limit=MAX_PAGE
        )
        first = next(pages)
        head = first.model_dump(mode="json", include={"base", "candidate", "summary", "meta"})

        def entries() -> Iterator[tuple[str, Mapping[str, Any]]]:
            for page in chain((first,), pages):  # one page held at a time
                d = page.model_dump(mode="json")
                for kind in ("changed", "added", "removed"):
                    for entry in d[kind] or ():
                        yield kind, entry

        hint = f"caseshelf diff {base} {candidate} --jsonl"
        return render_diff_markdown(
            head,
            entries(),
            ui_url=ui_url,
            max_cases=DEFAULT_MAX_CASES if max_cases is None else max_cases,
            limit=COMMENT_LIMIT if limit is None else limit,
            every_entry_hint=hint,
        )

    def export(
        self,
        ref: str,
        body: Mapping[str, Any] | BaseModel | None = None,
        *,
        to: str | Path | None = None,
        wait: float = 3600.0,
        **fields: Any,
    ) -> ExportOut:
        """Export a version as per-case directories. `body` is the export request
        (`caseshelf.services.exports.ExportRequest`, or its JSON); keyword `fields` are added
        to it as they are (`subset={...}`, `shared_files=[...]`, `format=...`, and whatever the
        API's export request takes), so the server validates every option.

        The API runs an export as a job (202): this follows it to its end (`follow_job`,
        reporting its progress to the command line's progress, if any) and answers its result,
        or raises the error of the part that failed; `wait` bounds the wait in seconds.

        `to`: where the export goes. Default: the registry's own exports prefix. A local
        directory: unpacked there, verified against its manifest. `s3://bucket/prefix`: written
        there, which only the embedded store can do (an API writes only into its own bucket;
        copy from there with `pull`)."""
        from caseshelf.api.dto import ExportOut
        from caseshelf.api.job_dto import JobOut  # lazy: pydantic, ~0.2 s
        from caseshelf.services.pull import current_progress

        name, r = parse_ref(ref)
        request = dict(_body(body) or {})
        request.update({k: _body(v) for k, v in fields.items()})
        target = None if to is None else str(to)
        if target is not None and isinstance(self.transport, InProcess):
            return self._export_in_process(name, r, request, target)
        if target is not None and target.startswith("s3://"):
            raise BadRequest(
                "over HTTP an export goes to the registry's bucket; copy it elsewhere with "
                "pull(), or export from the embedded store",
                field="to",
            )
        if target is not None:
            request["bundle"] = True  # a local directory is unpacked from the bundle
        path = ("datasets", name, "versions", r, "exports")
        answer = self.transport.send(Request("POST", path, {}, request))
        if answer.status == 202:
            job = self._as(JobOut, answer.json())
            job = self.follow_job(job.id, wait=wait, progress=current_progress())
            if job.state == "failed":
                raise job_error(job.id, job.error)
            out = self._as(ExportOut, job.result)
        else:
            out = self._as(ExportOut, answer.json())
        if target is None:
            return out
        from caseshelf.services.pull import install_bundle

        if not out.bundle_url:
            raise Upstream("the API answered no bundle URL to download the export from")
        install_bundle(self._fetch(out.bundle_url, None, None), Path(target))
        return out.model_copy(
            update={"prefix": target, "manifest_key": str(Path(target) / "manifest.json")}
        )

    def _export_in_process(
        self, name: str, ref: str, request: dict[str, Any], to: str
    ) -> ExportOut:
        """An export to a destination of the caller's choosing: the API has none (its exports
        go to its own bucket), so in process the export service writes there itself, with the
        request the route would validate."""
        from caseshelf.api import dto
        from caseshelf.domain.envelope import parse_model
        from caseshelf.services.exports import ExportRequest

        transport = self.transport
        assert isinstance(transport, InProcess)
        parsed = parse_model(ExportRequest, request)
        svc = transport.services
        try:
            res = svc.exports.export_version(transport.identity, name, ref, parsed, to=to)
        except NotFound as exc:
            raise transport.placed(exc) from None
        return dto.export_out(res)

    def pull(
        self,
        source: str,
        dest: str | Path,
        *,
        bundle: bool = False,
        concurrency: int = 16,
        progress: PullProgress | None = None,
    ) -> dict[str, Any]:
        """Download an export (`s3://bucket/prefix`, as `export` answers it) into `dest`,
        verified against its manifest. Needs S3 access only (the usual AWS settings), not the
        API. `progress` is told the totals, then each file as it lands."""
        from caseshelf.bootstrap import load_settings, s3_store
        from caseshelf.services.exports import parse_s3_url
        from caseshelf.services.pull import pull

        settings = (
            self.transport.settings if isinstance(self.transport, InProcess) else load_settings()
        )
        bucket, prefix = parse_s3_url(source)
        store = s3_store(settings, bucket)
        got = pull(
            store,
            prefix,
            Path(dest),
            concurrency=concurrency,
            bundle=bundle,
            progress=progress,
        )
        return {
            "dest": str(got.dest),
            "export_id": got.export_id,
            "case_count": got.case_count,
            "file_count": got.file_count,
            "bytes": got.bytes,
            "requests": got.requests,
            "reused": got.reused,
            "resumed": got.resumed,
        }

    # -- tasks -----------------------------------------------------------------------------------

    def import_tasks(
        self,
        format: str,
        body: Mapping[str, Any] | BaseModel | None = None,
        *,
        wait: float = 3600.0,
        **fields: Any,
    ) -> TaskImportOut:
        """Register Terminal-Bench or Harbor tasks (`format`: `terminal-bench` | `harbor`) from
        `s3=...`, `upload_id=...` or `archive_base64=...`. The API imports them as a job: this
        follows it (at most `wait` seconds) and answers what it registered, or raises the
        error it failed with (an invalid task named, a limit)."""
        from caseshelf.api.dto import TaskImportOut

        request = dict(_body(body) or {})
        request.update(fields)
        return self._as(TaskImportOut, self._job_result(("datasets", format), request, wait))

    def _job_result(
        self,
        path: tuple[str, ...],
        body: Mapping[str, Any],
        wait: float,
        *,
        query: Mapping[str, Any] | None = None,
    ) -> Any:
        """POST `body` to a route that answers a job (202, or an answer at once): the job
        followed to its end (`follow_job`) and its result, or the error it failed with."""
        from caseshelf.api.job_dto import JobOut  # lazy: pydantic, ~0.2 s

        answer = self.transport.send(Request("POST", path, dict(query or {}), _body(body)))
        if answer.status != 202:
            return answer.json()
        job = self.follow_job(self._as(JobOut, answer.json()).id, wait=wait)
        if job.state == "failed":
            raise job_error(job.id, job.error)
        return job.result

    # -- imports and recipes ---------------------------------------------------------------------

    def import_(
        self,
        source: Any = None,
        *,
        recipe: Any,
        dataset: str | None = None,
        version: str | None = None,
        bump: str | None = None,
        limit: int | None = None,
        **fields: Any,
    ) -> ImportOut:
        """Import a benchmark's rows through a recipe and register them as a version.

        `recipe`: a recipe id (registered or catalog), `{id, version}`, or a whole recipe.
        `source`: overrides the recipe's (`{kind, url, ...}`, or a URL/path string)."""
        from caseshelf.api.import_dto import ImportOut

        body = self._import_body(source, recipe, dataset, version, bump, limit, fields)
        return self._as(ImportOut, self.call("POST", "benchmarks", "import", body=body))

    def preview(
        self, source: Any = None, *, recipe: Any, limit: int | None = None, **fields: Any
    ) -> PreviewOut:
        """The first rows of a source, the fields found and the cases they would become."""
        from caseshelf.api.import_dto import PreviewOut

        body = self._import_body(source, recipe, None, None, None, limit, fields)
        return self._as(PreviewOut, self.call("POST", "benchmarks", "preview", body=body))

    @staticmethod
    def _import_body(
        source: Any,
        recipe: Any,
        dataset: str | None,
        version: str | None,
        bump: str | None,
        limit: int | None,
        fields: Mapping[str, Any],
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"recipe": _body(recipe)}
        if isinstance(source, str | Path):
            body["source"] = {"url": str(source)}
        elif source is not None:
            body["source"] = _body(source)
        body.update(
            _drop_none({"dataset": dataset, "version": version, "bump": bump, "limit": limit})
        )
        body.update(fields)
        return body

    def benchmarks(self) -> list[BenchmarkOut]:
        """The catalog's benchmarks."""
        from caseshelf.api.import_dto import BenchmarkOut

        return list(self._page(BenchmarkOut, self.call("GET", "benchmarks")).items)

    def publish_catalog(self) -> list[RecipeRegisterOut]:
        """Register the catalog's recipes into `_shared` (a `_shared` admin only)."""
        from caseshelf.api.import_dto import RecipeRegisterOut

        data = self.call("POST", "benchmarks", "publish")
        return list(self._page(RecipeRegisterOut, data).items)

    def hf_search(self, q: str, *, limit: int = 20) -> list[HfDatasetOut]:
        from caseshelf.api.import_dto import HfDatasetOut

        data = self.call("GET", "benchmarks", "hf", "search", query={"q": q, "limit": limit})
        return list(self._page(HfDatasetOut, data).items)

    def hf_splits(self, dataset: str) -> list[HfSplitOut]:
        from caseshelf.api.import_dto import HfSplitOut

        data = self.call("GET", "benchmarks", "hf", "splits", query={"dataset": dataset})
        return list(self._page(HfSplitOut, data).items)

    def hf_files(self, dataset: str, *, revision: str | None = None) -> HfFilesOut:
        from caseshelf.api.import_dto import HfFilesOut

        query = {"dataset": dataset, "revision": revision}
        return self._as(HfFilesOut, self.call("GET", "benchmarks", "hf", "files", query=query))

    def register_recipe(self, recipe: Mapping[str, Any] | BaseModel) -> RecipeRegisterOut:
        from caseshelf.api.import_dto import RecipeRegisterOut

        return self._as(RecipeRegisterOut, self.call("POST", "recipes", body=recipe))

    def import_bundle(self, bundle: Mapping[str, Any] | str | Path) -> BundleOut:
        """Import an everdict bundle: the document, or the path of its JSON or YAML file. Every
        dataset and recipe is validated before any is registered; the answer gives each item's
        outcome (`registered`, `unchanged`, `conflict`)."""
        from caseshelf.api.import_dto import BundleOut

        if isinstance(bundle, str | Path):
            from caseshelf.services.loaders import read_document

            bundle = read_document(Path(bundle))
        return self._as(BundleOut, self.call("POST", "bundles", body=bundle))

    def validate_recipe(self, recipe: Mapping[str, Any] | BaseModel) -> RecipeValidateOut:
        from caseshelf.api.import_dto import RecipeValidateOut

        return self._as(RecipeValidateOut, self.call("POST", "recipes", "validate", body=recipe))

    def list_recipes(
        self, *, shared: bool = False, cursor: str | None = None, limit: int = 50
    ) -> PageOut[RecipeSummaryOut]:
        from caseshelf.api.import_dto import RecipeSummaryOut

        query = {"shared": shared, "cursor": cursor, "limit": limit}
        return self._page(RecipeSummaryOut, self.call("GET", "recipes", query=query))

    def recipe(self, ref: str) -> RecipeOut:
        """A recipe (`ID` for its latest version, `ID@VERSION`)."""
        from caseshelf.api.import_dto import RecipeOut

        name, r = parse_ref(ref)
        segments = ("recipes", name) if r == "latest" else ("recipes", name, "versions", r)
        return self._as(RecipeOut, self.call("GET", *segments))

    def recipe_versions(
        self, name: str, *, include_deleted: bool = False
    ) -> PageOut[RecipeVersionOut]:
        from caseshelf.api.import_dto import RecipeVersionOut

        query = {"include_deleted": include_deleted, "limit": PAGE_MAX}
        data = self.call("GET", "recipes", name, "versions", query=query)
        return self._page(RecipeVersionOut, data)

    def delete_recipe(self, ref: str) -> RecipeVersionOut:
        from caseshelf.api.import_dto import RecipeVersionOut

        name, v = parse_version(ref)
        return self._as(RecipeVersionOut, self.call("DELETE", "recipes", name, "versions", v))

    def revive_recipe(self, ref: str) -> RecipeVersionOut:
        from caseshelf.api.import_dto import RecipeVersionOut

        name, v = parse_version(ref)
        data = self.call("POST", "recipes", name, "versions", v, "revive")
        return self._as(RecipeVersionOut, data)

    # -- uploads and jobs ------------------------------------------------------------------------

    def create_upload(self, body: Mapping[str, Any] | BaseModel) -> UploadOut:
        """`POST /uploads`: a presigned URL to PUT a file to, and the job that imports it."""
        from caseshelf.api.import_dto import UploadOut

        return self._as(UploadOut, self.call("POST", "uploads", body=body))

    def job(self, job_id: str) -> JobOut:
        from caseshelf.api.job_dto import JobOut  # lazy: pydantic, ~0.2 s

        return self._as(JobOut, self.call("GET", "jobs", job_id))

    def upload(
        self,
        path: str | Path,
        body: Mapping[str, Any],
        *,
        wait: float = 900.0,
        on_upload: Callable[[UploadOut], None] | None = None,
    ) -> JobOut:
        """Upload a local file (`POST /uploads`, then a PUT of the file to the URL answered)
        and wait for its import job to end. `body` is the upload request without `filename`
        (`{kind: benchmark, recipe, ...}` or `{kind: tasks, format, ...}`). A failed job is an
        `Upstream` error naming its detail."""
        p = Path(path)
        if not p.is_file():
            raise BadRequest(f"{p}: no such file", field="source")
        up = self.create_upload({"filename": _upload_name(p, "upload"), **body})
        if not up.upload_url:
            raise BadRequest(
                "this API gives no upload URL (an embedded store no server publishes): import "
                "the file without --api, or against `caseshelf serve`"
            )
        if on_upload is not None:
            on_upload(up)
        self._put_file(up.upload_url, p, None)
        job = self.wait_for_job(up.job_id, wait=wait)
        if job.state == "failed":
            detail = (job.error or {}).get("detail") if isinstance(job.error, dict) else None
            raise Upstream(f"import job {up.job_id} failed: {detail}", job_id=up.job_id)
        return job

    def _put_file(self, url: str, path: Path, progress: Progress | None) -> None:
        """Send the file at `path` to an upload URL, 1 MiB at a time (`progress(n)` per piece):
        served by this transport itself for an embedded store's URL, else PUT over HTTP."""
        from caseshelf.client.transport import put_url

        size = path.stat().st_size
        with path.open("rb") as fh:
            if isinstance(self.transport, InProcess) and self.transport.serves(url):
                self.transport.put_url(url, cast(BinaryIO, _counting(fh, progress)), size)
            else:
                put_url(url, fh, size=size, progress=progress)

    def follow_job(
        self, job_id: str, *, wait: float = 3600.0, progress: PullProgress | None = None
    ) -> JobOut:
        """The job once it has ended, its progress told to `progress` as it goes (an export's
        totals, then the cases, files and bytes its parts wrote). In process, this thread
        delivers the queued parts to the worker function, one at a time between looks at the
        job; over HTTP the server's workers run them and this looks every
        `JOB_POLL_SECONDS`."""
        from caseshelf.api.job_dto import JobProgressOut  # lazy: pydantic, ~0.2 s

        deadline = time.monotonic() + wait
        told: tuple[int, int, int] | None = None
        while True:
            job = self.job(job_id)
            p = job.progress
            if progress is not None and isinstance(p, JobProgressOut):
                now = (p.cases_written, p.files_written, p.bytes_written)
                if told is None:
                    progress.start(p.cases_total, 0, 0)
                    told = (0, 0, 0)
                if now != told:
                    progress.advance(now[1] - told[1], now[2] - told[2], now[0] - told[0])
                    told = now
            if job.state in ("succeeded", "failed"):
                return job
            if isinstance(self.transport, InProcess) and self.transport.run_queued(limit=1):
                continue
            if time.monotonic() > deadline:
                raise Upstream(
                    f"job {job_id} is still {job.state} after {wait:.0f} s; "
                    f"follow it with GET /jobs/{job_id}",
                    job_id=job_id,
                )
            time.sleep(JOB_POLL_SECONDS)

    def wait_for_job(self, job_id: str, *, wait: float = 900.0) -> JobOut:
        """The job once it has ended (`succeeded` or `failed`); `Upstream` naming it when it
        is still running after `wait` seconds."""
        deadline = time.monotonic() + wait
        while True:
            job = self.job(job_id)
            if job.state in ("succeeded", "failed"):
                return job
            if time.monotonic() > deadline:
                raise Upstream(
                    f"import job {job_id} is still {job.state} after {wait:.0f} s; "
                    f"follow it with GET /jobs/{job_id}",
                    job_id=job_id,
                )
            time.sleep(JOB_POLL_SECONDS)


# -- helpers --------------------------------------------------------------------------------------


def _upload_name(path: Path, default: str) -> str:
    """The file's name as an upload may carry it: letters, digits, `.`, `_` and `-`."""
    import re

    return re.sub(r"[^A-Za-z0-9._-]", "-", path.name).lstrip(".-") or default


def _large_file(cases: Any) -> bool:
    """`cases` names a dataset file larger than `STREAM_FILE_BYTES`."""
    if not isinstance(cases, str | Path):
        return False
    try:
        return Path(cases).stat().st_size > STREAM_FILE_BYTES
    except OSError:
        return False


class _counting:
    """A binary file whose reads are told to `progress(n)` (None: told to no one)."""

    def __init__(self, fh: BinaryIO, progress: Progress | None) -> None:
        self._fh, self._progress = fh, progress

    def read(self, n: int = -1) -> bytes:
        data = self._fh.read(n)
        if data and self._progress is not None:
            self._progress(len(data))
        return data


def _cases_part(cases: Any) -> dict[str, Any]:
    """`cases=` as the part of a dataset document it gives: `{cases: [...]}`, or for a file
    holding a whole document, that document."""
    from caseshelf.client.frames import frame_to_cases, is_frame

    if is_frame(cases):
        return {"cases": frame_to_cases(cases)}
    if isinstance(cases, str | Path):
        from caseshelf.services.loaders import load_dataset

        doc, notices = load_dataset(Path(cases))
        for line in notices:
            import warnings

            warnings.warn(line, DeprecationWarning, stacklevel=3)
        return dict(doc)
    if isinstance(cases, Mapping) or not isinstance(cases, Iterable) or isinstance(cases, bytes):
        raise BadRequest(
            f"cases must be a list of cases, a pandas DataFrame or a file path, not a "
            f"{type(cases).__name__}",
            field="cases",
        )
    out: list[Any] = []
    for i, case in enumerate(cases):
        item = _body(case)
        if not isinstance(item, Mapping):
            raise BadRequest(
                f"row {i}: a case is a mapping, not a {type(item).__name__}",
                row=i,
                field="cases",
            )
        out.append(dict(item))
    return {"cases": out}


def _body_limit(exc: TooLarge) -> bool:
    """Whether a 413 is the request body's limit (it names the upload route to use instead), not
    the limit of one case, which an upload would meet just the same."""
    return bool(exc.fields.get("upload_route"))


def _learn_limit(http: Http, exc: TooLarge) -> None:
    """A 413 names the server's body limit: below the client's own, it becomes the client's."""
    limit = exc.fields.get("limit")
    if isinstance(limit, int) and 0 < limit < http.max_body_bytes:
        http.max_body_bytes = limit


def _is_stream(to: object) -> bool:
    return callable(getattr(to, "write", None))


def _take(
    pieces: Iterator[bytes], target: Path | BinaryIO | None, progress: Progress | None
) -> bytes:
    """`pieces` written to `target` as they come, one held at a time (a file path: through a
    temporary file renamed into place once whole), answering b""; with no target, joined.
    `progress(n)` is told each piece's size."""

    def counted() -> Iterator[bytes]:
        for piece in pieces:
            if progress is not None:
                progress(len(piece))
            yield piece

    if target is None:
        return b"".join(counted())
    if isinstance(target, Path):
        _write_whole(target, counted())
    else:
        for piece in counted():
            target.write(piece)
    return b""


@contextmanager
def _rows_named(cases: Any) -> Iterator[None]:
    """The API names a bad case by its id, index and field; for `cases=` given as a table or a
    list, that index is the row (`row`), and for a table the field's column is named too
    (`column`: `inputs.user` for the field `inputs.user.str`)."""
    from caseshelf.client.frames import is_frame

    try:
        yield
    except BadRequest as exc:
        index = exc.fields.get("index")
        if cases is None or isinstance(cases, str | Path) or not isinstance(index, int):
            raise
        if "row" in exc.fields:
            raise
        if not is_frame(cases):
            raise BadRequest(exc.detail, **{**exc.fields, "row": index}) from None
        path = str(exc.fields.get("field") or "").split(".")
        names = {str(c) for c in cases.columns}
        prefixes = (".".join(path[:k]) for k in range(len(path), 0, -1))
        column = next((name for name in prefixes if name in names), path[0])
        named = {**exc.fields, "row": index, "column": column}
        raise BadRequest(f"row {index}, column {column!r}: {exc.detail}", **named) from None


def _target(to: str | Path | None, filename: str) -> Path | None:
    if to is None:
        return None
    p = Path(to)
    return p / filename if p.is_dir() else p


def _write_whole(target: Path, pieces: Iterable[bytes]) -> None:
    """Write `pieces` to `target` through a temporary file beside it, renamed into place only
    once complete: a failed download leaves no partial file that looks whole."""
    import os
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or Path())
    try:
        with os.fdopen(fd, "wb") as fh:
            for piece in pieces:
                fh.write(piece)
        Path(tmp).replace(target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def safe_filename(name: object, default: str) -> str:
    """A file name from the server, usable in the current directory, or `default`."""
    if (
        isinstance(name, str)
        and 0 < len(name) <= 255
        and not name.startswith(".")
        and not any(c in name for c in "/\\\0")
    ):
        return name
    return default


def _disposition_name(value: str | None, default: str) -> str:
    if not value:
        return default
    from email.message import Message

    msg = Message()
    msg["content-disposition"] = value
    return safe_filename(msg.get_param("filename", header="content-disposition"), default)
