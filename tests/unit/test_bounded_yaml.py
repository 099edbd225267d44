"""The package's one YAML loader: alias bombs, depth, self-reference and duplicate keys are
refused before any value is built; configs load exactly as `yaml.safe_load` does, and a dataset
file's plain scalars are numbers, booleans or null only where YAML 1.1 and 1.2 agree."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from caseshelf.domain.boundedyaml import MAX_DEPTH, YamlLimitError, load_yaml

pytestmark = pytest.mark.unit


def alias_bomb(levels: int = 9, fan: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        refs = ", ".join([f"*a{i - 1}"] * fan)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_before_it_is_expanded() -> None:
    with pytest.raises(YamlLimitError, match="alias bomb"):
        load_yaml(alias_bomb())


def test_a_modest_use_of_anchors_and_merge_keys_loads() -> None:
    doc = load_yaml("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  x: 3\nl: [*b, *b]\n")
    assert doc == {"base": {"x": 1, "y": 2}, "d": {"x": 3, "y": 2}, "l": [{"x": 1, "y": 2}] * 2}


def test_an_alias_that_contains_itself_is_refused() -> None:
    with pytest.raises(YamlLimitError, match="refers to itself"):
        load_yaml("&a [1, *a]")


@pytest.mark.parametrize(
    "text",
    [
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
        "x:\n" + "".join("  " * (i + 1) + "- \n" for i in range(MAX_DEPTH + 5)),
        "[" * 5000 + "]" * 5000,
    ],
    ids=["flow", "block", "very-deep"],
)
def test_deep_nesting_is_refused(text: str) -> None:
    with pytest.raises(yaml.YAMLError, match="nest"):
        load_yaml(text)


def test_depth_counts_through_aliases() -> None:
    half = MAX_DEPTH // 2 + 5
    text = "a: &a " + "[" * half + "]" * half + "\nb: " + "[" * half + "*a" + "]" * half + "\n"
    with pytest.raises(YamlLimitError, match="deeper"):
        load_yaml(text)


@pytest.mark.parametrize(
    ("text", "key"),
    [("a: 1\na: 2\n", "'a'"), ("x:\n  - {k: 1, k: 1}\n", "'k'"), ("'q': 1\nq: 2\n", "'q'")],
)
def test_a_key_given_twice_is_refused_and_named(text: str, key: str) -> None:
    with pytest.raises(YamlLimitError, match=f"duplicate key {key} at line"):
        load_yaml(text)


def test_dates_stay_text_unless_asked() -> None:
    assert load_yaml("d: 2024-01-02") == {"d": "2024-01-02"}
    assert str(load_yaml("d: 2024-01-02", timestamps=True)["d"]) == "2024-01-02"


@pytest.mark.parametrize(
    ("text", "dataset", "config"),
    [
        ("no", "no", False),  # a yes/no answer is its text, not YAML 1.1's boolean
        ("Yes", "Yes", True),
        ("on", "on", True),
        ("3:2", "3:2", 182),  # YAML 1.1's base 60
        ("12:30", "12:30", 750),
        ("010", "010", 8),  # YAML 1.1's octal; YAML 1.2 reads 10
        ("007", "007", 7),
        ("1_000", "1_000", 1000),
        ("0b11", "0b11", 3),
        ("1e3", "1e3", "1e3"),  # YAML 1.2 reads 1000.0
        ("0o17", "0o17", "0o17"),  # YAML 1.2 reads 15
        ("10", 10, 10),
        ("-7", -7, -7),
        ("0x1F", 31, 31),
        ("1.5", 1.5, 1.5),
        ("1.0e+3", 1000.0, 1000.0),
        ("true", True, True),
        ("FALSE", False, False),
        ("~", None, None),
        ("Null", None, None),
    ],
)
def test_a_dataset_file_means_the_text_where_yaml_versions_differ(
    text: str, dataset: Any, config: Any
) -> None:
    # A dataset file (a case means the text it was written with) and a config, read as the
    # tools that write configs read them (PyYAML's YAML 1.1)
    for key_or_value in (f"a: {text}", f"{text}: a"):
        got = load_yaml(key_or_value)
        assert got in ({"a": dataset}, {dataset: "a"})
        assert all(type(v) is type(dataset) for v in (*got, *got.values()) if v != "a")
    assert load_yaml(f"a: {text}", timestamps=True) == {"a": config}


YAML12 = YAML(typ="safe", pure=True)
plain_scalars = st.one_of(
    st.from_regex(r"[-+]?[0-9_]{0,5}(\.[0-9_]{0,3})?([eE][-+]?[0-9]{1,3})?", fullmatch=True),
    st.from_regex(r"(0[xob])?[0-9a-fA-F_]{1,6}", fullmatch=True),
    st.from_regex(r"[0-9]{1,2}(:[0-5]?[0-9]){1,2}(\.[0-9]*)?", fullmatch=True),
    st.sampled_from(
        [
            "yes",
            "No",
            "ON",
            "off",
            "y",
            "n",
            "true",
            "False",
            "null",
            "~",
            ".inf",
            "-.Inf",
            ".nan",
            "2024-01-02",
            "=",
            "1.",
            ".5",
            "-.5",
        ]
    ),
)


@given(plain_scalars)
@settings(max_examples=200, deadline=None)
def test_a_dataset_scalar_is_its_text_or_what_both_yaml_versions_read(text: str) -> None:
    doc = f"a: {text}\n"
    try:
        one_one, one_two = yaml.safe_load(doc)["a"], YAML12.load(doc)["a"]
    except Exception:  # not a plain scalar to every reader (a lone "-", say)
        return
    got = load_yaml(doc)["a"]
    if got != text or type(got) is not str:
        assert type(got) is type(one_one) is type(one_two), (got, one_one, one_two)
        assert got == one_one == one_two or (got != got and one_one != one_one)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=30,
)


@given(json_values)
@settings(max_examples=75, deadline=None)
def test_whatever_safe_dump_writes_loads_back_the_same(value: Any) -> None:
    assert load_yaml(yaml.safe_dump(value)) == yaml.safe_load(yaml.safe_dump(value)) == value


def test_an_alias_bomb_costs_little_memory_in_a_fresh_process() -> None:
    # The bound is measured in the process that loads, from outside the code under test: its
    # high-water RSS (VmHWM: this process's own, unlike ru_maxrss, which survives exec) and
    # tracemalloc's peak.
    script = textwrap.dedent(
        f"""
        import sys, tracemalloc
        from caseshelf.domain.boundedyaml import load_yaml, YamlLimitError
        text = {alias_bomb()!r}
        tracemalloc.start()
        try:
            load_yaml(text)
        except YamlLimitError:
            pass
        else:
            sys.exit("loaded")
        peak = tracemalloc.get_traced_memory()[1]
        hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM")]
        print(peak, hwm[0].split()[1] if hwm else 0)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    peak, rss_kb = out.stdout.split()
    assert int(peak) < 1_000_000  # bytes allocated while refusing: well under a megabyte
    assert int(rss_kb) < 200_000  # the whole interpreter stays small (an expansion is GBs)
