"""The first stages of a registration: validate, canonicalise and digest. A source's stager
turns its input (a document, a stream of plain cases, an import's canonical records, a
parent's cases) into `Staged` batches; a head (`VersionHead`) says the rest of the version.
Repeated ids in a stream are refused as they pass (`SeenIds`). Nothing here writes."""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from caseshelf.domain import layout
from caseshelf.domain.canonical import ContentDigester, digest_of, hex_of
from caseshelf.domain.chunks import Root
from caseshelf.domain.envelope import (
    canonical_into,
    cases_to_plain,
    validate_plain_cases,
    validation_problem,
)
from caseshelf.domain.errors import BadRequest, TooLarge
from caseshelf.domain.manifest import Location, Manifest
from caseshelf.domain.models import Case, DatasetVersionInput, SharedFileInput
from caseshelf.domain.versions import VersionRecord, check_dataset_id, check_label, next_version
from caseshelf.services.registry.documents import (
    _CASE_LIST,
    DatasetDocument,
    _decode_inline,
    parse_dataset,
)
from caseshelf.services.registry.reads import RegistryReads
from caseshelf.services.storage import read_blobs, read_cases

if TYPE_CHECKING:  # the import path's type; the registry needs none of the mapping at run time
    from caseshelf.domain.mapping import RecordBatch


_DIGEST_PREFIX = "sha256:"


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


class RegistryStaging(RegistryReads):
    """The stagers of each source, and the checks of bodies sent by reference."""

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
