"""The package's JSON parser keeps every value as written: what orjson (or the standard library)
writes reads back equal, a key given twice is always refused, and a long integer stays exact."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caseshelf.domain.errors import BadRequest
from caseshelf.domain.strictjson import MAX_DEPTH, loads, parsed_exactly

pytestmark = pytest.mark.unit

keys = st.text(alphabet=st.characters(codec="utf-8"), max_size=6)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()  # beyond 64 bits too
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
)
values = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(keys, kids, max_size=4),
    max_leaves=25,
)


@given(values, st.booleans())
@settings(max_examples=150, deadline=None)
def test_what_json_writes_reads_back_equal(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert loads(text) == value
    assert loads(text.encode()) == value


@given(st.dictionaries(keys, values, min_size=1, max_size=4), st.data())
@settings(max_examples=100, deadline=None)
def test_a_key_given_twice_is_always_refused(obj: dict[str, Any], data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(obj)))
    body = json.dumps(obj)[:-1] + ", " + json.dumps(key) + ": " + json.dumps(data.draw(values))
    doc = '{"cases": [{"id": "c1", "inputs": ' + body + "}}]}"
    with pytest.raises(BadRequest) as err:
        loads(doc)
    assert err.value.fields["key"] == key
    assert err.value.fields["case_id"] == "c1"
    assert err.value.fields["field"] == "/cases/0/inputs"


EDGES = [-(2**63) - 2, -(2**63) - 1, -(2**63), -(10**18), 10**18, 2**63, 2**64 - 1, 2**64]


@given(st.sampled_from(EDGES) | st.integers(-(2**66), 2**66), st.sampled_from(EDGES))
@settings(max_examples=150, deadline=None)
def test_every_integer_reads_back_as_that_integer(n: int, edge: int) -> None:
    # Given integers on both sides of the range orjson reads exactly (-2**63 .. 2**64 - 1)
    raws = [f'{{"n": {n}}}'.encode(), f"[{edge}, {n}]".encode()]
    # Then each document reads back as written, an integer, never a float near it
    assert loads(raws[0]) == {"n": n} and type(loads(raws[0])["n"]) is int
    assert loads(raws[1]) == [edge, n] and all(type(v) is int for v in loads(raws[1]))
    # And a batch is taken as orjson read it only when orjson read it exactly
    values = [orjson.loads(r) for r in raws]
    if parsed_exactly(raws, values):
        assert values == [{"n": n}, [edge, n]]
        assert type(values[0]["n"]) is int and all(type(v) is int for v in values[1])


def test_integers_beyond_64_bits_stay_distinct() -> None:
    a, b = loads("18446744073709551616"), loads("18446744073709551617")
    assert (a, b) == (2**64, 2**64 + 1) and orjson.loads("18446744073709551617") == float(a)


@pytest.mark.parametrize(
    "raw", [b'{"a": "\xff"}', b"[" * 1000 + b"]" * 1000, b"[NaN]", b'{"a": 1,}', b"\xef\xbb"]
)
def test_what_is_not_json_is_a_bad_request(raw: bytes) -> None:
    with pytest.raises(BadRequest):
        loads(raw)


def test_depth_is_bounded_where_canonical_json_can_be_written() -> None:
    ok = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert loads(ok) is not None and orjson.dumps(loads(ok))
    with pytest.raises(BadRequest, match="nested deeper"):
        loads("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))


def test_a_batch_of_lines_is_checked_at_once() -> None:
    lines = [b'{"a": 1}', b'{"b": "x:y"}']
    assert parsed_exactly(lines, [orjson.loads(x) for x in lines])
    twice = [b'{"a": 1, "a": 2}']
    assert not parsed_exactly(twice, [orjson.loads(x) for x in twice])
    long = [b'{"a": 123456789012345678901}']
    assert not parsed_exactly(long, [orjson.loads(x) for x in long])
