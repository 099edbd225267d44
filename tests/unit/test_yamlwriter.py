"""The export's own YAML writer: whatever it writes reads back, through PyYAML's safe loader
(YAML 1.1), the package's bounded loader and ruamel.yaml's (YAML 1.2, as Go's yaml.v3 reads it),
to the value it was given; what it cannot write it leaves to PyYAML."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from caseshelf.domain.boundedyaml import load_yaml
from caseshelf.domain.export import render_yaml
from caseshelf.domain.yamlwriter import MAX_KEY_CHARS, dump_plain_yaml

pytestmark = pytest.mark.unit

YAML12 = YAML(typ="safe", pure=True)

# The strings most likely to be misread: YAML's words and indicators, numbers, dates, line
# breaks of every kind, characters a stream refuses raw, and any other text.
TRICKY = [
    "",
    " ",
    "null",
    "Null",
    "~",
    "yes",
    "No",
    "on",
    "OFF",
    "true",
    "y",
    "n",
    "<<",
    "=",
    "1",
    "-1",
    "0x1f",
    "0o7",
    "1_000",
    "1e3",
    "1E3",
    "1.5e3",
    "-1e-3",
    "0o17",
    "0b11",
    "1.0",
    ".5",
    ".inf",
    "-.inf",
    ".nan",
    "12:30",
    "2024-01-02",
    "2024-01-02 10:00:00",
    "- a",
    "-a",
    "? x",
    "a: b",
    "a:b",
    "a #b",
    "a#b",
    "#x",
    "x:",
    "...",
    "---",
    "--- a",
    "%YAML",
    "@x",
    "`x",
    "!tag",
    "&a",
    "*a",
    "|",
    ">",
    "'q'",
    '"q"',
    "[1]",
    "{a: 1}",
    "a, b",
    "trailing ",
    " leading",
    "tab\there",
    "a\nb",
    "a\r\nb",
    "\n",
    "a\x85b",
    "a\u2028b",
    "a\u2029b",
    "\ufeffbom",
    "\x7f",
    "\x9f",
    "\ufffe",
    "\uffff",
    "\x00",
    "\x1b[0m",
    "Janet\u2019s ducks",
    "caf\u00e9",
    "\u00a0nbsp\u00a0",
    "\U0001f600",
    "\\",
    "a\\nb",
    "http://x.org/a?b=c#d",
    "C:\\path",
    "a  b",
    "x" * 300,
]
text = st.one_of(st.sampled_from(TRICKY), st.text(max_size=40))
keys = st.one_of(
    st.sampled_from(TRICKY), st.text(max_size=20), st.sampled_from(["k" * 128, "long key " * 20])
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    text,
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=20,
)
documents = st.dictionaries(keys, values, max_size=6)


def same(a: Any, b: Any) -> bool:
    """Equal as JSON values, types included (True is not 1, 1.0 is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return bool(a == b)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_what_it_writes_reads_back_to_the_same_value(doc: dict[str, Any]) -> None:
    # Given any JSON-shaped document
    out = dump_plain_yaml(doc)
    if out is None:
        # Then a document it leaves to PyYAML holds a key it does not write
        assert any(len(k) > MAX_KEY_CHARS for k in _all_keys(doc))
        return
    # Then every loader gives the value back, types included, YAML 1.1's and 1.2's alike
    assert same(yaml.safe_load(out.decode("utf-8")), doc), out
    assert same(load_yaml(out.decode("utf-8")), doc), out
    assert same(YAML12.load(out.decode("utf-8")), doc), out
    # And the bytes do not depend on the order the keys were given in
    assert dump_plain_yaml(orjson.loads(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS))) == out


@settings(max_examples=60, deadline=None)
@given(documents)
def test_render_yaml_reads_back_whichever_writer_it_takes(doc: dict[str, Any]) -> None:
    assert same(yaml.safe_load(render_yaml(doc).decode("utf-8")), doc)
    assert same(YAML12.load(render_yaml(doc).decode("utf-8")), doc)


@pytest.mark.parametrize("value", TRICKY)
def test_each_tricky_string_reads_back_as_key_and_value(value: str) -> None:
    doc = {value: value, "list": [value, {value: [value]}]}
    out = dump_plain_yaml(doc) if len(value) <= MAX_KEY_CHARS else render_yaml(doc)
    assert out is not None
    assert same(yaml.safe_load(out.decode("utf-8")), doc), out
    assert same(YAML12.load(out.decode("utf-8")), doc), out
    # And PyYAML's writer, for what this one leaves to it, reads back alike too
    long_keys = render_yaml({"k" * 200: value, value: [value]})
    assert same(YAML12.load(long_keys.decode("utf-8")), {"k" * 200: value, value: [value]})


def test_block_layout_as_pyyaml_writes_it() -> None:
    # Given a case's inputs and annotations
    doc = {
        "prompt": "Janet\u2019s ducks lay 16 eggs.",
        "metadata": {"split": "test", "n": 3, "score": 0.5, "empty": {}, "none": None},
        "tags": ["math", "grade-school"],
        "graders": [{"kind": "exact", "config": {"cmd": "pytest -q"}}, []],
    }
    # Then the layout is PyYAML's block style (keys sorted, a list under a key not indented)
    assert dump_plain_yaml(doc) == yaml.dump(
        doc, Dumper=yaml.SafeDumper, sort_keys=True, allow_unicode=True, default_flow_style=False
    ).encode("utf-8")


def test_shapes_it_leaves_to_pyyaml() -> None:
    assert dump_plain_yaml({"a": (1, 2)}) is None
    assert dump_plain_yaml({1: "int key"}) is None
    assert dump_plain_yaml({"a": float("inf")}) is None
    assert dump_plain_yaml({"k" * (MAX_KEY_CHARS + 1): 1}) is None
    assert dump_plain_yaml(["not", "a", "dict"]) is None
    # And render_yaml still writes them, through PyYAML
    assert yaml.safe_load(render_yaml({"k" * 200: 1})) == {"k" * 200: 1}


def _all_keys(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [*value.keys(), *(k for v in value.values() for k in _all_keys(v))]
    if isinstance(value, list):
        return [k for v in value for k in _all_keys(v)]
    return []
