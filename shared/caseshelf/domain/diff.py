"""Diff of two dataset versions (architecture §6 "Diff"). Pure.

Two steps, with I/O between them in the service:

1. `plan_diff(base, candidate)` compares the manifests only. Cases are matched by id; equal case
   digests mean unchanged, without reading a body. The plan names which bodies must be read:
   both sides of every changed case, and the added and removed cases (for their `inputs.user`).
2. `field_changes(before, after)` compares two plain JSON values and lists `Change`s.

A `Change` is `(path, before, after)`. `path` is a tuple of tokens (a dict key, a list position,
or a `Keyed` element of a list matched by id); `to_pointer` renders it as an RFC 6901 JSON
pointer. `before`/`after` are JSON values, or `ABSENT` when the key or element does not exist on
that side: absent is distinct from `null`. Display strings are not made here.

Rules: key order is never a change (dicts compare by key). Lists whose elements are all objects
carrying a unique string `id` (graders, for instance) are matched by id: an element only on one
side is added or removed, a common one is compared field by field; when the common elements come
in another order, the whole list is reported as one change. Every other list is compared by
position. Values of different JSON types are one change at their path.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice, pairwise
from operator import lt
from typing import Any, Final, Protocol

import orjson

from caseshelf.domain.chunks import Root, cases_manifest, chunk_bytes, chunk_from_bytes
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.manifest import (
    PENDING_PACK,
    DigestColumn,
    Location,
    Manifest,
    _pack_ints,
    _unpack_ints,
    column_array,
)


class _Absent:
    """The value on a side where a key or element does not exist (distinct from JSON null)."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __reduce__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent()


@dataclass(frozen=True)
class Keyed:
    """An element of a list matched by id, at its position on each side (None where absent)."""

    key: str
    before: int | None
    after: int | None

    def mirrored(self) -> Keyed:
        return Keyed(self.key, self.after, self.before)


Token = str | int | Keyed


@dataclass(frozen=True)
class Change:
    path: tuple[Token, ...]
    before: Any
    after: Any

    def mirrored(self) -> Change:
        path = tuple(t.mirrored() if isinstance(t, Keyed) else t for t in self.path)
        return Change(path, self.after, self.before)


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def to_pointer(path: Sequence[Token], prefix: str = "") -> str:
    """RFC 6901 pointer. A `Keyed` element is addressed by its position in the candidate, or
    in the base when it exists only there (a removal), so the pointer resolves in the document
    that holds the value it names."""
    parts = [prefix] if prefix else []
    for t in path:
        if isinstance(t, Keyed):
            pos = t.after if t.after is not None else t.before
            parts.append("/" + str(pos))
        elif isinstance(t, int):
            parts.append("/" + str(t))
        else:
            parts.append("/" + _escape(t))
    return "".join(parts)


