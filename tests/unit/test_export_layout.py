"""The export layout as a pure plan: per-case directories, generated files, shared files, the
manifest and the content-addressed export id."""

from __future__ import annotations

import orjson
import pytest
import yaml

from caseshelf.domain.canonical import digest_of
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.export import (
    SharedEntry,
    export_id,
    merge_shared,
    parse_manifest,
    render_yaml,
)
from caseshelf.domain.export_plan import plan_export
from caseshelf.domain.paths import case_dir_name, case_id_from_dir

pytestmark = pytest.mark.unit

SKILL = b"# skill\n"
SKILL_SHARED = SharedEntry("skill.md", digest_of(SKILL), len(SKILL))


def _plan(cases, shared=(), subset=None):
    return plan_export(
        dataset={"id": "demo", "version": "1.0.0"},
        content_digest="sha256:" + "0" * 64,
        cases=cases,
        shared_files=list(shared),
        subset=subset,
    )


def _files(plan, case_index=0):
    c = plan.cases[case_index]
    return {f.path[len(c.dir) + 1 :]: f for f in c.files}


def test_a_full_case_gives_input_answers_annotations_reference_and_files():
    # Given a case with inputs, HITL answers, text ground truth, graders, metadata and a file
    note = b"companion\n"
    case = {
        "id": "gsm8k/0",
        "inputs": {"user": "What is 2+2?", "hitl": ["yes", "go on"]},
        "expectations": {"ground_truth": "4", "details": {"solution": "2+2=4"}},
        "graders": [{"id": "exact"}],
        "metadata": {"row": 0},
        "files": {"notes/a.txt": {"digest": digest_of(note), "size": len(note)}},
    }
    # When it is planned with one shared file
    plan = _plan([case], [SKILL_SHARED])
    files = _files(plan)
    # Then the directory is the safe encoding of the id and holds every role
    assert plan.cases[0].dir == case_dir_name("gsm8k/0") == "~gsm8k%2F0"
    assert sorted(files) == [
        "annotations.yaml",
        "answers.yaml",
        "input.yaml",
        "notes/a.txt",
        "reference.md",
        "skill.md",
    ]
    assert yaml.safe_load(files["input.yaml"].body) == {
        "user": "What is 2+2?",
        "prompt": "What is 2+2?",
    }
    assert yaml.safe_load(files["answers.yaml"].body) == {"answers": ["yes", "go on"]}
    assert yaml.safe_load(files["annotations.yaml"].body) == {
        "expectations": case["expectations"],
        "graders": [{"id": "exact"}],
        "metadata": {"row": 0},
    }
    assert files["reference.md"].body == b"4"
    # And stored bodies are fetched by digest, not carried in the plan
    assert files["notes/a.txt"].body is None
    assert files["skill.md"].digest == SKILL_SHARED.digest
    assert plan.blob_digests() == {digest_of(note)[7:], SKILL_SHARED.digest[7:]}


def test_a_bare_case_gets_only_input_yaml():
    plan = _plan([{"id": "a"}])
    files = _files(plan)
    assert list(files) == ["input.yaml"]
    assert files["input.yaml"].body == b"{}\n"


def test_non_text_ground_truth_has_no_reference_md():
    plan = _plan([{"id": "a", "expectations": {"ground_truth": {"x": 1}}}])
    assert "reference.md" not in _files(plan)
    assert "annotations.yaml" in _files(plan)


def test_yaml_is_deterministic_sorted_and_keeps_unicode():
    # Given the same value built in two key orders
    one = render_yaml({"b": 1, "a": "Janet\u2019s ducks"})
    two = render_yaml({"a": "Janet\u2019s ducks", "b": 1})
    # Then the bytes are the same, keys sorted, non-ASCII written as is
    assert one == two
    assert one == "a: Janet\u2019s ducks\nb: 1\n".encode()


def test_same_input_same_plan_bytes():
    cases = [{"id": "x", "inputs": {"user": "é"}, "metadata": {"z": 1, "a": 2}}]
    a, b = _plan(cases, [SKILL_SHARED]), _plan(cases, [SKILL_SHARED])
    assert a.manifest_bytes() == b.manifest_bytes()
    assert a.export_id == b.export_id


@pytest.mark.parametrize("case_id", ["HumanEval/0", "../x", ".hidden", "données-π", "a b", "."])
def test_awkward_ids_map_to_safe_reversible_directories(case_id):
    plan = _plan([{"id": case_id}])
    d = plan.cases[0].dir
    assert "/" not in d and not d.startswith(".") and d not in {"", ".", ".."}
    assert case_id_from_dir(d) == case_id
    assert all(f.path.startswith(d + "/") for f in plan.cases[0].files)


