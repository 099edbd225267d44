"""Browsing a version, as the web UI and any client do: search its cases a page at a time, read
one file body, and its numbers (cases per tag, input lengths, file sizes).

Everything here goes through the registry's public reading API (`RegistryService.get_version`,
`manifest`, `case_records`, `file_body`): the caller's tenant decides what can be read, as on
every other read route.

Search is a scan with a bound: a page reads cases forward from its cursor until it holds
`limit` matches or the scan budget is spent (`TEXT_SCAN_CASES` cases or `TEXT_SCAN_BYTES` of
records for a text search, `ID_SCAN_CASES` ids of the manifest for a search by id or tag), then
answers what it found and a cursor to go on from where it stopped. A page may therefore hold
fewer matches than asked, even none, and still have a next cursor: the version is not
exhausted until `next_cursor` is null.

A text search of a version small enough for a search index (`MAX_INDEXED_BYTES`) is not bounded
so: its page searches the whole rest of the version, from the index once kept
(`caseshelf.services.search_index`, made with the version's numbers) or, until then, by a scan
of the records that stops when the page is full (`caseshelf.services.search_scan`). The two
answer the same pages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from caseshelf.domain import layout
from caseshelf.domain.answers import (
    ANSWER_BUDGET_BYTES,
    PAGE_FRAME_BYTES,
    escaped_size,
    fitting,
    oversized_case,
)
from caseshelf.domain.browse import (
    SearchBy,
    SharedFileInfo,
    StatsBuilder,
    VersionStats,
    case_matches,
    indexable,
    needle_of,
    sniff_text,
    tag_matches,
)
from caseshelf.domain.canonical import hex_of
from caseshelf.domain.errors import BadRequest, NotFound, TooLarge
from caseshelf.domain.identity import Identity
from caseshelf.domain.paging import check_limit, decode_position, encode_position
from caseshelf.domain.versions import VersionRecord
from caseshelf.services.registry import RegistryService
from caseshelf.services.search_index import (
    MAX_INDEXED_BYTES,
    IndexBuilder,
    LastIndex,
    SearchIndex,
    index_key,
    read_index,
)
from caseshelf.services.search_scan import RecordScan

# What answers a text search of a whole version: its kept index, or the scan of its records.
TextFinder = SearchIndex | RecordScan

# A text search reads at most this much of a version per page.
TEXT_SCAN_CASES = 5_000
TEXT_SCAN_BYTES = 16 * 1024 * 1024
# A search by id or tag reads only the manifest's columns: cheap, so the budget is larger.
ID_SCAN_CASES = 200_000
# Records read at once during a scan or the stats' pass.
READ_BATCH = 1_000
MAX_QUERY = 256
# One file body in one answer: a Lambda answer is at most 6 MB and a binary body is sent
# base64-encoded (4/3 of its size).
MAX_FILE_BYTES = 4 * 1024 * 1024
TEXT_TYPE = "text/plain; charset=utf-8"
BINARY_TYPE = "application/octet-stream"


@dataclass(frozen=True)
class SearchPage:
    items: list[dict[str, Any]]
    next_cursor: str | None
    scanned_from: int  # the scan of this page covered cases [scanned_from, scanned_to)
    scanned_to: int
    case_count: int


@dataclass(frozen=True)
class FileBody:
    digest: str
    size: int
    content_type: str
    body: bytes


def stats_key(tenant: str, content_digest: str) -> str:
    """Where a version's numbers are kept: under the caller's tenant, beside the downloads in
    the transient `exports/` area (expired by the bucket's lifecycle rule; recomputed when
    missing)."""
    hex_digest = content_digest.removeprefix("sha256:")
    return f"{layout.root(tenant)}exports/stats/{hex_digest}.json"


class BrowseService:
    def __init__(
        self,
        registry: RegistryService,
        *,
        max_file_bytes: int = MAX_FILE_BYTES,
        text_scan_cases: int = TEXT_SCAN_CASES,
        text_scan_bytes: int = TEXT_SCAN_BYTES,
        id_scan_cases: int = ID_SCAN_CASES,
        answer_bytes: int = ANSWER_BUDGET_BYTES,
        max_indexed_bytes: int = MAX_INDEXED_BYTES,
        index_bytes: int = MAX_INDEXED_BYTES,
    ) -> None:
        """`answer_bytes`: the escaped bytes a page of matches may take
        (`caseshelf.domain.answers`). `max_indexed_bytes`: the largest version (in record
        bytes) whose whole rest a text search page searches. `index_bytes`: the largest this
        process makes or reads a search index of (`caseshelf.services.search_index`,
        `index_bytes_for` its memory); a version between the two is searched by the scan of
        its records."""
        self.registry = registry
        self.max_indexed_bytes = max_indexed_bytes
        self.index_bytes = index_bytes
        self._last_index = LastIndex()
        self.answer_bytes = answer_bytes
        self.max_file_bytes = max_file_bytes
        self.text_scan_cases = text_scan_cases
        self.text_scan_bytes = text_scan_bytes
        self.id_scan_cases = id_scan_cases

    # -- search ----------------------------------------------------------------------------

    def search_cases(
        self,
        identity: Identity,
        name: str,
        ref: str,
        q: str,
        *,
        by: SearchBy = "any",
        cursor: str | None = None,
        limit: int = 100,
        include_deleted: bool = False,
    ) -> SearchPage:
        """One page of the cases matching `q` (module docstring: the bound on each page)."""
        needle = needle_of(q)
        if not needle:
            raise BadRequest("q is empty: give the text to search for", field="q")
        if len(q) > MAX_QUERY:
            raise BadRequest(f"q is longer than {MAX_QUERY} characters", field="q")
        limit = check_limit(limit)
        rec = self.registry.get_version(identity, name, ref, include_deleted=include_deleted)
        total = len(self.registry.manifest(rec))
        start = decode_position(cursor)
        finder = None
        if by in ("any", "text") and indexable(needle):
            finder = self._finder(identity.tenant, rec)
        if finder is not None:
            hits, stop = self._scan_index(rec, finder, needle, by, start, limit)
        elif by in ("id", "tag"):
            found, stop = self._scan_manifest(rec, needle, by, start, limit)
            hits = list(self.registry.case_records(rec, found))
        else:
            hits, stop = self._scan_records(rec, needle, by, start, limit)
        items, stop = self._fit(rec, hits, stop)
        return SearchPage(
            items=items,
            next_cursor=encode_position(stop) if stop < total else None,
            scanned_from=min(start, total),
            scanned_to=stop,
            case_count=total,
        )

    def _fit(
        self, rec: VersionRecord, hits: list[tuple[int, dict[str, Any]]], stop: int
    ) -> tuple[list[dict[str, Any]], int]:
        """The leading matches that fit one answer (`caseshelf.domain.answers`), and where the
        next page's scan starts: at the first match left out, or where this one stopped. A
        match alone over the budget is a stub naming the route that serves it alone."""
        dumped = [orjson.dumps(case) for _, case in hits]
        kept = fitting(map(escaped_size, dumped), self.answer_bytes - PAGE_FRAME_BYTES)
        if kept == len(hits):
            return [case for _, case in hits], stop
        if kept == 0:
            at, case = hits[0]
            href = self.registry.case_href(rec, at)
            return [oversized_case(case["id"], at, escaped_size(dumped[0]), href)], at + 1
        return [case for _, case in hits[:kept]], hits[kept][0]

    def _scan_manifest(
        self, rec: VersionRecord, needle: str, by: SearchBy, start: int, limit: int
    ) -> tuple[list[int], int]:
        """The positions from `start` (to the id budget) whose id holds `needle`, or whose tags
        hold it (`id_matches`, `tag_matches`), at most `limit`, and where the scan stopped:
        after the last one found when the page is full, else at the budget's end. The ids are
        searched as one case-folded text; the tags only when a tag name matches."""
        manifest = self.registry.manifest(rec)
        end = min(len(manifest), start + self.id_scan_cases)
        if by == "id":
            found = _ids_holding(manifest.ids[start:end], needle, limit)
            found = [start + k for k in found]
        else:
            tags = {k for k, t in enumerate(manifest.tag_names) if tag_matches([t], needle)}
            found = []
            if tags:
                found = [i for i in range(start, end) if tags.intersection(manifest.case_tags[i])]
                found = found[:limit]
        return found, found[-1] + 1 if len(found) == limit else end

    def _scan_index(
        self,
        rec: VersionRecord,
        finder: TextFinder,
        needle: str,
        by: SearchBy,
        start: int,
        limit: int,
    ) -> tuple[list[tuple[int, dict[str, Any]]], int]:
        """A page of matches from the version's search index or the scan of its records (the
        same answer either way): the whole rest of the version is searched (by `any`, the ids
        and tags to the id budget), then only the matches are read (and checked again against
        the case itself). By `any`, the ids and tags are searched first, so the text is
        searched only as far as they leave the page open."""
        total = len(finder)
        stop = total if by == "text" else min(total, start + self.id_scan_cases)
        named: list[int] = []
        if by == "any":
            named, _ = self._scan_manifest(rec, needle, "id", start, stop - start)
            tagged, _ = self._scan_manifest(rec, needle, "tag", start, stop - start)
            named = sorted({*named, *tagged})
        text_stop = named[limit - 1] + 1 if len(named) >= limit else stop
        found = finder.find(needle, start, text_stop, limit)
        if len(found) == limit:
            stop = found[-1] + 1
        if by == "any":
            found = sorted({*found, *(i for i in named if i < stop)})
            if len(found) >= limit:
                found, stop = found[:limit], found[limit - 1] + 1
        cases = self.registry.case_records(rec, found)
        return [(i, c) for i, c in cases if case_matches(c, needle, by)], stop

    def _finder(self, tenant: str, rec: VersionRecord) -> TextFinder | None:
        """What answers a text search of the version: its search index when one is kept (the
        last one used, or the one `stats` made), else a scan of its records; None for a
        version too large for either (its pages are the bounded scan)."""
        key = index_key(tenant, rec.content_digest)
        index = self._last_index.get(key)
        if index is None and rec.bytes <= self.index_bytes:
            total = len(self.registry.manifest(rec))
            index = read_index(self.registry.store, key, rec.content_digest, total)
        if index is not None:
            self._last_index.put(key, index)
            return index
        if rec.bytes > self.max_indexed_bytes:
            return None
        manifest = self.registry.manifest(rec)
        return RecordScan(self.registry.store, rec.tenant, manifest, self.registry.read_gap)

    def _scan_records(
        self, rec: VersionRecord, needle: str, by: SearchBy, start: int, limit: int
    ) -> tuple[list[tuple[int, dict[str, Any]]], int]:
        manifest = self.registry.manifest(rec)
        total = len(manifest)
        items: list[tuple[int, dict[str, Any]]] = []
        i = start
        scanned = read = 0
        while i < total and len(items) < limit:
            if scanned >= self.text_scan_cases or read >= self.text_scan_bytes:
                break
            batch_end = min(total, i + READ_BATCH, i + self.text_scan_cases - scanned)
            for index, case in self.registry.case_records(rec, list(range(i, batch_end))):
                scanned += 1
                read += manifest.location(index).length
                i = index + 1
                if case_matches(case, needle, by):
                    items.append((index, case))
                    if len(items) >= limit:
                        break
                if read >= self.text_scan_bytes:
                    break
        return items, i

    # -- one file --------------------------------------------------------------------------

    def file(
        self,
        identity: Identity,
        name: str,
        ref: str,
        digest: str,
        *,
        include_deleted: bool = False,
    ) -> FileBody:
        """The body of one file of a version (a case's companion file or a shared file), by
        its digest; 413 over `max_file_bytes` (the version's download has every body)."""
        rec = self.registry.get_version(identity, name, ref, include_deleted=include_deleted)
        loc = self.registry.manifest(rec).blob_locations().get(hex_of(digest))
        if loc is None:
            raise NotFound(
                f"no file {digest} in {rec.name}@{rec.version}", digests=[digest], id=rec.name
            )
        if loc.length > self.max_file_bytes:
            raise TooLarge(
                f"the file {digest} is {loc.length} bytes; one file is answered up to "
                f"{self.max_file_bytes}. GET /datasets/{rec.name}/versions/{rec.version}/download "
                "has every file of the version.",
                digest=digest,
                size=loc.length,
                limit=self.max_file_bytes,
            )
        body = self.registry.file_body(rec, digest)
        ctype = TEXT_TYPE if sniff_text(body) else BINARY_TYPE
        return FileBody(digest=digest, size=len(body), content_type=ctype, body=body)

    # -- numbers ---------------------------------------------------------------------------

    def stats(
        self, identity: Identity, name: str, ref: str, *, include_deleted: bool = False
    ) -> tuple[VersionRecord, VersionStats]:
        """A version's numbers over every case, kept by content digest after the first time
        (they read every record: `bench/bench_ui.py` measures the first and a kept one)."""
        rec = self.registry.get_version(identity, name, ref, include_deleted=include_deleted)
        store = self.registry.store
        key = stats_key(identity.tenant, rec.content_digest)
        try:
            kept = VersionStats.from_json(store.get(key))
            if kept.content_digest == rec.content_digest:
                return rec, kept
        except (NotFound, ValueError, KeyError, TypeError):
            pass  # not kept yet, or kept in another format: computed again below
        # The same pass makes the version's search index, when it has none yet.
        ikey = index_key(identity.tenant, rec.content_digest)
        total = len(self.registry.root(rec))
        wants_index = (
            rec.bytes <= min(self.max_indexed_bytes, self.index_bytes)
            and read_index(store, ikey, rec.content_digest, total) is None
        )
        index = IndexBuilder() if wants_index else None
        stats = self.compute_stats(rec, index)
        store.put(key, stats.to_json(), content_type="application/json")
        if index is not None:
            built = index.build(rec.content_digest)
            store.put(ikey, built.to_bytes(), content_type="application/octet-stream")
        return rec, stats

    def compute_stats(self, rec: VersionRecord, index: IndexBuilder | None = None) -> VersionStats:
        """The version's numbers, by one pass over its records (which also feeds `index`). The
        pass reads the version's root and then its chunks one at a time
        (`RegistryService.iter_records`): it neither loads the whole manifest nor keeps the
        chunks, so a warm function reading many versions' numbers holds only its bounded
        cache across requests."""
        root = self.registry.root(rec)
        builder = StatsBuilder()
        for _, record in self.registry.iter_records(rec):
            case = orjson.loads(record)
            builder.add(case)
            if index is not None:
                index.add(case)
        locations = root.blob_locations()
        shared = [
            SharedFileInfo(
                dest=s["dest"],
                digest=s["digest"],
                size=loc.length if (loc := locations.get(hex_of(s["digest"]))) else 0,
            )
            for s in root.shared_files
        ]
        return builder.build(rec.content_digest, shared)


def _ids_holding(ids: list[str], needle: str, limit: int) -> list[int]:
    """The indices of the ids that hold `needle` case-folded (`id_matches`), at most `limit`:
    one search of the ids joined by newlines (an id never holds a control character)."""
    if "\n" in needle:
        return []
    text = "\n".join(ids).casefold()
    found: list[int] = []
    line = at = 0  # the line `at` starts, and where the search goes on
    while len(found) < limit and (hit := text.find(needle, at)) >= 0:
        line += text.count("\n", at, hit)
        found.append(line)
        at = text.find("\n", hit)
        if at < 0:
            break
        at += 1
        line += 1
    return found