# -- field-level changes ------------------------------------------------------------------


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: `true` is not `1`, `1` is not `1.0` and `-0.0` is not `0.0`, at any
    depth. Python's `==` (fast, in C) rules out most differences; equal containers are confirmed
    by their canonical bytes."""
    if type(a) is not type(b) or a != b:
        return False
    if isinstance(a, dict | list):
        return orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(
            b, option=orjson.OPT_SORT_KEYS
        )
    if isinstance(a, float):
        return repr(a) == repr(b)
    return True


def _id_keys(items: list[Any]) -> list[str] | None:
    if not items or not all(isinstance(x, dict) and isinstance(x.get("id"), str) for x in items):
        return None
    keys = [x["id"] for x in items]
    return keys if len(set(keys)) == len(keys) else None


def _walk(before: Any, after: Any, path: tuple[Token, ...], out: list[Change]) -> None:
    if isinstance(before, dict) and isinstance(after, dict):
        for k in sorted(before.keys() | after.keys()):
            b = before.get(k, ABSENT)
            a = after.get(k, ABSENT)
            if b is ABSENT or a is ABSENT:
                out.append(Change((*path, k), b, a))
            elif not _equal(b, a):
                _walk(b, a, (*path, k), out)
        return
    if isinstance(before, list) and isinstance(after, list):
        _walk_list(before, after, path, out)
        return
    if not _equal(before, after):
        out.append(Change(path, before, after))


def _walk_list(
    before: list[Any], after: list[Any], path: tuple[Token, ...], out: list[Change]
) -> None:
    if _equal(before, after):
        return
    kb, ka = _id_keys(before), _id_keys(after)
    if kb is not None and ka is not None:
        pos_b = {k: i for i, k in enumerate(kb)}
        pos_a = {k: i for i, k in enumerate(ka)}
        common_b = [k for k in kb if k in pos_a]
        common_a = [k for k in ka if k in pos_b]
        if common_b != common_a:
            out.append(Change(path, before, after))
            return
        for k in sorted(pos_b.keys() | pos_a.keys()):
            ib, ia = pos_b.get(k), pos_a.get(k)
            tok = Keyed(k, ib, ia)
            if ib is None:
                out.append(Change((*path, tok), ABSENT, after[ia]))  # type: ignore[index]
            elif ia is None:
                out.append(Change((*path, tok), before[ib], ABSENT))
            else:
                _walk(before[ib], after[ia], (*path, tok), out)
        return
    for i in range(max(len(before), len(after))):
        b = before[i] if i < len(before) else ABSENT
        a = after[i] if i < len(after) else ABSENT
        if b is ABSENT or a is ABSENT:
            out.append(Change((*path, i), b, a))
        else:
            _walk(b, a, (*path, i), out)


def field_changes(before: Any, after: Any) -> list[Change]:
    """Every change between two plain JSON values, in a stable order (keys sorted)."""
    out: list[Change] = []
    _walk(before, after, (), out)
    return out


# -- the manifest-level plan --------------------------------------------------------------


@dataclass(frozen=True)
class DiffPlan:
    """What differs between two manifests, before any case body is read."""

    added: list[int]  # candidate positions, in candidate order
    removed: list[int]  # base positions, in base order
    changed: list[tuple[int, int]]  # (base position, candidate position), in candidate order
    unchanged: int
    order_changed: bool  # the cases both sides share come in another order
    meta: list[Change] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed or self.meta or self.order_changed)


class Content(Protocol):
    """What a version's own content is (a manifest or a root): what `meta_changes` compares."""

    description: str
    tags: list[str]
    shared_files: list[dict[str, str]]


def meta_changes(base: Content, candidate: Content) -> list[Change]:
    """Changes of the version's own content: description, tags (a set) and shared files
    (matched by destination, like an id)."""
    out: list[Change] = []
    if base.description != candidate.description:
        out.append(Change(("description",), base.description, candidate.description))
    if sorted(base.tags) != sorted(candidate.tags):
        out.append(Change(("tags",), sorted(base.tags), sorted(candidate.tags)))
    shared_b = [{"id": s["dest"], **s} for s in base.shared_files]
    shared_a = [{"id": s["dest"], **s} for s in candidate.shared_files]
    found: list[Change] = []
    _walk_list(shared_b, shared_a, ("shared_files",), found)
    for ch in found:
        out.append(Change(ch.path, _strip_id(ch.before), _strip_id(ch.after)))
    return out


def _strip_id(value: Any) -> Any:
    if isinstance(value, dict) and "id" in value:
        return {k: v for k, v in value.items() if k != "id"}
    if isinstance(value, list):
        return [_strip_id(v) for v in value]
    return value


def plan_diff(base: Manifest, candidate: Manifest) -> DiffPlan:
    """Match cases by id and compare digests: cost follows the number of cases, never their
    size, and no body is read for an unchanged case."""
    meta = meta_changes(base, candidate)
    if base.content_digest == candidate.content_digest:
        return DiffPlan([], [], [], len(candidate), False, meta)
    if base.ids == candidate.ids:
        # The common shape of a new version (same cases, some edited): compare the columns.
        same = differing_digests(base.digest_text(), candidate.digest_text())
        changed_here = [(i, i) for i in same]
        return DiffPlan([], [], changed_here, len(candidate) - len(same), False, meta)
    b_digests, c_digests = base.digest_list(), candidate.digest_list()
    base_pos = dict(zip(base.ids, range(len(base.ids)), strict=True))
    added: list[int] = []
    changed: list[tuple[int, int]] = []
    common: list[int] = []  # base positions of shared cases, in candidate order
    for j, i in enumerate(map(base_pos.get, candidate.ids)):
        if i is None:
            added.append(j)
            continue
        common.append(i)
        if b_digests[i] != c_digests[j]:
            changed.append((i, j))
    if len(common) == len(base.ids):
        removed: list[int] = []
    else:
        kept = set(common)
        removed = [i for i in range(len(base.ids)) if i not in kept]
    order_changed = any(a > b for a, b in pairwise(common))
    return DiffPlan(added, removed, changed, len(common) - len(changed), order_changed, meta)


