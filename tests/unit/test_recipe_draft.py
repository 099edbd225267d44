"""`caseshelf.domain.recipe_draft` and `plain_row`: a file of rows told apart from cases, and
the recipe drafted for it."""

from __future__ import annotations

import pytest

from caseshelf.domain.legacy import plain_row
from caseshelf.domain.recipe import parse_recipe
from caseshelf.domain.recipe_draft import draft_name, draft_recipe

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("item", "row"),
    [
        ({"id": "q1", "question": "1+1?", "answer": "2"}, True),
        ({"question": "1+1?", "expected_answer": "2"}, True),  # no id
        ({"id": "q1", "question": "1+1?", "expected_answer": "2"}, False),  # a legacy item
        ({"id": "q1", "inputs": {"user": "1+1?"}, "answer": "2"}, False),  # a case, bad key
        ({"id": "q1", "prompt": "hi", "memorySeeds": []}, False),
    ],
)
def test_plain_rows_are_told_from_items(item: dict[str, object], row: bool) -> None:
    assert plain_row(item) is row


def test_the_draft_guesses_task_answer_and_id_and_keeps_the_rest() -> None:
    fields = ["Type", "Category", "Question", "Best Answer", "Correct Answers", "Source"]
    doc = draft_recipe("truthfulqa", "csv", fields)
    recipe = parse_recipe(doc)
    m = recipe.mapping
    assert (m.task_field, m.answer_field, m.id_field) == ("Question", "Best Answer", None)
    assert m.metadata_fields == ["Type", "Category", "Correct Answers", "Source"]
    assert recipe.source.kind == "csv" and recipe.id == "truthfulqa"

    m = parse_recipe(draft_recipe("x", "jsonl", ["task_id", "prompt", "target"])).mapping
    assert (m.id_field, m.task_field, m.answer_field) == ("task_id", "prompt", "target")
    m = parse_recipe(draft_recipe("x", "jsonl", ["ref", "body"], id_field="ref")).mapping
    assert (m.id_field, m.task_field, m.answer_field) == ("ref", "body", None)
    # no fields at all still makes a valid recipe (the first preview's)
    assert parse_recipe(draft_recipe("x", "jsonl", [])).mapping.task_field == "_index"


def test_draft_names_are_dataset_ids() -> None:
    assert draft_name("TruthfulQA_mini") == "truthfulqa_mini"
    assert draft_name("my rows (v2)") == "my-rows-v2"
    assert draft_name("...") == "rows"
