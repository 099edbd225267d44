"""everdict bundles: a file of datasets and recipes imports as the versions and recipes it holds,
each validated as if registered alone (issue: on-ramps)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from caseshelf.api import dto, import_dto
from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.errors import BadRequest, Conflict, NotFound
from caseshelf.domain.identity import Identity
from caseshelf.services.bundles import apply_bundle, read_bundle
from caseshelf.services.loaders import is_bundle, load_dataset
from caseshelf.services.registry import parse_dataset
from tests.helpers import run_cli

pytestmark = pytest.mark.integration
ME = Identity("local", "alice")

DATASET = {
    "id": "smoke",
    "version": "1.0.0",
    "description": "d",
    "cases": [{"id": "c1", "task": "say hi", "timeoutSec": 60, "graders": [{"id": "steps"}]}],
}
RECIPE = {
    "id": "rows",
    "version": "1.0.0",
    "category": "qa",
    "source": {"kind": "jsonl"},
    "mapping": {"idField": "id", "taskField": "q"},
}


def bundle(**sections: Any) -> dict[str, Any]:
    return {"id": "b", "version": "1.0.0", **sections}


@pytest.fixture
def svc(tmp_path):
    return build(load_settings({}, home=str(tmp_path / "home")))


def calls(svc):
    def register(body):
        return dto.register_out(svc.registry.register(ME, parse_dataset(body))).model_dump()

    def register_recipe(body):
        return import_dto.recipe_register_out(svc.recipes.register(ME, body)).model_dump()

    return register, register_recipe


def test_a_bundle_registers_its_datasets_and_recipes(svc):
    doc = bundle(datasets=[DATASET], benchmarkRecipes=[RECIPE], harnesses=[{"id": "h"}])
    assert is_bundle(doc) and not is_bundle(DATASET)
    plan = read_bundle(doc)
    assert plan.skipped == {"harnesses": 1}
    items = apply_bundle(plan, *calls(svc))
    assert [(i.kind, i.id, i.status) for i in items] == [
        ("dataset", "smoke", "registered"),
        ("recipe", "rows", "registered"),
    ]
    case = svc.registry.list_cases(ME, "smoke", "1.0.0").items[0]
    assert case["inputs"]["user"] == "say hi" and case["timeout_sec"] == 60
    assert svc.recipes.get(ME, "rows", "1.0.0").recipe.mapping.id_field == "id"
    # Applying it again changes nothing
    assert {i.status for i in apply_bundle(read_bundle(doc), *calls(svc))} == {"unchanged"}


def test_each_item_is_validated_as_if_alone_and_nothing_registers_otherwise(svc):
    bad_case = {**DATASET, "id": "bad", "cases": [{"id": "c1", "timeout_sec": -1}]}
    bad_recipe = {**RECIPE, "id": "r2"}
    del bad_recipe["category"]
    with pytest.raises(BadRequest) as err:
        read_bundle(bundle(datasets=[DATASET, bad_case], benchmarkRecipes=[bad_recipe]))
    errors = err.value.fields["errors"]
    assert len(errors) == 2
    assert "datasets[1] (bad@1.0.0)" in errors[0] and "timeout_sec" in errors[0]
    assert "benchmarkRecipes[0] (r2@1.0.0)" in errors[1] and "category" in errors[1]
    with pytest.raises(NotFound):
        svc.registry.get_version(ME, "smoke", "1.0.0")


def test_a_conflicting_item_is_reported_and_the_others_go_on(svc):
    register, register_recipe = calls(svc)
    register(read_bundle(bundle(datasets=[DATASET])).datasets[0])
    other = {**DATASET, "description": "changed"}
    items = apply_bundle(
        read_bundle(bundle(datasets=[other], benchmarkRecipes=[RECIPE])), register, register_recipe
    )
    assert [i.status for i in items] == ["conflict", "registered"]
    with pytest.raises(Conflict):
        register(read_bundle(bundle(datasets=[other])).datasets[0])


def test_a_bundle_is_not_a_dataset_file(tmp_path):
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(bundle(datasets=[DATASET])))
    with pytest.raises(BadRequest, match="import-bundle"):
        load_dataset(path)


def test_bundle_shape_errors_name_the_key():
    with pytest.raises(BadRequest, match="unknown bundle keys"):
        read_bundle(bundle(datasets=[DATASET], extra=[]))
    with pytest.raises(BadRequest, match="holds no dataset and no recipe"):
        read_bundle(bundle(datasets=[]) | {"datasets": [], "benchmarkRecipes": []})


def real_bundle(shared_data: Path) -> dict[str, Any]:
    """An everdict bundle made of the real everdict datasets and recipes (the bundle files
    themselves were not copied; their sections are these objects)."""
    ed = shared_data / "everdict"
    datasets = [json.loads(p.read_text()) for p in sorted(ed.glob("*.json"))]
    recipes = [json.loads(p.read_text()) for p in sorted((ed / "recipes").glob("*.json"))]
    return bundle(datasets=datasets, benchmarkRecipes=recipes, harnessTemplates=[{"id": "t"}])


def test_real_everdict_bundle_through_the_cli(shared_data, tmp_path):
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(real_bundle(shared_data)))
    home = tmp_path / "home"
    proc = run_cli(home, "--json", "import-bundle", path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    # every real everdict dataset (repo-smoke 1.0.0 and 1.1.0 among them) and recipe
    assert [(r["kind"], r["status"]) for r in out["results"]] == [("dataset", "registered")] * 4 + [
        ("recipe", "registered")
    ] * 3
    assert "skipped harnessTemplates" in proc.stderr
    again = run_cli(home, "--json", "import-bundle", path)
    assert {r["status"] for r in json.loads(again.stdout)["results"]} == {"unchanged"}
