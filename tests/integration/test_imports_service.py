"""The import service on the embedded store: recipes by ref, inline and catalog; preview; limits;
provenance; nothing registered on failure."""

import gzip
import json

import pytest

from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.errors import BadRequest, Conflict, NotFound, TooLarge
from caseshelf.domain.identity import Identity
from caseshelf.services.imports import parse_import

pytestmark = pytest.mark.integration

ME = Identity("acme", "alice")
RECIPE = {
    "id": "mini",
    "version": "1.0.0",
    "category": "qa",
    "source": {"kind": "jsonl"},
    "mapping": {
        "id_field": "id",
        "task_field": "q",
        "answer_field": "a|after:####|strip",
        "tag_fields": ["level"],
    },
}


@pytest.fixture
def svc(tmp_path):
    return build(load_settings({}, home=str(tmp_path / "home")))


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def rows(n):
    return [{"id": f"r{i}", "q": f"q{i}", "a": f"w\n#### {i}", "level": "easy"} for i in range(n)]


def nothing_registered(svc, name="mini"):
    with pytest.raises(NotFound):
        svc.registry.get_version(ME, name, "latest")
    return True


def test_import_an_inline_recipe_from_a_file_stamps_provenance(svc, tmp_path):
    url = write_rows(tmp_path / "rows.jsonl", rows(3))
    req = parse_import({"recipe": RECIPE, "source": {"url": url}})
    done = svc.imports.run(ME, req)
    rec = done.result.record
    assert (rec.name, rec.version, rec.case_count) == ("mini", "1.0.0", 3)
    assert done.produced_by["rows_read"] == 3
    assert done.produced_by["limit"] is None
    assert done.produced_by["recipe"]["id"] == "mini"
    assert done.produced_by["source"] == {"kind": "jsonl", "url": url}
    assert rec.produced_by == done.produced_by
    cases = svc.registry.list_cases(ME, "mini", "latest").items
    assert cases[0] == {
        "id": "r0",
        "inputs": {"user": "q0"},
        "expectations": {"ground_truth": "0"},
        "graders": [{"id": "answer-match"}],
        "tags": ["easy"],
    }


def test_a_mapped_import_hashes_like_the_same_cases_registered_by_hand(svc, tmp_path):
    url = write_rows(tmp_path / "rows.jsonl", rows(4))
    done = svc.imports.run(ME, parse_import({"recipe": RECIPE, "source": {"url": url}}))
    cases = svc.registry.list_cases(ME, "mini", "latest").items
    from caseshelf.services.registry import parse_dataset

    by_hand = svc.registry.validate(
        ME, parse_dataset({"id": "mini", "version": "9.0.0", "cases": cases})
    )
    assert by_hand.content_digest == done.result.record.content_digest


def test_an_explicit_limit_is_the_only_way_to_take_fewer_rows_and_is_stamped(svc, tmp_path):
    url = write_rows(tmp_path / "rows.jsonl", rows(10))
    done = svc.imports.run(ME, parse_import({"recipe": RECIPE, "source": {"url": url}, "limit": 4}))
    assert done.result.record.case_count == 4
    assert done.produced_by["limit"] == 4 and done.produced_by["rows_read"] == 4


def test_a_registered_recipe_is_used_by_ref_and_pinned_in_provenance(svc, tmp_path):
    svc.recipes.register(ME, RECIPE)
    url = write_rows(tmp_path / "rows.jsonl", rows(2))
    done = svc.imports.run(
        ME, parse_import({"recipe": "mini@1.0.0", "source": {"url": url}, "dataset": "mine"})
    )
    assert done.produced_by["recipe"]["owner"] == "acme"
    assert done.result.record.name == "mine"


def test_reimporting_the_same_source_is_idempotent_and_a_bump_makes_the_next_version(svc, tmp_path):
    url = write_rows(tmp_path / "rows.jsonl", rows(3))
    first = svc.imports.run(
        ME, parse_import({"recipe": RECIPE, "source": {"url": url}, "version": "1.0.0"})
    )
    again = svc.imports.run(
        ME, parse_import({"recipe": RECIPE, "source": {"url": url}, "version": "1.0.0"})
    )
    assert first.result.created and not again.result.created
    write_rows(tmp_path / "rows.jsonl", rows(4))
    with pytest.raises(Conflict):
        svc.imports.run(
            ME, parse_import({"recipe": RECIPE, "source": {"url": url}, "version": "1.0.0"})
        )
    bumped = svc.imports.run(ME, parse_import({"recipe": RECIPE, "source": {"url": url}}))
    assert bumped.result.record.version == "1.1.0"
    assert bumped.result.stats.cases_reused == 3


PLAIN = {**RECIPE, "mapping": {k: v for k, v in RECIPE["mapping"].items() if k != "tag_fields"}}


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ('{"id": "a", "q": "x", "a": "#### 1"}\n{"id": "b", "q": oops}\n', "line 2"),
        (
            '{"id": "a", "q": "x", "a": "#### 1"}\n{"id": "b", "a": "#### 2"}\n',
            "row 1: missing field 'q'",
        ),
        (
            '{"id": "a", "q": "x", "a": "#### 1"}\n{"id": "a", "q": "y", "a": "#### 2"}\n',
            "rows 0 and 1",
        ),
        ('{"id": "a", "q": "x", "a": "1"}\n', "'####' not found"),
        ("\n\n", "no rows"),
    ],
)
def test_bad_input_registers_nothing(svc, tmp_path, content, match):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(BadRequest, match=match):
        svc.imports.run(ME, parse_import({"recipe": PLAIN, "source": {"url": str(path)}}))
    assert nothing_registered(svc)


