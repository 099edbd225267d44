"""The dataset registry: register, validate, read, tag, tombstone, download.

Registration order is the commit protocol of architecture §4: packs, blobs and the manifest are
written first; the conditional put of the version row is the commit. A crash before it leaves only
unreferenced objects (collected by `gc`), never a half-visible version.
"""

from __future__ import annotations

import base64
import binascii
import random
import time
from array import array
from bisect import bisect_right
from collections import ChainMap, Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import chain
from typing import TYPE_CHECKING, Any, Literal

import orjson
from pydantic import ConfigDict, TypeAdapter, ValidationError

from caseshelf.domain import layout
from caseshelf.domain.answers import (
    ANSWER_BUDGET_BYTES,
    PAGE_FRAME_BYTES,
    escaped_size,
    fitting,
    oversized_case,
)
from caseshelf.domain.canonical import (
    ContentDigester,
    canonical_json,
    digest_of,
    hex_of,
    inline_body,
    sha256_hex,
)
from caseshelf.domain.chunks import Root, join_chunks, root_of_legacy
from caseshelf.domain.diff import ChangeAgainstBase
from caseshelf.domain.envelope import (
    canonical_into,
    cases_to_plain,
    validate_plain_cases,
    validation_problem,
)
from caseshelf.domain.errors import BadRequest, Conflict, Corrupt, NotFound, TooLarge
from caseshelf.domain.identity import Identity
from caseshelf.domain.manifest import (
    PENDING_PACK,
    Location,
    Manifest,
    ManifestBuilder,
    column_array,
)
from caseshelf.domain.models import (
    Case,
    DatasetVersionInput,
    SharedFileInput,
)
from caseshelf.domain.paging import check_limit, decode_position, encode_position
from caseshelf.domain.tags import TagBoard, TagMove
from caseshelf.domain.versions import (
    VersionRecord,
    check_dataset_id,
    check_label,
    next_version,
    ordered,
    resolve_ref,
)
from caseshelf.domain.writeplan import plan_batch, record_spans
from caseshelf.ports import BlobStore, Index, Page
from caseshelf.services.fence import Lease, WriteFence
from caseshelf.services.memo import DEFAULT_MEMORY_BYTES, ByteBoundedCache, cache_bytes_for
from caseshelf.services.objectio import write_pieces
from caseshelf.services.storage import (
    MAX_GAP_BYTES,
    BlobWriter,
    ManifestWriter,
    ManifestWritten,
    PackWriter,
    parse_root,
    read_blobs,
    read_cases,
    read_chunk,
    read_chunks,
    read_superseded,
)
from caseshelf.services.versioned import Clock, VersionedStore, utc_now

if TYPE_CHECKING:  # the import path's type; the registry needs none of the mapping at run time
    from caseshelf.domain.mapping import RecordBatch

KIND = "dataset"
# A download document is rendered this many cases at a time (fewer when the version has file
# bodies, which are read with their cases).
RENDER_WINDOW_CASES = 2_000
RENDER_WINDOW_FILES = 64
MAX_CASE_BYTES = 4 * 1024 * 1024
# A bump loses a label only to a racing registration that committed it, so every lost attempt
# is another writer's success: the bound is generous (far above any real concurrency) and exists
# only so that a broken index cannot loop a request forever.
BUMP_ATTEMPTS = 1000
BUMP_BACKOFF_MAX = 0.05  # seconds: the longest pause between two attempts


def _bump_pause(attempt: int) -> None:
    """A short random pause before a bump's next attempt (full jitter, doubling up to
    BUMP_BACKOFF_MAX), so racing bumps spread out instead of colliding again at once."""
    time.sleep(random.uniform(0, min(BUMP_BACKOFF_MAX, 0.001 * 2 ** min(attempt, 6))))


_DIGEST_PREFIX = "sha256:"


@dataclass(frozen=True)
class WriteStats:
    case_bytes_written: int = 0  # the version's new records, and copies of superseded ones
    pack_objects_written: int = 0
    blob_bytes_written: int = 0
    cases_reused: int = 0
    superseded_copied: int = 0  # records of the base version copied (`_keep_superseded`)


@dataclass(frozen=True)
class _Copied:
    records: int = 0
    bytes_written: int = 0
    objects_written: int = 0


# The most cases a registration holds waiting for the packs their new records went into
# (`_HeldCases`): beyond it the pack being filled is stored as it is (`PackWriter.cut`). A pack
# is stored once it reaches its target size, which a registration reusing most of its records
# reaches slowly: a re-import of 1,000,000 GSM8K rows with 1% changed fills one pack with its
# 10,000 new records, and every case waited for it (~265 bytes a case held, ~250 MB). At this
# bound such a re-import stores a pack of its new records every ~131,000 cases; a version whose
# records are new fills its packs long before (an 8 MB pack is ~13,000 GSM8K cases).
HELD_MAX_CASES = 131_072

# Copies of superseded records (`RegistryService._keep_superseded`) are kept for changes up to
# this size: a pack's worth.
SUPERSEDED_MAX_RECORDS = 20_000
SUPERSEDED_MAX_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class RegisterResult:
    record: VersionRecord
    created: bool
    stats: WriteStats = field(default_factory=WriteStats)


@dataclass(frozen=True)
class ValidateResult:
    content_digest: str
    case_count: int
    would_conflict: bool
    version: str


@dataclass(frozen=True)
class DatasetSummary:
    id: str
    tenant: str
    latest: VersionRecord | None
    version_count: int
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class OneCase:
    """One case of a version: its canonical record, or (too large for an answer) the URL of
    it alone; `size` is its escaped size (`caseshelf.domain.answers.escaped_size`)."""

    size: int
    record: bytes | None = None
    id: str | None = None
    url: str | None = None


@dataclass(frozen=True)
class Download:
    """Either a presigned URL (AWS) or the document's bytes (embedded store)."""

    filename: str
    url: str | None = None
    body: bytes | None = None


def unchanged_latest(records: list[VersionRecord], content_digest: str) -> VersionRecord | None:
    """The latest live version when it already holds this content: a bump then registers
    nothing (re-running the same import or bumped registration is idempotent)."""
    live = [r for r in records if r.live]
    if live:
        latest = ordered(live)[-1]
        if latest.content_digest == content_digest:
            return latest
    return None


# Built on first use, as the models are (`defer_build`): building it at import built the whole
# `Case` schema, ~30 ms of every process that imports the registry, an import's included, which
# never validates a case this way.
_CASE_LIST: TypeAdapter[list[Case]] = TypeAdapter(list[Case], config=ConfigDict(defer_build=True))


@dataclass(frozen=True)
class DatasetDocument:
    """A validated dataset document, as `register` and `validate` take it: everything but its
    cases as the model holds it (`cases` left empty), and the cases in their canonical plain
    form (`caseshelf.domain.envelope.cases_to_plain`), their inline file bodies not yet
    stored."""

    meta: DatasetVersionInput
    plain_cases: list[dict[str, Any]]

    @property
    def id(self) -> str:
        return self.meta.id

    @cached_property
    def cases(self) -> list[Case]:
        """The cases as models, for a reader of their fields (made when first read; a
        registration reads `plain_cases`)."""
        return _CASE_LIST.validate_python(self.plain_cases)


def document_of(body: DatasetVersionInput | DatasetDocument) -> DatasetDocument:
    """A document validated into models (an HTTP body) as `register` takes it."""
    if isinstance(body, DatasetDocument):
        return body
    return DatasetDocument(body.model_copy(update={"cases": []}), cases_to_plain(body.cases))


