"""The CLI's and the client's pure pieces: ID@REF parsing, problem+json answers turned back into
domain errors, request building of the HTTP transport, and server-given file names."""

from __future__ import annotations

import pytest
import typer

from caseshelf.cli.registry import parse_ref, parse_version
from caseshelf.client import refs
from caseshelf.client.core import safe_filename
from caseshelf.client.transport import Http, Request, problem_error
from caseshelf.domain import models
from caseshelf.domain.errors import BadRequest, Conflict, Forbidden, NotFound, TooLarge

pytestmark = pytest.mark.integration

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("demo", ("demo", "latest")),
        ("demo@1.2.0", ("demo", "1.2.0")),
        ("demo@stable", ("demo", "stable")),
        ("demo@latest", ("demo", "latest")),
        (f"demo@{DIGEST}", ("demo", DIGEST)),
        ("a.b_c-1@v2024.05", ("a.b_c-1", "v2024.05")),
    ],
)
def test_refs_parse(text: str, expected: tuple[str, str]) -> None:
    assert parse_ref(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "@1.0.0", "-demo", "demo@", "demo@@1", "demo@1@2", "demo@sha256:abc", "de mo", "demo@a/b"],
)
def test_bad_refs_are_usage_errors(text: str) -> None:
    with pytest.raises(typer.BadParameter):
        parse_ref(text)


@pytest.mark.parametrize("text", ["demo", "demo@latest", f"demo@{DIGEST}"])
def test_changes_need_an_explicit_label(text: str) -> None:
    with pytest.raises(typer.BadParameter, match="name the version label"):
        parse_version(text)
    assert parse_version("demo@1.0.0") == ("demo", "1.0.0")


@pytest.mark.parametrize(
    ("status", "cls"),
    [(400, BadRequest), (403, Forbidden), (404, NotFound), (409, Conflict), (413, TooLarge)],
)
def test_problem_answers_become_domain_errors(status: int, cls: type) -> None:
    # Given a problem+json body with a helpful extra field
    body = (
        b'{"type":"about:blank","title":"x","status":%d,"detail":"it broke","digests":["d1"]}'
        % status
    )
    # When it is turned into an error
    err = problem_error(status, body)
    # Then the class follows the status, the detail is the message, extras are kept
    assert type(err) is cls
    assert err.detail == "it broke" and err.fields == {"digests": ["d1"]}


def test_non_problem_answers_still_say_what_happened() -> None:
    gateway = problem_error(401, b'{"message":"Unauthorized"}', "Unauthorized")
    assert gateway.detail == "Unauthorized" and getattr(gateway, "status", None) == 401
    html = problem_error(502, b"<html>bad gateway</html>", "Bad Gateway")
    assert html.detail.startswith("HTTP 502 Bad Gateway: <html>bad gateway")
    empty = problem_error(500, b"", "Internal Server Error")
    assert empty.detail == "HTTP 500 Internal Server Error"


def test_http_transport_builds_urls_and_sends_identity_only_when_asked() -> None:
    plain = Http("http://127.0.0.1:8000/", token="s3cr3t")
    req = Request("GET", ("datasets", "demo", "versions", DIGEST), {"a": True, "b": None, "c": 5})
    assert plain.url(req) == (
        "http://127.0.0.1:8000/datasets/demo/versions/sha256%3A" + "ab" * 32 + "?a=true&c=5"
    )
    assert not any(h.startswith("X-Caseshelf") for h in plain._headers)
    assert "s3cr3t" not in repr(plain) and "s3cr3t" not in str(plain._headers)
    who = Http("https://api.example.com/prod", tenant="t1", principal="p", roles=("admin",))
    assert who._headers["X-Caseshelf-Tenant"] == "t1"
    assert who._headers["X-Caseshelf-Roles"] == "admin"
    with pytest.raises(BadRequest):
        Http("file:///etc/passwd")


def test_the_client_parses_refs_by_the_models_patterns() -> None:
    # The client repeats the patterns so that parsing a ref needs no pydantic: they must agree
    assert refs.DATASET_ID_PATTERN == models.DATASET_ID_PATTERN
    assert refs.LABEL_PATTERN == models.LABEL_PATTERN
    assert refs.DIGEST_PATTERN == models.DIGEST_PATTERN
    with pytest.raises(BadRequest, match="name the version label"):
        refs.parse_version("demo@latest")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("demo-1.0.0.json", "demo-1.0.0.json"),
        ("../etc/passwd", "fallback.json"),
        ("a/b.json", "fallback.json"),
        (".bashrc", "fallback.json"),
        ("", "fallback.json"),
        (None, "fallback.json"),
    ],
)
def test_server_file_names_never_leave_the_directory(given: object, expected: str) -> None:
    assert safe_filename(given, "fallback.json") == expected


def test_the_command_table_names_every_module_s_commands() -> None:
    # A run loads only the module of the command it names: the table must say where each is
    import importlib

    from caseshelf.cli import COMMAND_MODULES, COMMANDS

    declared: dict[str, str] = {}
    for name in COMMAND_MODULES:
        app = typer.Typer()
        importlib.import_module(f"caseshelf.cli.{name}").register_commands(app)
        for cmd in app.registered_commands:
            declared[cmd.name or ""] = name
        for group in app.registered_groups:
            declared[group.name or ""] = name
    assert declared == COMMANDS


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["ls"], "ls"),
        (["--json", "--api", "http://x", "get", "a@1"], "get"),
        (["--tenant", "t", "--roles", "admin", "recipes", "ls"], "recipes"),
        (["--api=http://x", "cases", "a"], "cases"),
        (["--help"], None),
        ([], None),
    ],
)
def test_a_run_finds_the_command_it_names(argv: list[str], name: str | None) -> None:
    from caseshelf.cli import command_name

    assert command_name(argv) == name
