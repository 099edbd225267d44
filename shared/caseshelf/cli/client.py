"""How the CLI reaches the registry: the embedded store in-process, or an API over HTTP.

Both clients answer the same DTO-shaped dicts (`caseshelf.api.dto`), so a command prints the same
thing either way, and both raise the same typed domain errors (an HTTP problem+json body is turned
back into the error class of its status).

To add an operation: a method on `Client`, one on `LocalClient` (call the service, convert with the
`caseshelf.api.dto` function) and one on `HttpClient` (one `self.request(...)`).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from caseshelf.domain.errors import BadRequest, CaseshelfError, Upstream

if TYPE_CHECKING:
    from email.message import Message

    from caseshelf.bootstrap import Services, Settings
    from caseshelf.domain.identity import Identity
    from caseshelf.ports import Page


@dataclass(frozen=True)
class Downloaded:
    filename: str
    body: bytes


class Client(Protocol):
    def register(self, body: dict[str, Any]) -> dict[str, Any]:
        """RegisterOut."""

    def validate(self, body: dict[str, Any]) -> dict[str, Any]:
        """ValidateOut."""

    def list_datasets(
        self, *, shared: bool = False, cursor: str | None = None, limit: int = 50
    ) -> dict[str, Any]:
        """Page of DatasetOut."""

    def get_dataset(self, name: str) -> dict[str, Any]:
        """DatasetOut."""

    def list_versions(
        self,
        name: str,
        *,
        include_deleted: bool = False,
        cursor: str | None = None,
        limit: int = 100,
    ) -> dict[str, Any]:
        """Page of VersionOut, newest first."""

    def get_version(self, name: str, ref: str, *, include_deleted: bool = False) -> dict[str, Any]:
        """VersionOut."""

    def list_cases(
        self,
        name: str,
        ref: str,
        *,
        cursor: str | None = None,
        limit: int = 100,
        include_deleted: bool = False,
    ) -> dict[str, Any]:
        """Page of plain cases."""

    def set_tags(self, name: str, version: str, tags: list[str]) -> dict[str, Any]:
        """VersionOut."""

    def delete_version(self, name: str, version: str) -> dict[str, Any]:
        """VersionOut (tombstoned)."""

    def revive_version(self, name: str, version: str) -> dict[str, Any]:
        """VersionOut (live)."""

    def download(self, name: str, ref: str, *, include_deleted: bool = False) -> Downloaded:
        """The whole version as one dataset JSON document."""

    def subset(
        self,
        name: str,
        ref: str,
        body: dict[str, Any],
        *,
        cases: bool = False,
        include_deleted: bool = False,
    ) -> dict[str, Any]:
        """SubsetOut."""

    def diff(
        self,
        name: str,
        base: str,
        candidate: str,
        *,
        candidate_name: str | None = None,
        summary: bool = False,
        include_deleted: bool = False,
    ) -> dict[str, Any]:
        """DiffOut."""

    def export(
        self, name: str, ref: str, body: dict[str, Any], *, to: str | None = None
    ) -> dict[str, Any]:
        """ExportOut. `to`: `s3://bucket/prefix` or a local directory (default: the registry's
        own exports prefix)."""

    # -- imports and recipes (ImportOut, PreviewOut, Recipe*Out, UploadOut, JobOut) ---------

    def import_benchmark(
        self, body: dict[str, Any], *, on_rows: Callable[[int], None] | None = None
    ) -> dict[str, Any]:
        """ImportOut. `on_rows(n)` reports rows read so far (embedded store only)."""

    def preview_benchmark(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def list_benchmarks(self) -> dict[str, Any]: ...

    def register_recipe(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def validate_recipe(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def list_recipes(
        self, *, shared: bool = False, cursor: str | None = None, limit: int = 50
    ) -> dict[str, Any]: ...

    def get_recipe(self, name: str, ref: str = "latest") -> dict[str, Any]: ...

    def delete_recipe(self, name: str, version: str) -> dict[str, Any]: ...

    def revive_recipe(self, name: str, version: str) -> dict[str, Any]: ...

    def publish_catalog(self) -> dict[str, Any]:
        """Page of RecipeRegisterOut: the catalog registered into `_shared`."""

    def create_upload(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def get_job(self, job_id: str) -> dict[str, Any]: ...


def _page(items: list[Any], next_cursor: str | None) -> dict[str, Any]:
    return {"items": items, "next_cursor": next_cursor}


def _wire(model: Any) -> dict[str, Any]:
    """A wire model (`caseshelf.api.dto`, `caseshelf.api.import_dto`) as the API sends it."""
    out: dict[str, Any] = model.model_dump(mode="json")
    return out


def _wire_page(page: Page, convert: Callable[[Any], Any]) -> dict[str, Any]:
    """A service page with each item converted to its wire model, as the API sends it."""
    return _page([_wire(convert(item)) for item in page.items], page.next_cursor)


# -- embedded store -------------------------------------------------------------------------


class _LocalImports:
    """The import and recipe operations of `LocalClient` (mixed in)."""

    @property
    def services(self) -> Services:
        raise NotImplementedError

    @property
    def identity(self) -> Identity:
        raise NotImplementedError

    def import_benchmark(
        self, body: dict[str, Any], *, on_rows: Callable[[int], None] | None = None
    ) -> dict[str, Any]:
        from caseshelf.api import import_dto
        from caseshelf.services.imports import parse_import

        done = self.services.imports.run(self.identity, parse_import(body), progress=on_rows)
        return _wire(import_dto.import_out(done))

    def preview_benchmark(self, body: dict[str, Any]) -> dict[str, Any]:
        from caseshelf.api import import_dto
        from caseshelf.services.imports import parse_import

        got = self.services.imports.preview(self.identity, parse_import(body))
        return _wire(import_dto.preview_out(got))

    def list_benchmarks(self) -> dict[str, Any]:
        from caseshelf.api import import_dto

        recipes = self.services.recipes.benchmarks()
        return _page([_wire(import_dto.benchmark_out(r)) for r in recipes], None)

    def register_recipe(self, body: dict[str, Any]) -> dict[str, Any]:
        from caseshelf.api import import_dto

        res = self.services.recipes.register(self.identity, body)
        return _wire(import_dto.recipe_register_out(res))

    def validate_recipe(self, body: dict[str, Any]) -> dict[str, Any]:
        from caseshelf.api import import_dto

        res = self.services.recipes.validate(self.identity, body)
        return _wire(import_dto.recipe_validate_out(res))

    def list_recipes(
        self, *, shared: bool = False, cursor: str | None = None, limit: int = 50
    ) -> dict[str, Any]:
        from caseshelf.api import import_dto

        page = self.services.recipes.list_recipes(
            self.identity, shared=shared, cursor=cursor, limit=limit
        )
        return _wire_page(page, import_dto.recipe_summary_out)

    def get_recipe(self, name: str, ref: str = "latest") -> dict[str, Any]:
        from caseshelf.api import import_dto

        return _wire(import_dto.recipe_out(self.services.recipes.get(self.identity, name, ref)))

    def delete_recipe(self, name: str, version: str) -> dict[str, Any]:
        from caseshelf.api import import_dto

        rec = self.services.recipes.delete(self.identity, name, version)
        return _wire(import_dto.recipe_version_out(rec))

    def revive_recipe(self, name: str, version: str) -> dict[str, Any]:
        from caseshelf.api import import_dto

        rec = self.services.recipes.revive(self.identity, name, version)
        return _wire(import_dto.recipe_version_out(rec))

    def publish_catalog(self) -> dict[str, Any]:
        from caseshelf.api import import_dto

        done = self.services.recipes.publish_catalog(self.identity)
        return _page([_wire(import_dto.recipe_register_out(r)) for r in done], None)

    def create_upload(self, body: dict[str, Any]) -> dict[str, Any]:
        raise BadRequest(
            "the embedded store takes no uploads: import the file directly (caseshelf import)"
        )

    def get_job(self, job_id: str) -> dict[str, Any]:
        from caseshelf.api import import_dto

        return _wire(import_dto.job_out(self.services.jobs.get(self.identity, job_id)))


class _HttpImports:
    """The import and recipe operations of `HttpClient` (mixed in)."""

    def call(
        self,
        method: str,
        *segments: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
    ) -> dict[str, Any]:
        raise NotImplementedError

    def import_benchmark(
        self, body: dict[str, Any], *, on_rows: Callable[[int], None] | None = None
    ) -> dict[str, Any]:
        return self.call("POST", "benchmarks", "import", body=body)

    def preview_benchmark(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", "benchmarks", "preview", body=body)

    def list_benchmarks(self) -> dict[str, Any]:
        return self.call("GET", "benchmarks")

    def register_recipe(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", "recipes", body=body)

    def validate_recipe(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", "recipes", "validate", body=body)

    def list_recipes(
        self, *, shared: bool = False, cursor: str | None = None, limit: int = 50
    ) -> dict[str, Any]:
        query = {"shared": shared, "cursor": cursor, "limit": limit}
        return self.call("GET", "recipes", query=query)

    def get_recipe(self, name: str, ref: str = "latest") -> dict[str, Any]:
        segments = ("recipes", name) if ref == "latest" else ("recipes", name, "versions", ref)
        return self.call("GET", *segments)

    def delete_recipe(self, name: str, version: str) -> dict[str, Any]:
        return self.call("DELETE", "recipes", name, "versions", version)

    def revive_recipe(self, name: str, version: str) -> dict[str, Any]:
        return self.call("POST", "recipes", name, "versions", version, "revive")

    def publish_catalog(self) -> dict[str, Any]:
        return self.call("POST", "benchmarks", "publish")

    def create_upload(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", "uploads", body=body)

    def get_job(self, job_id: str) -> dict[str, Any]:
        return self.call("GET", "jobs", job_id)


class LocalClient(_LocalImports):
    """Calls the services of `caseshelf.bootstrap` in-process."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @cached_property
    def services(self) -> Services:
        from caseshelf import bootstrap

        settings = self.settings
        if settings.backend == "local" and settings.public_url is not None:
            # The embedded store's URLs are signed with a key drawn by this process, which no
            # server honours: in-process, the CLI reads and writes the store itself.
            settings = settings.model_copy(update={"public_url": None})
        svc = bootstrap.build(settings)
        bootstrap.use(svc)
        return svc

    @cached_property
    def identity(self) -> Identity:
        from caseshelf.domain.identity import Identity

        s = self.settings
        return Identity(s.tenant, s.principal, frozenset(s.roles))

    def register(self, body: dict[str, Any]) -> dict[str, Any]:
        from caseshelf.api import dto
        from caseshelf.services.registry import parse_dataset

        res = self.services.registry.register(self.identity, parse_dataset(body))
        return _wire(dto.register_out(res))

    def validate(self, body: dict[str, Any]) -> dict[str, Any]:
        from caseshelf.api import dto
        from caseshelf.services.registry import parse_dataset

        res = self.services.registry.validate(self.identity, parse_dataset(body))
        return _wire(dto.validate_out(res))

    def list_datasets(
        self, *, shared: bool = False, cursor: str | None = None, limit: int = 50
    ) -> dict[str, Any]:
        from caseshelf.api import dto

        page = self.services.registry.list_datasets(
            self.identity, shared=shared, cursor=cursor, limit=limit
        )
        return _wire_page(page, dto.dataset_out)

    def get_dataset(self, name: str) -> dict[str, Any]:
        from caseshelf.api import dto

        return _wire(dto.dataset_out(self.services.registry.summary(self.identity, name)))

    def list_versions(
        self,
        name: str,
        *,
        include_deleted: bool = False,
        cursor: str | None = None,
        limit: int = 100,
    ) -> dict[str, Any]:
        from caseshelf.api import dto

        page = self.services.registry.list_versions(
            self.identity, name, include_deleted=include_deleted, cursor=cursor, limit=limit
        )
        return _wire_page(page, dto.version_out)

    def get_version(self, name: str, ref: str, *, include_deleted: bool = False) -> dict[str, Any]:
        from caseshelf.api import dto

        rec = self.services.registry.get_version(
            self.identity, name, ref, include_deleted=include_deleted
        )
        return _wire(dto.version_out(rec))

    def list_cases(
        self,
        name: str,
        ref: str,
        *,
        cursor: str | None = None,
        limit: int = 100,
        include_deleted: bool = False,
    ) -> dict[str, Any]:
        page = self.services.registry.list_cases(
            self.identity, name, ref, cursor=cursor, limit=limit, include_deleted=include_deleted
        )
        return _page(list(page.items), page.next_cursor)

    def set_tags(self, name: str, version: str, tags: list[str]) -> dict[str, Any]:
        from caseshelf.api import dto

        rec = self.services.registry.set_version_tags(self.identity, name, version, tags)
        return _wire(dto.version_out(rec))

    def delete_version(self, name: str, version: str) -> dict[str, Any]:
        from caseshelf.api import dto

        rec = self.services.registry.delete_version(self.identity, name, version)
        return _wire(dto.version_out(rec))

    def revive_version(self, name: str, version: str) -> dict[str, Any]:
        from caseshelf.api import dto

        rec = self.services.registry.revive_version(self.identity, name, version)
        return _wire(dto.version_out(rec))

    def download(self, name: str, ref: str, *, include_deleted: bool = False) -> Downloaded:
        got = self.services.registry.download(
            self.identity, name, ref, include_deleted=include_deleted
        )
        if got.body is not None:
            return Downloaded(got.filename, got.body)
        assert got.url is not None
        return Downloaded(got.filename, fetch_url(got.url))

    def subset(
        self,
        name: str,
        ref: str,
        body: dict[str, Any],
        *,
        cases: bool = False,
        include_deleted: bool = False,
    ) -> dict[str, Any]:
        from caseshelf.api import dto
        from caseshelf.domain.envelope import parse_model
        from caseshelf.domain.subset import SubsetRequest

        res = self.services.selection.select_subset(
            self.identity,
            name,
            ref,
            parse_model(SubsetRequest, body),
            with_cases=cases,
            include_deleted=include_deleted,
        )
        return _wire(dto.subset_out(res))

    def diff(
        self,
        name: str,
        base: str,
        candidate: str,
        *,
        candidate_name: str | None = None,
        summary: bool = False,
        include_deleted: bool = False,
    ) -> dict[str, Any]:
        from caseshelf.api import dto

        res = self.services.diff.diff_versions(
            self.identity,
            name,
            base,
            candidate,
            candidate_name=candidate_name,
            summary_only=summary,
            include_deleted=include_deleted,
        )
        return _wire(dto.diff_out(res))

    def export(
        self, name: str, ref: str, body: dict[str, Any], *, to: str | None = None
    ) -> dict[str, Any]:
        from caseshelf.api import dto
        from caseshelf.domain.envelope import parse_model
        from caseshelf.services.exports import ExportRequest

        request = parse_model(ExportRequest, body)
        res = self.services.exports.export_version(self.identity, name, ref, request, to=to)
        return _wire(dto.export_out(res))


