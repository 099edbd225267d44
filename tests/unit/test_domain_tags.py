"""Version tags as pointers, decided on plain values (`caseshelf.domain.tags`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from caseshelf.domain.errors import NotFound
from caseshelf.domain.tags import (
    HISTORY_KEPT,
    TagBoard,
    conflicting_tags,
    effective_pointers,
    plan_moves,
    row_tags,
)
from caseshelf.domain.versions import VersionRecord, resolve_ref

pytestmark = pytest.mark.unit


def rec(version: str, seq: int, tags: tuple[str, ...] = (), deleted: bool = False) -> VersionRecord:
    return VersionRecord(
        tenant="acme",
        kind="dataset",
        name="gsm",
        version=version,
        content_digest="sha256:" + f"{seq:064x}",
        manifest_key="k",
        case_count=1,
        bytes=1,
        created_at="2026-12-01T00:00:00.000Z",
        created_by="alice",
        seq=seq,
        version_tags=tags,
        deleted_at="2026-12-02T00:00:00.000Z" if deleted else None,
    )


def test_a_tag_put_on_another_version_moves_and_the_move_names_where_from() -> None:
    records = [rec("1.0.0", 1), rec("1.1.0", 2)]
    board, moves = plan_moves(TagBoard(), records, "1.1.0", add=["stable"], by="a", at="t1")
    assert [(m.tag, m.from_version, m.to_version) for m in moves] == [("stable", None, "1.1.0")]
    board, moves = plan_moves(board, records, "1.0.0", add=["stable"], by="b", at="t2")
    assert [(m.tag, m.from_version, m.to_version, m.by) for m in moves] == [
        ("stable", "1.1.0", "1.0.0", "b")
    ]
    assert dict(board.pointers) == {"stable": "1.0.0"}
    assert [m.seq for m in board.history] == [1, 2] and board.seq == 2
    # Then a ref by the tag is the version it points at, a rollback included
    assert resolve_ref(records, "stable", pointers=board.pointers).version == "1.0.0"


def test_a_tag_already_there_makes_no_move_and_a_removal_is_a_move_to_nothing() -> None:
    records = [rec("1.0.0", 1)]
    board, _ = plan_moves(TagBoard(), records, "1.0.0", add=["stable"], by="a", at="t")
    again, moves = plan_moves(board, records, "1.0.0", add=["stable"], by="a", at="t")
    assert moves == [] and again == board
    gone, moves = plan_moves(board, records, "", remove=["stable", "never"], by="a", at="t")
    assert [(m.tag, m.from_version, m.to_version) for m in moves] == [("stable", "1.0.0", None)]
    assert dict(gone.pointers) == {}
    with pytest.raises(NotFound):
        resolve_ref(records, "stable", pointers=gone.pointers)


def test_two_versions_holding_one_tag_in_old_data_resolve_to_the_newest_and_are_reported() -> None:
    # Given rows written before tags were pointers: 1.0.0 and 1.2.0 both carry `stable`
    records = [rec("1.0.0", 1, ("stable",)), rec("1.2.0", 3, ("stable",)), rec("1.1.0", 2)]
    pointers = effective_pointers(TagBoard(), records)
    assert pointers == {"stable": "1.2.0"}
    assert conflicting_tags(TagBoard(), records) == {"stable": ["1.0.0", "1.2.0"]}
    # When the tag moves once, the rows are mended and nothing is reported
    board, _ = plan_moves(TagBoard(), records, "1.1.0", add=["stable"], by="a", at="t")
    assert row_tags(board.pointers, records) == {"1.0.0": (), "1.2.0": (), "1.1.0": ("stable",)}
    mended = [
        replace(r, version_tags=row_tags(board.pointers, records).get(r.version, r.version_tags))
        for r in records
    ]
    assert conflicting_tags(board, mended) == {}


def test_a_tag_on_a_deleted_version_says_so_and_how_to_get_it_back() -> None:
    records = [rec("1.0.0", 1), rec("1.1.0", 2, deleted=True)]
    with pytest.raises(NotFound, match=r"points at 1\.1\.0, which is deleted; revive 1\.1\.0"):
        resolve_ref(records, "stable", name="gsm", pointers={"stable": "1.1.0"})
    found = resolve_ref(records, "stable", include_deleted=True, pointers={"stable": "1.1.0"})
    assert found.version == "1.1.0"


def test_the_history_keeps_its_newest_moves_and_counts_the_dropped_ones() -> None:
    records = [rec("1.0.0", 1), rec("1.1.0", 2)]
    board = TagBoard()
    for i in range(HISTORY_KEPT + 5):
        board, _ = plan_moves(board, records, ["1.0.0", "1.1.0"][i % 2], add=["t"], by="a", at="t")
    assert len(board.history) == HISTORY_KEPT and board.dropped == 5
    assert board.history[-1].seq == HISTORY_KEPT + 5
    # And the board round-trips through its stored document
    assert TagBoard.from_doc(board.to_doc()) == replace(board, pointers=dict(board.pointers))
