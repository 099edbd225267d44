"""Which embedded store a command uses (`caseshelf.storehome`): CASESHELF_HOME, else the nearest
`.caseshelf/` at or above the working directory, else the user's data directory; and what the
settings make of a store path that is no directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from caseshelf.bootstrap import load_settings
from caseshelf.domain.errors import BadRequest, NotFound
from caseshelf.storehome import (
    FROM_ENV,
    FROM_PROJECT,
    FROM_USER,
    StoreHome,
    StoreNotFound,
    find_home,
    placed,
    project_home,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A directory with no `.caseshelf/` above it (skips where one is: the test cannot hold)."""
    above = project_home(str(tmp_path))
    if above is not None:
        pytest.skip(f"a .caseshelf/ above the temporary directory ({above}) would be found")
    return tmp_path


def test_a_project_store_is_found_from_any_directory_below_it(tree: Path) -> None:
    (tree / "proj" / ".caseshelf").mkdir(parents=True)
    nested = tree / "proj" / "src" / "evals" / "deep"
    nested.mkdir(parents=True)
    # When the store is looked for from the project root, a nested directory, and the store itself
    for cwd in (tree / "proj", nested, tree / "proj" / ".caseshelf"):
        home = find_home({}, cwd=str(cwd))
        # Then it is the project's
        assert home == StoreHome(str(tree / "proj" / ".caseshelf"), FROM_PROJECT)
    # And the nearest one wins
    (tree / "proj" / "src" / ".caseshelf").mkdir()
    assert find_home({}, cwd=str(nested)).path == str(tree / "proj" / "src" / ".caseshelf")


def test_caseshelf_home_wins_and_a_relative_one_is_read_from_the_working_directory(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tree / ".caseshelf").mkdir()
    home = find_home({"CASESHELF_HOME": "/data/shelf"}, cwd=str(tree))
    assert home == StoreHome("/data/shelf", FROM_ENV)
    monkeypatch.chdir(tree)
    assert find_home({"CASESHELF_HOME": "rel/store"}).path == str(tree / "rel" / "store")
    # An empty CASESHELF_HOME is no setting
    assert find_home({"CASESHELF_HOME": ""}, cwd=str(tree)).found == FROM_PROJECT


def test_without_either_it_is_the_users_data_directory(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tree / "xdg"))
    # A file named .caseshelf is no store, and is passed over
    (tree / "work").mkdir()
    (tree / "work" / ".caseshelf").write_text("not a store")
    home = find_home({}, cwd=str(tree / "work"))
    assert home == StoreHome(str(tree / "xdg" / "caseshelf"), FROM_USER)
    assert not home.exists() and not (tree / "xdg").exists()  # finding creates nothing
    assert "CASESHELF_HOME" in home.how and ".caseshelf/" in home.how


def test_a_caseshelf_directory_another_user_owns_is_passed_over(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not hasattr(os, "getuid") or os.getuid() != 0:
        pytest.skip("making a directory another user owns needs root")
    monkeypatch.setenv("XDG_DATA_HOME", str(tree / "xdg"))
    shared = tree / "shared"
    (shared / ".caseshelf").mkdir(parents=True)
    (shared / "mine").mkdir()
    os.chown(shared / ".caseshelf", 4242, 4242)
    # When looked for below a .caseshelf/ of another user's
    home = find_home({}, cwd=str(shared / "mine"))
    # Then it is not used
    assert home.found == FROM_USER


def test_settings_refuse_a_store_path_that_is_a_file_and_name_it(tmp_path: Path) -> None:
    target = tmp_path / "store"
    target.write_text("a file")
    with pytest.raises(BadRequest) as exc:
        load_settings({"CASESHELF_HOME": str(target)})
    assert str(target) in exc.value.detail and "not a directory" in exc.value.detail
    assert "point CASESHELF_HOME at a directory" in exc.value.detail
    # A path that does not exist yet is fine, and nothing is created for it
    settings = load_settings({"CASESHELF_HOME": str(tmp_path / "new" / "store")})
    assert settings.store_home == StoreHome(str(tmp_path / "new" / "store"), FROM_ENV)
    assert not (tmp_path / "new").exists()


def test_a_missing_entry_names_the_store_once(tmp_path: Path) -> None:
    home = StoreHome(str(tmp_path / "s"), FROM_ENV)
    error = placed(NotFound("no dataset 'gsm8k'", id="gsm8k"), home)
    assert isinstance(error, StoreNotFound) and error.fields == {"id": "gsm8k"}
    assert error.detail == (
        f"no dataset 'gsm8k' in the store at {tmp_path / 's'} (CASESHELF_HOME; no store there yet)"
    )
    assert placed(error, home) is error
    # Errors about anything else (a source file, a route) are left as they are
    other = NotFound("source x.jsonl: no such file", field="source.url")
    assert placed(other, home) is other
