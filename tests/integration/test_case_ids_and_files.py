"""Case ids and case file paths at registration: ids a disk cannot hold as a directory name
still export (shortened with their digest), ids that look like others are refused, ids equal
but for case export to distinct directories, and a second spelling of a file path is refused
instead of silently merging two files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.identity import Identity
from caseshelf.services.registry import parse_dataset

pytestmark = pytest.mark.integration

ME = Identity("local", "alice")


def dataset(*cases: dict[str, Any]) -> Any:
    return parse_dataset({"id": "demo", "version": "1.0.0", "cases": list(cases)})


@pytest.mark.parametrize(
    "case_id", ["a\u202eb", "zero\u200bwidth", "bom\ufeff", "c1\x85", "tab\tid", "lrm\u200e"]
)
def test_ids_with_control_bidi_or_zero_width_characters_are_refused(case_id: str) -> None:
    with pytest.raises(BadRequest) as err:
        dataset({"id": case_id})
    assert err.value.fields["field"] == "id" and "U+" in err.value.detail


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("a//b.txt", "not normalised"),
        ("a/b/", "not normalised"),
        ("x/.claude/settings.json", "agent configuration"),
        ("hooks/pre.sh", "hook directory"),
        ("INPUT.YAML", "reserved name"),
    ],
)
def test_case_file_paths_that_are_a_second_spelling_or_agent_config_are_refused(
    path: str, why: str
) -> None:
    with pytest.raises(BadRequest, match=why) as err:
        dataset({"id": "c1", "files": {path: {"text": "x"}}, "inputs": {"user": "q"}})
    assert err.value.fields["case_id"] == "c1" and err.value.fields["field"] == "files"


def test_two_spellings_of_one_path_never_collapse_into_one_file() -> None:
    files = {"a/b": {"text": "one"}, "a//b": {"text": "two"}}
    with pytest.raises(BadRequest, match="not normalised"):
        dataset({"id": "c1", "files": files})
    merged = {"Notes.md": {"text": "one"}, "notes.md": {"text": "two"}}
    with pytest.raises(BadRequest, match="case-insensitive"):
        dataset({"id": "c1", "files": merged})


def test_long_and_case_variant_ids_export_to_distinct_short_directories(tmp_path: Path) -> None:
    svc = build(load_settings({}, home=str(tmp_path / "home")))
    ids = ["x" * 256, "é" * 60, "名" * 256, "Case", "case", "CASE", "HumanEval/0"]
    svc.registry.register(ME, dataset(*({"id": i, "inputs": {"user": i}} for i in ids)))
    out = tmp_path / "out"
    result = svc.exports.export_version(ME, "demo", "1.0.0", to=str(out))
    dirs = [p.name for p in out.iterdir() if p.is_dir()]
    assert len(dirs) == len(ids)
    assert len({d.casefold() for d in dirs}) == len(ids)  # distinct on a case-insensitive disk
    assert max(len(d.encode()) for d in dirs) <= 240
    assert result is not None
