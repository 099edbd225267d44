"""A dataset file larger than one request body is registered from the file: `caseshelf register`
and `cs.register(cases=path)` upload it (`POST /uploads`, kind `dataset`) and the server's job
reads it a window of cases at a time, on the embedded store and over HTTP alike. The limit is
lowered here so that small files take that way."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import caseshelf
from caseshelf.client import core, datasets
from caseshelf.domain.errors import BadRequest
from tests.helpers import dev_server, run_cli

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]


def cases(n: int, *, bad_at: int | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"id": f"q{i}", "inputs": {"user": f"what is {i} + {i}?"}, "tags": ["sum"]}
        for i in range(n)
    ]
    if bad_at is not None:
        out[bad_at]["inputs"] = "not an object"
    return out


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # the client's own limit, and the one the command line reads from `caseshelf.client.core`
    monkeypatch.setattr(datasets, "STREAM_FILE_BYTES", 1024)
    monkeypatch.setattr(core, "STREAM_FILE_BYTES", 1024)


@pytest.fixture(params=["embedded", "api"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    home = tmp_path / "home"
    if request.param == "embedded":
        yield {"home": home, "args": [], "client": caseshelf.connect(home=home)}
        return
    with dev_server(tmp_path / "server") as server:
        yield {"home": home, "args": ["--api", server.url], "client": caseshelf.connect(server.url)}


def test_a_large_file_registers_the_version_the_whole_document_makes(
    where: dict[str, Any], tmp_path: Path
) -> None:
    # Given a JSON Lines file over the limit, and the same cases as one document
    rows = cases(200)
    big = jsonl(tmp_path / "big.jsonl", rows)
    assert big.stat().st_size > datasets.STREAM_FILE_BYTES
    cs = where["client"]

    # When the CLI registers the file, and the client registers the document under another id
    got = run_cli(
        where["home"],
        "register",
        big,
        "--dataset",
        "big",
        "--version",
        "1.0.0",
        "--json",
        *where["args"],
    )
    whole = cs.register({"id": "whole", "version": "1.0.0", "cases": rows})

    # Then the file went as a file (the note says so) and made the same content
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)
    assert "registering it as a file" in got.stderr
    assert out["created"] is True and out["case_count"] == 200
    assert out["content_digest"] == whole.content_digest
    assert [c.id for c in cs.cases("big@1.0.0")] == [r["id"] for r in rows]

    # And the client's register(cases=path) takes the same way, idempotently
    again = cs.register("big", cases=big, version="1.0.0")
    assert again.created is False and again.content_digest == whole.content_digest


def test_a_bad_case_deep_in_a_large_file_names_it_and_registers_nothing(
    where: dict[str, Any], tmp_path: Path
) -> None:
    big = jsonl(tmp_path / "bad.jsonl", cases(300, bad_at=250))
    got = run_cli(
        where["home"], "register", big, "--dataset", "bad", "--version", "1.0.0", *where["args"]
    )
    assert got.returncode == 1
    assert "q250" in got.stderr and "inputs" in got.stderr, got.stderr
    with pytest.raises(BadRequest) as caught:
        where["client"].register("bad", cases=big, version="1.0.0")
    assert caught.value.fields.get("case_id") == "q250"
    assert list(where["client"].datasets()) == []


def test_validate_of_a_large_file_stores_nothing(where: dict[str, Any], tmp_path: Path) -> None:
    big = jsonl(tmp_path / "big.jsonl", cases(200))
    got = run_cli(
        where["home"],
        "validate",
        big,
        "--dataset",
        "v",
        "--version",
        "2.0.0",
        "--json",
        *where["args"],
    )
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["case_count"] == 200
    assert list(where["client"].datasets()) == []


def test_a_large_jsonl_without_an_id_or_version_is_a_usage_error(
    where: dict[str, Any], tmp_path: Path
) -> None:
    big = jsonl(tmp_path / "big.jsonl", cases(200))
    no_id = run_cli(where["home"], "register", big, "--version", "1.0.0", *where["args"])
    no_version = run_cli(where["home"], "register", big, "--dataset", "x", *where["args"])
    assert no_id.returncode == 2 and "--dataset" in no_id.stderr
    assert no_version.returncode == 2 and "--version" in no_version.stderr
