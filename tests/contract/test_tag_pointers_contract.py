"""Version tags as pointers on every backend: a tag names at most one version, moves are kept,
and of two moves racing on one dataset one wins and the other is told (409)."""

from __future__ import annotations

from typing import Any

import pytest

from caseshelf.domain.errors import BadRequest, Conflict
from caseshelf.domain.tags import TagBoard
from caseshelf.services.registry import RegistryService
from caseshelf.services.versioned import VersionedStore
from tests.conftest import Backend
from tests.contract.test_registry_contract import ALICE, BOB, dataset, register

pytestmark = [pytest.mark.contract, pytest.mark.services]


@pytest.fixture
def registry(backend: Backend) -> RegistryService:
    svc = backend.services.registry
    register(svc, ALICE, dataset("1.0.0"))
    register(svc, ALICE, dataset("1.1.0", n=6))
    register(svc, ALICE, dataset("1.2.0", n=7))
    return svc


def tags_of(svc: RegistryService) -> dict[str, tuple[str, ...]]:
    return {r.version: r.version_tags for r in svc.list_versions(ALICE, "gsm").items}


def test_a_tag_moves_between_versions_and_a_rollback_resolves_back(
    registry: RegistryService,
) -> None:
    # Given stable and candidate on 1.1.0
    registry.move_tags(ALICE, "gsm", "1.1.0", ["stable", "candidate"])
    # When stable is put on 1.0.0 (a rollback)
    row, moves = registry.move_tags(BOB, "gsm", "1.0.0", ["stable"])
    # Then it moved, the answer says from where, and the ref follows it
    assert [(m.tag, m.from_version, m.to_version, m.by) for m in moves] == [
        ("stable", "1.1.0", "1.0.0", "bob")
    ]
    assert row is not None and row.version_tags == ("stable",)
    assert registry.get_version(ALICE, "gsm", "stable").version == "1.0.0"
    assert tags_of(registry) == {"1.2.0": (), "1.1.0": ("candidate",), "1.0.0": ("stable",)}
    # And adding prod elsewhere drops no other tag
    registry.move_tags(ALICE, "gsm", "1.1.0", ["prod"])
    assert tags_of(registry)["1.1.0"] == ("candidate", "prod")
    # And the history holds every move, in order
    board, pointers = registry.tags(ALICE, "gsm")
    assert pointers == {"stable": "1.0.0", "candidate": "1.1.0", "prod": "1.1.0"}
    assert [(m.seq, m.tag, m.to_version) for m in board.history] == [
        (1, "stable", "1.1.0"),
        (2, "candidate", "1.1.0"),
        (3, "stable", "1.0.0"),
        (4, "prod", "1.1.0"),
    ]


def test_put_replaces_a_versions_tags_moving_each_one_it_names(registry: RegistryService) -> None:
    registry.move_tags(ALICE, "gsm", "1.2.0", ["stable"])
    registry.set_version_tags(ALICE, "gsm", "1.1.0", ["candidate"])
    rec = registry.set_version_tags(ALICE, "gsm", "1.1.0", ["stable"])
    assert rec.version_tags == ("stable",)
    assert tags_of(registry) == {"1.2.0": (), "1.1.0": ("stable",), "1.0.0": ()}
    moves = registry.remove_tags(ALICE, "gsm", ["stable"])
    assert [(m.tag, m.from_version, m.to_version) for m in moves] == [("stable", "1.1.0", None)]
    assert tags_of(registry) == {"1.2.0": (), "1.1.0": (), "1.0.0": ()}


def test_a_tag_named_like_a_version_label_is_refused(registry: RegistryService) -> None:
    with pytest.raises(BadRequest, match=r"1\.0\.0 is a version label of gsm"):
        registry.move_tags(ALICE, "gsm", "1.1.0", ["1.0.0"])


def test_two_racing_moves_one_wins_the_other_gets_409_naming_both(
    registry: RegistryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = registry.versions
    registry.move_tags(ALICE, "gsm", "1.0.0", ["stable"])
    real_board = VersionedStore.board
    raced: list[Any] = []

    # When another request moves the tag between this one's read of the board and its write
    def board_then_race(self: VersionedStore, tenant: str, name: str) -> TagBoard:
        seen = real_board(self, tenant, name)
        if not raced:
            raced.append(True)
            monkeypatch.setattr(VersionedStore, "board", real_board)
            store.move_tags(BOB, "gsm", "1.2.0", add=["stable"])
        return seen

    monkeypatch.setattr(VersionedStore, "board", board_then_race)
    with pytest.raises(Conflict) as lost:
        registry.move_tags(ALICE, "gsm", "1.1.0", ["stable"])
    # Then the error names both moves, and only the winner's happened
    assert "stable: 1.0.0 -> 1.2.0" in lost.value.detail
    assert "stable: 1.0.0 -> 1.1.0" in lost.value.detail
    board, pointers = registry.tags(ALICE, "gsm")
    assert pointers == {"stable": "1.2.0"}
    assert [(m.tag, m.from_version, m.to_version) for m in board.history] == [
        ("stable", None, "1.0.0"),
        ("stable", "1.0.0", "1.2.0"),
    ]
    assert tags_of(registry) == {"1.2.0": ("stable",), "1.1.0": (), "1.0.0": ()}


def test_old_rows_holding_one_tag_twice_resolve_to_the_newest_until_it_moves(
    registry: RegistryService, backend: Backend
) -> None:
    # Given rows written before tags were pointers (no board; two versions carry `stable`)
    for label in ("1.0.0", "1.1.0"):
        backend.index.update_version("acme", "dataset", "gsm", label, {"version_tags": ["stable"]})
    assert registry.get_version(ALICE, "gsm", "stable").version == "1.1.0"
    # When the tag is put on a version, it is on that one only
    registry.move_tags(ALICE, "gsm", "1.0.0", ["stable"])
    assert tags_of(registry) == {"1.2.0": (), "1.1.0": (), "1.0.0": ("stable",)}
    assert registry.get_version(ALICE, "gsm", "stable").version == "1.0.0"
