"""`caseshelf subset` and `caseshelf diff` as subprocesses: on the embedded store, and with
`--api URL` against the local server (routes from the template, the same handlers)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import dev_server, run_cli

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]


def cli(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(home, *args, cwd=cwd)


def dataset(version: str, cases: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"id": "qa", "version": version, "cases": cases, **extra}


def case(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"c{i}",
        "inputs": {"user": f"q{i}"},
        "tags": ["odd" if i % 2 else "even"],
        **extra,
    }


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "v1.json").write_text(json.dumps(dataset("1.0.0", [case(i) for i in range(6)])))
    v2 = [case(i) for i in range(1, 6)] + [case(7)]
    v2[0] = case(1, timeout_sec=60)
    (tmp_path / "v2.json").write_text(json.dumps(dataset("1.1.0", v2, description="two")))
    return tmp_path


def test_subset_and_diff_on_the_embedded_store(work: Path) -> None:
    home = work / "home"
    assert cli(home, work, "register", "v1.json").returncode == 0
    assert cli(home, work, "register", "v2.json").returncode == 0

    # subset: ids on stdout, the stamp on stderr
    got = cli(home, work, "subset", "qa@1.0.0", "--tags", "odd", "--limit", "2")
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["c1", "c3"]
    assert "selected 2 of 6" in got.stderr

    got = cli(home, work, "subset", "qa@1.0.0", "--sample", "3", "--seed", "9", "--json")
    out = json.loads(got.stdout)
    assert out["stamp"]["selected"] == 3 and out["stamp"]["seed"] == 9
    again = json.loads(
        cli(home, work, "subset", "qa@1.0.0", "--sample", "3", "--seed", "9", "--json").stdout
    )
    assert again["case_ids"] == out["case_ids"]

    got = cli(home, work, "subset", "qa", "--ids", "c1,nope")
    assert got.returncode == 1 and "nope" in got.stderr

    # diff: a git-like view, and the wire answer with --json
    got = cli(home, work, "diff", "qa@1.0.0", "1.1.0")
    assert got.returncode == 0, got.stderr
    assert "+ c7" in got.stdout and "- c0" in got.stdout and "/timeout_sec" in got.stdout
    assert "1 added, 1 removed, 1 changed, 4 unchanged" in got.stdout
    out = json.loads(cli(home, work, "diff", "qa@1.0.0", "qa@1.1.0", "--json").stdout)
    # The default timeout is left out of the canonical form, so the old side is absent.
    assert out["changed"] == [{"id": "c1", "changes": [{"path": "/timeout_sec", "after": 60}]}]
    got = cli(home, work, "diff", "qa@1.0.0", "1.1.0", "--summary-only", "--json")
    summary = json.loads(got.stdout)
    assert summary["changed"] is None and summary["summary"]["added"] == 1


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with dev_server(tmp_path / "srv") as srv:
        yield srv.url


def test_subset_register_as_and_diff_over_http(work: Path, server: str) -> None:
    home = work / "unused-home"
    for doc in ("v1.json", "v2.json"):
        assert cli(home, work, "--api", server, "register", doc).returncode == 0
    got = cli(
        home,
        work,
        "--api",
        server,
        "subset",
        "qa@1.1.0",
        "--tags",
        "odd",
        "--register-as",
        "qa-odd@1.0.0",
        "--json",
    )
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)
    assert out["registered"]["id"] == "qa-odd" and out["registered"]["created"] is True
    # The derived version diffs against its parent: only the cases left out are "removed".
    got = cli(home, work, "--api", server, "diff", "qa@1.1.0", "qa-odd@1.0.0", "--json")
    diff = json.loads(got.stdout)
    assert diff["summary"] == {"added": 0, "removed": 2, "changed": 0, "unchanged": 4}
    assert diff["candidate"]["id"] == "qa-odd"


def test_diff_streams_pages_as_json_lines_and_as_a_table(work: Path, server: str) -> None:
    # Given v1 and v2 over the API: 1 changed, 1 added, 1 removed (3 entries)
    home = work / "unused-home"
    for doc in ("v1.json", "v2.json"):
        assert cli(home, work, "--api", server, "register", doc).returncode == 0
    # When streamed a page of one entry at a time as JSON Lines
    got = cli(
        home, work, "--api", server, "diff", "qa@1.0.0", "1.1.0", "--jsonl", "--page-size", "1"
    )
    assert got.returncode == 0, got.stderr
    lines = [json.loads(line) for line in got.stdout.splitlines()]
    # Then a head line, then every entry once, changed first, then added, then removed
    assert lines[0]["kind"] == "diff"
    assert lines[0]["summary"] == {"added": 1, "removed": 1, "changed": 1, "unchanged": 4}
    assert [(d["kind"], d["id"]) for d in lines[1:]] == [
        ("changed", "c1"),
        ("added", "c7"),
        ("removed", "c0"),
    ]
    assert lines[1]["changes"] == [{"path": "/timeout_sec", "after": 60}]
    # And the table, read in pages of one, shows each entry once and the summary once
    got = cli(home, work, "--api", server, "diff", "qa@1.0.0", "1.1.0", "--page-size", "1")
    assert got.returncode == 0, got.stderr
    assert got.stdout.count("+ c7") == 1 and got.stdout.count("- c0") == 1
    assert got.stdout.count("diff qa@1.0.0") == 1
    assert got.stdout.count("1 added, 1 removed, 1 changed, 4 unchanged") == 1
    # And --json joins the pages into the one document it always printed
    out = json.loads(cli(home, work, "--api", server, "diff", "qa@1.0.0", "1.1.0", "--json").stdout)
    assert [b["id"] for b in out["added"]] == ["c7"] and out["next_cursor"] is None
