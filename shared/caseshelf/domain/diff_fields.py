"""Which fields a diff changed, and how often: the field paths of its changed cases, counted over
the whole diff (architecture §6 "Diff"). Pure.

A field path is the JSON pointer of a change with every list position (and every element of a
list matched by id) written `*`: a change at `/inputs/user/3` and one at `/inputs/user/0` are
both `/inputs/user/*`, so a diff that edits the third turn of some cases and the first of others
shows one field. A case counts once per field path, however many of its changes fall there.

A filter by field path keeps the changes at that path or under it (`/expectations` keeps
`/expectations/ground_truth`), and the changed cases holding at least one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from caseshelf.domain.diff import Change, Keyed, Token, to_pointer

ANY = "*"
# The most field paths a summary names (most cases first); the rest are counted in `other`.
MAX_FIELD_PATHS = 200
FIELDS_FORMAT = "caseshelf.diff-fields/1"


def field_path(path: Sequence[Token]) -> str:
    """The field path of a change's path: its pointer with list positions as `*`."""
    general: list[str | int] = [ANY if isinstance(t, int | Keyed) else t for t in path]
    return to_pointer([str(t) for t in general]) or "/"


def under(path: str, prefix: str) -> bool:
    """Whether field path `path` is `prefix` or lies under it."""
    if prefix == "/":
        return True
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def changes_under(changes: Iterable[Change], prefix: str) -> list[Change]:
    """The changes at the field path `prefix` or under it."""
    return [c for c in changes if under(field_path(c.path), prefix)]


@dataclass(frozen=True)
class FieldCounts:
    """The field paths of a diff's changed cases. `paths` holds every path met, most cases
    first (ties by path); `counts[k]` is how many changed cases changed at `paths[k]`;
    `case_paths[n]` are the indices into `paths` of the n-th changed case (in the diff's
    order); `counted` is how many changed cases were read: the first `counted` of the diff's
    (every one, once a service that counts a part a request has been asked often enough:
    `caseshelf.services.diff.DiffService`)."""

    paths: list[str]
    counts: list[int]
    case_paths: list[tuple[int, ...]]
    counted: int

    @classmethod
    def of(cls, per_case: Iterable[Iterable[Change]]) -> FieldCounts:
        """The counts of the changed cases' changes, one list of changes per case in order."""
        return cls._of_sets([frozenset(field_path(c.path) for c in ch) for ch in per_case])

    def extended(self, per_case: Iterable[Iterable[Change]]) -> FieldCounts:
        """These counts with the next changed cases' changes counted too (in order): counts
        made a part at a time equal the counts of the whole (`of`)."""
        paths = self.paths
        sets = [frozenset(paths[k] for k in ks) for ks in self.case_paths]
        sets += [frozenset(field_path(c.path) for c in ch) for ch in per_case]
        return self._of_sets(sets)

    @classmethod
    def _of_sets(cls, sets: list[frozenset[str]]) -> FieldCounts:
        tally = Counter(p for s in sets for p in s)
        paths = sorted(tally, key=lambda p: (-tally[p], p))
        index = {p: k for k, p in enumerate(paths)}
        case_paths = [tuple(sorted(index[p] for p in s)) for s in sets]
        return cls(paths, [tally[p] for p in paths], case_paths, len(sets))

    def top(self, n: int = MAX_FIELD_PATHS) -> tuple[list[tuple[str, int]], int]:
        """The `n` most changed field paths with their case counts, and how many paths are
        left out."""
        shown = list(zip(self.paths[:n], self.counts[:n], strict=True))
        return shown, max(len(self.paths) - n, 0)

    def matching(self, prefix: str) -> list[int]:
        """The changed cases (their order in the diff) with a change at `prefix` or under it."""
        hits = {k for k, p in enumerate(self.paths) if under(p, prefix)}
        return [n for n, ks in enumerate(self.case_paths) if hits.intersection(ks)]

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "format": FIELDS_FORMAT,
                "paths": self.paths,
                "counts": self.counts,
                "case_paths": self.case_paths,
                "counted": self.counted,
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> FieldCounts:
        """Kept counts; `ValueError` when they are of another format or do not hold
        together (they are then computed again)."""
        doc: dict[str, Any] = orjson.loads(data)
        if doc.get("format") != FIELDS_FORMAT:
            raise ValueError("not field counts")
        paths = [str(p) for p in doc["paths"]]
        counts = [int(c) for c in doc["counts"]]
        case_paths = [tuple(int(k) for k in ks) for ks in doc["case_paths"]]
        if len(paths) != len(counts) or int(doc["counted"]) != len(case_paths):
            raise ValueError("field counts that do not hold together")
        if any(k >= len(paths) or k < 0 for ks in case_paths for k in ks):
            raise ValueError("a case names a field path the counts do not hold")
        return cls(paths, counts, case_paths, len(case_paths))
