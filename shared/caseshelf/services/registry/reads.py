"""Reading datasets: versions, summaries, pages of cases (spliced from the stored records),
one case, file bodies, and the whole version as one downloadable document."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
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
from caseshelf.domain.canonical import canonical_json, hex_of, inline_body, sha256_hex
from caseshelf.domain.chunks import Root
from caseshelf.domain.errors import NotFound
from caseshelf.domain.identity import Identity
from caseshelf.domain.manifest import Location, Manifest, column_array
from caseshelf.domain.paging import check_limit, decode_position, encode_position
from caseshelf.domain.versions import VersionRecord, ordered
from caseshelf.ports import Page
from caseshelf.services.objectio import write_pieces
from caseshelf.services.registry.caches import RegistryCaches
from caseshelf.services.registry.results import KIND, DatasetSummary, Download, OneCase
from caseshelf.services.storage import read_blobs

# A download document is rendered this many cases at a time (fewer when the version has file
# bodies, which are read with their cases).
RENDER_WINDOW_CASES = 2_000


RENDER_WINDOW_FILES = 64


def _held(chunk: Manifest) -> Callable[[int], Manifest]:
    """`chunk_of` for a window of one chunk the caller holds (`window_cases`)."""
    return lambda _number: chunk


class RegistryReads(RegistryCaches):
    """Reading datasets and their cases."""

    def get_version(
        self, identity: Identity, name: str, ref: str, *, include_deleted: bool = False
    ) -> VersionRecord:
        return self.versions.resolve(identity, name, ref, include_deleted=include_deleted)

    def list_versions(
        self,
        identity: Identity,
        name: str,
        *,
        include_deleted: bool = False,
        cursor: str | None = None,
        limit: int = 100,
    ) -> Page:
        return self.versions.versions(
            identity,
            name,
            include_deleted=include_deleted,
            cursor=cursor,
            limit=check_limit(limit),
        )

    def summary(self, identity: Identity, name: str) -> DatasetSummary:
        tenant, records = self.versions.find(identity, name)
        live = [r for r in records if r.live]
        latest = ordered(live)[-1] if live else None
        return DatasetSummary(
            id=name,
            tenant=tenant,
            latest=latest,
            version_count=len(live),
            created_at=min(r.created_at for r in records),
            updated_at=max(r.created_at for r in records),
        )

    def list_datasets(
        self,
        identity: Identity,
        *,
        shared: bool = False,
        cursor: str | None = None,
        limit: int = 50,
    ) -> Page:
        """Summaries of one tenant's datasets (the caller's, or `_shared`), in name order."""
        page = self.versions.list_entities(
            identity, shared=shared, cursor=cursor, limit=check_limit(limit)
        )
        out = []
        for entry in page.items:
            records = self.index.list_versions(entry.tenant, KIND, entry.name)
            live = [r for r in records if r.live]
            out.append(
                DatasetSummary(
                    id=entry.name,
                    tenant=entry.tenant,
                    latest=ordered(live)[-1] if live else None,
                    version_count=len(live),
                    created_at=entry.created_at,
                    updated_at=entry.updated_at,
                )
            )
        return Page(out, page.next_cursor)

    def case_records(
        self, rec: VersionRecord, indices: list[int]
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """Plain canonical cases at `indices` of a version, in the order asked."""
        for i, data in self.read_records(rec, indices):
            yield i, orjson.loads(data)

    def list_cases(
        self,
        identity: Identity,
        name: str,
        ref: str,
        *,
        cursor: str | None = None,
        limit: int = 100,
        include_deleted: bool = False,
    ) -> Page:
        rec = self.get_version(identity, name, ref, include_deleted=include_deleted)
        count = len(self.root(rec))
        start = decode_position(cursor)
        stop = min(start + check_limit(limit), count)
        items = [case for _, case in self.case_records(rec, list(range(start, stop)))]
        return Page(items, encode_position(stop) if stop < count else None)

    def case_page_json(
        self,
        identity: Identity,
        name: str,
        ref: str,
        *,
        cursor: str | None = None,
        limit: int = 100,
        include_deleted: bool = False,
        budget: int = ANSWER_BUDGET_BYTES,
    ) -> tuple[bytes, str | None]:
        """The page `list_cases` answers, as the JSON of `{items, next_cursor}` spliced from
        the stored canonical records without parsing them, and its `next_cursor`.

        A page holds up to `limit` cases and at most `budget` bytes as the answer's body is
        escaped on its way out of Lambda (`caseshelf.domain.answers`): it may hold fewer cases
        and still have a `next_cursor`. A case that alone is over the budget is a stub in the
        page (`oversized_case`) naming the route that serves it alone (`case_at`).

        A stored record is the canonical JSON of its case, so the page is the same JSON value
        as `list_cases`' items dumped; what this buys is the parse and the dump of every case
        (most of the server's time on a page, `bench/bench_client.py`). Only the root and the
        chunks covering the page are read, a few ranged reads each, and the records are checked in
        bulk (`caseshelf.services.windowread`), in about half the time of `read_records`."""
        # (imported here: the export formats it reads windows for are no cold-start cost of
        # every registry function)
        from caseshelf.services.windowread import window_cases  # lazy: ~40 ms of cold start

        rec = self.get_version(identity, name, ref, include_deleted=include_deleted)
        root = self.root(rec)
        count = len(root)
        start = min(decode_position(cursor), count)
        room = budget - PAGE_FRAME_BYTES
        stop = self._stored_fit(rec, root, start, min(start + check_limit(limit), count), room)
        records = window_cases(self, rec, root.chunk_starts(), range(start, stop)).records
        kept = fitting(map(escaped_size, records), room)
        if kept == 0 and records:  # one case over the budget on its own: a stub in its place
            records = [orjson.dumps(self._oversized(rec, start, records[0]))]
            kept = 1
        stop = start + kept
        nxt = encode_position(stop) if stop < count else None
        body = b"".join(
            (
                b'{"items":[',
                b",".join(records[:kept]),
                b'],"next_cursor":',
                orjson.dumps(nxt),
                b"}",
            )
        )
        return body, nxt

    def _stored_fit(self, rec: VersionRecord, root: Root, start: int, stop: int, room: int) -> int:
        """The end of the cases from `start` (before `stop`, and at least one) whose stored
        records together fit `room` bytes: escaping only adds bytes, so no case past it can fit
        in the page, and none is read."""
        starts = root.chunk_starts()
        used = -1
        at = start
        while at < stop:
            number = bisect_right(starts, at) - 1
            lengths = column_array(self.chunk(rec, number).lengths)
            end = min(stop, starts[number + 1])
            for i in range(at, end):
                used += lengths[i - starts[number]] + 1
                if used > room:
                    return max(i, start + 1)
            at = end
        return stop

    def case_href(self, rec: VersionRecord, position: int) -> str:
        """The route of one case of a version, pinned by content digest."""
        return f"/datasets/{rec.name}/versions/{rec.content_digest}/cases/{position}"

    def _oversized(self, rec: VersionRecord, position: int, record: bytes) -> dict[str, Any]:
        case_id = str(orjson.loads(record)["id"])
        return oversized_case(
            case_id, position, escaped_size(record), self.case_href(rec, position)
        )

    def one_case(
        self,
        identity: Identity,
        name: str,
        ref: str,
        position: int,
        *,
        include_deleted: bool = False,
        budget: int = ANSWER_BUDGET_BYTES,
    ) -> OneCase:
        """The case at `position` of a version: its canonical record when it fits an answer of
        `budget` escaped bytes (or the store gives no URLs), else a presigned URL of it alone."""
        rec, record = self.case_at(identity, name, ref, position, include_deleted=include_deleted)
        size = escaped_size(record)
        url = self.case_url(rec, record) if size > budget else None
        if url is None:
            return OneCase(record=record, size=size)
        case_id = str(orjson.loads(record)["id"])
        return OneCase(id=case_id, url=url, size=size)

    def case_at(
        self,
        identity: Identity,
        name: str,
        ref: str,
        position: int,
        *,
        include_deleted: bool = False,
    ) -> tuple[VersionRecord, bytes]:
        """The stored canonical record of the case at `position` (in dataset order) of a
        version, checked against its digest."""
        rec = self.get_version(identity, name, ref, include_deleted=include_deleted)
        count = len(self.root(rec))
        if not 0 <= position < count:
            raise NotFound(
                f"{rec.name}@{rec.version} has {count} cases: no case at position {position} "
                f"(positions run from 0 to {count - 1})",
                field="position",
            )
        (_, record), *_ = self.read_records(rec, [position])
        return rec, record

    def case_url(self, rec: VersionRecord, record: bytes) -> str | None:
        """A presigned GET of one case's record as its own object (written on first use, by
        its digest), where this store gives URLs; None where it does not."""
        if not self.presign_downloads:
            return None
        key = layout.case_object_key(rec.tenant, sha256_hex(record))
        if self.store.head(key) is None:
            self.store.put(key, record, content_type="application/json")
        return self.store.presign_get(key, expires=self.presign_expiry)

    def download(
        self, identity: Identity, name: str, ref: str, *, include_deleted: bool = False
    ) -> Download:
        """The whole version as one dataset JSON document that `register` accepts as it is:
        file bodies inline, so registering it anywhere gives the same content digest. Rendered
        here, in this call, when it is not stored yet (the API renders it as a job instead:
        `caseshelf.services.download_jobs`)."""
        rec = self.get_version(identity, name, ref, include_deleted=include_deleted)
        found = self.stored_download(rec)
        if found is not None:
            return found
        key = layout.download_key(rec.tenant, rec.content_digest)
        # streamed (a multipart upload on S3): no more than a window of cases in memory
        write_pieces(self.store, key, self.render_pieces(rec), content_type="application/json")
        found = self.stored_download(rec)
        assert found is not None
        return found

    def stored_download(self, rec: VersionRecord) -> Download | None:
        """The version's download document when it is stored already (a presigned URL where
        the store gives one, else its bytes); None when it is not rendered yet."""
        key = layout.download_key(rec.tenant, rec.content_digest)
        if self.store.head(key) is None:
            return None
        filename = f"{rec.name}-{rec.version}.json"
        if self.presign_downloads:
            url = self.store.presign_get(key, expires=self.presign_expiry, filename=filename)
            if url is not None:
                return Download(filename=filename, url=url)
        return Download(filename=filename, body=self.store.get(key))

    def render_version(self, rec: VersionRecord) -> bytes:
        """The whole download document of a version in memory (`render_pieces` joined): for
        small versions and tests; a download streams the pieces to the store."""
        return b"".join(self.render_pieces(rec))

    def render_pieces(self, rec: VersionRecord) -> Iterator[bytes]:
        """The download document of a version, a window of cases at a time: the canonical JSON
        of `{id, version, description, tags, cases, shared_files, produced_by}` with every file
        body inline, byte for byte what `canonical_json` makes of the whole document (so it
        registers with the same content digest), without holding more than a window of cases
        and their file bodies: `render_ends`' head, `render_cases` of every case, its tail."""
        head, tail = self.render_ends(rec)
        yield head
        yield from self.render_cases(rec, 0, len(self.root(rec)))
        yield tail

    def render_ends(self, rec: VersionRecord) -> tuple[bytes, bytes]:
        """The download document without its cases, as (what comes before the first case,
        what comes after the last). Canonical JSON sorts keys, so `cases` comes first: the
        document is `{"cases":[`, the cases joined by commas, and the rest of the document
        rendered with no case."""
        root = self.root(rec)
        blobs = root.blob_locations()
        doc: dict[str, Any] = {
            "id": rec.name,
            "version": rec.version,
            "description": root.description,
            "tags": root.tags,
            "cases": [],
            "shared_files": [
                {"dest": f["dest"], **inline_body(body)}
                for f, body in zip(
                    root.shared_files,
                    self._bodies(rec, blobs, [f["digest"] for f in root.shared_files]),
                    strict=True,
                )
            ],
            "produced_by": rec.produced_by,
        }
        if rec.produced_by is None:
            del doc["produced_by"]
        head = b'{"cases":['
        rest = canonical_json(doc, checked=True)
        if not rest.startswith(head + b"]"):
            raise AssertionError("canonical JSON no longer sorts `cases` first")
        return head, rest[len(head) :]

    def render_cases(self, rec: VersionRecord, start: int, stop: int) -> Iterator[bytes]:
        """The canonical JSON of the cases at positions [start, stop), file bodies inline,
        joined by commas (no comma before the first): a window of cases at a time, chunk by
        chunk, each chunk read once and not cached (a pass over many cases keeps none)."""
        from caseshelf.services.windowread import window_cases  # lazy: ~40 ms of cold start

        root = self.root(rec)
        blobs = root.blob_locations()
        window = RENDER_WINDOW_FILES if blobs else RENDER_WINDOW_CASES
        starts = root.chunk_starts()
        numbers = [n for n in range(len(starts) - 1) if starts[n] < stop and starts[n + 1] > start]
        first_piece = True
        for n, chunk in zip(numbers, self.read_chunks(rec, numbers), strict=True):
            held = _held(chunk)
            lo, hi = max(start, starts[n]), min(stop, starts[n + 1])
            for at in range(lo, hi, window):
                records = window_cases(
                    self, rec, starts, range(at, min(at + window, hi)), chunk_of=held
                )
                if not first_piece:
                    yield b","
                first_piece = False
                if not blobs:  # the stored records are the cases' canonical JSON already
                    yield b",".join(records.records)
                else:
                    yield b",".join(self._inlined(rec, blobs, records.cases()))

    def _bodies(
        self, rec: VersionRecord, blobs: Mapping[str, Location], digests: Sequence[str]
    ) -> list[bytes]:
        """The file bodies of `digests` (`sha256:<hex>`), in that order, each read once."""
        wanted = {hex_of(d): blobs[hex_of(d)] for d in digests}
        got = read_blobs(self.store, rec.tenant, wanted, workers=self.read_workers)
        return [got[hex_of(d)] for d in digests]

    def _inlined(
        self, rec: VersionRecord, blobs: Mapping[str, Location], cases: Sequence[dict[str, Any]]
    ) -> Iterator[bytes]:
        """The canonical JSON of `cases`, each with its files' bodies inline."""
        digests = [f["digest"] for case in cases for f in case.get("files", {}).values()]
        bodies = dict(zip(digests, self._bodies(rec, blobs, digests), strict=True))
        for case in cases:
            if "files" in case:
                case = {
                    **case,
                    "files": {
                        p: inline_body(bodies[f["digest"]]) for p, f in case["files"].items()
                    },
                }
            yield canonical_json(case, checked=True)

    def file_body(self, rec: VersionRecord, digest: str) -> bytes:
        manifest = self.manifest(rec)
        loc = manifest.blob_locations().get(hex_of(digest))
        if loc is None:
            raise NotFound(f"no file {digest} in {rec.name}@{rec.version}", digests=[digest])
        return read_blobs(self.store, rec.tenant, {hex_of(digest): loc})[hex_of(digest)]
