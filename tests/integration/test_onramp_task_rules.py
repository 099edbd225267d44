"""The task, case-tree and lab formats as their own tools read them (issue: on-ramps).

Each rule is tested on a small tree built here, then once per family on the real trees in
`../shared/data`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from caseshelf.domain.errors import BadRequest
from caseshelf.domain.symlinks import symlink_target_problem
from caseshelf.domain.tasks import (
    TB_DEFAULT_TEST_COMMAND,
    TaskSource,
    harbor_case,
    task_keys,
    terminal_bench_case,
)
from caseshelf.services.casedirs import build_case_dir_dataset
from caseshelf.services.loaders import load_dataset
from caseshelf.services.registry import parse_dataset
from caseshelf.services.tasks import Tree, build_task_dataset, read_path
from caseshelf.services.workspace import project_root_of

pytestmark = pytest.mark.integration


def tb_files(*, runner: bool = True, tests: dict[str, bytes] | None = None) -> dict[str, bytes]:
    files = {"task.yaml": yaml.safe_dump({"instruction": "do it"}).encode()}
    if runner:
        files["run-tests.sh"] = b"#!/bin/bash\npytest\n"
    files.update({"tests/test_outputs.py": b"def test(): pass\n"} if tests is None else tests)
    return files


HARBOR_TOML = b'version = "1.0"\n[environment]\ndocker_image = "img:1"\n'


# -- Terminal-Bench: run-tests.sh is optional ------------------------------------------------


def test_tb_task_without_run_tests_gets_the_harness_default_runner():
    case = terminal_bench_case(TaskSource("t", tb_files(runner=False)), image_template="i")
    assert case["graders"][0]["config"] == {"cmd": TB_DEFAULT_TEST_COMMAND, "runner": "default"}


def test_tb_task_with_run_tests_keeps_it():
    case = terminal_bench_case(TaskSource("t", tb_files()), image_template="i")
    assert case["graders"][0]["config"]["cmd"] == "bash /tests/run-tests.sh"


def test_tb_task_without_a_runner_nor_test_outputs_is_refused():
    files = tb_files(runner=False, tests={"tests/other_test.py": b"x\n"})
    with pytest.raises(BadRequest, match=r"task 't'.*test_outputs\.py"):
        terminal_bench_case(TaskSource("t", files), image_template="i")


def test_no_image_names_the_option_that_fixes_it():
    with pytest.raises(BadRequest, match=r"--image-template 'registry\.example\.com/") as err:
        terminal_bench_case(TaskSource("t", tb_files()))
    assert err.value.fields["case_id"] == "t"
    with pytest.raises(BadRequest, match="--image-template"):
        harbor_case(
            TaskSource("h", {"task.toml": b"", "instruction.md": b"x", "tests/test.sh": b""})
        )


# -- Harbor: the verifier's test.sh ----------------------------------------------------------


def test_harbor_single_step_needs_tests_test_sh():
    files = {"task.toml": HARBOR_TOML, "instruction.md": b"x", "tests/test_state.py": b"x"}
    with pytest.raises(BadRequest, match=r"task 'h'.*tests/test\.sh"):
        harbor_case(TaskSource("h", files))
    files["tests/test.sh"] = b"#!/bin/bash\n"
    assert harbor_case(TaskSource("h", files))["graders"][0]["config"]["cmd"] == (
        "bash /tests/test.sh"
    )


def test_harbor_steps_point_at_the_test_files_that_exist():
    toml = HARBOR_TOML + b'[[steps]]\nname = "a"\n[[steps]]\nname = "b"\n'
    files = {
        "task.toml": toml,
        "steps/a/instruction.md": b"A",
        "steps/a/tests/test.sh": b"own",
        "steps/b/instruction.md": b"B",
        "tests/test.sh": b"shared",
    }
    steps = harbor_case(TaskSource("h", files))["graders"][0]["config"]["steps"]
    assert [s["test_path"] for s in steps] == ["steps/a/tests/test.sh", "tests/test.sh"]
    del files["tests/test.sh"]
    with pytest.raises(BadRequest, match=r"task 'h'.*step 'b'.*test\.sh"):
        harbor_case(TaskSource("h", files))


def test_harbor_registry_json_is_read_wherever_it_sits():
    task = {"task.toml": HARBOR_TOML, "instruction.md": b"x", "tests/test.sh": b""}
    files = {f"cookbook/recipes/r1/{k}": v for k, v in task.items()}
    files["cookbook/registry.json"] = json.dumps(
        {
            "git_url": "https://g/c.git",
            "recipes": [{"name": "r1", "path": "recipes/r1", "description": "first"}],
        }
    ).encode()
    built = build_task_dataset(Tree("top", files), "harbor")
    case = built.body["cases"][0]
    assert case["metadata"]["catalog"]["description"] == "first"
    assert built.body["produced_by"]["source"]["git_url"] == "https://g/c.git"


# -- trees with repeated names -----------------------------------------------------------------


def test_task_ids_are_their_paths_in_the_tree():
    assert task_keys(["a/x", "b/x", "c/y"]) == {"a/x": "a/x", "b/x": "b/x", "c/y": "c/y"}
    assert task_keys(["top/a/x", "top/b/y"]) == {"top/a/x": "a/x", "top/b/y": "b/y"}
    assert task_keys(["top/x", "top/y"]) == {"top/x": "x", "top/y": "y"}
    assert task_keys(["top/x"]) == {"top/x": "x"}
    files = {}
    for where in ("evo/1", "lcb/1", "lcb/2"):
        files.update({f"{where}/{k}": v for k, v in tb_files().items()})
    built = build_task_dataset(Tree("t", files), "terminal-bench", image_template="i:{id}")
    cases = built.body["cases"]
    assert [c["id"] for c in cases] == ["evo/1", "lcb/1", "lcb/2"]
    assert [c["metadata"]["task"] for c in cases] == ["evo/1", "lcb/1", "lcb/2"]
    parse_dataset({**built.body, "id": "t"})  # valid, distinct ids


# -- mas-lab: integer ids, groups ----------------------------------------------------------------


def test_mas_lab_integer_ids_and_groups_in_json_and_yaml(tmp_path):
    groups = [{"id": "g1"}, {"id": "g2"}]
    items = [
        {"id": 1, "inputs": {"user": "hi"}, "group": "g1"},
        {"id": 2, "inputs": {"user": "yo"}},
    ]
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({"name": "flat", "groups": groups, "count": 2, "items": items}))
    lab = tmp_path / "lab.yaml"
    lab.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "lab/v1",
                "kind": "Dataset",
                "metadata": {"name": "lab", "version": "1.0.0"},
                "spec": {"groups": groups, "items": items},
            }
        )
    )
    for path in (flat, lab):
        raw, _ = load_dataset(path)
        body = parse_dataset({**raw, "version": "1.0.0"})
        assert [c.id for c in body.cases] == ["1", "2"]
        assert raw["produced_by"]["source"]["groups"] == groups
        assert body.cases[0].metadata == {"group": "g1"}


# -- agent-eval-harness case trees ----------------------------------------------------------------


def _case_tree(root: Path, case_files: dict[str, bytes], eval_dir: str = "eval/demo") -> Path:
    config = root / eval_dir
    (config / "cases" / "c1").mkdir(parents=True)
    (config / "eval.yaml").write_text("name: demo\ndataset:\n  path: cases\n")
    for rel, data in case_files.items():
        (config / "cases" / "c1" / rel).write_bytes(data)
    return config / "eval.yaml"


def test_input_file_order_is_the_harness_order(tmp_path):
    eval_yaml = _case_tree(
        tmp_path, {"input.json": b'{"prompt": "json"}', "input.yml": b"prompt: yml\n"}
    )
    case = build_case_dir_dataset(eval_yaml).body["cases"][0]
    assert case["inputs"]["user"] == "yml"


def test_case_file_symlinks_follow_the_listed_symlink_rule_on_import(tmp_path):
    eval_yaml = _case_tree(tmp_path, {"input.yaml": b"prompt: x\n"})
    case_dir = eval_yaml.parent / "cases" / "c1"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("companion\n")
    (tmp_path.parent / "host-secret").write_text("no\n")
    os.symlink(tmp_path / "docs" / "guide.md", case_dir / "guide.md")
    os.symlink(tmp_path.parent / "host-secret", case_dir / "leak.md")
    built = build_case_dir_dataset(eval_yaml)
    files = built.body["cases"][0]["files"]
    assert files["guide.md"] == {"text": "companion\n"}  # materialized: a project companion
    assert "leak.md" not in files
    assert any("leak.md" in w and "skipped" in w for w in built.warnings)


def test_the_project_root_is_the_harness_root_of_the_config(tmp_path):
    eval_yaml = _case_tree(tmp_path, {"input.yaml": b"prompt: x\n"})
    assert project_root_of(eval_yaml) == tmp_path.resolve()
    flat = _case_tree(tmp_path / "flat", {"input.yaml": b"prompt: x\n"}, eval_dir="demo")
    assert project_root_of(flat) == flat.parent.resolve()
    # {dest, source} resolves against that root
    (tmp_path / "skills").mkdir()
    (tmp_path / "skills" / "SKILL.md").write_text("s\n")
    eval_yaml.write_text(
        "dataset:\n  path: cases\n  workspace:\n    files:\n"
        "      - {dest: skill.md, source: skills/SKILL.md}\n"
    )
    assert build_case_dir_dataset(eval_yaml).body["shared_files"] == [
        {"dest": "skill.md", "text": "s\n"}
    ]


def test_symlink_rule_is_pure():
    from pathlib import PurePosixPath as P

    kw = {
        "case_root": P("/p/e/cases/c1"),
        "project_root": P("/p"),
        "dataset_dir": P("/p/e/cases"),
        "plugin_dirs": [P("/plug")],
    }
    assert symlink_target_problem(P("/p/e/cases/c1/a"), **kw) is None
    assert symlink_target_problem(P("/plug/x"), **kw) is None
    assert symlink_target_problem(P("/p/docs/x"), **kw) is None
    assert "another case" in (symlink_target_problem(P("/p/e/cases/c2/x"), **kw) or "")
    assert "outside" in (symlink_target_problem(P("/etc/passwd"), **kw) or "")


# -- the real trees ------------------------------------------------------------------------------


def test_real_terminal_bench_family(shared_data):
    built = build_task_dataset(
        read_path(shared_data / "terminal-bench"),
        "terminal-bench",
        image_template="r/tb:{id}",
        skip_invalid=True,
    )
    assert [s.task for s in built.skipped] == ["evoeval/5"]
    assert len(built.body["cases"]) == 9
    ids = [c["id"] for c in built.body["cases"]]
    assert "evoeval/24" in ids and "deveval/cpp-area-calculation-implementation" in ids
    parse_dataset({**built.body, "id": "tb"})


def test_real_harbor_family_nested_with_its_registry(shared_data):
    tree = read_path(shared_data / "harbor")
    nested = Tree("top", {f"cookbook/{k}": v for k, v in tree.files.items()})
    built = build_task_dataset(nested, "harbor", image_template="r/h:{id}")
    cases = {c["id"]: c for c in built.body["cases"]}
    assert len(cases) == 6 and all(c["metadata"].get("catalog") for c in cases.values())
    steps = cases["multi-step"]["graders"][0]["config"]["steps"]
    assert [s["test_path"] for s in steps] == [
        "steps/scaffold/tests/test.sh",
        "steps/implement/tests/test.sh",
        "steps/document/tests/test.sh",
    ]


def test_real_mas_lab_family(shared_data):
    paths = sorted((shared_data / "mas-lab" / "envelope").glob("*.yaml"))
    assert paths, "no mas-lab envelope files to load"
    for path in paths:
        raw, _ = load_dataset(path)
        doc = parse_dataset({**raw, "version": raw.get("version", "1.0.0")})
        assert doc.cases, path


def test_real_agent_eval_harness_family(shared_data):
    for name in ("opencode-smoke", "anova-example"):
        built = build_case_dir_dataset(shared_data / "agent-eval-harness" / name)
        body = parse_dataset(built.body)
        assert body.cases and all(c.inputs.user for c in body.cases)


def test_an_archived_case_tree_applies_the_symlink_rule_to_its_links(tmp_path):
    import io
    import tarfile

    from caseshelf.services.tasks import case_dirs_from_tree, read_archive_bytes

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:

        def put(name: str, data: bytes = b"", link: str | None = None) -> None:
            info = tarfile.TarInfo(name)
            if link is None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)

        put("eval/demo/eval.yaml", b"dataset:\n  path: cases\n")
        put("eval/demo/cases/c1/input.yaml", b"prompt: x\n")
        put("eval/demo/cases/c2/input.yaml", b"prompt: y\n")
        put("eval/demo/cases/c2/secret.md", b"c2 only\n")
        put("docs/guide.md", b"guide\n")
        put("eval/demo/cases/c1/guide.md", link="../../../../docs/guide.md")
        put("eval/demo/cases/c1/peek.md", link="../c2/secret.md")
    tree = read_archive_bytes(buf.getvalue(), "p.tar.gz")
    body, warnings = case_dirs_from_tree(tree)
    c1 = next(c for c in body["cases"] if c["id"] == "c1")
    assert c1["files"]["guide.md"] == {"text": "guide\n"}
    assert "peek.md" not in c1["files"]
    assert any("peek.md" in w and "another case" in w for w in warnings)


def test_a_failed_import_lists_twenty_invalid_tasks_then_a_count():
    from caseshelf.domain.tasks import Skipped
    from caseshelf.services.tasks import invalid_tasks_message

    skipped = [Skipped(task=f"t{n}", reason=f"task 't{n}': broken") for n in range(25)]
    text = invalid_tasks_message(skipped, 30)
    lines = text.splitlines()
    assert lines[0] == "25 of 30 tasks are invalid:"
    assert lines[1:21] == [f"  task 't{n}': broken" for n in range(20)]
    assert lines[21] == "  … and 5 more (every one is in `errors`)"
    assert "--skip-invalid" in lines[22]
    assert "would leave nothing" in invalid_tasks_message(skipped[:2], 2)
