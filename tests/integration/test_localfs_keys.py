"""The embedded store's key rules: a key names a file inside the store's root and nothing else,
whatever the key says (CWE-22) and whatever symlink was planted in the tree (CWE-59)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from caseshelf.adapters.localfs import LocalBlobStore
from caseshelf.domain.errors import BadRequest

pytestmark = pytest.mark.integration

OPERATIONS: dict[str, Callable[[LocalBlobStore, str], object]] = {
    "put": lambda s, k: s.put(k, b"x"),
    "put_if_absent": lambda s, k: s.put_if_absent(k, b"x"),
    "get": lambda s, k: s.get(k),
    "get_range": lambda s, k: s.get_range(k, 0, 1),
    "exists": lambda s, k: s.exists(k),
    "head": lambda s, k: s.head(k),
    "delete": lambda s, k: s.delete(k),
}


@pytest.fixture
def tree(tmp_path: Path) -> tuple[LocalBlobStore, Path]:
    """A store in `<tmp>/objects` (made: opening a store makes nothing), and a directory beside
    it whose name it is a prefix of."""
    outside = tmp_path / "objects-outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"not the store's")
    (tmp_path / "objects").mkdir()
    return LocalBlobStore(tmp_path / "objects"), outside


@pytest.mark.parametrize("op", sorted(OPERATIONS))
@pytest.mark.parametrize(
    "key", ["/etc/passwd", "t/a/../../x", "../objects-outside/secret", "t\\a\\x", "", "t/./a"]
)
def test_keys_that_leave_the_tree_are_refused_naming_the_key(
    tree: tuple[LocalBlobStore, Path], op: str, key: str
) -> None:
    store, outside = tree
    with pytest.raises(BadRequest) as err:
        OPERATIONS[op](store, key)
    assert err.value.fields["field"] == "key"
    assert (outside / "secret").read_bytes() == b"not the store's"


@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_a_planted_directory_symlink_is_never_followed_out_of_the_root(
    tree: tuple[LocalBlobStore, Path], op: str
) -> None:
    # Given a directory symlink inside the store to a sibling whose name starts like the root's
    store, outside = tree
    (store.root / "t").mkdir()
    os.symlink(outside, store.root / "t" / "evil")
    # When a key goes through it, then every operation refuses it
    with pytest.raises(BadRequest, match="escapes the store"):
        OPERATIONS[op](store, "t/evil/secret")
    assert (outside / "secret").read_bytes() == b"not the store's"


@pytest.mark.parametrize("op", ["get", "get_range", "exists", "head", "put_if_absent"])
def test_a_planted_file_symlink_is_never_read_through(
    tree: tuple[LocalBlobStore, Path], op: str
) -> None:
    # Given an object key that is a symlink to a file outside the store
    store, outside = tree
    (store.root / "t" / "a" / "packs").mkdir(parents=True)
    os.symlink(outside / "secret", store.root / "t" / "a" / "packs" / "p1")
    # When it is read (or written once), then the store refuses it
    with pytest.raises(BadRequest, match="escapes the store"):
        OPERATIONS[op](store, "t/a/packs/p1")


def test_ordinary_keys_still_work(tree: tuple[LocalBlobStore, Path]) -> None:
    store, _ = tree
    assert store.put_if_absent("t/a/packs/p1", b"abc")
    assert store.get("t/a/packs/p1") == b"abc"
    assert store.get_range("t/a/packs/p1", 1, 1) == b"b"
    assert [o.key for o in store.list("t/a/")] == ["t/a/packs/p1"]
