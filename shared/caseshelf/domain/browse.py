"""What people browsing a version ask of it, decided on plain values: does a case match a
search, and the numbers of a version (cases per tag, input lengths, file sizes).

Pure: cases in (as their canonical JSON objects), answers out. `caseshelf.services.browse`
reads the cases and keeps the answers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import orjson

SearchBy = Literal["any", "id", "tag", "text"]
SEARCH_BY: tuple[SearchBy, ...] = ("any", "id", "tag", "text")
# Fields of a case that are not its text: searched by `id` and `tag` themselves.
_NOT_TEXT = frozenset({"id", "tags"})
# The stats' layout: a change to what is counted changes this, so no stale answer is kept.
STATS_FORMAT = "caseshelf.stats/1"


def _strings(value: Any) -> Iterator[str]:
    """Every string value inside a JSON value (keys are names, not text: left out)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def needle_of(q: str) -> str:
    """The form a search text is compared in: case-folded, surrounding spaces dropped."""
    return q.strip().casefold()


def id_matches(case_id: str, needle: str) -> bool:
    return needle in case_id.casefold()


def tag_matches(tags: Iterable[str], needle: str) -> bool:
    """A tag equal to the search (case-insensitive): `math` finds `Math`, not `mathematics`."""
    return any(t.casefold() == needle for t in tags)


def text_matches(case: Mapping[str, Any], needle: str) -> bool:
    """Any string of the case other than its id and tags holds the search (case-insensitive):
    inputs, expectations, graders, environment, metadata, and the paths of its files (not
    their digests, which every stored file has)."""
    for key, value in case.items():
        if key in _NOT_TEXT:
            continue
        if key == "files" and isinstance(value, Mapping):
            if any(needle in path.casefold() for path in value):
                return True
            continue
        if any(needle in s.casefold() for s in _strings(value)):
            return True
    return False


# Separates a case's strings in its line of a search index; never in a search (no control
# character is searched for the index).
INDEX_SEPARATOR = "\x1f"


def indexable(needle: str) -> bool:
    """Whether the search index answers `needle` (a case-folded search): it holds no control
    character, which the index uses between strings and cases."""
    return not any(ord(c) < 32 or c == "\x7f" for c in needle)


def index_line(case: Mapping[str, Any]) -> bytes:
    """A case's line of the search index: the strings `text_matches` searches, case-folded,
    joined by `INDEX_SEPARATOR`, with every control character written as that separator (so
    `needle in line` for an `indexable` needle is `text_matches`), as UTF-8."""
    parts: list[str] = []
    for key, value in case.items():
        if key in _NOT_TEXT:
            continue
        if key == "files" and isinstance(value, Mapping):
            parts.extend(value)
            continue
        parts.extend(_strings(value))
    text = INDEX_SEPARATOR.join(parts).casefold()
    return text.translate(_CONTROLS).encode("utf-8")


_CONTROLS = {c: INDEX_SEPARATOR for c in [*range(32), 0x7F]}


def case_matches(case: Mapping[str, Any], needle: str, by: SearchBy = "any") -> bool:
    """Whether a case (its canonical JSON object) matches a search by id, tag, text or any."""
    if by in ("any", "id") and id_matches(str(case.get("id", "")), needle):
        return True
    if by in ("any", "tag") and tag_matches(case.get("tags") or [], needle):
        return True
    return by in ("any", "text") and text_matches(case, needle)


# -- the numbers of a version ---------------------------------------------------------------


@dataclass(frozen=True)
class Bucket:
    """Values `low <= v < high` (powers of two; `[0, 1)` holds the zeros)."""

    low: int
    high: int
    count: int


@dataclass(frozen=True)
class Distribution:
    count: int = 0
    total: int = 0
    min: int | None = None
    max: int | None = None
    mean: float | None = None
    p50: int | None = None
    p90: int | None = None
    p99: int | None = None
    buckets: list[Bucket] = field(default_factory=list)


def _bucket_of(v: int) -> int:
    return -1 if v < 1 else v.bit_length() - 1


