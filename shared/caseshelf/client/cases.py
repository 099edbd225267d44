"""A version's cases read from the client: paged, one at a time, searched, as a DataFrame or a
Hugging Face dataset, and a version's files and numbers."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, overload

import orjson

from caseshelf.client.base import Progress
from caseshelf.client.datasets import DatasetsMixin
from caseshelf.client.downloads import DownloadsMixin
from caseshelf.client.frames import cases_frame, columns_of, hf_fingerprint, hf_info
from caseshelf.client.prefetch import Prefetch
from caseshelf.client.refs import parse_ref
from caseshelf.client.transport import Answer, Http, Request
from caseshelf.domain.errors import Corrupt, Upstream
from caseshelf.extras import require

if TYPE_CHECKING:
    from caseshelf.api.browse_dto import CaseSearchPageOut, VersionStatsOut
    from caseshelf.api.dto import PageOut
    from caseshelf.domain.models import Case

NEXT_CURSOR_HEADER = "X-Next-Cursor"  # the cases route's (caseshelf.functions.registry)


class CasesMixin(DatasetsMixin, DownloadsMixin):
    """A version's cases, files and numbers."""

    def list_cases(
        self,
        ref: str,
        *,
        cursor: str | None = None,
        limit: int = 100,
        include_deleted: bool = False,
    ) -> PageOut[dict[str, Any]]:
        """One page of a version's cases (canonical form), and the cursor of the next."""
        from caseshelf.api.dto import PageOut  # lazy: pydantic, ~0.2 s

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
        from caseshelf.domain.models import Case  # lazy: pydantic, ~0.2 s

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
            data = orjson.loads(self._fetch(data["url"], None, None))
        if not isinstance(data, dict):
            raise Upstream(f"the API answered the case at {position} with no case")
        if raw:
            return data
        from caseshelf.domain.models import Case  # lazy: pydantic, ~0.2 s

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

        return cases_frame(self.cases(ref, include_deleted=include_deleted, raw=True))

    def to_hf(self, ref: str, *, include_deleted: bool = False) -> Any:
        """A version's cases as a Hugging Face `datasets.Dataset` (the columns of `to_pandas`),
        whose fingerprint and `info` follow the content: the fingerprint is
        `hf_fingerprint(content_digest)` (so `datasets`' own cache keys, which start from it,
        are the same for the same content wherever it was loaded from, and differ for any other
        content), and `info` names `ID@VERSION`, the digest and where the version is. Needs
        `caseshelf[hf]`."""
        datasets = require("datasets", "to_hf")

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
        from caseshelf.api.browse_dto import CaseSearchPageOut  # lazy: pydantic, ~0.2 s

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
        from caseshelf.domain.models import Case  # lazy: pydantic, ~0.2 s

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
        from caseshelf.api.browse_dto import VersionStatsOut  # lazy: pydantic, ~0.2 s

        name, r = parse_ref(ref)
        query = {"include_deleted": include_deleted}
        data = self.call("GET", "datasets", name, "versions", r, "stats", query=query)
        return self._as(VersionStatsOut, data)
