"""The client's subsets and diffs of versions."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import chain
from typing import TYPE_CHECKING, Any

from caseshelf.client.base import _body, _drop_none
from caseshelf.client.cases import CasesMixin
from caseshelf.client.refs import parse_ref
from caseshelf.domain.paging import MAX_PAGE

if TYPE_CHECKING:
    from pydantic import BaseModel

    from caseshelf.api.dto import CaseBriefOut, CaseChangesOut, DiffOut, SubsetOut


class CompareMixin(CasesMixin):
    """Subsets of a version and diffs between versions."""

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
        from caseshelf.api.dto import SubsetOut, SubsetRegisteredOut  # lazy: pydantic, ~0.2 s

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
        from caseshelf.api.dto import DiffOut  # lazy: pydantic, ~0.2 s

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
        from caseshelf.domain.diff_markdown import (  # lazy: ~8 ms, a tenth of the client
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