def put_url(url: str, data: bytes, timeout: float = 600) -> None:
    """PUT `data` to a presigned URL (no credentials of ours go with it)."""
    import urllib.error
    import urllib.request

    _check_url(url)
    req = urllib.request.Request(url, data=data, method="PUT")  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=timeout):  # noqa: S310
            return
    except urllib.error.HTTPError as exc:
        raise Upstream(f"the upload was refused: HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise Upstream(f"the upload failed: {exc.reason}") from None


# -- HTTP -----------------------------------------------------------------------------------

_PROBLEM_KEYS = {"type", "title", "status", "detail"}


class ApiError(CaseshelfError):
    """An API answer that is an error and has no better-matching domain error class."""

    def __init__(self, detail: str, *, status: int, **fields: Any) -> None:
        super().__init__(detail, **fields)
        self.status = status


def problem_error(status: int, body: bytes, reason: str = "") -> CaseshelfError:
    """The domain error an HTTP error answer stands for (problem+json `detail` as the message)."""
    doc: Any = None
    try:
        doc = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("detail"), str):
        detail = doc["detail"]
        fields = {k: v for k, v in doc.items() if k not in _PROBLEM_KEYS}
    elif isinstance(doc, dict) and isinstance(doc.get("message"), str):
        detail, fields = doc["message"], {}  # API Gateway's own answers (e.g. the authorizer)
    else:
        text = body.decode("utf-8", "replace").strip()[:300] if body else ""
        detail, fields = f"HTTP {status} {reason}".strip() + (f": {text}" if text else ""), {}
    # The API's own mapping, read backwards (imported only when there is an error to map).
    from caseshelf.api.errors import STATUS

    cls = next((c for c, (code, _) in STATUS.items() if code == status), None)
    if cls is not None:
        return cls(detail, **fields)
    return ApiError(detail, status=status, **fields)


