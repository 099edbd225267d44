"""Row -> case: the mapping rules of a recipe, on plain rows."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caseshelf.domain.envelope import case_to_plain, parse_case
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.mapping import RowMapper, row_to_case, rows_to_cases
from caseshelf.domain.recipe import parse_recipe

pytestmark = pytest.mark.unit


def recipe(mapping: dict, *, category: str = "qa", **extra) -> object:
    body = {
        "id": "bench",
        "version": "1.0.0",
        "category": category,
        "source": {"kind": "jsonl"},
        "mapping": {"task_field": "q", **mapping},
        **extra,
    }
    return parse_recipe(body)


def test_env_precedence_repo_path_over_git_over_files_over_os_use_over_prompt_over_browser():
    row = {"q": "do it", "repo": "https://git.example/r.git", "url": "https://a.example"}
    full = {
        "repo_path": "/data",
        "image": "img:1",
        "git_field": "repo",
        "files_template": {"README.md": "{q}"},
        "os_use_env": True,
        "prompt_env": True,
        "start_url_field": "url",
    }
    order = [
        ("repo_path", {"kind": "repo", "source": {"path": "/data"}}),
        ("git_field", {"kind": "repo", "source": {"git": "https://git.example/r.git"}}),
        ("files_template", {"kind": "repo", "source": {"files": {"README.md": "do it"}}}),
        ("os_use_env", {"kind": "os-use"}),
        ("prompt_env", {"kind": "prompt"}),
        ("start_url_field", {"kind": "browser", "start_url": "https://a.example"}),
    ]
    mapping = dict(full)
    for key, env in order:
        assert row_to_case(row, 0, recipe(mapping))["env"] == env, key
        mapping.pop(key)
        if key == "repo_path":
            mapping.pop("image")
    assert "env" not in row_to_case(row, 0, recipe(mapping))
    assert row_to_case(row, 0, recipe(mapping, category="browser"))["env"] == {"kind": "browser"}


def test_os_use_env_carries_setup_display_screenshot_and_placement():
    r = recipe(
        {
            "os_use_env": True,
            "os_use_setup": ["apt-get install -y {pkg}"],
            "display": ":1",
            "screenshot_path": "/tmp/shot.png",
            "placement": "docker",
            "image": "desk:1",
        },
        category="tool",
    )
    case = row_to_case({"q": "x", "pkg": "jq"}, 0, r)
    assert case["env"] == {
        "kind": "os-use",
        "setup": ["apt-get install -y jq"],
        "display": ":1",
        "screenshot_path": "/tmp/shot.png",
        "placement": "docker",
    }
    assert case["image"] == "desk:1"


def test_extra_graders_are_appended_as_given_after_the_answer_grader():
    extra = [{"id": "steps"}, {"id": "judge", "config": {"rubric": "{q} stays literal"}}]
    r = recipe({"answer_field": "a", "extra_graders": extra})
    case = row_to_case({"q": "x", "a": "1"}, 0, r)
    assert [g["id"] for g in case["graders"]] == ["answer-match", "steps", "judge"]
    assert case["graders"][2]["config"] == {"rubric": "{q} stays literal"}


def test_ref_defaults_to_head_and_a_given_ref_is_kept():
    r = recipe({"git_field": "repo", "ref_field": "ref"})
    head = row_to_case({"q": "x", "repo": "g", "ref": ""}, 0, r)
    pinned = row_to_case({"q": "x", "repo": "g", "ref": "abc123"}, 1, r)
    assert parse_case(head).env.source.ref == "HEAD"  # the default, omitted in plain form
    assert pinned["env"]["source"] == {"git": "g", "ref": "abc123"}


def test_answer_match_grader_only_when_the_answer_is_not_empty():
    r = recipe({"answer_field": "a", "answer_mode": "exact"})
    with_answer = row_to_case({"q": "x", "a": "42"}, 0, r)
    without = row_to_case({"q": "x", "a": "  "}, 1, r)
    assert with_answer["expectations"] == {"ground_truth": "42"}
    assert with_answer["graders"] == [{"id": "answer-match", "config": {"mode": "exact"}}]
    assert "graders" not in without and "expectations" not in without


def test_tests_pass_from_the_test_command_field():
    case = row_to_case({"q": "x", "t": "pytest -q"}, 0, recipe({"test_cmd_field": "t"}))
    assert case["graders"] == [{"id": "tests-pass", "config": {"cmd": "pytest -q"}}]


def test_per_row_image_wins_over_the_recipe_image():
    r = recipe({"image_field": "img", "image": "default:1"})
    assert row_to_case({"q": "x", "img": "row:2"}, 0, r)["image"] == "row:2"
    assert row_to_case({"q": "x", "img": ""}, 1, r)["image"] == "default:1"


def test_a_container_case_without_an_image_fails_with_its_case_id():
    r = recipe({"id_field": "id", "repo_path": "/app", "image_field": "img"})
    with pytest.raises(BadRequest, match=r"'task-7'.*image"):
        row_to_case({"id": "task-7", "q": "x", "img": None}, 3, r)


def test_tags_from_tag_fields_drop_empty_values_and_come_sorted():
    r = recipe({"tag_fields": ["b", "a", "c", "d"]})
    case = row_to_case({"q": "x", "a": "zeta", "b": "alpha", "c": "", "d": ["m", ""]}, 0, r)
    assert case["tags"] == ["alpha", "m", "zeta"]


def test_id_from_the_id_field_or_recipe_id_and_row_index():
    assert row_to_case({"q": "x", "id": "HumanEval/0"}, 0, recipe({"id_field": "id"}))["id"] == (
        "HumanEval/0"
    )
    assert row_to_case({"q": "x"}, 12, recipe({}))["id"] == "bench-12"


def test_colliding_ids_name_both_rows():
    rows = [(0, {"q": "a", "id": "x"}), (1, {"q": "b", "id": "y"}), (2, {"q": "c", "id": "x"})]
    with pytest.raises(BadRequest, match="rows 0 and 2") as exc:
        list(rows_to_cases(rows, recipe({"id_field": "id"})))
    assert exc.value.fields["rows"] == [0, 2]


def test_a_missing_field_names_the_row_and_the_field():
    with pytest.raises(BadRequest, match="row 4: missing field 'question'") as exc:
        row_to_case({"q": "x"}, 4, recipe({"task_template": "{question}"}))
    assert exc.value.fields == {"row": 4, "field": "question"}


def test_details_metadata_hitl_and_grader_templates():
    r = recipe(
        {
            "details_fields": {"correct": "{ok|split:;}", "best": "{best}"},
            "metadata_fields": ["cat"],
            "hitl_field": "h",
        },
        grader_templates=[{"id": "judge", "config": {"rubric": "Answer: {best}", "n": 2}}],
    )
    case = row_to_case({"q": "x", "ok": "a; b", "best": "a", "cat": "Misc", "h": "yes"}, 0, r)
    assert case["expectations"]["details"] == {"correct": ["a", "b"], "best": "a"}
    assert case["metadata"] == {"cat": "Misc"}
    assert case["inputs"] == {"user": "x", "hitl": ["yes"]}
    assert case["graders"] == [{"id": "judge", "config": {"n": 2, "rubric": "Answer: a"}}]


def test_non_finite_numbers_are_refused_with_row_and_field():
    with pytest.raises(BadRequest, match=r"row 0: expectations\.ground_truth"):
        row_to_case({"q": "x", "a": float("nan")}, 0, recipe({"answer_field": "a"}))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=75, deadline=None)
@given(
    q=st.text(max_size=20) | st.lists(st.text(max_size=5), max_size=3),
    a=json_values,
    tags=st.lists(st.text(max_size=4), max_size=4),
    cmd=st.text(max_size=6),
    meta=json_values,
)
def test_mapped_cases_are_a_fixed_point_of_envelope_validation(q, a, tags, cmd, meta):
    """The mapper's plain form is what parse_case + case_to_plain make of it: byte for byte the
    same case a user would register by hand."""
    r = recipe(
        {
            "answer_field": "a",
            "tag_fields": ["tags"],
            "test_cmd_field": "cmd",
            "metadata_fields": ["meta"],
            "git_field": "git",
        }
    )
    row = {"q": q, "a": a, "tags": tags, "cmd": cmd, "meta": meta, "git": "g"}
    plain = RowMapper(r)(row, 0)
    assert case_to_plain(parse_case(plain)) == plain
