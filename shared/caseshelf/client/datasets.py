"""The client's datasets and their versions: register, validate, list, read one, tag,
tombstone and revive."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from caseshelf.client.base import Progress, _body, _drop_none
from caseshelf.client.frames import frame_to_cases, is_frame
from caseshelf.client.jobs import JobsMixin, _upload_name
from caseshelf.client.refs import parse_ref, parse_version
from caseshelf.client.transport import Http, job_error, put_url
from caseshelf.client.versioned import VersionedMixin
from caseshelf.domain.errors import BadRequest, TooLarge

if TYPE_CHECKING:
    from pydantic import BaseModel

    from caseshelf.api.browse_dto import MeOut
    from caseshelf.api.dto import (
        DatasetOut,
        PageOut,
        RegisterOut,
        TagMovesOut,
        TagsOut,
        ValidateOut,
        VersionOut,
    )
    from caseshelf.api.import_dto import JobOut
    from caseshelf.api.refs_dto import RefResolvedOut


# A dataset file larger than this is registered from the file (`register_file`: uploaded, then
# read by the server a window of cases at a time) rather than parsed here into one document.
STREAM_FILE_BYTES = 5 << 20


def _large_file(cases: Any) -> bool:
    """`cases` names a dataset file larger than `STREAM_FILE_BYTES`."""
    if not isinstance(cases, str | Path):
        return False
    try:
        return Path(cases).stat().st_size > STREAM_FILE_BYTES
    except OSError:
        return False


def _cases_part(cases: Any) -> dict[str, Any]:
    """`cases=` as the part of a dataset document it gives: `{cases: [...]}`, or for a file
    holding a whole document, that document."""

    if is_frame(cases):
        return {"cases": frame_to_cases(cases)}
    if isinstance(cases, str | Path):
        from caseshelf.services.loaders import load_dataset  # lazy: services, pydantic: ~0.2 s

        doc, notices = load_dataset(Path(cases))
        for line in notices:
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


@contextmanager
def _rows_named(cases: Any) -> Iterator[None]:
    """The API names a bad case by its id, index and field; for `cases=` given as a table or a
    list, that index is the row (`row`), and for a table the field's column is named too
    (`column`: `inputs.user` for the field `inputs.user.str`)."""

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


class DatasetsMixin(JobsMixin, VersionedMixin):
    """Datasets and their versions."""

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
        from caseshelf.api.dto import RegisterOut  # lazy: pydantic, ~0.2 s

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
        from caseshelf.api.dto import RegisterOut  # lazy: pydantic, ~0.2 s

        http = self.transport if isinstance(self.transport, Http) else None
        if http is not None:
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
        from caseshelf.api.dto import RegisterOut  # lazy: pydantic, ~0.2 s

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
        from caseshelf.api.dto import RegisterOut, ValidateOut  # lazy: pydantic, ~0.2 s

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
        from caseshelf.api.dto import ValidateOut  # lazy: pydantic, ~0.2 s

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
        from caseshelf.api.dto import DatasetOut  # lazy: pydantic, ~0.2 s

        return self._listed("datasets", DatasetOut, shared, cursor, limit)

    def dataset(self, name: str) -> DatasetOut:
        """One dataset's summary (latest version, counts)."""
        from caseshelf.api.dto import DatasetOut  # lazy: pydantic, ~0.2 s

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
        from caseshelf.api.dto import VersionOut  # lazy: pydantic, ~0.2 s

        return self._versions_page("datasets", VersionOut, name, include_deleted, cursor, limit)

    def get(self, ref: str, *, include_deleted: bool = False) -> VersionOut:
        """One version's metadata: version, content_digest, case_count, produced_by, ..."""
        from caseshelf.api.dto import VersionOut  # lazy: pydantic, ~0.2 s

        name, r = parse_ref(ref)
        query = {"include_deleted": include_deleted}
        return self._as(VersionOut, self.call("GET", "datasets", name, "versions", r, query=query))

    def me(self) -> MeOut:
        """Who the API takes you for: tenant, principal, roles, and what they allow."""
        from caseshelf.api.browse_dto import MeOut  # lazy: pydantic, ~0.2 s

        return self._as(MeOut, self.call("GET", "me"))

    def tag(self, ref: str, tags: list[str]) -> TagMovesOut:
        """Point `tags` at a version (`ID@VERSION`): each tag moves there from wherever it
        pointed, since a tag names at most one version. `.moves` says what moved from where,
        `.version` is the version after."""
        from caseshelf.api.dto import TagMovesOut  # lazy: pydantic, ~0.2 s

        name, v = parse_version(ref)
        body = {"version": v, "tags": list(tags)}
        return self._as(TagMovesOut, self.call("POST", "datasets", name, "tags", body=body))

    def untag(self, name: str, tags: list[str]) -> TagMovesOut:
        """Remove `tags` of dataset `name` (each pointed at no version after)."""
        from caseshelf.api.dto import TagMovesOut  # lazy: pydantic, ~0.2 s

        moves: list[Any] = []
        for tag in tags:
            out = self._as(TagMovesOut, self.call("DELETE", "datasets", name, "tags", tag))
            moves.extend(out.moves)
        return TagMovesOut(id=name, moves=moves, version=None)

    def set_tags(self, ref: str, tags: list[str]) -> VersionOut:
        """Replace a version's tags (`ID@VERSION`): each named tag moves here, each other tag
        it had is removed; `[]` clears them."""
        from caseshelf.api.dto import VersionOut  # lazy: pydantic, ~0.2 s

        name, v = parse_version(ref)
        data = self.call("PUT", "datasets", name, "versions", v, "tags", body={"tags": list(tags)})
        return self._as(VersionOut, data)

    def tags(self, name: str) -> TagsOut:
        """Where each tag of dataset `name` points, and its moves, newest first."""
        from caseshelf.api.dto import TagsOut  # lazy: pydantic, ~0.2 s

        return self._as(TagsOut, self.call("GET", "datasets", name, "tags"))

    def resolve_refs(
        self, refs: Iterable[str | Mapping[str, Any]], *, batch: int = 500
    ) -> list[RefResolvedOut]:
        """Many refs resolved at once (`POST /refs/resolve`, `batch` a request): each `ID@REF`,
        or `{ref, version, digest}` to have the version it was pinned to answered as well
        (`pinned`, tombstoned ones included). One answer a ref, in order: its `version` or its
        `problem`, and `moved` (the tag's last move) when the ref is a tag."""
        from caseshelf.api.refs_dto import RefsResolveOut  # lazy: pydantic, ~0.2 s

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
        from caseshelf.api.dto import VersionOut  # lazy: pydantic, ~0.2 s

        return self._tombstone("datasets", VersionOut, ref)

    def revive(self, ref: str) -> VersionOut:
        """Restore a tombstoned version (`ID@VERSION`)."""
        from caseshelf.api.dto import VersionOut  # lazy: pydantic, ~0.2 s

        return self._revive("datasets", VersionOut, ref)