def test_case_own_files_win_over_generated_ones():
    # Given a case imported from a case directory, carrying its original files
    orig_input = b"prompt: hi\n"
    orig_ref = b"gold"
    orig_answers = b"- a\n"
    case = {
        "id": "c1",
        "inputs": {"user": "hi", "hitl": ["a"]},
        "expectations": {"ground_truth": "gold"},
        "files": {
            "input.yaml": {"digest": digest_of(orig_input), "size": len(orig_input)},
            "reference.txt": {"digest": digest_of(orig_ref), "size": len(orig_ref)},
            "answers.yaml": {"digest": digest_of(orig_answers), "size": len(orig_answers)},
        },
    }
    files = _files(_plan([case]))
    # Then the originals come back and no generated twin is added
    assert files["input.yaml"].body is None
    assert files["answers.yaml"].body is None
    assert "reference.md" not in files
    assert files["reference.txt"].digest == digest_of(orig_ref)


def test_an_input_json_of_the_case_suppresses_input_yaml():
    body = b"{}"
    case = {"id": "c", "files": {"input.json": {"digest": digest_of(body), "size": 2}}}
    assert sorted(_files(_plan([case]))) == ["input.json"]


@pytest.mark.parametrize(
    "dest",
    [
        "input.yaml",
        "input.yml",
        "input.json",
        "answers.yaml",
        "annotations.yaml",
        "batch.yaml",
        ".claude/settings.json",
        "hooks/pre.sh",
        "tool_handlers.yaml",
    ],
)
def test_reserved_dest_is_skipped_with_a_warning_and_the_case_file_left_intact(dest):
    # Given a shared file whose dest lands on a reserved name
    shared = SharedEntry(dest, SKILL_SHARED.digest, SKILL_SHARED.size)
    plan = _plan([{"id": "a", "inputs": {"user": "hi"}}], [shared])
    files = _files(plan)
    # Then it is not exported, a warning names it, and input.yaml is the case's own
    assert all(f.digest != SKILL_SHARED.digest for f in files.values())
    assert any(dest in str(w) and "reserved" in w.reason for w in plan.warnings)
    assert yaml.safe_load(files["input.yaml"].body) == {"user": "hi", "prompt": "hi"}


@pytest.mark.parametrize("dest", ["", ".", "/", "/etc/passwd", "../up", "a/../../b", "C:/x"])
def test_bad_dest_is_skipped_defensively(dest):
    plan = _plan([{"id": "a"}], [SharedEntry(dest, SKILL_SHARED.digest, 1)])
    assert [f.path for f in plan.cases[0].files] == ["a/input.yaml"]
    assert len(plan.warnings) == 1 and plan.warnings[0].case_id == "a"


def test_shared_dest_clashing_with_a_case_file_leaves_the_case_file():
    own = b"mine"
    case = {"id": "a", "files": {"skill.md": {"digest": digest_of(own), "size": 4}}}
    plan = _plan([case], [SKILL_SHARED])
    assert _files(plan)["skill.md"].digest == digest_of(own)
    assert "left intact" in plan.warnings[0].reason


def test_shared_dest_under_a_case_file_is_skipped():
    own = b"x"
    case = {"id": "a", "files": {"docs": {"digest": digest_of(own), "size": 1}}}
    plan = _plan([case], [SharedEntry("docs/skill.md", SKILL_SHARED.digest, 8)])
    assert "docs/skill.md" not in _files(plan)
    assert "is a file of the case" in plan.warnings[0].reason


def test_manifest_lists_case_dir_and_file_digests():
    plan = _plan([{"id": "HumanEval/0", "inputs": {"user": "x"}}], [SKILL_SHARED])
    doc = orjson.loads(plan.manifest_bytes())
    assert doc["dataset"] == {"id": "demo", "version": "1.0.0"}
    assert doc["content_digest"] == "sha256:" + "0" * 64
    assert doc["subset"] is None
    entry = doc["cases"]["HumanEval/0"]
    assert entry["dir"] == "~HumanEval%2F0~42"  # (its case mark: H and E are upper case)
    assert entry["files"]["skill.md"] == {
        "digest": SKILL_SHARED.digest,
        "size": 8,
        "role": "shared",
    }
    assert entry["files"]["input.yaml"]["digest"] == _files(plan)["input.yaml"].digest
    assert entry["files"]["input.yaml"]["role"] == "input"
    parsed = parse_manifest(plan.manifest_bytes())
    assert parsed.export_id == plan.export_id
    assert "~HumanEval%2F0~42/skill.md" in parsed.files
    assert parsed.roles["~HumanEval%2F0~42/skill.md"] == "shared"


