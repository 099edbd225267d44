"""`caseshelf ls` on the embedded store printed again from the handler's kept answer while the
index and the code are unchanged (`caseshelf.cli.answers`), and the index's change stamp that
decides it (`caseshelf.adapters.sqlite_stamp`)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import caseshelf
from caseshelf.adapters.sqlite import SqliteIndex
from caseshelf.adapters.sqlite_stamp import read_stamp
from caseshelf.bootstrap import load_settings
from caseshelf.cli import State, answers
from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.e2e

CASES = [{"id": f"c{i}", "inputs": {"user": f"q {i}"}} for i in range(3)]
# Whether `ls` in a new interpreter imported the handler path, and what it printed.
PROBE = """
import sys
from caseshelf.cli import run
code = run(sys.argv[1:])
print("HANDLER" if "caseshelf.bootstrap" in sys.modules else "KEPT", file=sys.stderr)
sys.exit(code)
"""


def ls_process(home: Path, *args: str, env: dict[str, str] | None = None) -> tuple[str, str]:
    """`ls` in a new interpreter: (stdout, "HANDLER" or "KEPT")."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CASESHELF_")}
    environ.update(CASESHELF_HOME=str(home), **(env or {}))
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=environ,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, proc.stderr.strip().splitlines()[-1]


def ids(stdout: str) -> list[str]:
    return [d["id"] for d in json.loads(stdout)["items"]]


def test_ls_prints_the_kept_answer_until_the_store_changes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with caseshelf.connect(home=home) as cs:
        cs.register("first", cases=CASES, version="1.0.0")
    # When `ls` runs twice on an unchanged store
    made, how = ls_process(home, "--json", "ls")
    again, how_again = ls_process(home, "--json", "ls")
    # Then the handler answers the first time, and the second prints that answer without it
    assert (how, how_again) == ("HANDLER", "KEPT")
    assert again == made and ids(made) == ["first"]
    # And a table comes from the kept answer as from the handler's
    table, _ = ls_process(home, "ls")
    table_again, how_table = ls_process(home, "ls")
    assert how_table == "KEPT" and table_again == table and "first" in table
    # When another process changes the store (a registration, then a deletion)
    with caseshelf.connect(home=home) as cs:
        cs.register("second", cases=CASES, version="1.0.0")
    # Then the next `ls` asks the handler again, and lists it
    after, how_after = ls_process(home, "--json", "ls")
    assert how_after == "HANDLER" and ids(after) == ["first", "second"]
    with caseshelf.connect(home=home) as cs:
        cs.delete("second@1.0.0")
    gone, how_gone = ls_process(home, "--json", "ls")
    assert how_gone == "HANDLER" and gone != after