def differing_chunks(base: Root, candidate: Root) -> tuple[list[int], list[int]]:
    """The chunk numbers of each side whose key the other side does not hold. A chunk both
    hold is the same cases (ids and digests) on both sides: nothing in it differs."""
    shared = set(base.chunk_keys) & set(candidate.chunk_keys)
    return (
        [n for n, key in enumerate(base.chunk_keys) if key not in shared],
        [n for n, key in enumerate(candidate.chunk_keys) if key not in shared],
    )


@dataclass(frozen=True)
class ChunkPart:
    """Some chunks of a version: their cases' ids and digests back to back (the digests as
    one column, cut into a list only if a plan loops over them), each case's position in the
    version, where each chunk's cases start in the part, and the chunks themselves (for the
    location of the few cases a diff reads). Built by `of`."""

    ids: list[str]
    digests: DigestColumn
    positions: list[int]
    chunk_starts: list[int]
    chunks: Sequence[Manifest]

    def digest(self, i: int) -> str:
        """The digest of case `i` of the part (64 hex), without cutting the column."""
        return self.digests.text[64 * i : 64 * i + 64]

    @classmethod
    def of(cls, chunks: Sequence[Manifest], firsts: Sequence[int]) -> ChunkPart:
        """`chunks`, whose first cases are at `firsts` in the version."""
        ids: list[str] = []
        texts: list[str] = []
        positions: list[int] = []
        starts: list[int] = []
        for chunk, first in zip(chunks, firsts, strict=True):
            starts.append(len(ids))
            ids.extend(chunk.ids)
            texts.append(chunk.digest_text())
            positions.extend(range(first, first + len(chunk)))
        return cls(ids, DigestColumn("".join(texts)), positions, starts, chunks)

    def location(self, i: int) -> Location:
        """Where case `i` of the part is stored."""
        n = bisect_right(self.chunk_starts, i) - 1
        return self.chunks[n].location(i - self.chunk_starts[n])


def plan_chunked_diff(
    base: Root, candidate: Root, base_part: ChunkPart, cand_part: ChunkPart
) -> DiffPlan:
    """`plan_diff` of two versions from their roots and the chunks they do not share
    (`differing_chunks`): cost follows the chunks that differ, not the versions' size.

    Why the parts are enough: ids are unique within a version, so a case of a shared chunk is
    on both sides with its digest, and an id in a part can only match an id in the other
    part. Positions in the plan are the versions' own."""
    meta = meta_changes(base, candidate)
    if base.content_digest == candidate.content_digest:
        return DiffPlan([], [], [], len(candidate), False, meta)
    b_ids, c_ids = base_part.ids, cand_part.ids
    b_pos, c_pos = base_part.positions, cand_part.positions
    added: list[int] = []
    removed: list[int] = []
    # What the two sides share, in candidate order: (candidate position, first and last base
    # position), a whole shared chunk at a time, or a stretch or a case of the parts.
    spans: list[tuple[int, int, int]]
    if b_ids == c_ids:
        # The common shape of a new version (the same cases, some edited): compare in C, and
        # see the order a chunk at a time.
        same = differing_digests(base_part.digests.text, cand_part.digests.text)
        changed = [(b_pos[j], c_pos[j]) for j in same]
        matched_count = len(c_ids)
        spans = _stretches(b_pos, c_pos, cand_part.chunk_starts)
    else:
        b_digests, c_digests = base_part.digests.as_list(), cand_part.digests.as_list()
        base_at = dict(zip(b_ids, range(len(b_ids)), strict=True))
        changed = []
        spans = []
        for j, i in enumerate(map(base_at.get, c_ids)):
            if i is None:
                added.append(c_pos[j])
                continue
            spans.append((c_pos[j], b_pos[i], b_pos[i]))
            if b_digests[i] != c_digests[j]:
                changed.append((b_pos[i], c_pos[j]))
        matched = {b for _, b, _ in spans}
        matched_count = len(matched)
        removed = [b for b in b_pos if b not in matched]
    base_chunks = dict(zip(base.chunk_keys, base.chunk_starts(), strict=False))
    in_shared = 0
    for key, start, count in zip(
        candidate.chunk_keys, candidate.chunk_starts(), candidate.chunk_counts, strict=False
    ):
        if key in base_chunks and count:
            spans.append((start, base_chunks[key], base_chunks[key] + count - 1))
            in_shared += count
    spans.sort()
    order_changed = any(a[2] >= b[1] for a, b in pairwise(spans))
    unchanged = matched_count - len(changed) + in_shared
    return DiffPlan(added, removed, changed, unchanged, order_changed, meta)


