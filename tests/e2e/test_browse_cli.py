"""`caseshelf cases --search`, `stats`, `file` and `whoami`: what the web UI shows, from the
command line, on the embedded store and against the local API, with the API's answers."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import caseshelf
from tests.helpers import dev_server, run_cli

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]

DEMO_JSON = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "demo.json"


@pytest.fixture(params=["embedded", "api"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A store holding the demo fixture, and the CLI arguments that reach it."""
    home = tmp_path / "home"
    if request.param == "embedded":
        assert run_cli(home, "register", DEMO_JSON).returncode == 0
        yield {"home": home, "args": [], "client": caseshelf.connect(home=home)}
        return
    with dev_server(tmp_path / "server") as server:
        api = server.url
        assert run_cli(home, "register", DEMO_JSON, "--api", api).returncode == 0
        yield {"home": home, "args": ["--api", api], "client": caseshelf.connect(api)}


def cli(where: dict[str, Any], *args: Any) -> Any:
    got = run_cli(where["home"], *args, *where["args"])
    assert got.returncode == 0, got.stderr
    return got


def test_search_finds_cases_by_text_id_and_tag_as_the_api_does(where: dict[str, Any]) -> None:
    # When the demo version is searched by text, id and tag
    by_text = json.loads(cli(where, "cases", "demo", "--search", "FRANCE", "--json").stdout)
    by_id = json.loads(cli(where, "cases", "demo", "-q", "add", "--by", "id", "--json").stdout)
    by_tag = json.loads(cli(where, "cases", "demo", "-q", "code", "--by", "tag", "--json").stdout)
    every = [
        json.loads(line)["id"]
        for line in cli(where, "cases", "demo", "-q", "e", "--all", "--jsonl").stdout.splitlines()
    ]

    # Then each page holds the matches the client finds (not case-sensitive), and says how
    # far it searched
    assert [c["id"] for c in by_text["items"]] == ["capital-1"]
    assert [c["id"] for c in by_id["items"]] == ["add-1"]
    assert [c["id"] for c in by_tag["items"]] == ["repo-1"]
    assert by_text["case_count"] == 3 and by_text["scanned_to"] == 3
    assert every == [c.id for c in where["client"].search("demo", "e")]


def test_a_search_page_names_the_command_that_goes_on(where: dict[str, Any]) -> None:
    got = cli(where, "cases", "demo", "-q", "-", "--by", "id", "--limit", "1")
    # The hint keeps the search, and --api where there is one
    assert "--search - --by id --cursor " in got.stderr
    assert got.stderr.rstrip().endswith(" ".join(where["args"]))


def test_stats_are_the_apis_numbers(where: dict[str, Any]) -> None:
    got = json.loads(cli(where, "stats", "demo", "--json").stdout)
    assert got == where["client"].stats("demo").model_dump(mode="json")
    assert got["case_count"] == 3 and {t["tag"] for t in got["tags"]} == {"math", "geo", "code"}
    table = cli(where, "stats", "demo").stdout
    assert "cases per tag" in table and "README.md" in table


def test_file_writes_the_body_the_digest_names(where: dict[str, Any], tmp_path: Path) -> None:
    # Given the digest of a companion file of a case
    (repo,) = [c for c in where["client"].cases("demo", raw=True) if c["id"] == "repo-1"]
    digest = repo["files"]["tests/test_app.py"]["digest"]

    # When it is fetched to stdout and to a file
    out = cli(where, "file", "demo", digest).stdout.encode()
    target = tmp_path / "test_app.py"
    cli(where, "file", "demo", digest, "-o", target)

    # Then both are the body with that digest, and no partial file is left
    assert "sha256:" + hashlib.sha256(out).hexdigest() == digest
    assert target.read_bytes() == out
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []


def test_file_refuses_an_unknown_or_malformed_digest(where: dict[str, Any]) -> None:
    unknown = run_cli(where["home"], "file", "demo", "sha256:" + "0" * 64, *where["args"])
    assert unknown.returncode == 1 and "no file sha256:000" in unknown.stderr
    malformed = run_cli(where["home"], "file", "demo", "nope", *where["args"])
    assert malformed.returncode == 1 and "digest" in malformed.stderr


def test_whoami_is_the_apis_me(where: dict[str, Any]) -> None:
    got = json.loads(cli(where, "whoami", "--json").stdout)
    assert got == where["client"].me().model_dump(mode="json")
    admin = json.loads(cli(where, "whoami", "--roles", "admin", "--json").stdout)
    assert admin["admin"] is True and admin["roles"] == ["admin"]
