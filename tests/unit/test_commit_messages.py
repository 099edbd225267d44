"""The commit-message rule (`scripts/check_commits.py`): a subject of at most 72 characters, then
a blank line before the body."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_commits.py"
spec = importlib.util.spec_from_file_location("check_commits", SCRIPT)
assert spec is not None and spec.loader is not None
check_commits = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_commits)


def test_a_short_subject_with_a_body_after_a_blank_line_passes() -> None:
    assert check_commits.check_message("export: stage inside the target\n\nWhy and figures.") == []
    assert check_commits.check_message("x" * 72) == []


def test_a_long_subject_an_empty_one_and_a_missing_blank_line_are_named() -> None:
    assert check_commits.check_message("x" * 73) == ["the subject is 73 characters (at most 72)"]
    assert check_commits.check_message("\n\nbody") == ["the subject is empty"]
    assert check_commits.check_message("subject\nbody right after") == [
        "the subject is not followed by a blank line"
    ]


def test_comment_lines_of_the_editor_template_are_not_the_message() -> None:
    assert check_commits.check_message("# Please enter the message\nfix: a thing\n") == []
