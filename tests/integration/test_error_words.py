"""Refused patterns are said in words, never as a regular expression."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import ValidationError

from caseshelf.api.errors import request_validation_error
from caseshelf.client.refs import parse_ref
from caseshelf.domain.envelope import validation_problem
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.models import DatasetVersionInput
from caseshelf.domain.versions import check_dataset_id, check_label
from caseshelf.domain.words import DATASET_ID_RULE, LABEL_RULE, REF_RULE

pytestmark = pytest.mark.integration

PACKAGE = Path(__file__).resolve().parents[2] / "shared" / "caseshelf"


def test_model_and_check_errors_say_the_rule_in_words() -> None:
    with pytest.raises(ValidationError) as exc:
        DatasetVersionInput.model_validate({"id": "a b", "version": "1.0.0", "cases": []})
    assert validation_problem(exc.value) == ("id", DATASET_ID_RULE)
    with pytest.raises(ValidationError) as exc:
        DatasetVersionInput.model_validate({"id": "a", "version": "x/y", "cases": []})
    assert validation_problem(exc.value) == ("version", LABEL_RULE)
    assert LABEL_RULE == "version labels are 1\u201364 letters, digits, '.', '_' or '-'"
    for check, value in ((check_label, "a b"), (check_dataset_id, "-x")):
        with pytest.raises(BadRequest) as bad:
            check(value)
        assert "[A-Za-z" not in bad.value.detail


def test_a_refused_query_parameter_is_said_in_words() -> None:
    from caseshelf.api.dto import REF_PATTERN

    err = {
        "type": "string_pattern_mismatch",
        "loc": ("query", "ref"),
        "msg": f"String should match pattern '{REF_PATTERN}'",
        "ctx": {"pattern": REF_PATTERN},
    }
    assert REF_RULE in request_validation_error([err]).detail
    with pytest.raises(BadRequest, match="a ref is a version label or tag"):
        parse_ref("gsm8k@a b")


def test_no_message_in_the_package_spells_a_rule_as_a_regular_expression() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
        for node in ast.walk(tree):
            if id(node) in docstrings:
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                # a pattern starts with ^ or is a character class alone; a message has words
                if "[A-Za-z0-9" in text and " " in text and not text.startswith(("^", "(")):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {text[:60]}")
    assert found == []