def parse_dataset(raw: Any) -> DatasetDocument:
    """Validate a dataset document; errors name the case id (or index) and the field.

    The cases are validated straight into their plain form (`validate_plain_cases`: half the
    cost of models read back); on any failure the whole document is validated with the models,
    which name what is wrong exactly as they always have."""
    if not isinstance(raw, dict):
        raise BadRequest("a dataset version is a JSON object")
    cases = raw.get("cases")
    if isinstance(cases, list):
        try:
            meta = DatasetVersionInput.model_validate({**raw, "cases": []})
            return DatasetDocument(meta, validate_plain_cases(cases))
        except (ValidationError, BadRequest):  # a path validator raises BadRequest itself
            pass
    try:
        return document_of(DatasetVersionInput.model_validate(raw))
    except ValidationError as exc:
        raise dataset_error(exc, raw) from None


def dataset_error(exc: ValidationError, raw: Any) -> BadRequest:
    loc, msg = validation_problem(exc)
    first = exc.errors(include_url=False)[0]["loc"]
    case_id = None
    index = None
    if len(first) >= 2 and first[0] == "cases" and isinstance(first[1], int):
        index = first[1]
        try:
            cid = raw["cases"][index].get("id")
            case_id = cid if isinstance(cid, str) else None
        except (KeyError, IndexError, TypeError, AttributeError):
            case_id = None
        where = f"case {case_id!r}" if case_id else f"case at index {index}"
        field_path = ".".join(str(p) for p in first[2:]) or "case"
        return BadRequest(
            f"{where}: {field_path}: {msg}", case_id=case_id, index=index, field=field_path
        )
    return BadRequest(f"{loc}: {msg}", field=loc)


