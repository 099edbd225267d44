"""The `dataset.workspace.files` contract, one test per row of its behaviour table, plus the
always-copied input file and answers, batch mode, load-time checks and symlink safety."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from caseshelf.domain.errors import BadRequest
from caseshelf.services.workspace import (
    EvalConfig,
    SharedSpec,
    collect_case_tree,
    load_eval_config,
    parse_entries,
    provision_workspace,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with one eval config, two cases, a skill, a plugin dir and a host file."""
    root = tmp_path / "project"
    cases = root / "eval" / "demo" / "cases"
    c1 = cases / "case-001"
    (c1 / "src" / "pkg").mkdir(parents=True)
    (c1 / "input.yaml").write_text("prompt: fix it\n")
    (c1 / "answers.yaml").write_text("- yes\n")
    (c1 / "annotations.yaml").write_text("expected: ok\n")
    (c1 / "reference.md").write_text("gold\n")
    (c1 / "strategy.md").write_text("plan\n")
    (c1 / "src" / "main.py").write_text("print(1)\n")
    (c1 / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    os.symlink("main.py", c1 / "src" / "nested_link.py")
    c2 = cases / "case-002"
    c2.mkdir()
    (c2 / "input.yaml").write_text("prompt: other\n")
    (c2 / "secret.md").write_text("sibling secret\n")
    (root / "skills" / "triage").mkdir(parents=True)
    (root / "skills" / "triage" / "SKILL.md").write_text("# skill\n")
    (root / "skills" / "triage" / "refs.md").write_text("refs\n")
    os.symlink("SKILL.md", root / "skills" / "triage" / "alias.md")
    plugin = tmp_path / "plugins" / "p1"
    plugin.mkdir(parents=True)
    (plugin / "tool.md").write_text("tool\n")
    os.symlink("loop", plugin / "loop")
    os.symlink("b", plugin / "a")
    os.symlink("a", plugin / "b")
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "passwd").write_text("root:x:0:0\n")
    return root


def _config(project: Path, files: list, *, mode: str = "case") -> EvalConfig:
    plugin = project.parent / "plugins" / "p1"
    return EvalConfig(
        config_dir=project / "eval" / "demo",
        dataset_dir=project / "eval" / "demo" / "cases",
        project_root=project,
        files=parse_entries(files)
        if files and not isinstance(files[0], SharedSpec)
        else tuple(files),
        mode=mode,
        plugin_dirs=(plugin,),
    )


def _case(project: Path, name: str = "case-001") -> Path:
    return project / "eval" / "demo" / "cases" / name


