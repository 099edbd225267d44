"""The recipe model: validation, camelCase aliases, canonical form, generated JSON Schema."""

import json
from pathlib import Path

import pytest

from caseshelf.domain.errors import BadRequest
from caseshelf.domain.recipe import parse_recipe, recipe_digest, recipe_plain
from caseshelf.domain.schemas import SCHEMAS, render

pytestmark = pytest.mark.unit

DOCS = Path(__file__).resolve().parents[2] / "docs" / "schemas"

BASE = {
    "id": "demo",
    "version": "1.0.0",
    "category": "qa",
    "source": {"kind": "csv", "header": False, "columns": ["q", "a"]},
    "mapping": {"task_field": "q", "answer_field": "a"},
}


def with_(path: str, value) -> dict:
    body = json.loads(json.dumps(BASE))
    *head, last = path.split(".")
    cur = body
    for p in head:
        cur = cur[p]
    cur[last] = value
    return body


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("mapping.bogus", 1, "mapping.bogus"),
        ("origin", {"homepage": "x", "stars": 5}, "origin.stars"),
        ("source.quote", '"', "source.quote"),
        ("category", "web", "category"),
        ("mapping.answer_field", "a|frob", "mapping"),
        ("mapping.files_template", {"../x": "{q}"}, "mapping.files_template"),
    ],
)
def test_bad_recipes_are_400_naming_the_key(path, value, field):
    with pytest.raises(BadRequest) as exc:
        parse_recipe(with_(path, value))
    assert exc.value.fields["field"] == field
    assert field.split(".")[-1] in str(exc.value) or "frob" in str(exc.value)


def test_a_headerless_csv_needs_its_columns():
    with pytest.raises(BadRequest, match="needs columns"):
        parse_recipe(with_("source", {"kind": "csv", "header": False}))


def test_camel_case_keys_are_accepted_and_stored_snake_case():
    camel = with_("mapping", {"taskField": "q", "answerField": "a", "tagFields": ["a"]})
    camel["graderTemplates"] = [{"id": "judge", "config": {"rubric": "{a}"}}]
    camel["origin"] = {"taskType": "qa"}
    snake = with_("mapping", {"task_field": "q", "answer_field": "a", "tag_fields": ["a"]})
    snake["grader_templates"] = [{"id": "judge", "config": {"rubric": "{a}"}}]
    snake["origin"] = {"task_type": "qa"}
    assert recipe_plain(parse_recipe(camel)) == recipe_plain(parse_recipe(snake))
    assert recipe_digest(parse_recipe(camel)) == recipe_digest(parse_recipe(snake))
    assert "task_type" in recipe_plain(parse_recipe(camel))["origin"]


def test_description_defaults_to_empty_and_defaults_are_omitted_from_the_plain_form():
    recipe = parse_recipe(BASE)
    assert recipe.description == ""
    assert "description" not in recipe_plain(recipe)
    assert recipe_plain(recipe)["source"] == {"kind": "csv", "header": False, "columns": ["q", "a"]}


def test_the_everdict_recipes_load(shared_data):
    paths = sorted((shared_data / "everdict" / "recipes").glob("*.json"))
    assert paths, "no everdict recipes to load"
    for path in paths:
        recipe = parse_recipe(json.loads(path.read_text()))
        assert recipe.id in path.name


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_committed_json_schema_matches_the_models(name):
    committed = (DOCS / name).read_text(encoding="utf-8")
    assert committed == render(SCHEMAS[name]()), f"docs/schemas/{name} is stale: run `make schemas`"
