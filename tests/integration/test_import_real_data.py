"""Imports of the real benchmark files in ../shared/data with the recipes in recipes/."""

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from caseshelf.adapters.sources import SourceReader, smart_opener
from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.envelope import case_to_plain, parse_case
from caseshelf.domain.identity import Identity
from caseshelf.domain.mapping import RowMapper
from caseshelf.domain.recipe import parse_recipe
from caseshelf.services.imports import parse_import

pytestmark = pytest.mark.integration

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
ME = Identity("local", "alice")


def recipe_file(name: str) -> dict:
    return yaml.safe_load((RECIPES / f"{name}.yaml").read_text())


@pytest.fixture
def svc(tmp_path):
    return build(load_settings({}, home=str(tmp_path / "home")))


def import_file(svc, path: Path, recipe: str, **extra):
    req = parse_import({"recipe": recipe_file(recipe), "source": {"url": str(path)}, **extra})
    done = svc.imports.run(ME, req)
    return done, all_cases(svc, done.result.record.name)


def all_cases(svc, name: str) -> list[dict]:
    out, cursor = [], None
    while True:
        page = svc.registry.list_cases(ME, name, "latest", cursor=cursor, limit=1000)
        out.extend(page.items)
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


def every_case_is_a_fixed_point(recipe: dict, path: Path) -> None:
    parsed = parse_recipe(recipe)
    source = parsed.source.model_copy(update={"url": str(path)})
    mapper = RowMapper(parsed)
    for index, row in SourceReader(smart_opener()).rows(source):
        plain = mapper(row, index)
        assert case_to_plain(parse_case(plain)) == plain


def test_gsm8k_test_jsonl(svc, shared_data):
    path = shared_data / "gsm8k" / "test.jsonl"
    done, cases = import_file(svc, path, "gsm8k")
    assert done.result.record.case_count == 1319 and done.produced_by["rows_read"] == 1319
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    expected = [r["answer"].split("####", 1)[1].strip() for r in rows]
    assert [c["expectations"]["ground_truth"] for c in cases] == expected
    assert cases[0]["expectations"]["ground_truth"] == "18"
    assert "2,125" in expected and any(a.startswith("-") for a in expected)
    assert cases[0]["id"] == "gsm8k-0" and cases[-1]["id"] == "gsm8k-1318"
    assert cases[0]["graders"] == [{"id": "answer-match", "config": {"mode": "numeric"}}]
    every_case_is_a_fixed_point(recipe_file("gsm8k"), path)


def test_humaneval_gzip_keeps_ids_with_slashes(svc, shared_data):
    path = shared_data / "humaneval" / "HumanEval.jsonl.gz"
    _, cases = import_file(svc, path, "humaneval")
    assert [c["id"] for c in cases] == [f"HumanEval/{i}" for i in range(164)]
    first = cases[0]
    files = first["env"]["source"]["files"]
    assert files["solution.py"].startswith("from typing import List")
    assert "check(has_close_elements)" in files["tests/test_solution.py"]
    assert first["metadata"] == {"entry_point": "has_close_elements"}
    every_case_is_a_fixed_point(recipe_file("humaneval"), path)


def test_mmlu_headerless_csv(svc, shared_data):
    path = shared_data / "mmlu" / "test" / "abstract_algebra_test.csv"
    done, cases = import_file(svc, path, "mmlu", dataset="mmlu-abstract-algebra")
    assert done.result.record.case_count == 100
    answers = Counter(c["expectations"]["ground_truth"] for c in cases)
    assert answers == {"A": 22, "B": 26, "C": 31, "D": 21}
    assert cases[0]["expectations"]["details"]["choices"] == ["0", "4", "2", "6"]
    assert "\nB. 4\n" in cases[0]["inputs"]["user"]
    for split in ("dev/machine_learning_dev.csv", "val/abstract_algebra_val.csv"):
        every_case_is_a_fixed_point(recipe_file("mmlu"), shared_data / "mmlu" / split)


def test_truthfulqa_semicolon_lists(svc, shared_data):
    path = shared_data / "truthfulqa" / "TruthfulQA.csv"
    done, cases = import_file(svc, path, "truthfulqa")
    assert done.result.record.case_count == 817
    first = cases[0]["expectations"]
    assert first["ground_truth"] == "The watermelon seeds pass through your digestive system"
    assert first["details"]["correct_answers"][0] == "Nothing happens"
    assert len(first["details"]["incorrect_answers"]) == 7
    assert all(
        c["expectations"]["ground_truth"] in c["expectations"]["details"]["correct_answers"]
        for c in cases
    )
    tags = Counter(t for c in cases for t in c["tags"])
    assert tags["Adversarial"] == 437 and tags["Non-Adversarial"] == 380
    every_case_is_a_fixed_point(recipe_file("truthfulqa"), path)


def test_the_everdict_camel_case_recipes_import_their_rows(svc, shared_data):
    recipe = json.loads((shared_data / "everdict/recipes/bu-bench-v1-open-1.0.0.json").read_text())
    req = parse_import(
        {"recipe": recipe, "source": {"url": str(shared_data / "everdict/bu_bench_v1_open.jsonl")}}
    )
    done = svc.imports.run(ME, req)
    cases = svc.registry.list_cases(ME, "bu-bench-v1-open", "latest").items
    assert done.result.record.case_count == 10
    assert all(c["env"] == {"kind": "prompt"} for c in cases)
    assert {t for c in cases for t in c["tags"]} >= {"webbench", "gaia", "Wikipedia"}
    judge = cases[0]["graders"][-1]
    assert judge["id"] == "judge" and "source component: webbench" in judge["config"]["rubric"]
