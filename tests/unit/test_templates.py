"""Row templates: placeholders, dotted paths, filters, missing fields."""

import pytest

from caseshelf.domain.templates import (
    FieldMissing,
    FilterFailed,
    TemplateError,
    compile_field,
    compile_template,
)

pytestmark = pytest.mark.unit

ROW = {
    "question": "What is 2+2?",
    "answer": "2+2 is 4\n#### 4 ",
    "meta": {"level": "Easy", "tags": ["a", "b"]},
    "Correct Answers": "yes; sure ;; ok",
    "n": 3,
    "empty": "",
    "enc": '["t1", "t2"]',
    "thousands": "1,234.5",
}


def render(text: str, row: dict = ROW, index: int = 7):
    return compile_template(text).render(row, index)


def test_a_single_placeholder_keeps_the_value_and_text_joins_as_string():
    assert render("{n}") == 3
    assert render("{meta.tags}") == ["a", "b"]
    assert render("Q: {question} ({n})") == "Q: What is 2+2? (3)"


def test_dotted_paths_reach_into_objects_and_lists_and_whole_names_win():
    assert render("{meta.level|lower}") == "easy"
    assert render("{meta.tags.1}") == "b"
    assert render("{Correct Answers|split:;}") == ["yes", "sure", "ok"]


def test_the_gsm8k_answer_is_the_text_after_the_marker_stripped():
    assert compile_field("answer|after:####|strip").value(ROW, 0) == "4"
    assert compile_field("answer|before:####|strip").value(ROW, 0) == "2+2 is 4"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{question|upper}", "WHAT IS 2+2?"),
        ("{question|replace:2:two}", "What is two+two?"),
        ("{question|replace:2+:}", "What is 2?"),
        ("{meta.tags|join:, }", "a, b"),
        ("{missing|default:none}", "none"),
        ("{empty|default:x}", "x"),
        ("{enc|json}", ["t1", "t2"]),
        ("{meta|tojson}", '{"level":"Easy","tags":["a","b"]}'),
        ("{n|int}", 3),
        ("{_index}", 7),
        ("{{literal}} {n}", "{literal} 3"),
        ("{question|replace:\\::-}", "What is 2+2?"),
        ("{meta.level|lower}", "easy"),
        ("{question|strip:?}", "What is 2+2"),
        ("{n|letter}", "D"),
        ("{meta.level|prefix:L-|suffix:!}", "L-Easy!"),
        ("{thousands|float}", 1234.5),
        ("{thousands|before:.}", "1,234"),
    ],
)
def test_filters(text, expected):
    assert render(text) == expected


def test_a_missing_field_names_the_field():
    with pytest.raises(FieldMissing) as exc:
        render("Q: {nope}")
    assert exc.value.field == "nope"


def test_a_separator_that_is_absent_is_an_error_not_an_empty_answer():
    with pytest.raises(FilterFailed, match="not found"):
        render("{question|after:####}")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{question|frobnicate}", "unknown filter"),
        ("{question", "unclosed"),
        ("oops }", "unmatched"),
        ("{}", "empty field"),
        ("{q|replace:a}", "two arguments"),
        ("{q|split}", "separator"),
    ],
)
def test_bad_templates_are_refused_when_compiled(text, problem):
    with pytest.raises(TemplateError, match=problem):
        compile_template(text)
