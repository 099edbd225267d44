"""`Client.to_pandas`: one column per leaf field, `id` first, the case model's order, no
dict-valued columns, `tags` a list; and back through `register(cases=df)` to the same digest.
On real MMLU and GSM8K imports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import caseshelf
from caseshelf.client import Client
from caseshelf.client.frames import CASE_FIELDS, PATHS_ATTR
from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.integration
pd = pytest.importorskip("pandas")


@pytest.fixture
def cs(tmp_path: Path) -> Iterator[Client]:
    with caseshelf.connect(home=tmp_path / "home") as client:
        yield client


def recipe(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((REPO_ROOT / "recipes" / name).read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def _no_dicts(df: Any) -> None:
    for column in df.columns:
        assert not any(isinstance(v, dict) for v in df[column]), column


def test_mmlu_as_leaf_columns_in_case_order(cs: Client, shared_data: Path) -> None:
    cs.import_(
        {"url": str(shared_data / "mmlu" / "test")},
        recipe=recipe("mmlu-subjects.yaml"),
    )
    df = cs.to_pandas("mmlu")
    assert list(df.columns) == [
        "id",
        "inputs.user",
        "expectations.ground_truth",
        "expectations.details.choices",
        "env.kind",
        "graders",
        "tags",
        "metadata.subject",
    ]
    _no_dicts(df)
    first = df.iloc[0]
    assert first["id"] == "abstract_algebra-0" and first["metadata.subject"] == "abstract_algebra"
    assert first["expectations.details.choices"] == ["0", "4", "2", "6"]  # a list stays a list
    assert first["tags"] == ["abstract_algebra"] and first["env.kind"] == "prompt"
    # back as the next version: the same content, so no new version
    again = cs.register("mmlu", cases=df, bump="minor")
    assert not again.created and again.version == "1.0.0"


def test_gsm8k_tags_are_empty_lists_not_none(cs: Client, shared_data: Path) -> None:
    cs.import_(
        {"url": str(shared_data / "gsm8k" / "test.jsonl")},
        recipe=recipe("gsm8k.yaml"),
        limit=50,
    )
    df = cs.to_pandas("gsm8k")
    assert df.columns[0] == "id" and "expectations.details.solution" in df.columns
    assert all(t == [] for t in df["tags"])
    _no_dicts(df)


def test_odd_keys_gaps_and_files_come_back_whole(cs: Client) -> None:
    cases: list[dict[str, Any]] = [
        {
            "id": "a",
            "inputs": {"user": "x"},
            "metadata": {"v1.2": {"n": 1}, "empty": {}},
            "files": {"run-tests.sh": {"text": "echo ok\n"}},
            "timeout_sec": 60,
        },
        {"id": "b", "inputs": {"user": "y"}, "tags": ["t"], "metadata": {"level": 2}},
    ]
    cs.register("odd", cases=cases, version="1.0.0")
    df = cs.to_pandas("odd")
    _no_dicts(df.drop(columns=["metadata.empty"]))  # an empty object stays as it is
    order = [CASE_FIELDS.index(c.split(".")[0]) for c in df.columns]
    assert order == sorted(order) and df.columns[0] == "id"
    assert "metadata.v1.2.n" in df.columns and "files.run-tests.sh.digest" in df.columns
    assert df.attrs[PATHS_ATTR]["metadata.v1.2.n"] == ["metadata", "v1.2", "n"]
    assert str(df["timeout_sec"].dtype) == "Int64" and df.loc[0, "timeout_sec"] == 60
    assert list(df["tags"]) == [[], ["t"]]
    # registered again (its file bodies stored in the base), the very same content
    again = cs.register("odd", cases=df, bump="minor")
    assert not again.created and again.content_digest == cs.get("odd@1.0.0").content_digest
    # a frame that lost its attrs still splits a file's path right
    plain = df.drop(columns=["metadata.v1.2.n"])
    plain.attrs = {}
    back = cs.validate("odd", cases=plain, bump="minor")
    assert back.case_count == 2 and back.content_digest != again.content_digest