def test_export_id_changes_with_subset_shared_files_and_content_only():
    base = export_id("sha256:" + "1" * 64, None, [SKILL_SHARED])
    assert base == export_id("sha256:" + "1" * 64, None, [SKILL_SHARED])
    assert base != export_id("sha256:" + "2" * 64, None, [SKILL_SHARED])
    assert base != export_id("sha256:" + "1" * 64, {"limit": 1}, [SKILL_SHARED])
    assert base != export_id("sha256:" + "1" * 64, None, [])
    # order of shared files does not matter
    other = SharedEntry("b.md", SKILL_SHARED.digest, 8)
    assert export_id("d", None, [SKILL_SHARED, other]) == export_id(
        "d", None, [other, SKILL_SHARED]
    )


def test_request_shared_file_replaces_the_version_one_at_the_same_dest():
    newer = SharedEntry("skill.md", digest_of(b"new"), 3)
    merged = merge_shared([SKILL_SHARED, SharedEntry("a.md", "sha256:" + "a" * 64, 1)], [newer])
    assert [s.dest for s in merged] == ["a.md", "skill.md"]
    assert merged[1] == newer


def test_repeated_case_id_is_an_error():
    with pytest.raises(BadRequest, match="appears twice"):
        _plan([{"id": "a"}, {"id": "a"}])


def test_unknown_format_is_refused():
    with pytest.raises(BadRequest, match="format"):
        plan_export(dataset={}, content_digest="d", cases=[], shared_files=[], fmt="tarball")


@pytest.mark.parametrize(
    ("case_id", "dirname", "rel", "reason"),
    [
        ("a", "a", "../x", "parent"),
        ("a", "a", "/abs", "absolute"),
        ("a", "../a", "input.yaml", "expected"),
    ],
)
def test_manifest_with_an_escaping_path_is_refused(case_id, dirname, rel, reason):
    doc = {
        "format": "caseshelf.export/1",
        "export_id": "e",
        "cases": {case_id: {"dir": dirname, "files": {rel: {"digest": "sha256:x", "size": 1}}}},
    }
    with pytest.raises(BadRequest, match=reason):
        parse_manifest(orjson.dumps(doc))


def test_the_root_file_names_are_the_ones_case_directories_avoid():
    from caseshelf.domain.export import BUNDLE_NAME, MANIFEST_NAME
    from caseshelf.domain.harbor_registry import MANIFEST_NAME as HARBOR_MANIFEST
    from caseshelf.domain.paths import EXPORT_ROOT_FILES, accepted_dir_names, case_dir_name

    assert {MANIFEST_NAME, BUNDLE_NAME, HARBOR_MANIFEST} == EXPORT_ROOT_FILES
    # a case called dataset.toml, plain in exports from before the harbor manifest, still reads
    assert case_dir_name("dataset.toml") != "dataset.toml"
    assert "dataset.toml" in accepted_dir_names("dataset.toml")


def test_parquet_columns_hold_the_values_of_row_of():
    # Given cases of every shape a row carries (text and structured prompts, environments,
    # graders, files, empty fields)
    from caseshelf.domain.export_formats import (
        ROW_COLUMNS,
        _companions,
        add_parquet_rows,
        parquet_table,
        row_of,
    )

    f = {"digest": "sha256:" + "1" * 64, "size": 3}
    cases = [
        {"id": "a", "inputs": {"user": "What is 2+2?"}, "expectations": {"ground_truth": "4"}},
        {"id": "b"},
        {
            "id": "c",
            "inputs": {"user": ["one", "two"], "system": "be brief"},
            "expectations": {"ground_truth": {"x": [1, 2]}, "details": {"choices": ["a"]}},
            "graders": [{"kind": "command", "config": {"cmd": "pytest -q"}}],
            "tags": ["t1", "t2"],
            "metadata": {"z": 1, "a": None},
            "image": "python:3.12",
            "timeout_sec": 60,
            "files": {"tests/test_x.py": f, "a.txt": f},
        },
        {"id": "d", "env": {"kind": "repo", "source": {"git": "https://x"}}, "tags": []},
    ]
    files = [_companions(c, []) for c in cases]
    columns: dict = {c: [] for c in ROW_COLUMNS}
    # When the rows are added column by column
    add_parquet_rows(columns, cases, {i: fs for i, fs in enumerate(files) if fs})
    # Then the table holds exactly row_of's values
    expected = [row_of(c, fs) for c, fs in zip(cases, files, strict=True)]
    assert parquet_table(columns).to_pylist() == expected
