"""The legacy-shape normaliser and the dataset file loader (envelope migration)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caseshelf.domain.envelope import normalise_item
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.legacy import normalise_legacy_item
from caseshelf.domain.notices import NOTICES, notice, notice_message
from caseshelf.services.loaders import DatasetShapeWarning, load_dataset, load_dataset_file
from caseshelf.services.registry import parse_dataset

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def needs(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared benchmark data not present: {path}")
    return path


# -- notices -------------------------------------------------------------------------------


def test_every_code_points_at_its_anchor():
    for code, n in NOTICES.items():
        assert n.anchor == f"docs/migration.md#{code}"
    assert set(NOTICES) == {
        "dataset.legacy_item",
        "dataset.role_list_user",
        "dataset.legacy_expectations",
        "dataset.bare_list",
    }


def test_unknown_code_is_a_programming_error():
    with pytest.raises(LookupError):
        notice("dataset.nope")


def test_message_names_file_and_anchor():
    msg = notice_message("dataset.bare_list", "d/x.yaml")
    assert msg.startswith("d/x.yaml: dataset.bare_list")
    assert "docs/migration.md#dataset.bare_list" in msg


# -- field map -----------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["prompt", "query", "question", "text", "input", "user", "task"])
def test_item_level_prompt_keys_become_inputs_user(key):
    item, codes = normalise_legacy_item({"id": "a", key: "hello"})
    assert item == {"id": "a", "inputs": {"user": "hello"}}
    assert codes == ["dataset.legacy_item"]


@pytest.mark.parametrize("key", ["expected_answer", "ground_truth", "expected"])
def test_answer_keys_become_ground_truth(key):
    item, codes = normalise_legacy_item({"id": "a", "prompt": "q", key: {"x": 1}})
    assert item["expectations"] == {"ground_truth": {"x": 1}}
    assert codes == ["dataset.legacy_item"]


def test_turns_split_into_user_and_hitl_never_inputs_turns():
    # Given a prompt followed by user and HITL turns
    item, codes = normalise_legacy_item(
        {
            "id": "t",
            "prompt": "p0",
            "turns": [
                {"role": "user", "content": "u1"},
                {"role": "hitl", "content": "h1"},
                {"role": "user", "content": "u2"},
            ],
        }
    )
    # Then user contents are inputs.user in order and HITL contents are inputs.hitl
    assert item["inputs"] == {"user": ["p0", "u1", "u2"], "hitl": ["h1"]}
    assert "turns" not in item["inputs"] and "turns" not in item
    assert codes == ["dataset.legacy_item"]


def test_turns_with_an_assistant_role_keep_the_conversation_in_messages():
    item, _ = normalise_legacy_item(
        {
            "id": "t",
            "prompt": "p0",
            "turns": [{"role": "assistant", "content": "a1"}, {"role": "user", "content": "u1"}],
        }
    )
    assert item["inputs"] == {
        "user": ["p0", "u1"],
        "messages": [
            {"role": "user", "content": "p0"},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "u1"},
        ],
    }


def test_a_conversation_without_user_turn_is_refused():
    with pytest.raises(BadRequest, match=r"'t'.*no user message"):
        normalise_legacy_item(
            {"id": "t", "inputs": {"user": [{"role": "assistant", "content": "x"}]}}
        )


def test_memory_seeds_session_and_hitl_responses_move():
    item, codes = normalise_legacy_item(
        {
            "id": "m",
            "prompt": "p",
            "memory_seeds": "./seeds/bob.yaml",
            "session_id": "s1",
            "hitl_responses": ["yes"],
        }
    )
    assert item["inputs"] == {"user": "p", "memory_seeds": "seeds/bob.yaml", "session_id": "s1"}
    assert item["expectations"] == {"details": {"hitl_responses": ["yes"]}}
    assert codes == ["dataset.legacy_item"]


def test_role_list_user_becomes_strings():
    one, codes = normalise_legacy_item(
        {"id": "r", "inputs": {"user": [{"role": "user", "content": "hi"}]}}
    )
    assert one["inputs"] == {"user": "hi"}
    assert codes == ["dataset.role_list_user"]
    many, _ = normalise_legacy_item(
        {
            "id": "r",
            "inputs": {
                "user": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
            },
        }
    )
    assert many["inputs"] == {"user": ["a", "b"]}


def test_app_keys_on_expectations_move_to_details():
    item, codes = normalise_legacy_item(
        {"id": "e", "inputs": {"user": "q"}, "expectations": {"ground_truth": 1, "governance": {}}}
    )
    assert item["expectations"] == {"ground_truth": 1, "details": {"governance": {}}}
    assert codes == ["dataset.legacy_expectations"]


def test_key_on_expectations_and_under_details_is_an_error():
    with pytest.raises(BadRequest, match=r"'e'.*'correct_action'") as err:
        normalise_legacy_item(
            {
                "id": "e",
                "expectations": {"correct_action": "a", "details": {"correct_action": "b"}},
            }
        )
    assert err.value.fields["case_id"] == "e"


def test_tool_fixture_shapes():
    ok, _ = normalise_legacy_item({"id": "f", "inputs": {"tool_fixtures": "fx.yaml"}})
    assert ok["inputs"]["tool_fixtures"] == "fx.yaml"
    by_tool = {"by_tool": {"*": {"rows": []}}}
    same, codes = normalise_legacy_item({"id": "f", "inputs": {"tool_fixtures": by_tool}})
    assert same["inputs"]["tool_fixtures"] == by_tool and codes == []
    with pytest.raises(BadRequest, match=r"'f'.*key 'scene'"):
        normalise_legacy_item({"id": "f", "inputs": {"tool_fixtures": {"scene": "a.yaml"}}})
    with pytest.raises(BadRequest, match=r"inline payload"):
        normalise_legacy_item({"id": "f", "inputs": {"tool_fixtures": {"rows": [1, 2]}}})
    with pytest.raises(BadRequest, match=r"inline list"):
        normalise_legacy_item({"id": "f", "inputs": {"tool_fixtures": [1, 2]}})


def test_camel_case_keys_become_snake_case():
    item, codes = normalise_legacy_item(
        {
            "id": "c",
            "task": "do",
            "timeoutSec": 30,
            "env": {"kind": "os-use", "screenshotPath": "/tmp/s.png"},
            "graders": [{"id": "judge", "config": {"useScreenshot": True}}],
        }
    )
    assert item["timeout_sec"] == 30
    assert item["env"] == {"kind": "os-use", "screenshot_path": "/tmp/s.png"}
    assert item["graders"][0]["config"] == {"useScreenshot": True}  # grader config untouched
    assert codes == ["dataset.legacy_item"]


def test_a_value_given_twice_is_an_error():
    with pytest.raises(BadRequest, match=r"both 'prompt' and inputs.user"):
        normalise_legacy_item({"id": "d", "prompt": "a", "inputs": {"user": "b"}})
    with pytest.raises(BadRequest, match=r"several prompt keys"):
        normalise_legacy_item({"id": "d", "prompt": "a", "query": "b"})


def test_envelope_items_pass_unchanged_and_normalise_item_uses_the_normaliser():
    item = {
        "id": "ok",
        "inputs": {"user": "hi", "hitl": ["x"]},
        "expectations": {"ground_truth": 1, "details": {"k": 2}},
        "tags": ["a"],
    }
    assert normalise_legacy_item(item) == (item, [])
    assert normalise_item({"id": "x", "prompt": "p"})[1] == ["dataset.legacy_item"]


# -- loader --------------------------------------------------------------------------------


def test_bare_list_warns_once_per_code(tmp_path):
    # Given a bare list with two legacy items
    f = tmp_path / "mini.yaml"
    f.write_text("- id: a\n  prompt: one\n- id: b\n  prompt: two\n  expected: 2\n")
    # When it is loaded
    raw, warnings = load_dataset(f)
    # Then each code is warned once, naming the file and the anchor
    assert [w.split(": ")[1] for w in warnings] == ["dataset.bare_list", "dataset.legacy_item"]
    assert all(str(f) in w and "docs/migration.md#" in w for w in warnings)
    assert raw["id"] == "mini"
    assert raw["cases"][1] == {
        "id": "b",
        "inputs": {"user": "two"},
        "expectations": {"ground_truth": 2},
    }


def test_a_user_string_is_prompt_text_even_when_a_file_has_that_name(tmp_path):
    # Given a prompt that happens to name a file next to the dataset
    (tmp_path / "prompt.md").write_text("file body, never read\n")
    f = tmp_path / "d.yaml"
    f.write_text(
        "apiVersion: lab/v1\nkind: Dataset\nmetadata: {name: d}\n"
        "spec:\n  items:\n  - id: a\n    inputs: {user: prompt.md}\n  - id: b\n"
        "    prompt: prompt.md\n"
    )
    raw, _ = load_dataset(f)
    # Then both items keep the text itself
    assert [c["inputs"]["user"] for c in raw["cases"]] == ["prompt.md", "prompt.md"]


def test_non_dataset_kind_is_refused(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("apiVersion: lab/v1\nkind: Experiment\nspec: {}\n")
    with pytest.raises(BadRequest, match=r"not a Dataset"):
        load_dataset_file(f)


def test_loader_error_names_the_file_and_index(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("- id: a\n  prompt: one\n  query: two\n")
    with pytest.raises(BadRequest, match=r"x\.yaml.*'a'.*index 0"):
        load_dataset_file(f)


# -- real data -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "count", "codes"),
    [
        ("envelope/qa-mas-smoke.yaml", 1, []),
        ("envelope/qa-agent-default.yaml", 5, ["dataset.role_list_user"]),
        ("envelope/memory-provenance-dataset.yaml", 1, ["dataset.role_list_user"]),
        (
            "envelope/lifecycle-queries.yaml",
            13,
            ["dataset.role_list_user", "dataset.legacy_expectations"],
        ),
        ("legacy/trip_queries-full-example.yaml", 6, ["dataset.legacy_item"]),
        ("legacy/multi-turn-hitl-bare-list.yaml", 1, ["dataset.bare_list", "dataset.legacy_item"]),
    ],
)
def test_mas_lab_datasets_load_into_the_envelope(name, count, codes):
    path = needs(DATA / "mas-lab" / name)
    raw, warnings = load_dataset(path)
    raw.setdefault("version", "1.0.0")
    body = parse_dataset(raw)
    assert len(body.cases) == count
    assert [w.split(": ")[1] for w in warnings] == codes


def test_mas_lab_multi_turn_hitl_bare_list():
    raw, _ = load_dataset(needs(DATA / "mas-lab/legacy/multi-turn-hitl-bare-list.yaml"))
    case = parse_dataset({**raw, "version": "1"}).cases[0]
    assert case.inputs.user == [
        "Book a flight to Tokyo.",
        "Actually, make it business class.",
        "Add a hotel in Shinjuku for 5 nights.",
    ]
    assert case.inputs.hitl == ["Operator: budget approved up to €3,000."]


def test_mas_lab_lifecycle_governance_moves_to_details():
    raw, _ = load_dataset(needs(DATA / "mas-lab/envelope/lifecycle-queries.yaml"))
    body = parse_dataset(raw)
    first = body.cases[0]
    assert first.id == "n1" and body.id == "lifecycle-control-queries"
    assert first.inputs.user == "What trains run from Celestia to Verdantia?"
    assert first.expectations.details["governance"] == {"expected": "none"}
    assert first.metadata == {"type": "nominal"}
    # The lab's groups are kept beside the items, in the JSON and the YAML forms alike
    assert raw["produced_by"]["source"]["groups"] == [{"id": "nominal"}, {"id": "adversarial"}]


@pytest.mark.parametrize(
    "name",
    [
        "repo-smoke-1.0.0.json",
        "repo-smoke-1.1.0.json",
        "hermes-desktop-ssh.json",
        "quickstart-dataset.json",
    ],
)
def test_everdict_datasets_load_as_legacy_items(name):
    raw, warnings = load_dataset(needs(DATA / "everdict" / name))
    body = parse_dataset(raw)
    assert [w.split(": ")[1] for w in warnings] == ["dataset.legacy_item"]
    assert all(isinstance(c.inputs.user, str) and c.inputs.user for c in body.cases)
    if name == "hermes-desktop-ssh.json":
        case = body.cases[0]
        assert case.timeout_sec == 300
        assert case.env is not None and case.env.screenshot_path == "/tmp/osuse.png"


def test_load_dataset_file_issues_each_notice_as_a_warning(tmp_path):
    f = tmp_path / "mini.yaml"
    f.write_text("- id: a\n  prompt: one\n- id: b\n  prompt: two\n")
    with pytest.warns(DatasetShapeWarning) as caught:
        doc = load_dataset_file(f)
    assert len(caught) == 2
    assert doc["cases"][0]["inputs"] == {"user": "one"}


def test_json_list_of_envelope_cases_raises_no_notice(tmp_path):
    f = tmp_path / "cases.json"
    f.write_text('[{"id": "a", "inputs": {"user": "x"}}]')
    doc, warnings = load_dataset(f)
    assert warnings == [] and doc == {"cases": [{"id": "a", "inputs": {"user": "x"}}]}


# The fast path for items already in the envelope must agree with the full fold.
_text = st.text(max_size=8)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)
_envelope_items = st.fixed_dictionaries(
    {"id": st.text(min_size=1, max_size=8)},
    optional={
        "inputs": st.fixed_dictionaries(
            {},
            optional={
                "user": _text | st.lists(_text, max_size=3),
                "hitl": st.lists(_text, max_size=2),
                "session_id": _text,
            },
        ),
        "expectations": st.fixed_dictionaries(
            {},
            optional={
                "ground_truth": _json,
                "details": st.dictionaries(_text, _json, max_size=3),
                "metrics": st.dictionaries(_text, _json, max_size=2),
            },
        ),
        "env": st.just({"kind": "browser", "start_url": "https://example.org"}),
        "timeout_sec": st.integers(1, 5000),
        "tags": st.lists(_text, max_size=3),
        "metadata": st.dictionaries(_text, _json, max_size=3),
    },
)


@settings(max_examples=200, deadline=None)
@given(item=_envelope_items)
def test_items_already_in_the_envelope_skip_the_fold_with_the_same_result(item):
    from caseshelf.domain.legacy import _fold_item, already_envelope

    assert already_envelope(item)
    assert normalise_legacy_item(item) == _fold_item(item, None) == (item, [])