def test_a_row_over_the_case_size_limit_is_413_naming_the_row(tmp_path):
    svc = build(load_settings({}, home=str(tmp_path / "home"), max_case_bytes=2000))
    big = rows(3)
    big[2]["q"] = "x" * 5000
    url = write_rows(tmp_path / "rows.jsonl", big)
    with pytest.raises(TooLarge, match="row 2: case 'r2'") as exc:
        svc.imports.run(ME, parse_import({"recipe": RECIPE, "source": {"url": url}}))
    assert exc.value.fields["row"] == 2
    assert nothing_registered(svc)


def test_a_truncated_gzip_registers_nothing(svc, tmp_path):
    path = tmp_path / "rows.jsonl.gz"
    data = "".join(json.dumps(r) + "\n" for r in rows(2000)).encode()
    path.write_bytes(gzip.compress(data)[:-100])
    with pytest.raises(BadRequest, match="truncated or corrupt"):
        svc.imports.run(ME, parse_import({"recipe": RECIPE, "source": {"url": str(path)}}))
    assert nothing_registered(svc)


def test_an_unknown_recipe_key_is_400_naming_it(svc):
    bad = {**RECIPE, "mapping": {**RECIPE["mapping"], "answer_feild": "a"}}
    with pytest.raises(BadRequest, match="answer_feild") as exc:
        svc.imports.run(ME, parse_import({"recipe": bad, "source": {"text": "{}"}}))
    assert exc.value.fields["field"] == "mapping.answer_feild"


def test_preview_shows_rows_fields_and_cases_without_registering(svc, tmp_path):
    url = write_rows(tmp_path / "rows.jsonl", [*rows(2), {"id": "r9", "a": "#### 9"}, *rows(10)])
    got = svc.imports.preview(ME, parse_import({"recipe": RECIPE, "source": {"url": url}}))
    assert got.fields == ["id", "q", "a", "level"]
    assert [c["id"] for c in got.cases] == ["r0", "r1", "r0", "r1"]
    assert got.errors == [
        {"row": 2, "detail": "row 2: missing field 'q'; the row has 'id', 'a'", "field": "q"}
    ]
    assert len(got.rows) == 5
    assert nothing_registered(svc)


def test_catalog_recipes_are_served_from_shared_and_resolvable_by_id(svc):
    assert [r.id for r in svc.recipes.benchmarks()] == [
        "gsm8k",
        "humaneval",
        "mmlu",
        "swe-bench-verified",
        "truthfulqa",
    ]
    stored = svc.recipes.get(ME, "gsm8k")
    assert stored.owner == "_shared" and stored.recipe.source.dataset == "openai/gsm8k"


def test_every_catalog_recipe_names_its_origin_and_citation(svc):
    # The first-party catalog is GSM8K, HumanEval, MMLU, TruthfulQA and SWE-bench Verified on HF
    by_id = {r.id: r for r in svc.recipes.benchmarks()}
    assert by_id["swe-bench-verified"].source.dataset == "princeton-nlp/SWE-bench_Verified"
    for recipe in by_id.values():
        assert recipe.source.kind == "huggingface", recipe.id
        assert recipe.origin.homepage and recipe.origin.paper and recipe.origin.license, recipe.id
        assert (recipe.origin.citation or "").startswith("@"), recipe.id


def test_progress_is_reported_as_rows_are_read_up_to_the_total(svc, tmp_path):
    url = write_rows(tmp_path / "rows.jsonl", rows(2500))
    seen: list[int] = []
    done = svc.imports.run(
        ME, parse_import({"recipe": RECIPE, "source": {"url": url}}), progress=seen.append
    )
    assert seen and seen == sorted(seen) and seen[-1] == 2500 == done.rows_read


def test_the_recipe_registry_is_versioned_with_tombstones_and_conflicts(svc):
    reg = svc.recipes.register(ME, RECIPE)
    again = svc.recipes.register(ME, RECIPE)
    assert reg.created and not again.created
    changed = {**RECIPE, "description": "other"}
    assert svc.recipes.validate(ME, changed).would_conflict
    with pytest.raises(Conflict):
        svc.recipes.register(ME, changed)
    svc.recipes.register(ME, {**changed, "version": "1.1.0"})
    assert svc.recipes.get(ME, "mini").recipe.version == "1.1.0"
    svc.recipes.delete(ME, "mini", "1.1.0")
    assert svc.recipes.get(ME, "mini").recipe.version == "1.0.0"
    other = Identity("other", "bob")
    with pytest.raises(NotFound):
        svc.recipes.get(other, "mini")
    summary = svc.recipes.list_recipes(ME).items
    assert [(s.id, s.latest, s.category) for s in summary] == [("mini", "1.0.0", "qa")]
