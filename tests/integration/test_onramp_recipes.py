"""Row sources and templates the recipe language reaches (issue: on-ramps): `.json` files and
directories of them, list paths, lettered options, chat-message tasks and `inputs.messages`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from caseshelf.adapters.sources import SourceReader, smart_opener
from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.envelope import canonical_case, case_to_plain, parse_case
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.identity import Identity
from caseshelf.domain.legacy import normalise_legacy_item
from caseshelf.domain.mapping import RowMapper, row_to_case
from caseshelf.domain.recipe import parse_recipe
from caseshelf.domain.templates import FilterFailed, compile_template
from caseshelf.services.imports import parse_import

pytestmark = pytest.mark.integration
ME = Identity("local", "alice")


def recipe(source: dict, **mapping) -> dict:
    return {"id": "r", "version": "1.0.0", "category": "qa", "source": source, "mapping": mapping}


def rows(source: dict, **kw) -> list[dict]:
    parsed = parse_recipe(recipe(source, task_field="q"))
    return [r for _, r in SourceReader(smart_opener()).rows(parsed.source, **kw)]


# -- json sources ----------------------------------------------------------------------------------


def test_a_json_array_and_an_object_with_records_path(tmp_path):
    array = tmp_path / "a.json"
    array.write_text(json.dumps([{"q": "1"}, {"q": "2"}]))
    assert rows({"kind": "json", "url": str(array)}) == [{"q": "1"}, {"q": "2"}]
    nested = tmp_path / "n.json"
    nested.write_text(json.dumps({"meta": {}, "data": {"rows": [{"q": "x"}]}}))
    assert rows({"kind": "json", "url": str(nested), "records_path": "data.rows"}) == [{"q": "x"}]


@pytest.mark.parametrize(
    ("doc", "records_path", "message"),
    [
        ({"items": [], "n": 1}, None, r"an object.*records_path.*\['items'\]"),
        ({"data": {}}, "data.rows", r"no key 'data\.rows'"),
        ({"data": 3}, "data", r"under 'data' is int"),
        ([{"q": 1}, 2], None, r"record 1 is not a JSON object"),
    ],
)
def test_json_sources_name_what_is_wrong(tmp_path, doc, records_path, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    source = {"kind": "json", "url": str(path)}
    if records_path:
        source["records_path"] = records_path
    with pytest.raises(BadRequest, match=message):
        rows(source)


def test_a_directory_of_json_files_is_one_record_per_file_with_its_stem(tmp_path):
    tasks = tmp_path / "arc"
    tasks.mkdir()
    (tasks / "b7249182.json").write_text(json.dumps({"train": [], "test": [{"input": [[1]]}]}))
    (tasks / "007bbfb7.json").write_text(json.dumps({"train": [], "test": [{"input": [[0]]}]}))
    (tasks / "notes.txt").write_text("not a record")
    spec = recipe(
        {"kind": "json", "url": str(tasks)},
        id_field="_stem",
        task_template="Solve: {test[0].input|tojson}",
    )
    cases = [
        RowMapper(parse_recipe(spec))(row, i)
        for i, row in SourceReader(smart_opener()).rows(parse_recipe(spec).source)
    ]
    assert [c["id"] for c in cases] == ["007bbfb7", "b7249182"]
    assert cases[0]["inputs"]["user"] == "Solve: [[0]]"


def test_a_json_directory_record_may_not_carry_its_own_stem(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.json").write_text('{"_stem": "y"}')
    with pytest.raises(BadRequest, match="'_stem'"):
        rows({"kind": "json", "url": str(tmp_path / "d")})


@pytest.mark.parametrize("as_directory", [False, True])
def test_json_sources_keep_every_value_as_written(tmp_path, as_directory):
    # Given a .json file (or a directory of them) with an integer orjson alone reads as a float
    (tmp_path / "d").mkdir()
    path = tmp_path / "d" / "x.json"
    path.write_text('{"q": "1", "n": -9223372036854775809}')
    source = {"kind": "json", "url": str(path.parent if as_directory else path)}
    if not as_directory:
        path.write_text('[{"q": "1", "n": -9223372036854775809}]')
    # Then it is read exactly
    (row,) = rows(source)
    assert row["n"] == -(2**63) - 1 and type(row["n"]) is int
    # And a key given twice is refused, naming it, not read as its last value
    path.write_text(path.read_text().replace('"n"', '"q"'))
    with pytest.raises(BadRequest, match="the key 'q' is given twice"):
        rows(source)


def test_the_json_filter_refuses_a_key_given_twice():
    with pytest.raises(FilterFailed, match="the key 'a' is given twice"):
        compile_template("{raw|json}").render({"raw": '{"a": 1, "a": 2}'}, 0)
    assert compile_template("{raw|json}").render({"raw": '{"a": 18446744073709551616}'}, 0) == {
        "a": 2**64
    }


# -- templates over lists -------------------------------------------------------------------------

ROW = {
    "messages": [
        {"role": "system", "content": "brief"},
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "u2"},
    ],
    "choices": ["red", "green", "blue", "cyan", "pink"],
    "answer": 3,
}


@pytest.mark.parametrize(
    ("template", "rendered"),
    [
        ("{messages[*].content}", ["brief", "u1", "a1", "u2"]),
        ("{messages[role=user].content}", ["u1", "u2"]),
        ("{messages[role=user].content|join: / }", "u1 / u2"),
        ("{messages[role=user].content|last}", "u2"),
        ("{messages[0].role}", "system"),
        ("{choices|lettered}", "A. red\nB. green\nC. blue\nD. cyan\nE. pink"),
        ("Answer: {answer|letter}", "Answer: D"),
        ("{messages[role=tool].content|join:,|default:none}", "none"),
    ],
)
def test_list_templates(template, rendered):
    assert compile_template(template).render(ROW, 0) == rendered


def test_a_fanned_out_path_needs_the_field_in_every_item():
    from caseshelf.domain.templates import FieldMissing

    with pytest.raises(FieldMissing):
        compile_template("{messages[*].name}").render(ROW, 0)


def test_multiple_choice_with_any_number_of_options_needs_no_code():
    spec = recipe(
        {"kind": "jsonl"},
        task_template="{question}\n\n{choices|lettered}",
        answer_field="answer|letter",
    )
    parsed = parse_recipe(spec)
    three = row_to_case({"question": "Q?", "choices": ["a", "b", "c"], "answer": 2}, 0, parsed)
    six = row_to_case({"question": "Q?", "choices": list("abcdef"), "answer": 5}, 1, parsed)
    assert three["inputs"]["user"] == "Q?\n\nA. a\nB. b\nC. c"
    assert three["expectations"]["ground_truth"] == "C"
    assert six["inputs"]["user"].endswith("F. f") and six["expectations"]["ground_truth"] == "F"


# -- chat messages ---------------------------------------------------------------------------------


def test_a_chat_message_task_maps_as_register_reads_it():
    parsed = parse_recipe(recipe({"kind": "jsonl"}, id_field="id", task_field="messages"))
    for messages in (
        [{"role": "user", "content": "hi"}],
        [{"role": "user", "content": "hi"}, {"role": "hitl", "content": "yes"}],
        ROW["messages"],
    ):
        mapped = RowMapper(parsed)({"id": "c", "messages": messages}, 0)
        registered, _ = normalise_legacy_item({"id": "c", "inputs": {"user": messages}})
        assert mapped == case_to_plain(parse_case(registered))
        assert canonical_case(parse_case(mapped)) == canonical_case(parse_case(registered))
    assert mapped["inputs"]["messages"][2] == {"role": "assistant", "content": "a1"}
    assert mapped["inputs"]["user"] == ["u1", "u2"]


def test_a_case_without_a_conversation_keeps_its_bytes():
    data, _ = canonical_case(parse_case({"id": "a", "inputs": {"user": ["x", "y"]}}))
    assert data == b'{"id":"a","inputs":{"user":["x","y"]}}'
    empty, _ = canonical_case(
        parse_case({"id": "a", "inputs": {"user": ["x", "y"], "messages": []}})
    )
    assert empty == data
    # and the registration fast path gives the same plain form as the reference one
    from caseshelf.domain.envelope import cases_to_plain

    chat = parse_case(
        RowMapper(parse_recipe(recipe({"kind": "jsonl"}, task_field="m")))(
            {"m": ROW["messages"]}, 0
        )
    )
    assert cases_to_plain([chat]) == [case_to_plain(chat)]


def test_a_bad_chat_message_names_the_row_and_the_turn():
    parsed = parse_recipe(recipe({"kind": "jsonl"}, task_field="m"))
    with pytest.raises(BadRequest, match=r"row 4: inputs\.user\.0\.content is not a string"):
        RowMapper(parsed)({"m": [{"role": "user", "content": 3}]}, 4)
    with pytest.raises(BadRequest, match=r"row 0: inputs\.user has no user message"):
        RowMapper(parsed)({"m": [{"role": "assistant", "content": "x"}]}, 0)


# -- required keys ---------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["id", "version", "category", "source", "mapping"])
def test_every_required_recipe_key_is_named_when_missing(key):
    spec = recipe({"kind": "jsonl"}, task_field="q")
    del spec[key]
    with pytest.raises(BadRequest, match=rf"recipe: {key}: Field required"):
        parse_recipe(spec)


# -- real data ---------------------------------------------------------------------------------


def test_a_real_json_object_with_records_under_a_key(shared_data, tmp_path):
    svc = build(load_settings({}, home=str(tmp_path / "home")))
    spec = recipe(
        {"kind": "json", "records_path": "rows"},
        id_field="row_idx",
        task_field="row.text",
        answer_field="row.label",
    )
    req = parse_import(
        {"recipe": spec, "source": {"url": str(shared_data / "hf-viewer/rows-example.json")}}
    )
    done = svc.imports.run(ME, req)
    assert done.result.record.case_count == 3
    cases = svc.registry.list_cases(ME, "r", "latest").items
    assert [c["id"] for c in cases] == ["234", "235", "236"]


def test_real_truthfulqa_options_lettered(shared_data):
    spec = recipe(
        {"kind": "csv", "url": str(shared_data / "truthfulqa/TruthfulQA_mini.csv")},
        task_template="{Question}\n{Incorrect Answers|split:;|lettered}",
    )
    parsed = parse_recipe(spec)
    cases = [RowMapper(parsed)(r, i) for i, r in SourceReader(smart_opener()).rows(parsed.source)]
    assert len(cases) == 10
    assert all("\nA. " in c["inputs"]["user"] for c in cases)
    assert all(case_to_plain(parse_case(c)) == c for c in cases)


def test_real_mas_lab_chat_items_as_rows_through_a_recipe(shared_data, tmp_path):
    import yaml

    doc = yaml.safe_load((shared_data / "mas-lab/envelope/qa-agent-default.yaml").read_text())
    items = doc["spec"]["items"]
    path = tmp_path / "items.json"
    path.write_text(json.dumps(items))
    parsed = parse_recipe(
        recipe({"kind": "json", "url": str(path)}, id_field="id", task_field="inputs.user")
    )
    mapped = [RowMapper(parsed)(r, i) for i, r in SourceReader(smart_opener()).rows(parsed.source)]
    assert len(mapped) == len(items) == 5
    for item, case in zip(items, mapped, strict=True):
        registered, _ = normalise_legacy_item({"id": str(item["id"]), "inputs": item["inputs"]})
        assert case["inputs"] == case_to_plain(parse_case(registered))["inputs"]


def test_the_recipe_page_names_the_required_keys():
    page = (Path(__file__).resolve().parents[2] / "docs" / "recipes.md").read_text()
    assert "Required keys" in page and "`category`" in page


def test_a_json_file_of_json_lines_reads_as_json_lines(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text('{"q": "1"}\n{"q": "2"}\n')
    assert rows({"kind": "json", "url": str(path)}) == [{"q": "1"}, {"q": "2"}]
    path.write_text('{"q": "1"}\n{"q": \n')
    with pytest.raises(BadRequest, match="line 2"):
        rows({"kind": "json", "url": str(path)})
