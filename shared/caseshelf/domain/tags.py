"""Version tags as pointers: a tag names at most one version of a dataset, and every move is kept.

A dataset's tags live on one index row beside its versions (the tag board): which version each
tag points at, a sequence number that every move advances (the row is written only when the
number is still the one read, so of two racing moves one wins and the other is told), and the
moves themselves, newest last. The version rows keep a copy of their tags for display
(`version_tags`); the board is what a ref resolves by. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from caseshelf.domain.versions import VersionRecord, order_key

# The sort key of the board row under a dataset's partition (versions are `V#<label>`).
BOARD_SK = "TAGS"
# Moves kept on the board; older ones are dropped (the count of dropped moves is kept).
HISTORY_KEPT = 1000


@dataclass(frozen=True)
class TagMove:
    """One change of where a tag points: `from_version` None when the tag is new, `to_version`
    None when it was removed."""

    seq: int
    tag: str
    from_version: str | None
    to_version: str | None
    by: str
    at: str

    def to_doc(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "tag": self.tag,
            "from": self.from_version,
            "to": self.to_version,
            "by": self.by,
            "at": self.at,
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> TagMove:
        return cls(doc["seq"], doc["tag"], doc.get("from"), doc.get("to"), doc["by"], doc["at"])


@dataclass(frozen=True)
class TagBoard:
    """Where a dataset's tags point (`pointers`: tag -> version label) and how they got there."""

    seq: int = 0
    pointers: Mapping[str, str] = field(default_factory=dict)
    history: tuple[TagMove, ...] = ()
    dropped: int = 0

    def to_doc(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "pointers": dict(sorted(self.pointers.items())),
            "history": [m.to_doc() for m in self.history],
            "dropped": self.dropped,
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any] | None) -> TagBoard:
        if not doc:
            return cls()
        return cls(
            int(doc.get("seq", 0)),
            dict(doc.get("pointers") or {}),
            tuple(TagMove.from_doc(m) for m in doc.get("history") or ()),
            int(doc.get("dropped", 0)),
        )


def effective_pointers(board: TagBoard, records: Iterable[VersionRecord]) -> dict[str, str]:
    """Tag -> version label. The board decides every tag it names. A tag only version rows
    carry (data written before tags were pointers, or a move whose row updates did not all
    land) goes to the newest version carrying it, in version order, so two versions holding one
    tag resolve the same way every time."""
    out: dict[str, str] = {}
    by_tag: dict[str, list[VersionRecord]] = {}
    for rec in records:
        for tag in rec.version_tags:
            by_tag.setdefault(tag, []).append(rec)
    for tag, holders in by_tag.items():
        out[tag] = max(holders, key=order_key).version
    out.update(board.pointers)
    return out


def conflicting_tags(board: TagBoard, records: Sequence[VersionRecord]) -> dict[str, list[str]]:
    """Tags whose version rows disagree with where they point: tag -> the labels whose rows
    carry it (what `verify` reports; the next move of the tag mends it)."""
    pointers = effective_pointers(board, records)
    found: dict[str, list[str]] = {}
    for tag, target in pointers.items():
        holders = sorted(r.version for r in records if tag in r.version_tags)
        if holders != [target]:
            found[tag] = holders
    return found


def plan_moves(
    board: TagBoard,
    records: Sequence[VersionRecord],
    version: str,
    *,
    add: Iterable[str] = (),
    remove: Iterable[str] = (),
    by: str,
    at: str,
) -> tuple[TagBoard, list[TagMove]]:
    """The board after pointing each tag of `add` at `version` and removing each tag of
    `remove` (wherever it points), and the moves that makes. A tag already pointing where it is
    asked to makes no move."""
    pointers = effective_pointers(board, records)
    seq = board.seq
    moves: list[TagMove] = []
    for tag in dict.fromkeys(remove):
        if tag in pointers:
            seq += 1
            moves.append(TagMove(seq, tag, pointers.pop(tag), None, by, at))
    for tag in dict.fromkeys(add):
        if pointers.get(tag) != version:
            seq += 1
            moves.append(TagMove(seq, tag, pointers.get(tag), version, by, at))
            pointers[tag] = version
    history = (*board.history, *moves)
    dropped = board.dropped + max(0, len(history) - HISTORY_KEPT)
    return TagBoard(seq, pointers, history[-HISTORY_KEPT:], dropped), moves


def row_tags(
    pointers: Mapping[str, str], records: Iterable[VersionRecord]
) -> dict[str, tuple[str, ...]]:
    """Version label -> the tags its row should carry, for every row whose copy differs: the
    tags it keeps in the order it had them, then the ones new to it."""
    want: dict[str, list[str]] = {}
    for tag, label in pointers.items():
        want.setdefault(label, []).append(tag)
    changes: dict[str, tuple[str, ...]] = {}
    for rec in records:
        wanted = want.get(rec.version, [])
        kept = [t for t in rec.version_tags if t in wanted]
        tags = (*kept, *(t for t in wanted if t not in kept))
        if tags != rec.version_tags:
            changes[rec.version] = tags
    return changes


__all__ = [
    "BOARD_SK",
    "HISTORY_KEPT",
    "TagBoard",
    "TagMove",
    "conflicting_tags",
    "effective_pointers",
    "plan_moves",
    "row_tags",
]