def test_the_kept_answer_is_only_for_the_same_options_identity_and_environment(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    with caseshelf.connect(home=home, tenant="acme") as cs:
        cs.register("theirs", cases=CASES, version="1.0.0")
    assert ls_process(home, "--json", "ls", "--tenant", "acme")[1] == "HANDLER"
    assert ls_process(home, "--json", "ls", "--tenant", "acme")[1] == "KEPT"
    # When another tenant, or other options, ask
    other, how = ls_process(home, "--json", "ls", "--tenant", "beta")
    # Then the handler answers each, with what that caller may see
    assert how == "HANDLER" and ids(other) == []
    from_env, how_env = ls_process(home, "--json", "ls", env={"CASESHELF_TENANT": "acme"})
    assert how_env == "HANDLER" and ids(from_env) == ["theirs"]
    paged, how_paged = ls_process(home, "--json", "ls", "--limit", "1", "--tenant", "acme")
    assert how_paged == "HANDLER" and ids(paged) == ["theirs"]
    setting = {"CASESHELF_TENANT": "acme", "CASESHELF_MAX_BODY_BYTES": "1000000"}
    assert ls_process(home, "--json", "ls", env=setting)[1] == "HANDLER"
    # And the same question again is answered from what was kept for it
    assert ls_process(home, "--json", "ls", env=setting)[1] == "KEPT"
    # And no credential in the environment is written down with it
    secrets = {"HF_TOKEN": "hf-secret-1234", "AWS_SECRET_ACCESS_KEY": "aws-secret-5678"}
    ls_process(home, "--json", "ls", env={**setting, **secrets})
    kept = (home / "cli" / "ls.json").read_text()
    assert "hf-secret-1234" not in kept and "aws-secret-5678" not in kept


def test_changed_code_or_a_damaged_file_asks_the_handler(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with caseshelf.connect(home=home) as cs:
        cs.register("first", cases=CASES, version="1.0.0")
    ls_process(home, "--json", "ls")
    kept_path = home / "cli" / "ls.json"
    kept = json.loads(kept_path.read_bytes())
    assert any(f.endswith("bootstrap.py") for f, _, _ in kept["code"])
    # When a module that made the answer is not the one on disk any more
    kept["code"][0][2] += 1
    kept_path.write_text(json.dumps(kept))
    # Then the handler answers again (and keeps its answer with the code as it is)
    assert ls_process(home, "--json", "ls")[1] == "HANDLER"
    assert ls_process(home, "--json", "ls")[1] == "KEPT"
    # When the kept file is damaged, or a symlink to somewhere else
    kept_path.write_bytes(b'{"key": ')
    out, how = ls_process(home, "--json", "ls")
    assert how == "HANDLER" and ids(out) == ["first"]
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(kept_path.read_bytes())
    kept_path.unlink()
    kept_path.symlink_to(elsewhere)
    before = elsewhere.read_bytes()
    # Then it is not followed: the handler answers, and the link's target is left as it was
    assert ls_process(home, "--json", "ls")[1] == "HANDLER"
    assert elsewhere.read_bytes() == before
    assert not kept_path.is_symlink()


def test_an_answer_made_while_another_process_wrote_is_never_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    for name in [n for n in os.environ if n.startswith("CASESHELF_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("CASESHELF_HOME", str(home))
    with caseshelf.connect(home=home) as cs:
        cs.register("first", cases=CASES, version="1.0.0")
        state = State()
        # When the key is taken, then the store changes before the answer is kept
        key = answers.key(state, "ls", {"shared": False, "limit": None, "cursor": None})
        assert key is not None
        cs.register("second", cases=CASES, version="1.0.0")
        answers.keep(key, {"items": [], "next_cursor": None}, load_settings(home=home))
        # Then the key the next `ls` takes finds nothing kept under it
        now = answers.key(state, "ls", {"shared": False, "limit": None, "cursor": None})
        assert now is not None and now != key
        assert answers.find(now) is None
        # And the old key still finds what was kept under it (nothing else reads it)
        assert answers.find(key) == {"items": [], "next_cursor": None}


def test_an_api_or_a_store_without_an_index_keeps_nothing(tmp_path: Path) -> None:
    state = State()
    state.api = "http://127.0.0.1:9"
    assert answers.key(state, "ls", {}) is None
    empty = tmp_path / "empty"
    # When `ls` first runs where there is no store yet
    out, how = ls_process(empty, "--json", "ls")
    # Then it answers, and neither makes a store nor keeps anything: a read creates nothing
    assert how == "HANDLER" and ids(out) == []
    assert not empty.exists()
    assert ls_process(empty, "--json", "ls")[1] == "HANDLER"
    assert not empty.exists()


def test_every_row_written_renews_the_stamp_and_reading_it_creates_nothing(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    assert read_stamp(str(home)) is None and not home.exists()
    index = SqliteIndex(home / "index.sqlite")
    assert index.get_item("P#1", "S#1") is None and not home.exists()  # opened, read: nothing
    index.create()
    seen = {read_stamp(str(home))}
    index.put_item("P#1", "S#1", {"a": 1})
    seen.add(read_stamp(str(home)))
    index.update_item("P#1", "S#1", {"a": 2})
    seen.add(read_stamp(str(home)))
    index.put_item("P#1", "S#1", {"a": 3})  # replaced
    seen.add(read_stamp(str(home)))
    with sqlite3.connect(home / "index.sqlite") as conn:  # any writer, not only ours
        conn.execute("DELETE FROM items")
    seen.add(read_stamp(str(home)))
    assert None not in seen and len(seen) == 5
    # And reading, or opening the index again, does not renew it
    stamp = read_stamp(str(home))
    index.get_item("P#1", "S#1")
    SqliteIndex(home / "index.sqlite")
    assert read_stamp(str(home)) == stamp


def test_an_index_made_before_stamps_gets_them_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "home" / "index.sqlite"
    path.parent.mkdir()
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE items (pk TEXT NOT NULL, sk TEXT NOT NULL, doc BLOB NOT NULL,"
            " PRIMARY KEY (pk, sk)) WITHOUT ROWID"
        )
    assert read_stamp(str(path.parent)) is None
    SqliteIndex(path).put_item("P#1", "S#1", {"a": 1})
    assert read_stamp(str(path.parent)) is not None
