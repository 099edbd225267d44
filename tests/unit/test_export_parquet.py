"""Parquet rows built by Arrow from the canonical records (`domain.export_parquet`) hold exactly
the values of the per-case path (`row_of`), or are declined and left to it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caseshelf.domain.canonical import canonical_json
from caseshelf.domain.export_formats import _companions, parquet_schema, row_of
from caseshelf.domain.export_parquet import arrow_rows

pytestmark = pytest.mark.unit


def expected_rows(cases):
    return [row_of(c, _companions(c, [])) for c in cases]


def rows_of(cases):
    table = arrow_rows(b"\n".join(canonical_json(c) for c in cases), len(cases), parquet_schema())
    return None if table is None else table.to_pylist()


def gsm8k(i):
    return {
        "id": f"test-{i:06d}",
        "inputs": {"user": f'Janet has {i} "ducks"\\ and a caf\u00e9 \U0001f986?'},
        "expectations": {"ground_truth": str(i * 2)},
        "metadata": {"row": i, "source_index": -i, "ok": i % 2 == 0},
        "tags": ["gsm8k", "math"] if i % 3 else ["gsm8k"],
    }


def test_row_benchmark_cases_are_built_by_arrow_with_the_values_of_row_of():
    # Given row-benchmark cases (text prompt, text answer, integer and boolean metadata, tags),
    # some without tags, expectations or metadata
    cases = [gsm8k(i) for i in range(50)]
    cases += [{"id": "bare"}, {"id": "no-tags", "inputs": {"user": "q"}}]
    cases[1]["metadata"] = {"row": 1, "source_index": -1, "ok": False}
    # When Arrow builds their rows
    got = rows_of(cases)
    # Then it does (the fast path is taken), with exactly row_of's values
    assert got is not None
    assert got == expected_rows(cases)


def test_control_characters_and_nested_values_are_written_as_orjson_writes_them():
    text = "".join(chr(c) for c in range(0x20)) + '"\\/\u2028\x7f end'
    cases = [
        {
            "id": f"c{i}",
            "inputs": {"user": text, "system": "be brief", "parts": ["a\nb", text]},
            "expectations": {"details": {"choices": ["x", "y"], "n": [1, -2]}},
            "metadata": {"nested": {"deep": {"k": text}}, "flags": [True, False], "\u00e9": 1},
        }
        for i in range(3)
    ]
    got = rows_of(cases)
    assert got is not None
    assert got == expected_rows(cases)


def test_keys_are_ordered_as_orjson_orders_them():
    keys = ["\uffff", "\U00010000", "Z", "a", "\u00e9", "", "a b", 'a"b']
    cases = [{"id": f"k{i}", "metadata": {k: i for k in keys}} for i in range(3)]
    got = rows_of(cases)
    assert got is not None
    assert got == expected_rows(cases)


def test_a_window_with_very_many_escapes_gets_every_replacement():
    cases = [
        {"id": f"q{i}", "inputs": {"user": 'say "hi"\t' * 40 + ("\x01" if i == 99 else "")}}
        for i in range(100)
    ]
    got = rows_of(cases)
    assert got is not None
    assert got == expected_rows(cases)


@pytest.mark.parametrize(
    "odd",
    [
        {"id": "f", "metadata": {"score": 0.5}},  # a float: Arrow writes its text its own way
        {"id": "n", "metadata": {"row": None}},  # a null, read like a missing key
        {"id": "m", "metadata": {"only_here": 1}},  # a key the other cases lack
        {"id": "t", "metadata": {"when": "2024-01-02T03:04:05"}},  # read as a timestamp
        {"id": "l", "metadata": {"rows": [{"a": 1}]}},  # a list of objects
        {"id": "x", "inputs": {"user": ["two", "turns"]}},  # one key, two kinds of value
        {"id": "e", "image": "python:3.12"},  # an environment
        {"id": "g", "graders": [{"kind": "exact"}]},
        {"id": "files", "files": {"a.txt": {"digest": "sha256:" + "1" * 64, "size": 1}}},
    ],
)
def test_a_window_arrow_cannot_write_exactly_is_left_to_the_per_case_path(odd):
    cases = [gsm8k(i) for i in range(3)] + [odd]
    got = rows_of(cases)
    assert got is None or got == expected_rows(cases)


_text = st.text(st.characters(codec="utf-8"), max_size=12)
_leaf = st.one_of(_text, st.booleans(), st.integers(-(2**63), 2**63 - 1))
_value = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.lists(st.one_of(_text, st.integers(-5, 5)), max_size=3),
        st.dictionaries(_text, inner, max_size=3),
    ),
    max_leaves=8,
)


@settings(max_examples=75, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"inputs": st.dictionaries(_text, _value, max_size=3)},
            optional={
                "metadata": st.dictionaries(_text, _value, max_size=3),
                "tags": st.lists(_text, max_size=3),
                "expectations": st.fixed_dictionaries({"ground_truth": _value}),
            },
        ),
        min_size=1,
        max_size=4,
    )
)
def test_whatever_the_values_arrow_gives_row_of_or_declines(shapes):
    cases = [{"id": f"case-{i}", **shape} for i, shape in enumerate(shapes)]
    cases = [{k: v for k, v in c.items() if v not in ({}, [])} for c in cases]
    got = rows_of(cases)
    assert got is None or got == expected_rows(cases)
