"""Request bodies that would change a value silently, or cost unbounded work, are 400
problem+json on every route that takes a body (the local server over real HTTP, every such route
of `docs/openapi.json`): invalid UTF-8, JSON nested ~1,000 deep, a key given twice. An integer
beyond 64 bits is refused by name, never rounded into another integer's digest."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import REPO_ROOT, DevServer, dev_server, http_call

pytestmark = pytest.mark.e2e


def body_routes() -> list[tuple[str, str]]:
    doc = json.loads((REPO_ROOT / "docs" / "openapi.json").read_text(encoding="utf-8"))
    out = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if isinstance(op, dict) and "requestBody" in op:
                concrete = path.replace("{id}", "demo").replace("{ref}", "1.0.0")
                out.append((method.upper(), concrete))
    return sorted(out)


ROUTES = body_routes()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    with dev_server(tmp_path_factory.mktemp("home")) as srv:
        doc = {"id": "demo", "version": "1.0.0", "cases": [{"id": "a", "inputs": {"user": "x"}}]}
        assert http_call(srv.url + "/datasets", "POST", doc).status == 201
        yield srv


def send(server: DevServer, method: str, path: str, raw: bytes) -> Any:
    got = http_call(
        server.url + path, method, raw=raw, headers={"Content-Type": "application/json"}
    )
    assert got.headers.get("Content-Type", "").startswith("application/problem+json"), got.body
    return got


@pytest.mark.parametrize(("method", "path"), ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
def test_invalid_utf8_deep_nesting_and_repeated_keys_are_400(
    server: DevServer, method: str, path: str
) -> None:
    bad_utf8 = send(server, method, path, b'{"id": "demo", "x": "\xff\xfe"}')
    assert bad_utf8.status == 400, bad_utf8.body
    assert "UTF-8" in bad_utf8.json["detail"]

    deep = send(server, method, path, b'{"x": ' + b"[" * 1000 + b"]" * 1000 + b"}")
    assert deep.status == 400, deep.body

    twice = send(server, method, path, b'{"id": "demo", "id": "other"}')
    assert twice.status == 400, twice.body
    assert "'id' is given twice" in twice.json["detail"]


def test_a_repeated_key_inside_a_case_names_the_case_and_the_object(server: DevServer) -> None:
    raw = (
        b'{"id": "demo", "version": "2.0.0", "cases": ['
        b'{"id": "a", "inputs": {"user": "x"}},'
        b'{"id": "b", "inputs": {"user": "first", "user": "second"}}]}'
    )
    got = send(server, "POST", "/datasets", raw)
    assert got.status == 400
    assert got.json["case_id"] == "b" and got.json["field"] == "/cases/1/inputs"
    assert got.json["key"] == "user"


@pytest.mark.parametrize(
    "number",
    ["18446744073709551616", "18446744073709551617", "-9223372036854775809", "-" + "9" * 30],
)
def test_an_integer_beyond_64_bits_is_refused_naming_the_case_and_field(
    server: DevServer, number: str
) -> None:
    raw = (
        '{"id": "demo", "version": "3.0.0", "cases": [{"id": "big", "inputs": {"user": "x"}, '
        f'"expectations": {{"ground_truth": {number}}}}}]}}'
    ).encode()
    for path in ("/datasets/validate", "/datasets"):
        got = send(server, "POST", path, raw)
        assert got.status == 400, got.body
        assert got.json["case_id"] == "big"
        assert "expectations" in got.json["field"]


def test_a_64_bit_integer_registers_and_reads_back_exactly(server: DevServer) -> None:
    top = 2**64 - 1
    raw = (
        '{"id": "ints", "version": "1.0.0", "cases": [{"id": "a", "inputs": {"user": "x"}, '
        f'"expectations": {{"ground_truth": {top}}}, "metadata": {{"low": {-(2**63)}}}}}]}}'
    ).encode()
    got = http_call(
        server.url + "/datasets", "POST", raw=raw, headers={"Content-Type": "application/json"}
    )
    assert got.status == 201, got.body
    case = http_call(server.url + "/datasets/ints/versions/1.0.0/cases").json["items"][0]
    assert case["expectations"]["ground_truth"] == top
    assert case["metadata"]["low"] == -(2**63)


def test_bodies_that_are_fine_still_register(server: DevServer) -> None:
    user = b'{"user": "a:b \\u00e9 x\\u003ay"}'
    raw = b'{"id": "fine", "version": "1.0.0", "cases": [{"id": "a", "inputs": ' + user + b"}]}"
    got = http_call(
        server.url + "/datasets", "POST", raw=raw, headers={"Content-Type": "application/json"}
    )
    assert got.status == 201, got.body


def test_a_task_archive_with_an_alias_bomb_is_a_400_not_a_hang(server: DevServer) -> None:
    import base64

    from caseshelf import connect
    from caseshelf.domain.errors import BadRequest, TooLarge
    from tests.integration.test_archive_bombs import alias_bomb_task_tar, tar_bomb

    body = {
        "archive_base64": base64.b64encode(alias_bomb_task_tar()).decode(),
        "image_template": "r/{id}",
        "dataset": "tb",
        "version": "1.0.0",
    }
    # The import is a job (202); the job fails with the 400 the archive stands for
    with connect(server.url, env={}) as cs:
        with pytest.raises(BadRequest) as refused:
            cs.import_tasks("terminal-bench", body, wait=120)
        assert "alias bomb" in str(refused.value)

        # And a 1 GiB member in a small .tar.bz2 is refused (413), not stored and served
        bomb = {**body, "archive_base64": base64.b64encode(tar_bomb("bz2")).decode()}
        bomb["filename"] = "tasks.tar.bz2"
        with pytest.raises(TooLarge) as too_large:
            cs.import_tasks("terminal-bench", bomb, wait=120)
        assert "limit for one file" in str(too_large.value)
    assert http_call(server.url + "/datasets/tb/versions").status == 404