def distribution(values: list[int]) -> Distribution:
    """Count, total, extremes, mean, nearest-rank percentiles and power-of-two buckets (every
    bucket from the smallest value's to the largest's, empty ones included)."""
    if not values:
        return Distribution()
    ordered = sorted(values)
    n = len(ordered)

    def rank(p: int) -> int:
        return ordered[max(0, -(-p * n // 100) - 1)]

    counts = Counter(_bucket_of(v) for v in ordered)
    buckets = [
        Bucket(0 if k < 0 else 1 << k, 1 if k < 0 else 1 << (k + 1), counts.get(k, 0))
        for k in range(min(counts), max(counts) + 1)
    ]
    total = sum(ordered)
    return Distribution(
        count=n,
        total=total,
        min=ordered[0],
        max=ordered[-1],
        mean=round(total / n, 3),
        p50=rank(50),
        p90=rank(90),
        p99=rank(99),
        buckets=buckets,
    )


@dataclass(frozen=True)
class SharedFileInfo:
    dest: str
    digest: str
    size: int


@dataclass(frozen=True)
class VersionStats:
    """A version's numbers, over every case. They depend on its content only, so they are the
    same for every version with the same content digest."""

    content_digest: str
    case_count: int
    tags: list[tuple[str, int]]  # (tag, cases), most cases first, then by tag
    untagged: int
    input_kinds: dict[str, int]  # text, turns, file, none
    input_length: Distribution  # characters of inputs.user, for text and turns
    file_sizes: Distribution  # bytes of each companion file (a case and a path)
    shared_files: list[SharedFileInfo]
    format: str = STATS_FORMAT

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, data: bytes) -> VersionStats:
        raw = orjson.loads(data)
        if not isinstance(raw, dict) or raw.get("format") != STATS_FORMAT:
            raise ValueError("not stats of this format")

        def dist(d: dict[str, Any]) -> Distribution:
            return Distribution(**{**d, "buckets": [Bucket(**b) for b in d["buckets"]]})

        return cls(
            content_digest=raw["content_digest"],
            case_count=raw["case_count"],
            tags=[(t, n) for t, n in raw["tags"]],
            untagged=raw["untagged"],
            input_kinds=dict(raw["input_kinds"]),
            input_length=dist(raw["input_length"]),
            file_sizes=dist(raw["file_sizes"]),
            shared_files=[SharedFileInfo(**s) for s in raw["shared_files"]],
        )


INPUT_KINDS = ("text", "turns", "file", "none")


def input_kind(user: Any) -> str:
    if isinstance(user, str):
        return "text"
    if isinstance(user, list):
        return "turns"
    if isinstance(user, Mapping) and "ref" in user:
        return "file"
    return "none"


class StatsBuilder:
    """Accumulates a version's numbers one case at a time (cases in any order)."""

    def __init__(self) -> None:
        self.cases = 0
        self.tags: Counter[str] = Counter()
        self.untagged = 0
        self.kinds: Counter[str] = Counter()
        self.lengths: list[int] = []
        self.sizes: list[int] = []

    def add(self, case: Mapping[str, Any]) -> None:
        self.cases += 1
        tags = case.get("tags") or []
        if tags:
            self.tags.update(set(tags))
        else:
            self.untagged += 1
        user = (case.get("inputs") or {}).get("user")
        kind = input_kind(user)
        self.kinds[kind] += 1
        if isinstance(user, str):
            self.lengths.append(len(user))
        elif isinstance(user, list):
            self.lengths.append(sum(len(t) for t in user if isinstance(t, str)))
        for entry in (case.get("files") or {}).values():
            if isinstance(entry, Mapping) and isinstance(entry.get("size"), int):
                self.sizes.append(entry["size"])

    def build(self, content_digest: str, shared_files: list[SharedFileInfo]) -> VersionStats:
        return VersionStats(
            content_digest=content_digest,
            case_count=self.cases,
            tags=sorted(self.tags.items(), key=lambda tn: (-tn[1], tn[0])),
            untagged=self.untagged,
            input_kinds={k: self.kinds.get(k, 0) for k in INPUT_KINDS},
            input_length=distribution(self.lengths),
            file_sizes=distribution(self.sizes),
            shared_files=shared_files,
        )


def sniff_text(body: bytes) -> bool:
    """A file body shown as text: UTF-8 without control characters other than whitespace in
    its first 8 KiB (what a browser would otherwise have to guess)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    head = text[:8192]
    return not any(ord(c) < 32 and c not in "\t\n\r\f" for c in head)