def _tree(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            assert not p.is_symlink(), f"the workspace holds a symlink: {p}"
        for name in filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = p.read_text()
    return out


def _provision(project: Path, tmp_path: Path, files: list, **kw):
    warnings: list[str] = []
    ws = tmp_path / "ws"
    provision_workspace(_case(project), ws, _config(project, files, **kw), warn=warnings.append)
    return _tree(ws), warnings


# --- always copied, never copied ------------------------------------------------------------


def test_input_and_answers_always_copied_evaluation_material_left_behind(project, tmp_path):
    # Given no whitelist
    tree, warnings = _provision(project, tmp_path, [])
    # Then only the input file and answers.yaml reach the workspace
    assert tree == {"input.yaml": "prompt: fix it\n", "answers.yaml": "- yes\n"}
    assert warnings == []


def test_input_json_is_copied_when_there_is_no_input_yaml(project, tmp_path):
    case = _case(project)
    (case / "input.yaml").unlink()
    (case / "input.json").write_text("{}")
    tree, _ = _provision(project, tmp_path, [])
    assert "input.json" in tree and "input.yaml" not in tree


def test_not_listed_is_left_behind(project, tmp_path):
    # Row: Not listed -> left behind
    tree, _ = _provision(project, tmp_path, ["strategy.md"])
    assert "strategy.md" in tree
    for behind in ("annotations.yaml", "reference.md", "src/main.py"):
        assert behind not in tree


def test_batch_mode_ignores_the_whitelist_with_a_warning(project, tmp_path):
    tree, warnings = _provision(project, tmp_path, ["strategy.md"], mode="batch")
    assert "strategy.md" not in tree and "input.yaml" in tree
    assert any("batch mode" in w for w in warnings)


# --- string entries -------------------------------------------------------------------------


def test_string_directory_is_copied_recursively_without_nested_symlinks(project, tmp_path):
    # Row: String - directory
    tree, warnings = _provision(project, tmp_path, ["src/"])
    assert tree["src/main.py"] == "print(1)\n"
    assert tree["src/pkg/mod.py"] == "x = 1\n"
    assert "src/nested_link.py" not in tree
    assert any("src/nested_link.py" in w and "nested symlink" in w for w in warnings)


def test_string_file_is_copied_at_its_relative_path(project, tmp_path):
    # Row: String - file
    tree, _ = _provision(project, tmp_path, ["strategy.md", "src/pkg/mod.py"])
    assert tree["strategy.md"] == "plan\n"
    assert tree["src/pkg/mod.py"] == "x = 1\n"


@pytest.mark.parametrize(
    ("target", "content"),
    [
        ("strategy.md", "plan\n"),  # inside the current case
        ("../../../../skills/triage/SKILL.md", "# skill\n"),  # project companion path
        ("PLUGIN/tool.md", "tool\n"),  # a configured plugin dir
    ],
)
def test_listed_file_symlink_in_an_allowed_root_is_materialized(project, tmp_path, target, content):
    # Row: String - listed file symlink (allowed)
    target = target.replace("PLUGIN", str(project.parent / "plugins" / "p1"))
    os.symlink(target, _case(project) / "linked.md")
    tree, warnings = _provision(project, tmp_path, ["linked.md"])
    assert tree["linked.md"] == content
    assert not (tmp_path / "ws" / "linked.md").is_symlink()
    assert warnings == []


@pytest.mark.parametrize(
    "target",
    [
        "../case-002/secret.md",  # a sibling case: inside the dataset dir
        "HOST/passwd",  # a host file outside every root
    ],
)
def test_listed_file_symlink_outside_allowed_roots_is_skipped(project, tmp_path, target):
    # Row: String - listed file symlink (not allowed, CWE-59)
    target = target.replace("HOST", str(project.parent / "host"))
    os.symlink(target, _case(project) / "linked.md")
    tree, warnings = _provision(project, tmp_path, ["linked.md"])
    assert "linked.md" not in tree
    assert any("linked.md" in w and "outside" in w for w in warnings)


def test_dangling_listed_symlink_is_skipped(project, tmp_path):
    os.symlink("nowhere.md", _case(project) / "linked.md")
    tree, warnings = _provision(project, tmp_path, ["linked.md"])
    assert "linked.md" not in tree
    assert any("dangling" in w for w in warnings)


def test_listed_directory_symlink_is_skipped_not_walked(project, tmp_path):
    # Row: String - listed directory symlink
    os.symlink("src", _case(project) / "srclink")
    tree, warnings = _provision(project, tmp_path, ["srclink"])
    assert not any(k.startswith("srclink") for k in tree)
    assert any("srclink" in w and "directory symlink" in w for w in warnings)


def test_path_resolving_outside_allowed_roots_is_skipped(project, tmp_path):
    # Row: String - path resolving outside allowed roots (through a symlinked parent)
    os.symlink(project.parent / "host", _case(project) / "escape")
    tree, warnings = _provision(project, tmp_path, ["escape/passwd"])
    assert "escape/passwd" not in tree
    assert any("escape/passwd" in w and "outside" in w for w in warnings)


def test_missing_listed_path_is_skipped_with_a_warning(project, tmp_path):
    tree, warnings = _provision(project, tmp_path, ["nope.md"])
    assert "nope.md" not in tree
    assert any("nope.md" in w and "not found" in w for w in warnings)


@pytest.mark.parametrize("entry", ["../case-002/secret.md", "/etc/passwd", "a/../../b"])
def test_string_entry_with_parent_traversal_or_absolute_is_rejected_at_load(entry):
    with pytest.raises(BadRequest, match=r"workspace\.files"):
        parse_entries([entry])


def test_trailing_slash_is_stripped_at_load():
    assert parse_entries(["src/"]) == ("src",)


# --- {dest, source} entries -----------------------------------------------------------------


def test_shared_file_source_is_copied_into_the_case_at_dest(project, tmp_path):
    # Row: {dest, source} - shared (file, relative to the project root)
    files = [{"dest": "triage-skill.md", "source": "skills/triage/SKILL.md"}]
    tree, warnings = _provision(project, tmp_path, files)
    assert tree["triage-skill.md"] == "# skill\n"
    assert warnings == []


def test_shared_directory_source_copies_recursively_dropping_nested_symlinks(project, tmp_path):
    files = [{"dest": "skill", "source": "skills/triage"}]
    tree, warnings = _provision(project, tmp_path, files)
    assert tree["skill/SKILL.md"] == "# skill\n" and tree["skill/refs.md"] == "refs\n"
    assert "skill/alias.md" not in tree
    assert any("alias.md" in w for w in warnings)


def test_shared_source_in_a_plugin_dir_is_allowed(project, tmp_path):
    plugin = project.parent / "plugins" / "p1"
    tree, _ = _provision(
        project, tmp_path, [{"dest": "tool.md", "source": str(plugin / "tool.md")}]
    )
    assert tree["tool.md"] == "tool\n"


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("HOST/passwd", "outside"),  # outside project and plugin roots
        ("skills/missing.md", "missing"),
        ("DANGLING", "dangling"),
    ],
)
def test_shared_source_outside_missing_or_dangling_is_skipped(project, tmp_path, source, reason):
    # Row: {dest, source} - source outside roots, missing, or dangling (CWE-59)
    os.symlink("gone.md", project / "dangling.md")
    source = source.replace("HOST", str(project.parent / "host")).replace("DANGLING", "dangling.md")
    tree, warnings = _provision(project, tmp_path, [{"dest": "x.md", "source": source}])
    assert "x.md" not in tree
    assert any("x.md" in w and reason in w for w in warnings)


