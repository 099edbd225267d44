"""`POST /bundles`: an everdict bundle imports as the dataset versions and recipes it holds, in
process and over HTTP alike, each item validated before any is registered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import caseshelf
from caseshelf.client import Client
from caseshelf.domain.errors import BadRequest, NotFound
from tests.helpers import dev_server
from tests.integration.test_onramp_bundles import DATASET, RECIPE, bundle

pytestmark = pytest.mark.integration


@pytest.fixture(params=["in-process", "http"])
def cs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Client]:
    if request.param == "in-process":
        with caseshelf.connect(home=tmp_path / "home", tenant="acme", principal="alice") as c:
            yield c
    else:
        with dev_server(tmp_path / "srv") as srv, caseshelf.connect(srv.url) as c:
            yield c


def test_a_bundle_registers_its_datasets_and_recipes_and_reports_the_rest(cs: Client) -> None:
    # Given a bundle of one dataset, one recipe and a harness section
    doc = bundle(datasets=[DATASET], benchmarkRecipes=[RECIPE], harnesses=[{"id": "h"}])
    # When it is imported
    out = cs.import_bundle(doc)
    # Then both items are registered, and the harness is reported as skipped
    assert [(r.kind, r.id, r.version, r.status) for r in out.results] == [
        ("dataset", "smoke", "1.0.0", "registered"),
        ("recipe", "rows", "1.0.0", "registered"),
    ]
    assert out.skipped == {"harnesses": 1}
    assert cs.get("smoke@1.0.0").content_digest == out.results[0].content_digest
    assert cs.recipe("rows@1.0.0").id == "rows"
    # And importing it again changes nothing
    again = cs.import_bundle(doc)
    assert [r.status for r in again.results] == ["unchanged", "unchanged"]


def test_a_conflict_is_reported_and_the_other_items_still_register(cs: Client) -> None:
    # Given smoke@1.0.0 already registered with other content
    cs.register(
        {
            "id": "smoke",
            "version": "1.0.0",
            "description": "other",
            "cases": [{"id": "c1", "inputs": {"user": "say hi"}}],
        }
    )
    # When a bundle with smoke@1.0.0 and a recipe is imported
    out = cs.import_bundle(bundle(datasets=[DATASET], benchmarkRecipes=[RECIPE]))
    # Then the dataset is a conflict naming both digests, and the recipe registers anyway
    first, second = out.results
    assert first.status == "conflict" and first.message and "sha256:" in first.message
    assert second.status == "registered"


def test_one_invalid_item_refuses_the_whole_bundle_and_registers_nothing(cs: Client) -> None:
    # Given a bundle whose second dataset has a case without an id
    bad = {"id": "broken", "version": "1.0.0", "cases": [{"task": "no id"}]}
    # When it is imported, then it is a 400 naming the bad item
    with pytest.raises(BadRequest) as err:
        cs.import_bundle(bundle(datasets=[DATASET, bad], benchmarkRecipes=[RECIPE]))
    assert "datasets[1]" in err.value.detail
    # And nothing of the bundle was registered
    with pytest.raises(NotFound):
        cs.get("smoke@1.0.0")
    with pytest.raises(NotFound):
        cs.recipe("rows@1.0.0")


def test_a_bundle_file_imports_by_path(cs: Client, tmp_path: Path) -> None:
    # Given the bundle as a YAML file
    import yaml

    path = tmp_path / "bundle.yaml"
    path.write_text(yaml.safe_dump(bundle(datasets=[DATASET])), encoding="utf-8")
    # When its path is given, then it imports as the document would
    out = cs.import_bundle(path)
    assert [r.status for r in out.results] == ["registered"]
