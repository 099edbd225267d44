"""Cases validated straight into their plain form (`validate_plain_cases`) against the models.

A registration takes the plain form the plain validator gives where it once read it back from
`Case` models (`cases_to_plain`). The two must agree on everything: the same bytes and digests
for what both accept, a refusal of what either refuses, and the models' own error for a refused
document (`parse_dataset`).
"""

from __future__ import annotations

import base64
import math
import random
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from caseshelf.domain.envelope import canonical_into, cases_to_plain, validate_plain_cases
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.identity import Identity
from caseshelf.domain.models import Case, DatasetVersionInput
from caseshelf.services.registry import (
    DatasetDocument,
    RegistryService,
    dataset_error,
    parse_dataset,
)
from tests.unit.test_domain_canonical import cases, json_values, with_defaults

pytestmark = pytest.mark.integration

PROPERTY = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ME = Identity("team-a", "alice")


def _model_plain(items: list[Any]) -> list[dict[str, Any]] | None:
    """The models' plain form of `items`, or None when the models refuse them."""
    try:
        return cases_to_plain([Case.model_validate(item) for item in items])
    except (ValidationError, BadRequest):  # a path validator raises BadRequest itself
        return None


def _plain(items: list[Any]) -> list[dict[str, Any]] | None:
    try:
        return validate_plain_cases(items)
    except (ValidationError, BadRequest):
        return None


def _records(plains: list[dict[str, Any]]) -> tuple[bytes, list[str], list[list[str]]]:
    records = bytearray()
    _, digests, tags = canonical_into(plains, records)
    return bytes(records), digests, tags


# Values a mutation plants: any JSON, and what the models refuse or convert.
odd_values = (
    json_values
    | st.sampled_from([math.nan, math.inf, 2**64, -(2**63) - 1, "", "a\x00b", "../x", "/abs"])
    | st.sampled_from([{}, [], {"ref": "a"}, {"ref": "../up"}, {"by_tool": {}}, {"kind": "repo"}])
    | st.sampled_from([1800, 1800.0, 0, -1, True, "1800", {"text": "x"}, {"base64": "eA=="}])
)


def _mutated(case: dict[str, Any], rnd: random.Random, value: Any, key: str) -> dict[str, Any]:
    """`case` with one place changed: a value replaced by `value`, or `key` added holding it,
    at a random depth."""
    out = orjson.loads(orjson.dumps(case))

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if node and rnd.random() < 0.6:
                k = rnd.choice(list(node))
                node[k] = walk(node[k])
            elif rnd.random() < 0.5 and node:
                node[rnd.choice(list(node))] = value
            else:
                node[key] = value
            return node
        if isinstance(node, list) and node and rnd.random() < 0.6:
            i = rnd.randrange(len(node))
            node[i] = walk(node[i])
            return node
        return value

    return walk(out)


# -- the plain form ---------------------------------------------------------------------------


@PROPERTY
@given(items=st.lists(cases, min_size=1, max_size=4), rnd=st.randoms(use_true_random=False))
def test_the_plain_validator_gives_the_models_plain_form_and_canonical_bytes(items, rnd):
    # Given cases, some with their defaults written out, keys shuffled and tags repeated
    raw = [with_defaults(c, rnd) if rnd.random() < 0.5 else c for c in items]
    # When they are validated into plain form, and into models read back
    plain = validate_plain_cases(raw)
    expected = _model_plain(raw)
    # Then both give the same plain form, the same canonical records and the same digests
    assert plain == expected
    assert _records(plain) == _records(expected)


@PROPERTY
@given(
    case=cases,
    value=odd_values,
    key=st.sampled_from(["extra", "id", "user", "ref", "kind", "tags", "text", "files"]),
    rnd=st.randoms(use_true_random=False),
)
def test_the_plain_validator_refuses_exactly_what_the_models_refuse(case, value, key, rnd):
    # Given a valid case changed in one place (a value replaced or a key added, anywhere)
    item = _mutated(case, rnd, value, key)
    # When both validate it
    plain, expected = _plain([item]), _model_plain([item])
    # Then both refuse it, or both accept it with the same plain form and canonical bytes
    assert (plain is None) == (expected is None)
    if plain is not None and expected is not None:
        assert plain == expected
        assert _records(plain) == _records(expected)


@pytest.mark.parametrize(
    "item",
    [
        "not an object",
        {"id": ""},
        {"id": "c", "timeout_sec": 0},
        {"id": "c", "inputs": {"tool_fixtures": {"ref": "a", "extra": 1}}},
        {"id": "c", "files": {"../etc/passwd": {"text": "x"}}},
        {"id": "c", "env": {"kind": "nope"}},
        {"id": "c", "metadata": {"x": math.nan}},
        {"id": "c", "network": {"mode": "public", "hosts": []}},
    ],
)
def test_each_refusal_of_the_models_is_one_of_the_plain_validator(item):
    with pytest.raises((ValidationError, BadRequest)):
        Case.model_validate(item)
    with pytest.raises((ValidationError, BadRequest)):
        validate_plain_cases([item])