def test_shared_source_escaping_through_a_project_symlink_is_skipped(project, tmp_path):
    # source names a project path, but the symlink it is resolves to a host file
    os.symlink(project.parent / "host" / "passwd", project / "innocent.md")
    tree, warnings = _provision(project, tmp_path, [{"dest": "x.md", "source": "innocent.md"}])
    assert "x.md" not in tree
    assert any("outside the project root" in w for w in warnings)


@pytest.mark.parametrize(
    "dest", ["input.yaml", "answers.yaml", "annotations.yaml", "batch.yaml", ".claude", "hooks"]
)
def test_shared_dest_on_a_reserved_name_is_skipped_and_the_case_file_left_intact(
    project, tmp_path, dest
):
    # Row: {dest, source} - dest colliding with a reserved name
    tree, warnings = _provision(
        project, tmp_path, [{"dest": dest, "source": "skills/triage/SKILL.md"}]
    )
    assert tree.get("input.yaml") == "prompt: fix it\n"
    assert tree.get("answers.yaml") == "- yes\n"
    assert "# skill\n" not in tree.values()
    assert any("reserved" in w for w in warnings)


@pytest.mark.parametrize("dest", ["", ".", "/", "/abs.md", "../up.md", "a/../../b"])
def test_bad_dest_is_rejected_at_load(dest):
    # Row: {dest, source} - empty, ., /, absolute or parent-traversing dest (load)
    with pytest.raises(BadRequest, match="dest"):
        parse_entries([{"dest": dest, "source": "skills/triage/SKILL.md"}])


@pytest.mark.parametrize("dest", ["", ".", "/", "/abs.md", "../up.md"])
def test_bad_dest_is_skipped_defensively_at_materialization(project, tmp_path, dest):
    # The same row, when a bad entry gets past loading
    spec = SharedSpec(dest, "skills/triage/SKILL.md")
    warnings: list[str] = []
    ws = tmp_path / "ws"
    provision_workspace(_case(project), ws, _config(project, [spec]), warn=warnings.append)
    assert set(_tree(ws)) == {"input.yaml", "answers.yaml"}
    assert not (tmp_path / "up.md").exists()
    assert any("dest" in w for w in warnings)


def test_dest_resolving_inside_its_own_source_is_skipped(project, tmp_path):
    # Row: {dest, source} - dest resolving inside the source directory (would recurse)
    ws = project / "work" / "case-001"
    warnings: list[str] = []
    config = _config(project, [{"dest": "everything", "source": "."}])
    provision_workspace(_case(project), ws, config, warn=warnings.append)
    assert not (ws / "everything").exists()
    assert any("inside its own source" in w for w in warnings)