# Digests compared at once by `differing_digests` before looking at each of them.
_DIGEST_BLOCK = 32


def differing_digests(base: str, candidate: str) -> list[int]:
    """The positions where two digest columns of one length (64 hex a digest, back to back)
    hold different digests, ascending: blocks of `_DIGEST_BLOCK` digests compared whole (one
    string comparison in C each), and only the blocks that differ digest by digest: with every
    100th digest differing, about a quarter of the time of cutting both columns into lists."""
    if len(base) != len(candidate):
        raise ValueError("digest columns of different lengths")
    if base == candidate:
        return []
    out: list[int] = []
    step = 64 * _DIGEST_BLOCK
    for start in range(0, len(base), step):
        stop = start + step
        if base[start:stop] != candidate[start:stop]:
            out.extend(
                i // 64
                for i in range(start, min(stop, len(base)), 64)
                if base[i : i + 64] != candidate[i : i + 64]
            )
    return out


def _stretches(
    b_pos: Sequence[int], c_pos: Sequence[int], starts: Sequence[int]
) -> list[tuple[int, int, int]]:
    """Parts whose cases pair up in order (case j with case j): one span per candidate chunk
    (`starts`, or one per case without them), or a span per case where the base positions go
    back somewhere (so the order check sees it)."""
    if not starts or not all(map(lt, b_pos, islice(b_pos, 1, None))):
        return [(c, b, b) for c, b in zip(c_pos, b_pos, strict=True)]
    ends = [*starts[1:], len(c_pos)]
    return [(c_pos[a], b_pos[a], b_pos[z - 1]) for a, z in zip(starts, ends, strict=True) if z > a]


def user_text(case: dict[str, Any]) -> Any:
    """`inputs.user` of a plain case (a string, a list of strings, `{ref}`), or None."""
    inputs = case.get("inputs")
    return inputs.get("user") if isinstance(inputs, dict) else None


# -- a version's change against its base ---------------------------------------------------

DELTA_FORMAT = "caseshelf.delta/1"
# The most cases a delta names (added, removed and changed together): beyond it a version keeps
# none, and a diff against its base reads the chunks that differ, as any other diff does.
DELTA_MAX_CASES = 20_000


@dataclass(frozen=True)
class Delta:
    """The plan of the diff of a version against the base it was registered against, and the
    cases that plan names on each side (ids, digests, locations), kept by the version
    (`delta_bytes`): a diff of the two then reads no chunk. `base` is the base's content
    digest. The plan's `meta` is empty: it is the roots' (`meta_changes`)."""

    base: str
    plan: DiffPlan
    base_part: ChunkPart
    cand_part: ChunkPart

    def mirrored(self) -> Delta:
        """The same change seen from the other side: the diff of the version (as base)
        against its base (as candidate)."""
        p = self.plan
        changed = sorted(((j, i) for i, j in p.changed), key=lambda pair: pair[1])
        plan = DiffPlan(p.removed, p.added, changed, p.unchanged, p.order_changed)
        return Delta(self.base, plan, self.cand_part, self.base_part)