def test_shorthands_and_file_entries_take_the_models_plain_form():
    # Given the path shorthands of memory seeds and tool fixtures, inline and stored files,
    # and defaults spelled out inside sub-objects
    items = [
        {
            "id": "s",
            "inputs": {"memory_seeds": "seeds/m.json", "tool_fixtures": "fx.json", "hitl": []},
            "env": {"kind": "repo", "source": {"git": "g", "ref": "HEAD"}, "setup": []},
            "network": {"mode": "public"},
            "resources": {"gpus": None},
            "files": {"a.txt": {"text": ""}, "b.bin": {"base64": "AA=="}},
            "tags": ["b", "a", "b"],
            "timeout_sec": 1800.0,
        },
        {"id": "t", "files": {"c": {"digest": "sha256:" + "0" * 64, "size": 0}}},
    ]
    # Then the plain validator gives what the models give
    assert validate_plain_cases(items) == _model_plain(items)
    assert validate_plain_cases(items)[0] == {
        "id": "s",
        "inputs": {"memory_seeds": {"ref": "seeds/m.json"}, "tool_fixtures": {"ref": "fx.json"}},
        "env": {"kind": "repo", "source": {"git": "g"}},
        "files": {"a.txt": {"text": ""}, "b.bin": {"base64": "AA=="}},
        "tags": ["a", "b"],
    }


# -- documents ----------------------------------------------------------------------------------


def _model_error(doc: dict[str, Any]) -> BadRequest:
    """The error the models give for a document (what `parse_dataset` always said)."""
    try:
        DatasetVersionInput.model_validate(doc)
    except ValidationError as exc:
        return dataset_error(exc, doc)
    except BadRequest as exc:  # a path validator's own
        return exc
    raise AssertionError("the models accept the document")


@PROPERTY
@given(
    items=st.lists(cases, min_size=1, max_size=4, unique_by=lambda c: c["id"]),
    value=odd_values,
    key=st.sampled_from(["extra", "id", "ref", "kind"]),
    head=st.sampled_from([{}, {"bump": "minor"}, {"id": "bad id"}, {"tags": "x"}]),
    rnd=st.randoms(use_true_random=False),
)
def test_a_refused_document_names_what_the_models_name(items, value, key, head, rnd):
    # Given a document whose head or one of whose cases may be changed into something invalid
    at = rnd.randrange(len(items))
    items[at] = _mutated(items[at], rnd, value, key)
    doc = {"id": "ds", "version": "1.0.0", "cases": items, **head}
    try:
        expected: BadRequest | None = _model_error(doc)
    except AssertionError:
        expected = None
    # When it is parsed
    if expected is None:
        # Then a valid one holds the models' plain form of its cases
        parsed = parse_dataset(doc)
        assert parsed.plain_cases == _model_plain(items)
        return
    with pytest.raises(BadRequest) as err:
        parse_dataset(doc)
    # Then the error is the models' own: its text, case id, index and field
    assert err.value.detail == expected.detail
    assert err.value.fields == expected.fields


def test_a_document_of_models_is_parsed_with_the_models():
    # Given a document whose cases are models already (a caller in this process)
    doc = {"id": "ds", "version": "1", "cases": [Case(id="a", tags=["y", "x"])]}
    # Then it is parsed, and its plain form is the models'
    assert parse_dataset(doc).plain_cases == [{"id": "a", "tags": ["x", "y"]}]


def test_the_cases_of_a_parsed_document_read_as_models():
    doc = {"id": "ds", "version": "1", "cases": [{"id": "a", "inputs": {"user": "hi"}}]}
    parsed = parse_dataset(doc)
    assert isinstance(parsed, DatasetDocument) and parsed.id == "ds"
    assert parsed.cases[0].inputs.user == "hi"
    assert parsed.meta.cases == []


def test_a_document_registers_as_the_same_version_by_either_path(tmp_path):
    # Given one document with inline and stored files, registered once from its plain form
    # (`parse_dataset`) and once from models (the HTTP body), as two datasets
    from caseshelf.adapters.localfs import LocalBlobStore
    from caseshelf.adapters.sqlite import SqliteIndex

    body = b"hello"
    cases_ = [
        {"id": "a", "inputs": {"user": "q"}, "files": {"x.txt": {"text": "hi"}}, "tags": ["t"]},
        {"id": "b", "files": {"y.bin": {"base64": base64.b64encode(body).decode()}}},
        {"id": "c", "expectations": {"ground_truth": 4}, "timeout_sec": 1800},
    ]
    registry = RegistryService(LocalBlobStore(tmp_path / "blobs"), SqliteIndex(tmp_path / "i.db"))
    doc = {"version": "1.0.0", "description": "d", "tags": ["z"], "cases": cases_}
    plain = registry.register(ME, parse_dataset({**doc, "id": "plain"}))
    models = registry.register(ME, DatasetVersionInput.model_validate({**doc, "id": "models"}))
    # Then both versions have the same content digest and the same records
    assert plain.record.content_digest == models.record.content_digest
    a = registry.list_cases(ME, "plain", "1.0.0", limit=10).items
    b = registry.list_cases(ME, "models", "1.0.0", limit=10).items
    assert a == b and [c["id"] for c in a] == ["a", "b", "c"]
    assert a[1]["files"]["y.bin"]["size"] == len(body)