def _check_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BadRequest(f"not an http(s) URL: {url!r}", field="api")
    return url


def fetch_url(url: str, timeout: float = 300) -> bytes:
    """GET a presigned URL (no credentials of ours go with it)."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(_check_url(url), method="GET")  # noqa: S310 (scheme checked)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (scheme checked)
            data: bytes = resp.read()
            return data
    except urllib.error.HTTPError as exc:
        raise problem_error(exc.code, exc.read(), exc.reason) from None
    except urllib.error.URLError as exc:
        raise Upstream(f"cannot fetch the download: {exc.reason}") from None


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


def _filename(headers: Message, default: str) -> str:
    return safe_filename(headers.get_param("filename", header="content-disposition"), default)


class HttpClient(_HttpImports):
    """The registry API over HTTP (stdlib only).

    The dev identity headers (`X-Caseshelf-Tenant/Principal/Roles`) go only when an identity was
    asked for; only the local dev server reads them. A deployed API gets the bearer token from
    `CASESHELF_TOKEN`, which is never printed and never follows a redirect.
    """

    def __init__(
        self,
        base_url: str,
        *,
        tenant: str | None = None,
        principal: str | None = None,
        roles: tuple[str, ...] | None = None,
        token: str | None = None,
        timeout: float = 120,
    ) -> None:
        self.base_url = _check_url(base_url).rstrip("/")
        self.timeout = timeout
        self._headers = {"Accept": "application/json", "User-Agent": "caseshelf-cli"}
        if tenant:
            self._headers["X-Caseshelf-Tenant"] = tenant
        if principal:
            self._headers["X-Caseshelf-Principal"] = principal
        if roles is not None:
            self._headers["X-Caseshelf-Roles"] = ",".join(roles)
        self._token = token

    def __repr__(self) -> str:  # never show the token
        return f"HttpClient({self.base_url!r})"

    def url(self, *segments: str, query: dict[str, Any] | None = None) -> str:
        path = "/".join(urllib.parse.quote(s, safe="") for s in segments)
        url = f"{self.base_url}/{path}"
        q = {
            k: ("true" if v is True else "false" if v is False else str(v))
            for k, v in (query or {}).items()
            if v is not None and v is not False
        }
        return f"{url}?{urllib.parse.urlencode(q)}" if q else url

    def send(self, method: str, url: str, body: Any = None) -> tuple[int, Message, bytes]:
        import urllib.error
        import urllib.request

        data = None if body is None else orjson.dumps(body)
        req = urllib.request.Request(  # noqa: S310 (the base URL's scheme is checked)
            url, data=data, method=method, headers=dict(self._headers)
        )
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self._token:
            req.add_unredirected_header("Authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                return resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as exc:
            raise problem_error(exc.code, exc.read(), exc.reason) from None
        except urllib.error.URLError as exc:
            raise Upstream(f"cannot reach the API at {self.base_url}: {exc.reason}") from None
        except TimeoutError:
            raise Upstream(f"the API at {self.base_url} did not answer in time") from None

    def request(
        self,
        method: str,
        *segments: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
    ) -> Any:
        """One API call; the decoded JSON answer."""
        _, _, data = self.send(method, self.url(*segments, query=query), body)
        if not data:
            return None
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            raise Upstream(
                f"the API answered {method} {'/'.join(segments)} with non-JSON"
            ) from None

    def call(
        self,
        method: str,
        *segments: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
    ) -> dict[str, Any]:
        """One API call whose answer is a JSON object (every operation's)."""
        out: dict[str, Any] = self.request(method, *segments, query=query, body=body)
        return out

    # -- operations ------------------------------------------------------------------------

    def register(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", "datasets", body=body)

    def validate(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", "datasets", "validate", body=body)

    def list_datasets(
        self, *, shared: bool = False, cursor: str | None = None, limit: int = 50
    ) -> dict[str, Any]:
        query = {"shared": shared, "cursor": cursor, "limit": limit}
        return self.call("GET", "datasets", query=query)

    def get_dataset(self, name: str) -> dict[str, Any]:
        return self.call("GET", "datasets", name)

    def list_versions(
        self,
        name: str,
        *,
        include_deleted: bool = False,
        cursor: str | None = None,
        limit: int = 100,
    ) -> dict[str, Any]:
        query = {"include_deleted": include_deleted, "cursor": cursor, "limit": limit}
        return self.call("GET", "datasets", name, "versions", query=query)

    def get_version(self, name: str, ref: str, *, include_deleted: bool = False) -> dict[str, Any]:
        query = {"include_deleted": include_deleted}
        return self.call("GET", "datasets", name, "versions", ref, query=query)

    def list_cases(
        self,
        name: str,
        ref: str,
        *,
        cursor: str | None = None,
        limit: int = 100,
        include_deleted: bool = False,
    ) -> dict[str, Any]:
        query = {"cursor": cursor, "limit": limit, "include_deleted": include_deleted}
        return self.call("GET", "datasets", name, "versions", ref, "cases", query=query)

    def set_tags(self, name: str, version: str, tags: list[str]) -> dict[str, Any]:
        body = {"tags": tags}
        return self.call("PUT", "datasets", name, "versions", version, "tags", body=body)

    def delete_version(self, name: str, version: str) -> dict[str, Any]:
        return self.call("DELETE", "datasets", name, "versions", version)

    def revive_version(self, name: str, version: str) -> dict[str, Any]:
        return self.call("POST", "datasets", name, "versions", version, "revive")

    def download(self, name: str, ref: str, *, include_deleted: bool = False) -> Downloaded:
        query = {"include_deleted": include_deleted}
        url = self.url("datasets", name, "versions", ref, "download", query=query)
        _, headers, data = self.send("GET", url)
        default = f"{name}-{ref.replace(':', '-')}.json"
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            doc = None
        # An API answers a presigned URL (S3, or the local server's own); one over a store
        # that no server publishes streams the document itself.
        if isinstance(doc, dict) and isinstance(doc.get("url"), str) and "cases" not in doc:
            return Downloaded(safe_filename(doc.get("filename"), default), fetch_url(doc["url"]))
        return Downloaded(_filename(headers, default), data)

    def subset(
        self,
        name: str,
        ref: str,
        body: dict[str, Any],
        *,
        cases: bool = False,
        include_deleted: bool = False,
    ) -> dict[str, Any]:
        query = {"cases": cases, "include_deleted": include_deleted}
        return self.call(
            "POST", "datasets", name, "versions", ref, "subset", query=query, body=body
        )

    def diff(
        self,
        name: str,
        base: str,
        candidate: str,
        *,
        candidate_name: str | None = None,
        summary: bool = False,
        include_deleted: bool = False,
    ) -> dict[str, Any]:
        query = {
            "base": base,
            "candidate": candidate,
            "candidate_id": candidate_name,
            "summary": summary,
            "include_deleted": include_deleted,
        }
        return self.call("GET", "datasets", name, "diff", query=query)

    def export(
        self, name: str, ref: str, body: dict[str, Any], *, to: str | None = None
    ) -> dict[str, Any]:
        """The API writes into the registry's bucket; a local `to` unpacks the export's bundle
        there (verified against its manifest)."""
        if to is not None and to.startswith("s3://"):
            raise BadRequest(
                "with --api an export goes to the registry's bucket; copy it elsewhere with "
                "`caseshelf pull`, or export from the embedded store",
                field="to",
            )
        out = self.call("POST", "datasets", name, "versions", ref, "exports", body=body)
        if to is not None:
            from pathlib import Path

            from caseshelf.services.pull import install_bundle

            if not out.get("bundle_url"):
                raise Upstream("the API answered no bundle URL to download the export from")
            install_bundle(fetch_url(out["bundle_url"]), Path(to))
            out["prefix"] = to
            out["manifest_key"] = str(Path(to) / "manifest.json")
        return out
