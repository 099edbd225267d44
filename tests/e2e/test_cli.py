"""The `caseshelf` command on a fresh embedded store, and against the local API with `--api URL`:
in this process (`tests.helpers.run_cli`), and as a subprocess where the process is what a test
checks (its exit code and streams).

Exit codes: 0 on success, 1 on a failed command (`error: <detail>` on stderr), 2 on a usage
error. `--json` output is parsed, never matched as text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import dev_server, run_cli

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli"
DEMO_JSON = FIXTURES / "demo.json"
DEMO_YAML = FIXTURES / "demo.yaml"
CASES_JSONL = FIXTURES / "cases.jsonl"
BROKEN_JSON = FIXTURES / "broken.json"


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, f"exit {self.code}: {self.err}"
        return json.loads(self.out)


class Cli:
    """The `caseshelf` command with its own CASESHELF_HOME and working directory (`process`:
    as a subprocess)."""

    def __init__(self, home: Path, cwd: Path) -> None:
        self.home = home
        self.cwd = cwd

    def __call__(
        self, *args: str | Path, env: dict[str, str] | None = None, process: bool = False
    ) -> Run:
        proc = run_cli(self.home, *args, cwd=self.cwd, env=env, process=process)
        return Run(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    work = tmp_path / "work"
    work.mkdir()
    return Cli(tmp_path / "home", work)


def write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def demo_doc(**changes: Any) -> dict[str, Any]:
    doc = json.loads(DEMO_JSON.read_text(encoding="utf-8"))
    doc.update(changes)
    return doc


# -- the embedded store ------------------------------------------------------------------------


def test_register_is_idempotent_and_reads_back(cli: Cli) -> None:
    # Given a fresh store
    # When the fixture is registered, then registered again, and as YAML
    first = cli("register", DEMO_JSON, "--json").json()
    again = cli("register", DEMO_JSON, "--json").json()
    as_yaml = cli("register", DEMO_YAML, "--json").json()

    # Then the first call created 1.0.0 and the others found the same content there
    assert first["created"] is True and first["version"] == "1.0.0" and first["case_count"] == 3
    assert again["created"] is False and again["content_digest"] == first["content_digest"]
    assert as_yaml["created"] is False and as_yaml["content_digest"] == first["content_digest"]

    # And ls, get and cases show it, in human and in JSON form
    listed = cli("ls", "--json").json()
    assert [(d["id"], d["latest"], d["case_count"]) for d in listed["items"]] == [
        ("demo", "1.0.0", 3)
    ]
    human = cli("ls")
    assert human.code == 0 and "demo" in human.out and "1.0.0" in human.out
    got = cli("get", "demo", "--json").json()  # ID alone means latest
    assert got["content_digest"] == first["content_digest"]
    assert got["description"] == "Three small cases for the CLI tests"
    assert cli("get", f"demo@{first['content_digest']}", "--json").json()["version"] == "1.0.0"
    cases = cli("cases", "demo@1.0.0", "--json").json()
    assert [c["id"] for c in cases["items"]] == ["add-1", "capital-1", "repo-1"]
    assert cases["next_cursor"] is None
    # YAML dates stay the strings they were written as
    assert cases["items"][0]["metadata"] == {"added": "2024-05-01"}
    table = cli("cases", "demo")
    assert table.code == 0 and "capital-1" in table.out and "Paris" in table.out


def test_bump_versions_tags_and_tombstones(cli: Cli, tmp_path: Path) -> None:
    # Given 1.0.0, and new content registered by --bump minor as 1.1.0
    cli("register", DEMO_JSON)
    same = cli("register", DEMO_JSON, "--bump", "minor", "--json").json()
    assert (same["version"], same["created"]) == ("1.0.0", False)  # unchanged: nothing new
    newer = write(tmp_path / "newer.json", demo_doc(description="a newer edition"))
    bumped = cli("register", newer, "--bump", "minor", "--json").json()
    assert bumped["version"] == "1.1.0" and bumped["created"] is True

    # When 1.1.0 is tagged
    tagged = cli("tag", "demo@1.1.0", "stable", "prod", "--json").json()

    # Then the tags resolve as refs, and the answer says what moved
    assert tagged["version"]["version_tags"] == ["stable", "prod"]
    assert [(m["tag"], m["from_version"], m["to_version"]) for m in tagged["moves"]] == [
        ("stable", None, "1.1.0"),
        ("prod", None, "1.1.0"),
    ]
    assert cli("get", "demo@stable", "--json").json()["version"] == "1.1.0"
    versions = cli("versions", "demo", "--json").json()
    assert [v["version"] for v in versions["items"]] == ["1.1.0", "1.0.0"]

    # When it is deleted, it leaves the listing and latest, and stays readable with --all
    rm = cli("rm", "demo@1.1.0", "--json").json()
    assert rm["deleted_at"] is not None
    assert [v["version"] for v in cli("versions", "demo", "--json").json()["items"]] == ["1.0.0"]
    assert cli("get", "demo", "--json").json()["version"] == "1.0.0"
    every = cli("versions", "demo", "--all", "--json").json()["items"]
    assert [(v["version"], v["deleted_at"] is not None) for v in every] == [
        ("1.1.0", True),
        ("1.0.0", False),
    ]
    assert cli("get", "demo@1.1.0").code == 1
    assert cli("get", "demo@1.1.0", "--deleted", "--json").json()["version"] == "1.1.0"

    # When it is revived, it is latest again; --clear removes its tags
    assert cli("revive", "demo@1.1.0", "--json").json()["deleted_at"] is None
    assert cli("get", "demo", "--json").json()["version"] == "1.1.0"
    assert cli("tag", "demo@1.1.0", "--clear", "--json").json()["version_tags"] == []
    gone = cli("get", "demo@stable")
    assert gone.code == 1 and "error:" in gone.err


def test_cases_pages_with_cursor_and_all(cli: Cli) -> None:
    # Given a three-case version
    cli("register", DEMO_JSON)

    # When read two at a time
    first = cli("cases", "demo@1.0.0", "--limit", "2", "--json").json()
    rest = cli("cases", "demo@1.0.0", "--limit", "2", "--cursor", first["next_cursor"], "--json")

    # Then the pages join into the whole version, and --all pages through by itself
    ids = [c["id"] for c in first["items"]] + [c["id"] for c in rest.json()["items"]]
    assert ids == ["add-1", "capital-1", "repo-1"]
    assert rest.json()["next_cursor"] is None
    every = cli("cases", "demo", "--all", "--limit", "1", "--json").json()
    assert [c["id"] for c in every["items"]] == ids and every["next_cursor"] is None


def test_download_round_trip_keeps_the_content_digest(cli: Cli) -> None:
    # Given a version with inline text, binary and shared files
    reg = cli("register", DEMO_JSON, "--json").json()

    # When it is downloaded (default file name, and -o) and registered under another id
    default = cli("download", "demo", "--json").json()
    assert Path(cli.cwd / default["file"]).name == "demo-1.0.0.json"
    out = cli.cwd / "copy.json"
    assert cli("download", "demo@1.0.0", "-o", out).code == 0
    copy = cli("register", out, "--dataset", "copy", "--version", "7.0.0", "--json").json()

    # Then the copy has the same content digest, and its files read back the same
    assert copy["content_digest"] == reg["content_digest"] and copy["created"] is True
    doc = json.loads(out.read_text(encoding="utf-8"))
    files = doc["cases"][2]["files"]
    assert files["data/blob.bin"] == {"base64": "AAECAwQF/w=="}
    assert files["tests/test_app.py"] == {"text": "def test_ok():\n    assert True\n"}
    assert doc["shared_files"] == [{"dest": "README.md", "text": "# Shared notes\n"}]
    # and '-o -' writes the document itself to stdout
    assert json.loads(cli("download", "demo", "-o", "-").out)["id"] == "demo"


def test_validate_and_conflicts(cli: Cli, tmp_path: Path) -> None:
    # Given 1.0.0 registered, and another file claiming 1.0.0 with other content
    first = cli("register", DEMO_JSON, "--json").json()
    other = write(tmp_path / "other.json", demo_doc(description="something else"))

    # When the same file is validated, it is valid and would not conflict
    ok = cli("validate", DEMO_JSON, "--json").json()
    assert ok["valid"] is True and ok["would_conflict"] is False
    assert ok["content_digest"] == first["content_digest"]

    # When the other file is validated, it reports the conflict and exits 1
    clash = cli("validate", other, "--json")
    assert clash.code == 1 and json.loads(clash.out)["would_conflict"] is True
    assert "error:" in clash.err

    # And registering it fails with 1, naming both digests, and changes nothing
    reg = cli("register", other)
    assert reg.code == 1
    assert reg.err.startswith("error:") and first["content_digest"] in reg.err
    assert cli("get", "demo", "--json").json()["content_digest"] == first["content_digest"]
    # Under another label it registers fine
    assert cli("register", other, "--version", "2.0.0", "--json").json()["created"] is True


def test_files_without_id_or_version_take_them_from_options(cli: Cli) -> None:
    # Given a JSONL file of cases only
    # When it is registered without naming the dataset, that is a usage error
    missing = cli("register", CASES_JSONL)
    assert missing.code == 2 and "--dataset" in missing.err

    # When the id and a bump are given, it registers as 1.0.0
    reg = cli("register", CASES_JSONL, "--dataset", "q", "--bump", "patch", "--json").json()
    assert (reg["id"], reg["version"], reg["case_count"]) == ("q", "1.0.0", 3)


def test_a_jsonl_file_streams_into_the_version_a_whole_document_makes(
    cli: Cli, tmp_path: Path
) -> None:
    # Given 2,500 cases (more than one window) as JSON Lines, one of them invalid
    cases = [{"id": f"c{i:04d}", "inputs": {"user": f"q{i}"}} for i in range(2500)]
    bad = [*cases[:2300], {"id": "c2300", "inputs": {"nope": 1}}, *cases[2301:]]
    lines = tmp_path / "cases.jsonl"
    lines.write_text("".join(json.dumps(c) + "\n" for c in bad), encoding="utf-8")
    # When it is registered, the error names the case and nothing is registered
    run = cli("register", lines, "--dataset", "big", "--version", "1.0.0")
    assert run.code == 1 and "'c2300'" in run.err and "inputs" in run.err, run.err
    assert cli("ls", "--json").json()["items"] == []
    # When it is fixed, it registers as the same version the whole document gives
    lines.write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    streamed = cli("register", lines, "--dataset", "big", "--version", "1.0.0", "--json").json()
    doc = write(tmp_path / "big.json", {"id": "copy", "version": "1.0.0", "cases": cases})
    whole = cli("register", doc, "--json").json()
    assert streamed["case_count"] == 2500
    assert streamed["content_digest"] == whole["content_digest"]


def test_failed_commands_exit_1_with_a_clear_error(cli: Cli) -> None:
    cli("register", DEMO_JSON)
    cases: dict[str, tuple[list[str | Path], str]] = {
        "unknown dataset": (["get", "nope"], "no dataset 'nope'"),
        "unknown version": (["cases", "demo@9.9.9"], "no version demo@9.9.9"),
        "missing file": (["register", "nope.json"], "no such file"),
        "malformed JSON": (["register", BROKEN_JSON], "line 2 column 25"),
        "another tenant": (["get", "demo", "--tenant", "team-b"], "no dataset 'demo'"),
        "not the creator": (["rm", "demo@1.0.0", "--principal", "mallory"], "only the creator"),
        "shared needs admin": (["register", DEMO_JSON, "--tenant", "_shared"], "admin"),
    }
    for n, (what, (args, needle)) in enumerate(cases.items()):
        # The first as a process of its own (its exit code and streams), the rest in process
        run = cli(*map(str, args), process=n == 0)
        assert run.code == 1, f"{what}: exit {run.code}: {run.err}"
        assert run.err.startswith("error: ") and needle in run.err, f"{what}: {run.err}"
        assert run.out == "", what
    # An admin may delete another principal's version; the store is unchanged otherwise
    admin = cli("rm", "demo@1.0.0", "--principal", "ops", "--roles", "admin", "--json")
    assert admin.json()["deleted_by"] == "ops"


def test_usage_errors_exit_2(cli: Cli) -> None:
    cases: dict[str, list[str | Path]] = {
        "bad ref": ["get", "demo@@1"],
        "bad digest ref": ["get", "demo@sha256:abc"],
        "bad id": ["get", "-demo"],
        "tag without version": ["tag", "demo", "stable"],
        "rm of latest": ["rm", "demo@latest"],
        "tag without tags": ["tag", "demo@1.0.0"],
        "tags and --clear": ["tag", "demo@1.0.0", "x", "--clear"],
        "unknown bump": ["register", DEMO_JSON, "--bump", "huge"],
        "version and bump": ["register", DEMO_JSON, "--bump", "major", "--version", "2.0.0"],
        "unknown command": ["frobnicate"],
        "unknown option": ["ls", "--frob"],
        "missing argument": ["register"],
        "gc over http": ["gc", "--api", "http://127.0.0.1:9"],
        "not a URL": ["ls", "--api", "localhost:8000"],
    }
    assert cases
    for what, args in cases.items():
        run = cli(*args)
        assert run.code == 2, f"{what}: exit {run.code}: {run.err}"
        assert run.out == "", what


def test_global_options_go_before_the_command_too(cli: Cli) -> None:
    cli("register", DEMO_JSON, "--tenant", "team-a")
    listed = json.loads(cli("--json", "--tenant", "team-a", "ls").out)
    assert [d["id"] for d in listed["items"]] == ["demo"]
    # and from the environment
    env_listed = cli("ls", "--json", env={"CASESHELF_TENANT": "team-a"}).json()
    assert [d["id"] for d in env_listed["items"]] == ["demo"]
    assert cli("ls", "--json").json()["items"] == []


def test_gc_finds_nothing_on_a_clean_store_and_an_orphan_after_a_crash(
    cli: Cli, tmp_path: Path
) -> None:
    # Given a committed version
    cli("register", DEMO_JSON)
    clean = cli("gc", "--grace-hours", "0", "--json").json()
    assert clean["orphan_count"] == 0 and clean["referenced_count"] >= 3

    # And a stray pack, as a crashed registration would leave
    stray = tmp_path / "home" / "objects" / "t" / "local" / "packs" / ("0" * 64)
    stray.write_bytes(b'{"id":"x"}\n')

    # When gc lists, then deletes
    listed = cli("gc", "--grace-hours", "0", "--json").json()
    spared = cli("gc", "--json").json()  # the default grace period spares a fresh object
    deleted = cli("gc", "--grace-hours", "0", "--delete", "--json").json()

    # Then the stray pack alone is found, spared while fresh, and removed with --delete
    assert [o["key"] for o in listed["orphans"]] == ["t/local/packs/" + "0" * 64]
    assert spared["orphan_count"] == 0 and spared["fresh_count"] == 1
    assert deleted["deleted"] is True and deleted["orphan_count"] == 1
    assert not stray.exists()
    assert cli("cases", "demo", "--json").json()["items"][0]["id"] == "add-1"


# -- the local API over HTTP -------------------------------------------------------------------


@pytest.fixture
def api(tmp_path: Path) -> Iterator[str]:
    """The local dev server on a free port, over its own embedded store."""
    with dev_server(tmp_path / "server-home", tenant="local", principal="local") as server:
        yield server.url


def test_api_mode_talks_to_the_local_server(cli: Cli, api: str) -> None:
    # Given the local API and a CLI pointed at it
    def remote(*args: str | Path) -> Run:
        return cli(*args, "--api", api)

    # When the fixture is registered, tagged, deleted and revived over HTTP
    reg = remote("register", DEMO_JSON, "--json").json()
    assert reg["created"] is True and reg["case_count"] == 3
    assert remote("register", DEMO_JSON, "--json").json()["created"] is False
    tagged = remote("tag", "demo@1.0.0", "stable", "--json").json()
    assert tagged["version"]["version_tags"] == ["stable"]
    assert remote("get", "demo@stable", "--json").json()["content_digest"] == reg["content_digest"]
    page = remote("cases", "demo", "--limit", "2", "--json").json()
    assert len(page["items"]) == 2 and page["next_cursor"]
    assert len(remote("cases", "demo", "--all", "--json").json()["items"]) == 3
    assert remote("rm", "demo@1.0.0", "--json").json()["deleted_at"] is not None
    assert remote("ls", "--json").json()["items"][0]["latest"] is None
    assert remote("revive", "demo@1.0.0", "--json").json()["deleted_at"] is None

    # Then the embedded store of the CLI itself was never touched
    assert cli("ls", "--json").json()["items"] == []

    # And a download registers back to the same content digest
    out = cli.cwd / "dl.json"
    assert remote("download", "demo", "-o", out).code == 0
    copy = remote("register", out, "--dataset", "copy", "--json").json()
    assert copy["content_digest"] == reg["content_digest"]

    # And problem+json answers become `error: <detail>` with exit 1
    missing = remote("get", "nope")
    assert missing.code == 1 and missing.err.startswith("error: no dataset 'nope'")
    other = cli("get", "demo", "--api", api, "--tenant", "team-b")
    assert other.code == 1 and "no dataset 'demo'" in other.err
    clash = remote("register", write(cli.cwd / "x.json", demo_doc(description="changed")))
    assert clash.code == 1 and reg["content_digest"] in clash.err
    denied = cli("rm", "demo@1.0.0", "--api", api, "--principal", "mallory")
    assert denied.code == 1 and "only the creator" in denied.err


def test_tags_are_pointers_that_move_and_keep_their_history(cli: Cli, tmp_path: Path) -> None:
    # Given two versions, with stable and candidate on 1.1.0
    cli("register", DEMO_JSON)
    cli("register", write(tmp_path / "v2.json", demo_doc(description="v2")), "--bump", "minor")
    cli("tag", "demo@1.1.0", "stable", "candidate")
    # When stable is put on 1.0.0 (a rollback), the answer says where it moved from
    moved = cli("tag", "demo@1.0.0", "stable")
    assert moved.code == 0 and "stable moved 1.1.0 -> 1.0.0" in moved.out
    assert cli("get", "demo@stable", "--json").json()["version"] == "1.0.0"
    # And tagging 1.1.0 prod keeps its candidate tag
    cli("tag", "demo@1.1.0", "prod")
    versions = {
        v["version"]: v["version_tags"] for v in cli("versions", "demo", "--json").json()["items"]
    }
    assert versions == {"1.1.0": ["candidate", "prod"], "1.0.0": ["stable"]}
    # When candidate is removed, and the history is asked for
    assert "removed candidate" in cli("untag", "demo", "candidate").out
    board = cli("tags", "demo", "--json").json()
    assert board["tags"] == {"stable": "1.0.0", "prod": "1.1.0"}
    assert [(m["tag"], m["from_version"], m["to_version"]) for m in board["history"]] == [
        ("candidate", "1.1.0", None),
        ("prod", None, "1.1.0"),
        ("stable", "1.1.0", "1.0.0"),
        ("candidate", None, "1.1.0"),
        ("stable", None, "1.1.0"),
    ]
    shown = cli("tags", "demo", "--history")
    assert shown.code == 0 and "moves, newest first" in shown.out
    # And verify finds nothing wrong with the tags
    assert cli("verify", "demo", "--json").json()["ok"] is True