def _take(m: Manifest, positions: Sequence[int]) -> Manifest:
    """The cases of `m` at `positions`, as a manifest of their own (ids, digests, locations)."""
    text = m.digest_text()
    packs, offsets = column_array(m.pack_index), column_array(m.offsets)
    lengths = column_array(m.lengths)
    return Manifest(
        content_digest="",
        description="",
        tags=[],
        shared_files=[],
        ids=[m.ids[i] for i in positions],
        digests=DigestColumn("".join(text[64 * i : 64 * i + 64] for i in positions)),
        packs=list(m.packs),
        pack_index=array("I", [packs[i] for i in positions]),
        offsets=array("Q", [offsets[i] for i in positions]),
        lengths=array("I", [lengths[i] for i in positions]),
        tag_names=[],
        case_tags=[],
    )


def delta_bytes(base: Manifest, candidate: Manifest) -> bytes | None:
    """The delta of `candidate` against `base` (`Delta`), or None when they differ in no case
    or in more than `DELTA_MAX_CASES` (known without a plan when their sizes differ by more).
    `ChangeAgainstBase` answers the same of a candidate whose cases pass a batch at a time."""
    if abs(len(base) - len(candidate)) > DELTA_MAX_CASES:
        return None
    plan = plan_diff(base, candidate)
    named = len(plan.added) + len(plan.removed) + len(plan.changed)
    if not named or named > DELTA_MAX_CASES:
        return None
    base_at = sorted(plan.removed + [i for i, _ in plan.changed])
    cand_at = sorted(plan.added + [j for _, j in plan.changed])
    return _delta_document(
        base.content_digest, plan, _take(base, base_at), _take(candidate, cand_at)
    )


def _delta_document(
    base_digest: str, plan: DiffPlan, base_cases: Manifest, candidate_cases: Manifest
) -> bytes:
    """The stored delta of `plan` (its `meta` left out) against the base of content digest
    `base_digest`: `base_cases` are the base's removed and changed cases and `candidate_cases`
    the candidate's added and changed ones, each in their version's order (ids, digests,
    locations)."""
    base_at = sorted(plan.removed + [i for i, _ in plan.changed])
    cand_at = sorted(plan.added + [j for _, j in plan.changed])
    if len(candidate_cases) != len(cand_at) or len(base_cases) != len(base_at):
        raise ValueError("cases that do not match the plan")

    def ints(values: Sequence[int]) -> str:
        return _pack_ints(array("I", values), "I")

    doc = {
        "format": DELTA_FORMAT,
        "base": base_digest,
        "unchanged": plan.unchanged,
        "order_changed": plan.order_changed,
        "added": ints(plan.added),
        "removed": ints(plan.removed),
        "changed_base": ints([i for i, _ in plan.changed]),
        "changed_candidate": ints([j for _, j in plan.changed]),
        "base_positions": ints(base_at),
        "candidate_positions": ints(cand_at),
        "base_cases": orjson.Fragment(chunk_bytes(base_cases, 0, len(base_at))),
        "candidate_cases": orjson.Fragment(chunk_bytes(candidate_cases, 0, len(cand_at))),
    }
    return orjson.dumps(doc)


def _cases_at(ids: list[str], digests: list[str], locations: Sequence[Location]) -> Manifest:
    """Some cases as a manifest of their own (ids, digests, locations; no content, no tags)."""
    return cases_manifest(
        ids,
        digests,
        [()] * len(ids),
        [loc.container for loc in locations],
        [loc.offset for loc in locations],
        [loc.length for loc in locations],
    )


# What `ChangeAgainstBase` knows of each base case: no case of the version has its id (yet), one
# has it with another digest (changed), or one has it with the same digest (its record reused).
_UNMATCHED, _CHANGED, _KEPT = 0, 1, 2


class _BaseSpan:
    """Where the records of some base positions are: the chunks holding them, each with the
    position of its first case."""

    def __init__(self, parts: Sequence[tuple[int, Manifest]]) -> None:
        self._parts = parts  # (position of the chunk's first case, chunk), in order
        self._firsts = [first for first, _ in parts]

    def location(self, i: int) -> Location:
        n = bisect_right(self._firsts, i) - 1
        first, chunk = self._parts[n]
        return chunk.location(i - first)


