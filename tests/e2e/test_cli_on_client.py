"""The CLI as a layer on the Python client, as a subprocess: streamed `cases --all`, the hints
that keep `--api`, and `serve` on a taken port."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import orjson
import pytest

import caseshelf
from tests.helpers import dev_server, run_cli

pytestmark = pytest.mark.e2e

CASES = [{"id": f"k{i:03d}", "inputs": {"user": f"question {i}"}} for i in range(25)]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    with caseshelf.connect(home=home) as cs:
        cs.register("many", cases=CASES, version="1.0.0")
    return home


def test_cases_all_streams_json_and_json_lines(home: Path, tmp_path: Path) -> None:
    # When every case is asked for in small pages, as JSON and as JSON Lines
    doc = run_cli(home, "cases", "many", "--all", "--limit", "4", "--json", cwd=tmp_path)
    lines = run_cli(home, "cases", "many@1.0.0", "--all", "--jsonl", cwd=tmp_path)
    # Then both hold every case in order, the JSON one as the {items, next_cursor} document
    assert doc.returncode == 0, doc.stderr
    assert json.loads(doc.stdout) == {"items": CASES, "next_cursor": None}
    assert lines.returncode == 0, lines.stderr
    assert [orjson.loads(x) for x in lines.stdout.splitlines()] == CASES
    # And --jsonl needs --all
    alone = run_cli(home, "cases", "many", "--jsonl", cwd=tmp_path)
    assert alone.returncode == 2


def test_the_cursor_hint_keeps_the_api(home: Path, tmp_path: Path) -> None:
    with dev_server(home, tenant="local", principal="local") as srv:
        # When one page is shown from the API
        got = run_cli(tmp_path / "other", "cases", "many", "--limit", "10", "--api", srv.url)
        assert got.returncode == 0, got.stderr
        # Then the hint for the next page is a command that reaches the same API
        hint = next(line for line in got.stderr.splitlines() if "--cursor" in line)
        assert hint.startswith("more: caseshelf cases many --cursor ")
        assert hint.endswith(f"--api {srv.url}")
        cursor = hint.split("--cursor ")[1].split()[0]
        nxt = run_cli(
            tmp_path / "other", "cases", "many", "--cursor", cursor, "--api", srv.url, "--json"
        )
        assert [c["id"] for c in json.loads(nxt.stdout)["items"]][:1] == ["k010"]


def test_serve_on_a_taken_port_names_it(tmp_path: Path) -> None:
    # Given a port that something else holds
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # When the server is asked to listen there
        got = run_cli(tmp_path / "h", "serve", "--port", str(port), timeout=120, process=True)
    # Then it fails with one line naming the port, no traceback
    assert got.returncode == 1
    assert f"error: port {port} on 127.0.0.1 is already in use" in got.stderr
    assert "Traceback" not in got.stderr


def test_register_api_over_the_body_limit_uploads_and_download_streams(tmp_path: Path) -> None:
    # Given the local server with a small request limit, and a dataset file larger than it
    big = [{"id": f"u{i}", "inputs": {"user": "z" * 300}} for i in range(30)]
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"".join(orjson.dumps(c) + b"\n" for c in big))
    direct = run_cli(
        tmp_path / "direct", "register", str(path), "--dataset", "big", "--bump", "minor", "--json"
    )
    assert direct.returncode == 0, direct.stderr
    with dev_server(tmp_path / "srv", max_body_bytes=4000) as srv:
        # When it is registered with --api
        got = run_cli(
            tmp_path / "cli",
            "register",
            str(path),
            "--dataset",
            "big",
            "--bump",
            "minor",
            "--api",
            srv.url,
            "--json",
        )
        # Then it went through an upload (said on stderr) and registered the same content
        assert got.returncode == 0, got.stderr
        assert "over the API's request limit: uploading" in got.stderr
        out, expected = json.loads(got.stdout), json.loads(direct.stdout)
        assert (out["version"], out["created"]) == ("1.0.0", True)
        assert out["content_digest"] == expected["content_digest"]
        # And a bad case in such a file fails naming the case and field, registering nothing
        bad = [*big[:10], {**big[10], "tags": "oops"}, *big[11:]]
        path.write_bytes(b"".join(orjson.dumps(c) + b"\n" for c in bad))
        failed = run_cli(
            tmp_path / "cli",
            "register",
            str(path),
            "--dataset",
            "bad",
            "--version",
            "1.0.0",
            "--api",
            srv.url,
        )
        assert failed.returncode == 1
        assert "error: case 'u10': tags:" in failed.stderr
    # And downloading from the embedded store, to stdout, streams the same document
    doc = run_cli(tmp_path / "direct", "download", "big@1.0.0", "-o", "-")
    assert doc.returncode == 0, doc.stderr
    assert [c["id"] for c in orjson.loads(doc.stdout)["cases"]] == [c["id"] for c in big]


def test_ls_on_an_empty_store_imports_neither_rich_nor_boto3_and_takes_options_anywhere(
    home: Path, tmp_path: Path
) -> None:
    # When `ls` runs on an empty embedded store, its imports traced
    empty = run_cli(tmp_path / "empty", "ls", env={"PYTHONPROFILEIMPORTTIME": "1"}, process=True)
    # Then it says so, having imported neither rich (nothing to draw) nor boto3
    assert empty.returncode == 0, empty.stderr
    assert "no datasets" in empty.stderr
    imported = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in empty.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "caseshelf" in imported
    assert not imported & {"rich", "boto3"}, imported & {"rich", "boto3"}
    # And with options, before or after the command, it answers what the API lists
    listed = run_cli(home, "--json", "ls", "--limit=5", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert [d["id"] for d in json.loads(listed.stdout)["items"]] == ["many"]
    # And a table when asked without --json (rich, once there is something to draw)
    table = run_cli(home, "ls", cwd=tmp_path)
    assert table.returncode == 0 and "many" in table.stdout and "1.0.0" in table.stdout
    # And help and usage errors are typer's, as for every command
    assert "--shared" in run_cli(home, "ls", "--help").stdout
    bad = run_cli(home, "ls", "--limit", "0")
    assert bad.returncode == 2 and "--limit" in bad.stderr
    assert run_cli(home, "ls", "--bogus").returncode == 2
    # And CASESHELF_API, as typer reads it, sends it to the API
    with dev_server(home, tenant="local", principal="local") as srv:
        remote = run_cli(tmp_path / "other", "ls", "--json", env={"CASESHELF_API": srv.url})
        assert remote.returncode == 0, remote.stderr
        assert [d["id"] for d in json.loads(remote.stdout)["items"]] == ["many"]
