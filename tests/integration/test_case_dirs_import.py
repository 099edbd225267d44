"""Case-directory trees (eval.yaml + cases/<id>/...) -> dataset, and back out byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.identity import Identity
from caseshelf.services.casedirs import build_case_dir_dataset, case_from_files
from caseshelf.services.registry import parse_dataset

pytestmark = pytest.mark.integration

ME = Identity("local", "alice")


def make_tree(root: Path, dataset_block: str, cases: dict[str, dict[str, bytes]]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "eval.yaml").write_text(f"name: demo\ndataset:\n{dataset_block}")
    for cid, files in cases.items():
        for rel, data in files.items():
            p = root / "cases" / cid / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
    return root / "eval.yaml"


def test_input_annotations_and_companions_map_to_the_envelope():
    case = case_from_files(
        "c1",
        {
            "input.yaml": b"prompt: fix it\npriority: high\n",
            "annotations.yaml": b"dedup_is_duplicate: true\n",
            "answers.yaml": b"answers: [yes]\n",
            "reference.md": b"# gold\n",
            "src/a.py": b"x = 1\n",
        },
    )
    assert case["inputs"] == {"user": "fix it"}
    assert case["expectations"] == {"details": {"dedup_is_duplicate": True}}
    assert case["metadata"] == {"input_fields": {"priority": "high"}}
    assert set(case["files"]) == {
        "input.yaml",
        "annotations.yaml",
        "answers.yaml",
        "reference.md",
        "src/a.py",
    }


def test_input_json_is_read_and_a_missing_input_names_the_case():
    case = case_from_files("j", {"input.json": b'{"prompt": "hi", "hitl": ["ok"]}'})
    assert case["inputs"] == {"user": "hi", "hitl": ["ok"]}
    with pytest.raises(BadRequest, match="case 'k': no input file"):
        case_from_files("k", {"reference.md": b"x"})


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("  path: ../elsewhere\n", "traverses"),
        ("  path: cases\n  workspace:\n    files: [/etc/passwd]\n", "absolute"),
        ("  path: cases\n  workspace:\n    files: [a/../../b]\n", "traverses"),
        ("  path: cases\n  workspace:\n    files: [{dest: x}]\n", "dest, source"),
        ("  path: cases\n  workspace:\n    files: [{dest: x, source: y, z: 1}]\n", "dest, source"),
        ("  path: cases\n  workspace:\n    files: [{dest: '.', source: y}]\n", "dest"),
        ("  path: cases\n  workspace:\n    files: [{dest: /abs, source: y}]\n", "absolute"),
        ("  path: cases\n  workspace:\n    files: [{dest: ../up, source: y}]\n", "traverses"),
        ("  path: cases\n  workspace:\n    files: [{dest: '', source: y}]\n", "dest"),
        ("  path: cases\n  workspace:\n    files: [{dest: /, source: y}]\n", "dest"),
        ("  path: cases\n  workspace:\n    files: [{source: y}]\n", "dest, source"),
        ("  path: cases\n  workspace:\n    files: [../up/]\n", "traverses"),
    ],
)
def test_dataset_block_is_validated_at_load(tmp_path, block, message):
    eval_yaml = make_tree(tmp_path / "p", block, {"c1": {"input.yaml": b"prompt: x\n"}})
    with pytest.raises(BadRequest, match=message):
        build_case_dir_dataset(eval_yaml)


def test_workspace_entries_strip_slashes_and_shared_files_are_read(tmp_path):
    eval_yaml = make_tree(
        tmp_path / "p",
        "  path: cases\n  workspace:\n    files:\n      - src/\n"
        "      - {dest: skill.md, source: skills/SKILL.md}\n"
        "      - {dest: leak.md, source: /etc/hostname}\n",
        {"c1": {"input.yaml": b"prompt: x\n", "src/a.py": b"1\n"}},
    )
    (tmp_path / "p" / "skills").mkdir()
    (tmp_path / "p" / "skills" / "SKILL.md").write_text("be good\n")
    built = build_case_dir_dataset(eval_yaml)
    assert built.body["produced_by"]["source"]["workspace_files"] == ["src"]
    assert built.body["shared_files"] == [{"dest": "skill.md", "text": "be good\n"}]
    assert any("leak.md" in w and "outside the project" in w for w in built.warnings)


def test_absolute_dataset_path_passes(tmp_path):
    cases_dir = tmp_path / "shared-cases"
    (cases_dir / "c1").mkdir(parents=True)
    (cases_dir / "c1" / "input.yaml").write_text("prompt: x\n")
    eval_yaml = tmp_path / "p" / "eval.yaml"
    eval_yaml.parent.mkdir()
    eval_yaml.write_text(f"dataset:\n  path: {cases_dir}\n")
    built = build_case_dir_dataset(eval_yaml.parent, dataset="abs", version="1")
    assert [c["id"] for c in built.body["cases"]] == ["c1"]


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("example", ["opencode-smoke", "anova-example"])
def test_real_eval_harness_trees_import_and_export_byte_for_byte(shared_data, tmp_path, example):
    # Given a real eval-harness case tree
    root = shared_data / "agent-eval-harness" / example
    built = build_case_dir_dataset(root, version="1.0.0")
    body = parse_dataset(built.body)
    assert built.warnings == []
    svc = build(load_settings({}, home=str(tmp_path / "home")))
    # When it is registered and exported
    svc.registry.register(ME, body)
    out = tmp_path / "out"
    svc.exports.export_version(ME, body.id, "1.0.0", to=str(out))
    # Then every original case file comes back with the same bytes
    cases_dir = root / ("cases" if example == "opencode-smoke" else "dataset")
    original = tree_bytes(cases_dir)
    exported = tree_bytes(out)
    for rel, data in original.items():
        assert exported.get(rel) == data, rel
    first = body.cases[0]
    assert isinstance(first.inputs.user, str) and first.inputs.user
    if example == "anova-example":
        assert len(body.cases) == 4
        assert first.expectations.details == {
            "instruction": "instruction.txt",
            "oracle": "oracle.diff",
        }