class ChangeAgainstBase:
    """A version's change against the base it is registered against, followed as its cases
    pass in dataset order (each case once): what a registration needs of the two at the end
    without holding the version's cases until then, and, batch by batch, which base records
    the version's cases reuse (in place of a dict of every base record by digest).

    The base is read a chunk at a time, in order, while the batches line up with it (the same
    ids at the same positions: a re-import or an edited bump), each compared as a slice of
    those chunks; the first batch that does not has the whole base manifest loaded (`whole`)
    and its id -> position index built, for matching by id. Besides, it keeps one byte per base
    case (`_UNMATCHED`, `_CHANGED`, `_KEPT`), and while the change names at most `limit` cases,
    the named positions with the cases on each side (ids, digests, locations): memory follows
    the change, and the base only where the batches do not line up with it.

    Each batch is `match`ed (ids and digests), then `place`d (where its records are stored,
    once the plan has put its new ones in packs). `superseded()` answers what
    `superseded_indices` answers of the whole version, `superseded_cases()` those base cases,
    and `delta()` what `delta_bytes` answers (the same bytes; tests hold them equal). `close()`
    stops reading the base's chunks."""

    def __init__(
        self,
        content_digest: str,
        count: int,
        chunks: Iterable[tuple[int, Manifest]],
        whole: Callable[[], Manifest],
        *,
        limit: int = DELTA_MAX_CASES,
    ) -> None:
        """The base: its content digest, case count, its chunks in order (each with the
        position of its first case, read as they are asked for) and a way to load it whole."""
        self.content_digest = content_digest
        self._base_count = count
        self._chunks: Iterator[tuple[int, Manifest]] = iter(chunks)
        self._load_whole = whole
        self._whole: Manifest | None = None
        self._position: dict[str, int] | None = None  # base id -> position, once needed
        self._window: deque[tuple[int, Manifest]] = deque()  # chunks read and still needed
        self._read_to = 0  # the base position the chunks read so far reach
        self._state = bytearray(count)  # every base case _UNMATCHED at first
        # The base's changed cases met while the batches lined up: position -> id, digest, where
        # (while they fit `limit`).
        self._dropped: dict[int, tuple[str, str, Location]] = {}
        self._limit = limit
        self._count = 0  # the version's cases so far
        self._common = 0  # those whose id the base holds
        self._last_common = -1  # the base position of the latest of them
        self._order_changed = False
        # The named cases while they fit `limit` (`_named`): positions, and the candidate's
        # added and changed cases in order, with where each record is stored.
        self._named = True
        self._added: list[int] = []
        self._changed: list[tuple[int, int]] = []
        self._case_ids: list[str] = []
        self._case_digests: list[str] = []
        self._containers: list[str] = []
        self._offsets = array("Q")
        self._lengths = array("I")
        self._unplaced: list[int] = []  # the noted cases of the batch matched last, not placed
        self._superseded_cases: Manifest | None = None

    def close(self) -> None:
        """Stop reading the base's chunks (at the end, or when a registration fails)."""
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()
        self._window.clear()

    def _whole_base(self) -> Manifest:
        if self._whole is None:
            self._whole = self._load_whole()
            if len(self._whole) != self._base_count:
                raise ValueError("a whole base of another count than its chunks")
            self.close()
        return self._whole

    def _span(self, start: int, stop: int) -> tuple[list[str], str, _BaseSpan]:
        """The ids and digests of base positions `start:stop` (fewer where the base ends) and
        where they are, from the chunks read in order (positions never go back)."""
        stop = min(stop, self._base_count)
        window = self._window
        while window and window[0][0] + len(window[0][1]) <= start:
            window.popleft()  # (the batches have passed it)
        while self._read_to < stop:
            first, chunk = next(self._chunks)
            if first != self._read_to:
                raise ValueError("base chunks out of order")
            window.append((first, chunk))
            self._read_to = first + len(chunk)
        ids: list[str] = []
        texts: list[str] = []
        for first, chunk in window:
            a, b = max(start - first, 0), min(stop - first, len(chunk))
            if a < b:
                ids += chunk.ids[a:b]
                texts.append(chunk.digest_text()[64 * a : 64 * b])
        return ids, "".join(texts), _BaseSpan(list(window))

    def match(self, ids: Sequence[str], digests: Sequence[str]) -> dict[str, Location]:
        """The version's next cases (ids, digests hex): answers where the base stores the
        records they reuse (the same id and digest), by digest, for the batch's plan."""
        if self._unplaced:
            raise ValueError("the batch matched last is not placed yet")
        start, stop = self._count, self._count + len(ids)
        self._count = stop
        if not ids:
            return {}
        if self._position is None and stop <= self._base_count:
            base_ids, text, span = self._span(start, stop)
            if base_ids == list(ids):
                return self._match_aligned(start, ids, digests, text, span)
        return self._match_by_id(start, ids, digests)

    def _match_by_id(
        self, start: int, ids: Sequence[str], digests: Sequence[str]
    ) -> dict[str, Location]:
        whole = self._whole_base()
        if self._position is None:
            self._position = dict(zip(whole.ids, range(len(whole)), strict=True))
        state, position, text = self._state, self._position, whole.digest_text()
        reused: dict[str, Location] = {}
        for k, case_id in enumerate(ids):
            i = position.get(case_id)
            if i is None:
                self._note(start + k, None, k, ids, digests)
                continue
            self._common += 1
            if i < self._last_common:
                self._order_changed = True
            self._last_common = i
            if text[64 * i : 64 * i + 64] == digests[k]:
                state[i] = _KEPT
                reused[digests[k]] = whole.location(i)
            else:
                state[i] = _CHANGED
                self._note(start + k, i, k, ids, digests)
        return reused

    def _match_aligned(
        self,
        start: int,
        ids: Sequence[str],
        digests: Sequence[str],
        text: str,
        span: _BaseSpan,
    ) -> dict[str, Location]:
        """Cases whose ids are the base's at the same positions from `start` on (`text`:
        those base cases' digests)."""
        n = len(ids)
        stop = start + n
        if start < self._last_common:
            self._order_changed = True
        self._last_common = stop - 1
        self._common += n
        if text == "".join(digests):
            self._state[start:stop] = bytes([_KEPT]) * n
            return {d: span.location(start + k) for k, d in enumerate(digests)}
        reused: dict[str, Location] = {}
        for k, digest in enumerate(digests):
            i = start + k
            if text[64 * k : 64 * k + 64] == digest:
                self._state[i] = _KEPT
                reused[digest] = span.location(i)
            else:
                self._state[i] = _CHANGED
                if len(self._dropped) <= self._limit:
                    self._dropped[i] = (ids[k], text[64 * k : 64 * k + 64], span.location(i))
                self._note(i, i, k, ids, digests)
        return reused

    def _note(
        self, j: int, base_position: int | None, k: int, ids: Sequence[str], digests: Sequence[str]
    ) -> None:
        """Case `k` of a batch, at position `j` of the version: added (no base position) or
        changed. Past `limit` named cases the version keeps no delta: nothing more is noted."""
        if not self._named:
            return
        if base_position is None:
            self._added.append(j)
        else:
            self._changed.append((base_position, j))
        if len(self._added) + len(self._changed) > self._limit:
            self._named = False
            self._added, self._changed, self._case_ids, self._case_digests = [], [], [], []
            self._containers, self._offsets, self._lengths = [], array("Q"), array("I")
            self._unplaced = []
            return
        self._case_ids.append(ids[k])
        self._case_digests.append(digests[k])
        self._unplaced.append(k)

    def place(
        self, containers: Sequence[str], offsets: Sequence[int], lengths: Sequence[int]
    ) -> None:
        """Where the records of the batch matched last are stored (a pack name, or a pending
        one that `resolve_pending` names later), each case's."""
        for k in self._unplaced:
            self._containers.append(containers[k])
            self._offsets.append(offsets[k])
            self._lengths.append(lengths[k])
        self._unplaced = []

    def resolve_pending(self, digest_of_pack: Callable[[int], str]) -> None:
        """Name the packs that were still being written when the noted cases were added
        (`ManifestBuilder.resolve_pending`)."""
        self._containers = [
            digest_of_pack(int(c[len(PENDING_PACK) :])) if c.startswith(PENDING_PACK) else c
            for c in self._containers
        ]

    def superseded(self) -> list[int]:
        """The base positions whose record the version does not hold (its removed cases and
        the earlier form of its changed ones), ascending: `superseded_indices`."""
        return [i for i, s in enumerate(self._state) if s != _KEPT]

    def superseded_cases(self) -> Manifest | None:
        """The base's cases at `superseded()` (ids, digests, where each record is), in base
        order; None when they are more than `limit`. Asked for once all cases have come."""
        if self._superseded_cases is None:
            at = self.superseded()
            if len(at) > self._limit:
                return None
            self._superseded_cases = self._cases_of(at)
        return self._superseded_cases

    def _cases_of(self, at: list[int]) -> Manifest:
        if self._whole is not None or self._position is not None:
            whole = self._whole_base()
            text = whole.digest_text()
            return _cases_at(
                [whole.ids[i] for i in at],
                [text[64 * i : 64 * i + 64] for i in at],
                [whole.location(i) for i in at],
            )
        # Every batch lined up with the base: the superseded are its changed cases, met on the
        # way, and the base's cases past the version's last (read now, a chunk at a time).
        cases = [self._dropped[i] for i in at if i < self._count]
        if self._count < self._base_count:
            start = self._count
            while start < self._base_count:
                stop = min(start + 4096, self._base_count)
                ids, text, span = self._span(start, stop)
                cases += [
                    (ids[k], text[64 * k : 64 * k + 64], span.location(start + k))
                    for k in range(stop - start)
                ]
                start = stop
        return _cases_at(
            [case_id for case_id, _, _ in cases],
            [digest for _, digest, _ in cases],
            [loc for _, _, loc in cases],
        )

    def delta(self) -> bytes | None:
        """The delta of the version against the base: `delta_bytes` of the whole version."""
        limit = self._limit
        if not self._named or abs(self._base_count - self._count) > limit:
            return None
        removed = [i for i, s in enumerate(self._state) if s == _UNMATCHED]
        named = len(self._added) + len(removed) + len(self._changed)
        if not named or named > limit:
            return None
        base_cases = self.superseded_cases()
        if base_cases is None:
            return None
        plan = DiffPlan(
            self._added,
            removed,
            self._changed,
            self._common - len(self._changed),
            self._order_changed,
        )
        candidate_cases = _cases_at(
            self._case_ids,
            self._case_digests,
            [
                Location(c, o, n)
                for c, o, n in zip(self._containers, self._offsets, self._lengths, strict=True)
            ],
        )
        return _delta_document(self.content_digest, plan, base_cases, candidate_cases)