def test_symlink_loops_in_a_plugin_dir_are_tolerated(project, tmp_path):
    plugin = project.parent / "plugins" / "p1"
    files = [
        {"dest": "plugin", "source": str(plugin)},
        {"dest": "loop.md", "source": str(plugin / "loop")},
    ]
    tree, warnings = _provision(project, tmp_path, files)
    assert tree["plugin/tool.md"] == "tool\n"
    assert "loop.md" not in tree
    assert any("loop.md" in w and "loop" in w for w in warnings)


def test_shared_dest_clashing_with_a_listed_case_file_keeps_the_case_file(project, tmp_path):
    files = ["strategy.md", {"dest": "strategy.md", "source": "skills/triage/SKILL.md"}]
    tree, warnings = _provision(project, tmp_path, files)
    assert tree["strategy.md"] == "plan\n"
    assert any("left intact" in w for w in warnings)


# --- eval.yaml and case trees ---------------------------------------------------------------


def test_load_eval_config_resolves_dataset_path_and_entries(project):
    cfg_path = project / "eval" / "demo" / "eval.yaml"
    cfg_path.write_text(
        "dataset:\n  path: cases\n  workspace:\n    files:\n      - src/\n"
        "      - {dest: s.md, source: skills/triage/SKILL.md}\n"
        "execution:\n  mode: case\nrunner:\n  plugin_dirs: [../plugins/p1]\n"
    )
    cfg = load_eval_config(cfg_path, project_root=project)
    assert cfg.dataset_dir == project / "eval" / "demo" / "cases"
    assert cfg.files == ("src", SharedSpec("s.md", "skills/triage/SKILL.md"))
    assert cfg.plugin_dirs == (project / "../plugins/p1",)


def test_load_eval_config_rejects_parent_traversal_in_dataset_path(project):
    cfg_path = project / "eval" / "demo" / "eval.yaml"
    cfg_path.write_text("dataset:\n  path: ../elsewhere\n")
    with pytest.raises(BadRequest, match=r"dataset\.path"):
        load_eval_config(cfg_path, project_root=project)


def test_collect_case_tree_keeps_regular_files_and_safe_symlinks_only(project):
    case = _case(project)
    os.symlink("strategy.md", case / "ok_link.md")
    os.symlink("../case-002/secret.md", case / "bad_link.md")
    os.symlink("src", case / "dirlink")
    warnings: list[str] = []
    got = collect_case_tree(case, _config(project, []), warn=warnings.append)
    assert "ok_link.md" in got and got["ok_link.md"].name == "strategy.md"
    assert "bad_link.md" not in got and not any(k.startswith("dirlink") for k in got)
    assert "src/pkg/mod.py" in got and "src/nested_link.py" not in got
    assert len(warnings) == 3


def test_an_export_of_a_case_tree_with_symlinks_holds_no_symlink(project, tmp_path):
    # Given case files that are symlinks (safe, to a sibling case, to a directory) and a shared
    # directory source with a nested symlink
    from caseshelf.bootstrap import build, load_settings

    case = _case(project)
    os.symlink("strategy.md", case / "ok_link.md")
    os.symlink("../case-002/secret.md", case / "bad_link.md")
    os.symlink("src", case / "dirlink")
    config = _config(project, [{"dest": "skills", "source": "skills"}])
    warnings: list[str] = []
    services = build(load_settings({}, home=str(tmp_path / "home")))
    exports = services.exports
    exports.warn = warnings.append
    # When the tree is exported to a directory
    exports.export_tree(config, to=str(tmp_path / "out"))
    # Then every entry is a regular file or a directory (`_tree` fails on a symlink), the safe
    # link is materialized, and the rest was left out with a warning naming it
    tree = _tree(tmp_path / "out")
    assert tree["case-001/ok_link.md"] == "plan\n"
    assert tree["case-002/skills/triage/SKILL.md"] == "# skill\n"
    assert not any(k.endswith(("bad_link.md", "alias.md")) for k in tree)
    assert not any("/dirlink" in k or k.endswith("nested_link.py") for k in tree)
    assert not any("secret" in v for k, v in tree.items() if k.startswith("case-001/"))
    for name in ("bad_link.md", "dirlink", "nested_link.py", "alias.md"):
        assert any(name in w for w in warnings), name