def _decode_inline(entry: Mapping[str, str], where: str) -> bytes:
    """The body of a file sent inline, `{text}` or `{base64}` (a plain `InlineText` or
    `InlineBase64`)."""
    if "text" in entry:
        return entry["text"].encode("utf-8")
    try:
        return base64.b64decode(entry["base64"], validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{where}: base64 body is not valid base64", field=where) from None


STAGE_CASES = 2048  # cases per staged batch of a dataset document


@dataclass(frozen=True)
class VersionHead:
    """What a registration says of its version besides the cases: the dataset, the label (or
    the bump), the base its dedup reuses, and the metadata the content digest covers."""

    name: str
    version: str | None = None
    bump: str | None = None
    base: str | None = None
    description: str = ""
    tags: tuple[str, ...] = ()  # sorted, unique
    shared_files: tuple[dict[str, str], ...] = ()  # {dest, digest}, in order
    produced_by: dict[str, Any] | None = None
    shared_bodies: Mapping[str, bytes] = field(default_factory=dict)  # sent inline, by hex
    shared_refs: Mapping[str, tuple[str, str, int]] = field(default_factory=dict)  # by digest
    # Which of INHERITED the input left out: a new version takes them from its base.
    inherit: frozenset[str] = frozenset()


# The metadata a new version of a dataset keeps from its base unless its input sets it.
INHERITED: tuple[str, ...] = ("description", "tags", "produced_by")


def head_of(body: DatasetVersionInput) -> VersionHead:
    """A validated document's head (its shared files decoded); the metadata it does not set
    is named in `inherit`."""
    shared, bodies, refs = shared_part(body.shared_files)
    return VersionHead(
        name=body.id,
        version=body.version,
        bump=body.bump,
        base=body.base,
        description=body.description,
        tags=tuple(sorted(set(body.tags))),
        shared_files=tuple(shared),
        produced_by=body.produced_by,
        shared_bodies=bodies,
        shared_refs=refs,
        inherit=frozenset(f for f in INHERITED if f not in body.model_fields_set),
    )


def inherited(head: VersionHead, base: VersionRecord | None) -> VersionHead:
    """`head` with the metadata it left out taken from `base` (a cases-only file registered
    as the next version keeps its dataset's description, tags and provenance)."""
    if base is None or not head.inherit:
        return head
    taken: dict[str, Any] = {}
    if "description" in head.inherit:
        taken["description"] = base.description
    if "tags" in head.inherit:
        taken["tags"] = tuple(base.tags)
    if "produced_by" in head.inherit and base.produced_by is not None:
        taken["produced_by"] = dict(base.produced_by)
    return replace(head, inherit=frozenset(), **taken)


def parse_head(raw: Any) -> VersionHead:
    """The head of a dataset document whose cases come apart (`register_stream`): everything but
    `cases`, validated as `parse_dataset` validates it."""
    if not isinstance(raw, dict):
        raise BadRequest("a dataset version is a JSON object")
    if "cases" in raw:
        raise BadRequest("the head of a streamed dataset holds no cases", field="cases")
    return head_of(parse_dataset({**raw, "cases": []}).meta)


def _label(head: VersionHead, records: list[VersionRecord]) -> str:
    """The label a registration takes: the one given, or the next the bump gives."""
    return head.version if head.version is not None else next_version(records, head.bump or "")


def _check_head(head: VersionHead) -> None:
    check_dataset_id(head.name)
    if (head.version is None) == (head.bump is None):
        raise BadRequest("give either a version or a bump (major|minor|patch)", field="version")
    if head.version is not None:
        check_label(head.version)


def shared_part(
    shared_files: Sequence[SharedFileInput],
) -> tuple[list[dict[str, str]], dict[str, bytes], dict[str, tuple[str, str, int]]]:
    """A document's shared files as `{dest, digest}`, with the bodies sent inline (by digest
    hex) and those sent by reference."""
    bodies: dict[str, bytes] = {}
    refs: dict[str, tuple[str, str, int]] = {}
    shared: list[dict[str, str]] = []
    for sf in shared_files:
        if sf.digest is not None:
            refs.setdefault(hex_of(sf.digest), ("", f"shared_files.{sf.dest}", -1))
            shared.append({"dest": sf.dest, "digest": sf.digest})
            continue
        entry = {"text": sf.text} if sf.text is not None else {"base64": sf.base64 or ""}
        data = _decode_inline(entry, f"shared_files.{sf.dest}")
        digest = digest_of(data)
        bodies[hex_of(digest)] = data
        shared.append({"dest": sf.dest, "digest": digest})
    clash = sorted(d for d, n in Counter(s["dest"] for s in shared).items() if n > 1)
    if clash:
        raise BadRequest(
            f"shared files with the same dest: {', '.join(clash)}", field="shared_files"
        )
    return shared, bodies, refs


@dataclass
class Staged:
    """A batch of cases through validation, canonical form and digests: what the plan and the
    writer take. `data` holds the canonical records back to back, each followed by a newline;
    None when every record is stored already (the plan finds each in `known`)."""

    ids: list[str]
    digests: list[str]  # hex
    tags: Sequence[Sequence[str]]  # sorted, unique tags of each case
    lengths: list[int]  # bytes of each record, its newline not counted
    data: bytes | bytearray | None = None
    bodies: dict[str, bytes] = field(default_factory=dict)  # file bodies sent inline, by hex
    refs: dict[str, tuple[str, str, int]] = field(default_factory=dict)  # hex -> (case, path, size)
    files: list[str] = field(default_factory=list)  # every body the batch names, by hex
    # Batches of a stream consumed once, whose ids are checked as they pass (`SeenIds`): an id
    # given twice is refused naming both positions, the rows of an import ("rows") or the cases
    # of a streamed dataset ("cases"). "" for a document's, whose ids were checked whole.
    positions: Literal["", "rows", "cases"] = ""

    def pairs(self) -> list[tuple[str, str]]:
        """`[case id, case digest]` of each case, as the content digest takes them."""
        return list(zip(self.ids, [_DIGEST_PREFIX + d for d in self.digests], strict=True))


def _digester(head: VersionHead) -> ContentDigester:
    return ContentDigester(
        description=head.description, tags=list(head.tags), shared_files=head.shared_files
    )


def _content_digest(head: VersionHead, batches: Iterable[Staged]) -> str:
    digester = _digester(head)
    for batch in batches:
        digester.add(batch.pairs())
    return digester.digest()


def _staged_shared(head: VersionHead) -> Staged:
    """The head's shared file bodies, as a batch without cases."""
    return Staged([], [], [], [], bodies=dict(head.shared_bodies), refs=dict(head.shared_refs))


def _all_refs(batches: Iterable[Staged]) -> dict[str, tuple[str, str, int]]:
    refs: dict[str, tuple[str, str, int]] = {}
    for batch in batches:
        for hex_digest, where in batch.refs.items():
            refs.setdefault(hex_digest, where)
    return refs


def _has_in(base: Root | None, batches: Iterable[Staged]) -> Callable[[str], bool]:
    """Whether a body is stored in the base version or sent inline by one of `batches`."""
    have = set(base.blob_locations() if base is not None else ())
    for batch in batches:
        have.update(batch.bodies)
    return have.__contains__


def _plain_batch(raw: Sequence[Any], start: int) -> list[dict[str, Any]]:
    """A batch of a stream's cases validated into their plain form (`validate_plain_cases`);
    on any failure validated with the models (`_validate_cases`), which name what is wrong."""
    try:
        return validate_plain_cases(raw)
    except (ValidationError, BadRequest):  # a path validator raises BadRequest itself
        return cases_to_plain(_validate_cases(raw, start))


def _validate_cases(raw: Sequence[Any], start: int) -> list[Case]:
    """A batch of plain cases validated; an error names the case id (or its index in the whole
    dataset, `start` being the batch's first) and the field, as `parse_dataset` does."""
    try:
        return _CASE_LIST.validate_python(list(raw))
    except ValidationError as exc:
        _, msg = validation_problem(exc)
        loc = exc.errors(include_url=False)[0]["loc"]
        at = loc[0] if loc and isinstance(loc[0], int) else 0
        item = raw[at] if at < len(raw) else None
        cid = item.get("id") if isinstance(item, dict) else None
        case_id = cid if isinstance(cid, str) else None
        index = start + at
        where = f"case {case_id!r}" if case_id else f"case at index {index}"
        field_path = ".".join(str(p) for p in loc[1:]) or "case"
        raise BadRequest(
            f"{where}: {field_path}: {msg}", case_id=case_id, index=index, field=field_path
        ) from None


def _check_sizes(batch: Staged, limit: int) -> None:
    if batch.lengths and max(batch.lengths) > limit:
        i = next(i for i, n in enumerate(batch.lengths) if n > limit)
        case_id = batch.ids[i]
        raise TooLarge(
            f"case {case_id!r} is {batch.lengths[i]} bytes; the limit is {limit}", case_id=case_id
        )


def _located(src: Manifest, indices: Sequence[int]) -> Staged:
    """The cases of `src` at `indices`, every record stored already (a derived version's)."""
    return Staged(
        ids=[src.ids[i] for i in indices],
        digests=[src.digests[i] for i in indices],
        tags=[src.tags_of(i) for i in indices],
        lengths=[src.location(i).length for i in indices],
        files=list(src.blob_locations()),
    )


def _reused_columns(
    reused: Sequence[Location | None], lengths: Sequence[int]
) -> tuple[list[str], list[int], list[int]]:
    """The manifest columns of a batch as its plan leaves them: where each reused record is;
    new ones are filled in as they are written (`_write_runs`)."""
    containers = [loc.container if loc is not None else "" for loc in reused]
    offsets = [loc.offset if loc is not None else 0 for loc in reused]
    sizes = [loc.length if loc is not None else n for loc, n in zip(reused, lengths, strict=True)]
    return containers, offsets, sizes


def _write_runs(
    packs: PackWriter,
    batch: Staged,
    runs: Sequence[tuple[int, int]],
    pending: list[str],
    containers: list[str],
    offsets: list[int],
) -> None:
    """Append each run of new records to the packs as one slice of the batch's buffer, and
    note where each record went (its pack by placeholder name until the pack is stored).

    A batch whose records are all new is appended as a view of its buffer (no copy). A batch
    that reuses some has its runs copied out (`_run_bytes`): a view would keep the whole buffer
    alive while the pack being filled waits for more records, and in a re-import with 1% of its
    cases changed that pack fills slowly, so every batch's buffer stayed until the end."""
    assert batch.data is not None
    starts, stops = record_spans(batch.lengths)
    view = memoryview(batch.data)
    whole = runs == [(0, len(batch.lengths))]
    for first, stop in runs:
        at = starts[first]
        run = view[at : stops[stop - 1]] if whole else _run_bytes(view, at, stops[stop - 1])
        segments = packs.append_run(run, [e - at for e in stops[first:stop]])
        for n, (seg_first, number, shift) in enumerate(segments):
            seg_stop = segments[n + 1][0] if n + 1 < len(segments) else stop - first
            while len(pending) <= number:
                pending.append(PENDING_PACK + str(len(pending)))
            for i in range(first + seg_first, first + seg_stop):
                containers[i] = pending[number]
                offsets[i] = starts[i] - at + shift


def _run_bytes(view: memoryview, start: int, stop: int) -> memoryview:
    """A copy of `view[start:stop]`, as a view of the copy (a pack slices it without copying
    again)."""
    return memoryview(bytes(view[start:stop]))


class SeenIds:
    """The case ids a streamed registration has taken so far, kept as their hashes (`hash`,
    this process's): ~60 bytes an id in a set of integers, where a dict of the ids to their
    rows held ~130 (the id strings kept alive with it), most of what grew with the rows of an
    import (1,000,000 rows: ~130 MB). A hash seen again is a repeated id, or two ids of one
    hash (about one pair in 10^19): `first_repeat` tells them apart with the ids themselves,
    the earlier one read back where it is (`id_at`)."""

    def __init__(self, key: Callable[[str], int] = hash) -> None:
        self._key = key
        self._seen: set[int] = set()
        self._order = array("q")  # each position's hash

    def first_repeat(
        self, ids: Sequence[str], id_at: Callable[[int], str]
    ) -> tuple[int, int, str] | None:
        """Take the ids of the next positions; answer `(earlier position, position, id)` of the
        first that repeats an id before it, if one does."""
        start = len(self._order)
        hashes = list(map(self._key, ids))
        fresh = set(hashes)
        if len(fresh) == len(hashes) and self._seen.isdisjoint(fresh):
            self._seen |= fresh
            self._order.extend(hashes)
            return None
        for k, (case_id, h) in enumerate(zip(ids, hashes, strict=True)):
            if h in self._seen:
                for at in _positions(self._order, h):
                    earlier = ids[at - start] if at >= start else id_at(at)
                    if earlier == case_id:
                        return at, start + k, case_id
            self._seen.add(h)
            self._order.append(h)
        return None


def _refuse_repeats(seen: SeenIds, batch: Staged, id_at: Callable[[int], str]) -> None:
    """Refuse a batch of a stream that repeats an id given before it or in it (`SeenIds`;
    `id_at` reads an earlier position's id back), naming the id and both positions."""
    repeat = seen.first_repeat(batch.ids, id_at)
    if repeat is None:
        return
    first, again, case_id = repeat
    if batch.positions == "rows":
        raise BadRequest(
            f"rows {first} and {again} both map to case id {case_id!r}",
            case_ids=[case_id],
            rows=[first, again],
        )
    raise BadRequest(
        f"duplicate case ids: {case_id} (the cases at index {first} and {again})",
        case_ids=[case_id],
        indices=[first, again],
    )


class IdLog:
    """The ids of a stream that stores nothing (a validation, a registration whose label is
    taken), for `SeenIds` to read an earlier id back when a hash comes again: each batch's ids
    joined into one string (a case id holds no control character), about a byte a character
    where a set of the id strings holds ~80 bytes more an id."""

    def __init__(self) -> None:
        self._batches: list[str] = []
        self._starts = [0]  # the position of each batch's first id, and the count last

    def add(self, ids: Sequence[str]) -> None:
        if ids:
            self._batches.append("\n".join(ids))
            self._starts.append(self._starts[-1] + len(ids))

    def case_id(self, position: int) -> str:
        if not 0 <= position < self._starts[-1]:
            raise IndexError(f"case position {position} out of range")
        n = bisect_right(self._starts, position) - 1
        return self._batches[n].split("\n")[position - self._starts[n]]


def _positions(column: array[int], value: int) -> Iterator[int]:
    """Every position of `value` in `column`, in order (each found by a search in C)."""
    at = 0
    while True:
        try:
            at = column.index(value, at)
        except ValueError:
            return
        yield at
        at += 1


@dataclass(frozen=True)
class _HeldBatch:
    """A batch's manifest columns, waiting for the packs below `packs_named` to be stored."""

    ids: list[str]
    digests: list[str]
    tags: Sequence[Sequence[str]]
    containers: list[str]
    offsets: list[int]
    lengths: list[int]
    packs_named: int


class _HeldCases:
    """Cases added to the manifest whose packs are still being written: a chunk names the
    packs its cases are in, and a pack's name is the digest of its bytes. Each batch's columns
    (not its records: those are in the packs) are handed on to the `ManifestWriter`, in order,
    once every pack it went into is stored."""

    def __init__(self, writer: ManifestWriter) -> None:
        self._writer = writer
        self._held: deque[_HeldBatch] = deque()
        self._count = 0
        self._names: dict[str, str] = {}  # placeholder -> pack name, of the packs stored

    def add(
        self,
        batch: Staged,
        containers: list[str],
        offsets: list[int],
        lengths: list[int],
        packs_named: int,
    ) -> None:
        """A batch whose new records went into packs below number `packs_named`."""
        self._held.append(
            _HeldBatch(
                batch.ids, batch.digests, batch.tags, containers, offsets, lengths, packs_named
            )
        )
        self._count += len(batch.ids)

    def __len__(self) -> int:
        """The cases held."""
        return self._count

    def case_id(self, position: int) -> str:
        """The id of the case at `position` of the version (held here, or handed on)."""
        at = len(self._writer)
        if position < at:
            return self._writer.case_id(position)
        for batch in self._held:
            if position < at + len(batch.ids):
                return batch.ids[position - at]
            at += len(batch.ids)
        raise IndexError(f"case position {position} out of range")

    def release(
        self, stored: int, pending: Sequence[str], digest_of_pack: Callable[[int], str]
    ) -> None:
        """Hand on the batches whose packs are among the first `stored` (named by
        `digest_of_pack`), their placeholders replaced by the packs' names."""
        names = self._names
        for number in range(len(names), min(stored, len(pending))):
            names[pending[number]] = digest_of_pack(number)
        while self._held and self._held[0].packs_named <= stored:
            b = self._held.popleft()
            self._count -= len(b.ids)
            located = [names.get(c, c) for c in b.containers] if names else b.containers
            self._writer.add(b.ids, b.digests, b.tags, located, b.offsets, b.lengths)


def _held(chunk: Manifest) -> Callable[[int], Manifest]:
    """`chunk_of` for a window of one chunk the caller holds (`window_cases`)."""
    return lambda _number: chunk


class RegistryService:
    def __init__(
        self,
        store: BlobStore,
        index: Index,
        *,
        clock: Clock = utc_now,
        max_case_bytes: int = MAX_CASE_BYTES,
        presign_expiry: int = 900,
        presign_downloads: bool = True,
        read_gap: int = MAX_GAP_BYTES,
        read_workers: int = 1,
        fence: WriteFence | None = None,
        cache_bytes: int = cache_bytes_for(DEFAULT_MEMORY_BYTES),
    ) -> None:
        """`read_gap` and `read_workers`: how this store is read when many records are
        wanted at once (`caseshelf.services.storage.read_records`). `fence`: the write fence
        every registration holds against gc (`caseshelf.services.fence`). `cache_bytes`: the
        bound of the cache of manifests, roots and chunks."""
        self.store = store
        self.index = index
        self.fence = fence or WriteFence(index)
        self.versions = VersionedStore(index, KIND, noun="dataset", clock=clock)
        self.max_case_bytes = max_case_bytes
        self.presign_expiry = presign_expiry
        # A download is a presigned URL where the store is remote (AWS) and the document itself
        # where it is local (the embedded store, architecture §7).
        self.presign_downloads = presign_downloads
        self.read_gap = read_gap
        self.read_workers = read_workers
        # Manifests, roots and chunks are immutable, so a cache keyed by their keys is always
        # right; it is bounded in bytes (`cache_bytes`, against the process's memory), its least
        # recently used entries dropped first (`caseshelf.services.memo`).
        self.cache = ByteBoundedCache(cache_bytes)

    # -- registration: one pipeline ----------------------------------------------------------
    #
    # Every registration runs the same stages: validate -> canonicalise -> digest (a source's
    # stager turns its input into `Staged` batches) -> plan (`plan_batch`, pure) -> write packs
    # and blobs (`_write`) -> commit (`_commit`, the one commit loop). A source is buffered (a
    # document already in memory: every check runs before the first write, so a refusal leaves
    # the store as it was) or streamed (a file, an upload, an import: batches are written as they
    # come, so memory holds a window of cases; a refusal or a crash leaves only unreferenced
    # objects, which gc collects). Nothing is visible before the commit.

    def validate(
        self, identity: Identity, body: DatasetDocument | DatasetVersionInput
    ) -> ValidateResult:
        tenant = identity.check_can_write()
        document = document_of(body)
        head = head_of(document.meta)
        batches = list(self._stage_document(document, head))
        records = self.index.list_versions(tenant, KIND, head.name)
        head = inherited(head, self._base_version(head, records))
        base = self._base_root(head, records)
        cdigest = _content_digest(head, batches)
        self._check_refs(
            tenant, _all_refs(batches), _has_in(base, batches), self._head_blob(tenant)
        )
        return self._validate_result(head, records, cdigest, sum(len(b.ids) for b in batches))

    def validate_stream(
        self, identity: Identity, head: VersionHead, cases: Iterable[Sequence[Any]]
    ) -> ValidateResult:
        """`validate` of a dataset streamed as batches of plain cases (`register_stream`)."""
        tenant = identity.check_can_write()
        _check_head(head)
        records = self.index.list_versions(tenant, KIND, head.name)
        head = inherited(head, self._base_version(head, records))
        base = self._base_root(head, records)
        known = base.blob_locations() if base is not None else {}
        digester = _digester(head)
        count = 0
        inline: set[str] = set()
        seen, log = SeenIds(), IdLog()
        for batch in self._stage_stream(head, cases):
            _refuse_repeats(seen, batch, log.case_id)
            log.add(batch.ids)
            digester.add(batch.pairs())
            count += len(batch.ids)
            inline.update(batch.bodies)
            self._check_refs(
                tenant, batch.refs, lambda h: h in inline or h in known, self._head_blob(tenant)
            )
        return self._validate_result(head, records, digester.digest(), count)

    def _validate_result(
        self, head: VersionHead, records: list[VersionRecord], cdigest: str, count: int
    ) -> ValidateResult:
        label = _label(head, records)
        current = next((r for r in records if r.version == label), None)
        return ValidateResult(
            content_digest=cdigest,
            case_count=count,
            would_conflict=current is not None and current.content_digest != cdigest,
            version=label,
        )

    def register(
        self, identity: Identity, body: DatasetDocument | DatasetVersionInput
    ) -> RegisterResult:
        """Register a dataset document (buffered: it is in memory already): one `parse_dataset`
        gave, or a body the HTTP resolver validated into models."""
        tenant = identity.check_can_write()
        document = document_of(body)
        head = head_of(document.meta)
        batches = list(self._stage_document(document, head))
        with self.fence.writing(tenant) as lease:
            return self._register(identity, tenant, lease, head, batches, buffered=True)

    def register_stream(
        self, identity: Identity, head: VersionHead, cases: Iterable[Sequence[Any]]
    ) -> RegisterResult:
        """Register a dataset whose cases come as batches of plain (not yet validated) cases,
        consumed once: a file or an upload read a window at a time
        (`caseshelf.services.loaders.stream_dataset`). Validation errors name the case id (or
        its index in the whole dataset) and the field. The same answers as `register`."""
        tenant = identity.check_can_write()
        _check_head(head)
        with self.fence.writing(tenant) as lease:
            return self._register(
                identity, tenant, lease, head, self._stage_stream(head, cases), buffered=False
            )

    def register_derived(
        self,
        identity: Identity,
        *,
        name: str,
        version: str | None,
        bump: str | None,
        parent: VersionRecord,
        indices: Sequence[int],
        produced_by: dict[str, Any],
    ) -> RegisterResult:
        """Register the cases of `parent` at `indices` as a version of `name`. No case bytes are
        copied: the new manifest points at the parent's packs and blobs. Keys never cross
        tenants, so a parent read from `_shared` has its records copied into the writer's."""
        tenant = identity.check_can_write()
        src = self.manifest(parent)
        head = VersionHead(
            name=name,
            version=version,
            bump=bump,
            description=src.description,
            tags=tuple(src.tags),
            shared_files=tuple(src.shared_files),
            produced_by=produced_by,
        )
        _check_head(head)
        if parent.tenant == tenant:
            batches = [_located(src, indices)]
            known, known_blobs = src.locations_by_digest(), src.blob_locations()
        else:
            batches = [self._copied(parent, src, indices)]
            known, known_blobs = {}, {}
        with self.fence.writing(tenant) as lease:
            return self._register(
                identity,
                tenant,
                lease,
                head,
                batches,
                buffered=True,
                known=known,
                known_blobs=known_blobs,
                dedup=False,
            )

    def register_records(
        self,
        identity: Identity,
        *,
        name: str,
        version: str | None,
        bump: str | None,
        description: str,
        tags: Sequence[str],
        produced_by: dict[str, Any] | None,
        records: Iterable[RecordBatch],
    ) -> RegisterResult:
        """Register cases streamed as batches of canonical records
        (`caseshelf.domain.mapping.record_batches`), consumed once and never all held at once:
        the import path, whose mapper builds each case already validated in canonical form and
        hashes it. Two rows with the same case id are refused naming both rows. The same commit
        protocol, dedup against the latest live version, size limit, and 409 / idempotency
        rules as `register`. An error while consuming `records` leaves nothing registered."""
        tenant = identity.check_can_write()
        head = VersionHead(
            name=name,
            version=version,
            bump=bump,
            description=description,
            tags=tuple(sorted(set(tags))),
            produced_by=produced_by,
        )
        _check_head(head)
        with self.fence.writing(tenant) as lease:
            return self._register(
                identity, tenant, lease, head, self._stage_records(records), buffered=False
            )

    def _register(
        self,
        identity: Identity,
        tenant: str,
        lease: Lease,
        head: VersionHead,
        batches: Iterable[Staged],
        *,
        buffered: bool,
        known: dict[str, Location] | None = None,
        known_blobs: dict[str, Location] | None = None,
        dedup: bool = True,
    ) -> RegisterResult:
        """The pipeline from staged batches on. `known` / `known_blobs`: records and bodies
        stored already that the plan may point at besides the base version's; `dedup=False`:
        no base version (a derived version points at its parent's records)."""
        records = self.index.list_versions(tenant, KIND, head.name)
        previous = self._base_version(head, records)
        head = inherited(head, previous)
        base = previous if dedup else None
        ahead: frozenset[str] = frozenset()
        if buffered:
            staged = list(batches)
            settled = self._settled(records, head, _content_digest(head, staged))
            if settled is not None:
                return settled
            self._check_refs(
                tenant,
                _all_refs(staged),
                _has_in(self.root(base) if base is not None else None, staged),
                self._head_blob(tenant),
            )
            batches = staged
            ahead = frozenset(chain.from_iterable(b.bodies for b in staged))
        elif head.version is not None and any(r.version == head.version for r in records):
            # The label is taken: whatever the content, this registration stores nothing (it is
            # the same content, or a conflict), so the stream is only validated and digested.
            digester = _digester(head)
            seen, log = SeenIds(), IdLog()
            for batch in batches:
                if batch.positions:
                    _refuse_repeats(seen, batch, log.case_id)
                    log.add(batch.ids)
                digester.add(batch.pairs())
            settled = self._settled(records, head, digester.digest())
            assert settled is not None
            return settled
        written, stats = self._write(
            tenant,
            head,
            batches,
            base=base,
            known=known,
            known_blobs=known_blobs,
            inline_ahead=ahead,
        )
        return self._commit(identity, head, written, stats, lease)

    def _settled(
        self, records: list[VersionRecord], head: VersionHead, cdigest: str
    ) -> RegisterResult | None:
        """The answer when this content needs no new version: a bump whose content the latest
        live version holds already, or a label that is taken (the same content: idempotent, a
        tombstone revived; other content: 409). None when a new version is to be committed."""
        if head.version is None:
            same = unchanged_latest(records, cdigest)
            if same is not None:
                return RegisterResult(same, created=False)
        label = _label(head, records)
        current = next((r for r in records if r.version == label), None)
        if current is None:
            return None
        return RegisterResult(self.versions.settle_existing(current, cdigest), created=False)

    def _base_version(
        self, head: VersionHead, records: list[VersionRecord]
    ) -> VersionRecord | None:
        """The version whose stored records and bodies a registration reuses: `base`, or the
        latest live version."""
        if head.base is not None:
            return resolve_ref(records, head.base, include_deleted=True, name=head.name)
        live = [r for r in records if r.live]
        return ordered(live)[-1] if live else None

    def _base_root(self, head: VersionHead, records: list[VersionRecord]) -> Root | None:
        """The root of `_base_version` (its file bodies, for a validation's references)."""
        rec = self._base_version(head, records)
        return self.root(rec) if rec is not None else None

    # -- stagers: validate, canonicalise, digest ---------------------------------------------

    def _stage_document(self, body: DatasetDocument, head: VersionHead) -> Iterator[Staged]:
        """A validated document's batches: its shared files first (a batch without cases), then
        its cases. Repeated ids are refused before any case is staged."""
        cases = body.plain_cases
        ids = [c["id"] for c in cases]
        if len(set(ids)) != len(ids):
            dups = sorted(cid for cid, n in Counter(ids).items() if n > 1)
            raise BadRequest(f"duplicate case ids: {', '.join(dups[:50])}", case_ids=dups)
        yield _staged_shared(head)
        for start in range(0, len(cases), STAGE_CASES):
            yield self._stage_cases(cases[start : start + STAGE_CASES])

    def _stage_stream(self, head: VersionHead, cases: Iterable[Sequence[Any]]) -> Iterator[Staged]:
        """Batches of plain cases validated, canonicalised and digested one batch at a time.
        The head's shared files were decoded with the head (`shared_part`). A repeated id is
        refused where the batches are consumed (`positions`: `SeenIds` holds a hash an id, not
        the ids)."""
        yield _staged_shared(head)
        start = 0
        for raw in cases:
            plains = _plain_batch(raw, start)
            start += len(plains)
            staged = self._stage_cases(plains)
            staged.positions = "cases"
            yield staged

    def _stage_cases(self, cases: Sequence[dict[str, Any]]) -> Staged:
        """Cases in their plain form with their inline file bodies taken out (stored as blobs,
        named by digest: a `StoredFile` in their place), as canonical records."""
        bodies: dict[str, bytes] = {}
        refs: dict[str, tuple[str, str, int]] = {}
        files: list[str] = []
        plain: list[dict[str, Any]] = []
        for case in cases:
            if "files" in case:
                stored: dict[str, dict[str, Any]] = {}
                for path, entry in case["files"].items():
                    if "digest" in entry:  # a StoredFile
                        refs.setdefault(hex_of(entry["digest"]), (case["id"], path, entry["size"]))
                        stored[path] = entry
                    else:
                        body = _decode_inline(entry, f"case {case['id']!r}: files.{path}")
                        stored[path] = {"digest": digest_of(body), "size": len(body)}
                        bodies[hex_of(stored[path]["digest"])] = body
                    files.append(hex_of(stored[path]["digest"]))
                case = {**case, "files": stored}
            plain.append(case)
        data = bytearray()
        stops, digests, tags = canonical_into(plain, data)
        lengths = [stop - start - 1 for start, stop in zip([0, *stops[:-1]], stops, strict=True)]
        staged = Staged(
            ids=[c["id"] for c in plain],
            digests=[d[7:] for d in digests],
            tags=tags,
            lengths=lengths,
            data=data,
            bodies=bodies,
            refs=refs,
            files=files,
        )
        _check_sizes(staged, self.max_case_bytes)
        return staged

    def _stage_records(self, records: Iterable[RecordBatch]) -> Iterator[Staged]:
        """Canonical records (an import's mapper made and hashed them,
        `caseshelf.domain.mapping.record_batches`); two rows with the same case id are refused
        naming both rows, as they are written (`rows`)."""
        for batch in records:
            ids = batch.ids
            if not ids:
                continue
            if (
                len(batch.lengths) != len(ids)
                or len(batch.digests) != len(ids)
                or sum(batch.lengths) + len(ids) != len(batch.data)
            ):
                raise ValueError("a record batch whose lengths do not match its records")
            staged = Staged(
                ids=ids,
                digests=batch.digests,
                tags=batch.tags if batch.tags is not None else [()] * len(ids),
                lengths=batch.lengths,
                data=batch.data,
                positions="rows",
            )
            _check_sizes(staged, self.max_case_bytes)
            yield staged

    def _copied(self, parent: VersionRecord, src: Manifest, indices: Sequence[int]) -> Staged:
        """The parent's cases at `indices` and every body it names, read from its tenant: the
        records a derived version in another tenant stores as new."""
        got = read_cases(self.store, parent.tenant, src, indices)
        data = bytearray()
        for i in indices:
            data += got[i]
            data += b"\n"
        return Staged(
            ids=[src.ids[i] for i in indices],
            digests=[src.digests[i] for i in indices],
            tags=[src.tags_of(i) for i in indices],
            lengths=[len(got[i]) for i in indices],
            data=data,
            bodies=read_blobs(self.store, parent.tenant, src.blob_locations()),
            files=list(src.blob_locations()),
        )

    # -- checks before writing -----------------------------------------------------------------

    def _check_refs(
        self,
        tenant: str,
        refs: dict[str, tuple[str, str, int]],
        have: Callable[[str], bool],
        stored_alone: Callable[[str], Location | None],
    ) -> None:
        """Check that every body sent by reference is stored (`have`: inline in this
        registration or in the base version; else alone, by an earlier registration of this
        tenant) with the size given. Writes nothing: a validation, and a registration refused
        here, leave the store as it was. `stored_alone` finds a body stored alone."""
        for hex_digest, (case_id, path, size) in refs.items():
            if have(hex_digest):
                continue
            head = stored_alone(hex_digest)
            where = f"case {case_id!r}: files.{path}" if case_id else path
            if head is None:
                raise BadRequest(
                    f"{where}: no stored body for sha256:{hex_digest}; send it inline "
                    "({text} or {base64}) or reference a body stored in the base version",
                    case_id=case_id or None,
                    field=path,
                    digests=[f"sha256:{hex_digest}"],
                )
            if size >= 0 and head.length != size:
                raise BadRequest(
                    f"{where}: size {size} does not match the stored body ({head.length} bytes)",
                    case_id=case_id or None,
                    field=path,
                )

    def _head_blob(self, tenant: str) -> Callable[[str], Location | None]:
        def stored_alone(hex_digest: str) -> Location | None:
            head = self.store.head(layout.blob_key(tenant, hex_digest))
            return None if head is None else Location(hex_digest, 0, head.size)

        return stored_alone

    # -- write packs, blobs and the manifest -------------------------------------------------

    def _write(
        self,
        tenant: str,
        head: VersionHead,
        batches: Iterable[Staged],
        *,
        base: VersionRecord | None,
        known: dict[str, Location] | None,
        known_blobs: dict[str, Location] | None = None,
        inline_ahead: frozenset[str] = frozenset(),
    ) -> tuple[ManifestWritten, WriteStats]:
        """Apply each batch's plan: new records into packs (put-if-absent, named by digest),
        bodies into blobs, every case into the manifest, whose chunks are stored as they fill
        (`ManifestWriter`) and whose root is stored last. Nothing here is visible until
        `_commit`. `inline_ahead`: bodies a later batch sends inline (a buffered source's; a
        streamed one names a body stored, or sent earlier in the stream).

        Memory holds a window of cases: those whose packs are still being written (a chunk
        names its packs; at most `HELD_MAX_CASES`), and the chunk being filled. With a base,
        the change against it is followed as the batches pass (`ChangeAgainstBase`: the base
        read a chunk at a time while the batches line up with it, else whole; a byte per base
        case; the changed and added cases while they number few enough for a delta), for the
        records the plan reuses, the copies of those the version supersedes and its delta
        against the base: memory follows the change, not the new input."""
        # The records the plan may point at: the base's, found batch by batch (`change.match`),
        # and `known` (a derived version's parent's).
        reusable: Mapping[str, Location] = known or {}
        root = self.root(base) if base is not None else None
        stored = root.blob_locations() if root is not None else {}
        blobs = BlobWriter(self.store, tenant, {**stored, **(known_blobs or {})})
        packs = PackWriter(self.store, lambda h: layout.pack_key(tenant, h))
        # The version's content and file bodies (its cases go to `chunks` as they come).
        builder = ManifestBuilder(
            description=head.description, tags=list(head.tags), shared_files=list(head.shared_files)
        )
        chunks = ManifestWriter(self.store, tenant, workers=self.read_workers)
        held = _HeldCases(chunks)
        change = (
            ChangeAgainstBase(
                root.content_digest,
                root.count,
                self.iter_chunks(base),
                lambda: self.manifest(base),
            )
            if base is not None and root is not None
            else None
        )
        seen = SeenIds()
        digester = _digester(head)
        named: dict[str, None] = {}  # every body the version names, in order
        pending: list[str] = []  # the placeholder name of each pack number
        reused = 0
        try:
            for batch in batches:
                for hex_digest, data in batch.bodies.items():
                    blobs.add(hex_digest, data)
                self._check_refs(
                    tenant,
                    batch.refs,
                    lambda h: blobs.has(h) or h in inline_ahead,
                    blobs.locate_standalone,
                )
                named.update(dict.fromkeys(batch.files))
                if not batch.ids:
                    continue
                if batch.positions:
                    _refuse_repeats(seen, batch, held.case_id)
                digester.add(batch.pairs())
                if change is not None:
                    matched = change.match(batch.ids, batch.digests)
                    reusable = ChainMap(known, matched) if known else matched
                plan = plan_batch(batch.digests, reusable)
                reused += len(batch.ids) - plan.new_count
                containers, offsets, lengths = _reused_columns(plan.reused, batch.lengths)
                if plan.runs:
                    if batch.data is None:
                        raise ValueError("a batch with new records that does not hold them")
                    _write_runs(packs, batch, plan.runs, pending, containers, offsets)
                if change is not None:
                    change.place(containers, offsets, lengths)
                held.add(batch, containers, offsets, lengths, len(pending))
                if len(held) > HELD_MAX_CASES:
                    packs.cut()
                held.release(packs.stored(), pending, packs.digest_of_pack)
            named.update(dict.fromkeys(sf["digest"][7:] for sf in head.shared_files))
            cdigest = digester.digest()
            packs.flush()
            held.release(len(pending), pending, packs.digest_of_pack)
            blob_locs = blobs.finish()
            for hex_digest in named:
                builder.add_blob(hex_digest, blob_locs[hex_digest])
            manifest = builder.build(cdigest)
            if change is None:
                copied = _Copied()
                written = chunks.finish(manifest)
            else:
                change.resolve_pending(packs.digest_of_pack)
                manifest, copied = self._keep_superseded(
                    tenant, change.superseded_cases(), manifest
                )
                written = chunks.finish(
                    manifest, delta=change.delta(), delta_base=change.content_digest
                )
        except BaseException:
            chunks.close()
            raise
        finally:
            if change is not None:
                change.close()
        stats = WriteStats(
            case_bytes_written=packs.bytes_written + copied.bytes_written,
            pack_objects_written=packs.objects_written + copied.objects_written,
            blob_bytes_written=blobs.bytes_written,
            cases_reused=reused,
            superseded_copied=copied.records,
        )
        return written, stats

    def _keep_superseded(
        self, tenant: str, cases: Manifest | None, manifest: Manifest
    ) -> tuple[Manifest, _Copied]:
        """`manifest` with copies of the base version's records `cases` (ids, digests and
        where they are), those the new version no longer holds (its changed and removed cases),
        written back to back: a diff of the two then reads them in one span instead of one
        request each, scattered through the base's packs. Registration pays those reads once,
        with this store's read plan (`read_gap`, `read_workers`). Skipped beyond
        `SUPERSEDED_MAX_RECORDS` or `SUPERSEDED_MAX_BYTES` (a large change costs a diff more
        reads in any case), or when `cases` is None (more than its tracker keeps)."""
        if (
            cases is None
            or not len(cases)
            or len(cases) > SUPERSEDED_MAX_RECORDS
            or cases.case_bytes() > SUPERSEDED_MAX_BYTES
        ):
            return manifest, _Copied()
        records = read_cases(
            self.store,
            tenant,
            cases,
            range(len(cases)),
            max_gap=self.read_gap,
            workers=self.read_workers,
        )
        packs = PackWriter(self.store, lambda h: layout.pack_key(tenant, h))
        text = cases.digest_text()
        placed = [
            (text[64 * k : 64 * k + 64], packs.append(records[k]), len(records[k]))
            for k in range(len(cases))
        ]
        packs.flush()
        copies = [(d, packs.location(where, size)) for d, where, size in placed]
        copied = _Copied(len(copies), packs.bytes_written, packs.objects_written)
        return manifest.with_superseded(copies), copied

    # -- commit: the one commit loop ---------------------------------------------------------

    def _commit(
        self,
        identity: Identity,
        head: VersionHead,
        written: ManifestWritten,
        stats: WriteStats,
        lease: Lease,
    ) -> RegisterResult:
        """Commit a version whose manifest is stored: the label given, or the next one the bump
        gives (retried when a racing bump takes it), with the registry's idempotency rules."""
        root = written.root
        cdigest = root.content_digest
        for attempt in range(BUMP_ATTEMPTS):
            if attempt:
                _bump_pause(attempt)
            records = self.index.list_versions(identity.tenant, KIND, head.name)
            settled = self._settled(records, head, cdigest)
            if settled is not None:
                return settled
            label = _label(head, records)
            rec = self.versions.new_record(
                identity,
                name=head.name,
                version=label,
                content_digest=cdigest,
                manifest_key=written.key,
                case_count=root.count,
                bytes=root.case_bytes,
                description=head.description,
                tags=head.tags,
                produced_by=head.produced_by,
            )
            self.fence.check(lease)
            try:
                committed, created = self.versions.commit(rec)
            except Conflict:
                if head.bump is None:
                    raise
                continue  # a racing bump took this label with other content: take the next
            return RegisterResult(committed, created, stats)
        raise Conflict(
            f"could not find a free version label for {head.name} after {BUMP_ATTEMPTS} attempts"
        )

    # -- reading ---------------------------------------------------------------------------

    def _load_root(self, key: str) -> Root | Manifest:
        """A committed version's stored manifest document: a format 3 root, or a whole format 2
        manifest. Missing or unreadable is a damaged store."""
        try:
            return parse_root(self.store.get(key))
        except NotFound:
            raise Corrupt(
                f"the manifest {key} of a committed version is missing (run `caseshelf verify`)",
                key=key,
            ) from None
        except BadRequest as exc:
            raise Corrupt(f"the manifest {key}: {exc.detail}", key=key) from None

    def _roots(self, key: str) -> Root | Manifest:
        return self.cache.get(("root", key), lambda: self._load_root(key))

    def _manifest(self, tenant: str, key: str) -> Manifest:
        return self.cache.get(("manifest", key), lambda: self._load_manifest(tenant, key))

    def _chunks(self, tenant: str, hex_digest: str) -> Manifest:
        return self.cache.get(
            ("chunk", tenant, hex_digest), lambda: self._read_chunk(tenant, hex_digest)
        )

    def _load_manifest(self, tenant: str, key: str) -> Manifest:
        """The whole manifest: a format 2 one as stored, a format 3 root joined with all of
        its chunks (and its superseded copies)."""
        stored = self._roots(key)
        if isinstance(stored, Manifest):
            return stored
        chunks = list(self._stream_chunks(tenant, stored.chunk_keys))
        try:
            whole = join_chunks(stored, chunks)
        except BadRequest as exc:
            raise Corrupt(f"the manifest {key}: {exc.detail}", key=key) from None
        copies = read_superseded(self.store, tenant, stored)
        return whole.with_superseded(list(copies.items())) if copies else whole

    def _read_chunk(self, tenant: str, hex_digest: str) -> Manifest:
        return read_chunk(self.store, tenant, hex_digest)

    def _stream_chunks(self, tenant: str, keys: Iterable[str]) -> Iterator[Manifest]:
        """Chunks by key, in order, with this store's reads in flight (`read_workers`)."""
        return read_chunks(self.store, tenant, keys, workers=self.read_workers)

    def manifest(self, rec: VersionRecord) -> Manifest:
        """The whole manifest of a version (every chunk read). Manifests are immutable, so a
        small cache keyed by their key is always right. Readers that need only part of a
        version use `root`, `chunk` and `iter_chunks` instead."""
        return self._manifest(rec.tenant, rec.manifest_key)

    def root(self, rec: VersionRecord) -> Root:
        """The version's root: its content, case count, and each chunk's key, case count,
        first and last id and tags. A format 2 manifest is seen as a root of one chunk."""
        stored = self._roots(rec.manifest_key)
        if isinstance(stored, Manifest):
            return root_of_legacy(stored)
        return stored

    def superseded(self, rec: VersionRecord) -> dict[str, Location]:
        """Where the copies of its base's records a version keeps are, by digest hex ({} when
        it keeps none)."""
        stored = self._roots(rec.manifest_key)
        if isinstance(stored, Manifest):
            return stored.superseded_locations()
        return read_superseded(self.store, rec.tenant, stored)

    def chunk(self, rec: VersionRecord, number: int) -> Manifest:
        """Chunk `number` of a version as a manifest of its cases alone (positions local to the
        chunk), checked against its key; a format 2 manifest's one chunk is itself."""
        stored = self._roots(rec.manifest_key)
        if isinstance(stored, Manifest):
            return stored
        return self._chunks(rec.tenant, stored.chunk_keys[number])

    def iter_chunks(self, rec: VersionRecord) -> Iterator[tuple[int, Manifest]]:
        """Every chunk of a version in order, as `(position of its first case, chunk)`, read
        one at a time and not kept: a pass over all cases holds one chunk's columns at once."""
        stored = self._roots(rec.manifest_key)
        if isinstance(stored, Manifest):
            yield 0, stored
            return
        chunks = self._stream_chunks(rec.tenant, stored.chunk_keys)
        yield from zip(stored.chunk_starts(), chunks, strict=False)

    def read_chunks(self, rec: VersionRecord, numbers: Sequence[int]) -> Iterator[Manifest]:
        """The chunks `numbers` of a version, in that order, read as they are iterated (not
        kept: a diff of two large versions reads many chunks once each)."""
        stored = self._roots(rec.manifest_key)
        if isinstance(stored, Manifest):
            yield from (stored for _ in numbers)
            return
        yield from self._stream_chunks(rec.tenant, (stored.chunk_keys[n] for n in numbers))

    def _chunk_runs(
        self, rec: VersionRecord, indices: Sequence[int]
    ) -> Iterator[tuple[Manifest, list[int], list[int]]]:
        """`indices` cut into runs that fall in one chunk each, in the order given: `(chunk,
        positions, the same positions local to the chunk)`. A whole manifest already loaded is
        one chunk."""
        stored = self._roots(rec.manifest_key)
        if isinstance(stored, Manifest):
            yield stored, list(indices), list(indices)
            return
        starts = stored.chunk_starts()
        run: list[int] = []
        current = -1
        for i in indices:
            if not 0 <= i < stored.count:
                raise IndexError(f"case position {i} out of range")
            n = bisect_right(starts, i) - 1
            if n != current and run:
                yield self.chunk(rec, current), run, [j - starts[current] for j in run]
                run = []
            current = n
            run.append(i)
        if run:
            yield self.chunk(rec, current), run, [j - starts[current] for j in run]

    def read_records(
        self, rec: VersionRecord, indices: Sequence[int]
    ) -> Iterator[tuple[int, bytes]]:
        """The stored canonical records at `indices` of a version, in the order asked, each
        checked against its digest; only the chunks covering them are read."""
        for chunk, positions, local in self._chunk_runs(rec, indices):
            got = read_cases(self.store, rec.tenant, chunk, local)
            for i, j in zip(positions, local, strict=True):
                yield i, got[j]

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
        from caseshelf.services.windowread import window_cases

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
        file bodies inline, so registering it anywhere gives the same content digest."""
        rec = self.get_version(identity, name, ref, include_deleted=include_deleted)
        key = layout.download_key(rec.tenant, rec.content_digest)
        filename = f"{rec.name}-{rec.version}.json"
        if self.store.head(key) is None:
            # streamed (a multipart upload on S3): no more than a window of cases in memory
            write_pieces(self.store, key, self.render_pieces(rec), content_type="application/json")
        url = (
            self.store.presign_get(key, expires=self.presign_expiry, filename=filename)
            if (self.presign_downloads)
            else None
        )
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
        and their file bodies. Canonical JSON sorts keys, so `cases` comes first: the document
        is its head, the cases, and the rest of the document rendered with no case."""
        from caseshelf.services.windowread import window_cases

        root = self.root(rec)
        blobs = root.blob_locations()
        doc: dict[str, Any] = {
            "id": rec.name,
            "version": rec.version,
            "description": root.description,
            "tags": root.tags,
            "cases": [],
            "shared_files": [],
            "produced_by": rec.produced_by,
        }
        if rec.produced_by is None:
            del doc["produced_by"]
        head = b'{"cases":['
        window = RENDER_WINDOW_FILES if blobs else RENDER_WINDOW_CASES
        starts = root.chunk_starts()
        yield head
        # chunk by chunk, read once and not cached: a pass over every case keeps none of them
        for first, chunk in self.iter_chunks(rec):
            held = _held(chunk)
            for at in range(first, first + len(chunk), window):
                wanted = range(at, min(at + window, first + len(chunk)))
                records = window_cases(self, rec, starts, wanted, chunk_of=held)
                if at:
                    yield b","
                if not blobs:  # the stored records are the cases' canonical JSON already
                    yield b",".join(records.records)
                else:
                    yield b",".join(self._inlined(rec, blobs, records.cases()))
        doc["shared_files"] = [
            {"dest": f["dest"], **inline_body(body)}
            for f, body in zip(
                root.shared_files,
                self._bodies(rec, blobs, [f["digest"] for f in root.shared_files]),
                strict=True,
            )
        ]
        rest = canonical_json(doc, checked=True)
        if not rest.startswith(head + b"]"):
            raise AssertionError("canonical JSON no longer sorts `cases` first")
        yield rest[len(head) :]

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

    # -- mutable metadata ------------------------------------------------------------------

    def set_version_tags(
        self, identity: Identity, name: str, version: str, tags: list[str]
    ) -> VersionRecord:
        return self.versions.set_tags(identity, name, version, tags)

    def move_tags(
        self, identity: Identity, name: str, version: str, tags: list[str]
    ) -> tuple[VersionRecord | None, list[TagMove]]:
        """Point `tags` at `version`, each moved from wherever it pointed."""
        return self.versions.move_tags(identity, name, version, add=tags)

    def remove_tags(self, identity: Identity, name: str, tags: list[str]) -> list[TagMove]:
        return self.versions.move_tags(identity, name, None, remove=tags)[1]

    def tags(self, identity: Identity, name: str) -> tuple[TagBoard, dict[str, str]]:
        """(the tag board with its history, where each tag points now)."""
        return self.versions.tags(identity, name)

    def delete_version(self, identity: Identity, name: str, version: str) -> VersionRecord:
        return self.versions.delete(identity, name, version)

    def revive_version(self, identity: Identity, name: str, version: str) -> VersionRecord:
        return self.versions.revive(identity, name, version)