def delta_from_bytes(data: bytes) -> Delta:
    """A stored delta; `BadRequest` when it does not parse or does not hold together."""
    try:
        doc: dict[str, Any] = orjson.loads(data)
        if doc.get("format") != DELTA_FORMAT:
            raise ValueError(f"not a delta (format {doc.get('format')!r})")

        def ints(name: str) -> list[int]:
            return list(_unpack_ints(doc[name], "I"))

        parts = []
        for side in ("base", "candidate"):
            positions = ints(f"{side}_positions")
            chunk = chunk_from_bytes(orjson.dumps(doc[f"{side}_cases"]))
            if len(chunk) != len(positions) or positions != sorted(set(positions)):
                raise ValueError(f"the {side} cases do not match their positions")
            parts.append(
                ChunkPart(chunk.ids, DigestColumn(chunk.digest_text()), positions, [0], [chunk])
            )
        changed = list(zip(ints("changed_base"), ints("changed_candidate"), strict=True))
        plan = DiffPlan(
            ints("added"),
            ints("removed"),
            changed,
            int(doc["unchanged"]),
            bool(doc["order_changed"]),
        )
        held_base, held_cand = set(parts[0].positions), set(parts[1].positions)
        if not (
            held_base.issuperset(plan.removed)
            and held_base.issuperset(i for i, _ in changed)
            and held_cand.issuperset(plan.added)
            and held_cand.issuperset(j for _, j in changed)
        ):
            raise ValueError("a position the delta names but does not hold")
        return Delta(str(doc["base"]), plan, parts[0], parts[1])
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise BadRequest(f"corrupt delta: {exc}") from exc
