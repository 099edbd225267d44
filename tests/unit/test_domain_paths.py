"""Path rules (architecture §6, CWE-22/59) and the case id -> directory name encoding."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caseshelf.domain.errors import BadRequest
from caseshelf.domain.paths import (
    DIR_NAME_MAX,
    RESERVED_NAMES,
    case_dir_name,
    case_file_clash,
    case_file_problem,
    case_id_from_dir,
    case_id_problem,
    check_relative_path,
    destination_problem,
    is_shortened_dir_name,
    relative_path_problem,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/etc/passwd", "absolute"),
        ("C:/Windows", "absolute"),
        ("c:evil", "absolute"),
        ("../x", "parent"),
        ("a/../../b", "parent"),
        ("a/..", "parent"),
        ("..", "parent"),
        ("a\\b", "backslash"),
        ("..\\x", "backslash"),
        ("a\x00b", "control"),
        ("a\nb", "control"),
        ("tab\there", "control"),
        ("del\x7f", "control"),
        ("", "empty"),
        ("   ", "empty"),
        (".", "empty"),
        ("/", "empty"),
        ("./a", "'.'"),
        ("a/./b", "'.'"),
    ],
)
def test_unsafe_relative_paths_are_refused_saying_why(path, why):
    problem = relative_path_problem(path)
    assert problem is not None
    assert why in problem
    with pytest.raises(BadRequest) as err:
        check_relative_path(path, what="files")
    assert err.value.fields["path"] == path
    assert err.value.fields["field"] == "files"


@pytest.mark.parametrize(
    ("path", "normalised"),
    [
        ("a", "a"),
        ("src/x/y.py", "src/x/y.py"),
        (".hidden", ".hidden"),
        ("dir/.env", "dir/.env"),
        ("a..b/c", "a..b/c"),
        ("a//b/", "a/b"),
        ("tests/", "tests"),
        ("名前/ファイル.txt", "名前/ファイル.txt"),
    ],
)
def test_safe_relative_paths_pass_normalised(path, normalised):
    assert relative_path_problem(path) is None
    assert check_relative_path(path) == normalised


@settings(max_examples=300, deadline=None)
@given(path=st.text(alphabet="ab./\\\x00:C ", max_size=12))
def test_an_accepted_path_never_escapes_its_root(path):
    # Whatever passes the rules stays below the directory it is joined to
    if relative_path_problem(path) is None:
        parts = check_relative_path(path).split("/")
        assert ".." not in parts and "." not in parts and "" not in parts
        assert not path.startswith("/") and "\\" not in path and "\x00" not in path


@pytest.mark.parametrize("name", sorted(RESERVED_NAMES))
def test_a_destination_on_a_reserved_name_is_refused(name):
    assert "reserved" in (destination_problem(name) or "")
    assert "reserved" in (destination_problem(f"{name}/inner.txt") or "")


@pytest.mark.parametrize("dest", ["input.yaml.bak", "data/inputs.yaml", "ref.md", "claude/x"])
def test_names_that_only_resemble_reserved_ones_are_fine(dest):
    assert destination_problem(dest) is None


@pytest.mark.parametrize(
    "dest",
    [
        "INPUT.YAML",
        "input.yaml.",
        "input.yaml ",
        "x/.claude",
        "X/.Claude/settings.json",
        "data/input.yaml",
        "tests/hooks",
        "Hooks/pre-commit",
    ],
)
def test_reserved_names_are_matched_on_every_segment_as_a_disk_reads_them(dest):
    assert "reserved" in (destination_problem(dest) or "")


@pytest.mark.parametrize("dest", ["", ".", "/", "/abs", "../up", "a\\b"])
def test_a_destination_also_obeys_the_relative_path_rules(dest):
    assert destination_problem(dest) is not None


# -- case id <-> directory name ----------------------------------------------------------------


@pytest.mark.parametrize("case_id", ["a", "humaneval_0", "task-1.2", "a.b-c_d", "x..y"])
def test_plain_ids_are_their_own_directory_name(case_id):
    assert case_dir_name(case_id) == case_id


@pytest.mark.parametrize(("case_id", "name"), [("A", "A~1"), ("HumanEval_0", "HumanEval_0~21")])
def test_ids_with_upper_case_letters_carry_a_case_mark(case_id, name):
    assert case_dir_name(case_id) == name and case_id_from_dir(name) == case_id


@pytest.mark.parametrize(
    "case_id",
    [
        "HumanEval/0",
        "../x",
        ".hidden",
        "..",
        ".",
        "é",
        "a b",
        "~x",
        "%41",
        "a\n",
        "名",
        "manifest.json",
        "bundle.tar.gz",
    ],
)
def test_other_ids_are_encoded_safely_and_reversibly(case_id):
    name = case_dir_name(case_id)
    assert name != case_id
    assert "/" not in name and not name.startswith(".") and name not in {".", ".."}
    assert case_id_from_dir(name) == case_id


def test_ids_named_like_the_export_root_files_never_take_their_place():
    assert case_dir_name("manifest.json") == "~manifest%2Ejson"
    assert case_dir_name("bundle.tar.gz") == "~bundle%2Etar%2Egz"
    assert case_dir_name("manifest.json.bak") == "manifest.json.bak"


def test_known_encodings_are_stable():
    # These names end up in S3 prefixes that pods read: they must never change.
    assert case_dir_name("HumanEval/0") == "~HumanEval%2F0~42"
    assert case_dir_name("gsm8k/0") == "~gsm8k%2F0"
    assert case_dir_name("..") == "~%2E%2E"
    assert case_dir_name("é") == "~%C3%A9"


@settings(max_examples=250, deadline=None)
@given(case_id=st.text(min_size=1, max_size=256))
def test_directory_names_are_safe_short_and_round_trip_for_any_unicode_id(case_id):
    name = case_dir_name(case_id)
    assert "/" not in name and "\\" not in name and "\x00" not in name
    assert not name.startswith(".")
    assert len(name.encode("utf-8")) <= DIR_NAME_MAX < 256
    if is_shortened_dir_name(name):
        with pytest.raises(BadRequest, match="manifest"):
            case_id_from_dir(name)
    else:
        assert case_id_from_dir(name) == case_id


@pytest.mark.parametrize("case_id", ["x" * 256, "é" * 60, "名" * 256, "A" * 256])
def test_the_longest_ids_still_have_a_name_a_disk_takes(case_id):
    name = case_dir_name(case_id)
    assert len(name.encode()) <= DIR_NAME_MAX and is_shortened_dir_name(name)
    assert case_dir_name(case_id[:-1] + "y") != name


@settings(max_examples=300, deadline=None)
@given(a=st.text(min_size=1, max_size=16))
def test_ids_equal_but_for_case_get_names_equal_in_no_case(a):
    b = a.swapcase()
    if a != b:
        assert case_dir_name(a).casefold() != case_dir_name(b).casefold()


@pytest.mark.parametrize(
    "path", ["a//b", "a/", "INPUT.YAML", "input.yaml.", "x/.claude/settings.json", "hooks/pre"]
)
def test_case_file_paths_that_would_change_or_reach_agent_config_are_refused(path):
    assert case_file_problem(path) is not None


@pytest.mark.parametrize("path", ["a/b", "input.yaml", "tests/hooks/x", ".git/config", "A/B.txt"])
def test_ordinary_case_file_paths_pass(path):
    assert case_file_problem(path) is None


def test_case_file_paths_one_disk_would_merge_are_found():
    assert case_file_clash(["a/b.txt", "A/B.txt"]) == ("A/B.txt", "a/b.txt")
    assert case_file_clash(["a/b", "a/c", "b"]) is None


@pytest.mark.parametrize("ch", ["\u202e", "\u2066", "\u200b", "\u200d", "\ufeff", "\x85", "\x07"])
def test_ids_with_invisible_characters_are_refused_by_code_point(ch):
    problem = case_id_problem(f"a{ch}b")
    assert problem and f"U+{ord(ch):04X}" in problem
    assert case_id_problem("plain-é-名") is None


@settings(max_examples=300, deadline=None)
@given(a=st.text(min_size=1, max_size=100), b=st.text(min_size=1, max_size=100))
def test_the_encoding_is_injective(a, b):
    if a != b:
        assert case_dir_name(a) != case_dir_name(b)


def test_look_alike_ids_get_distinct_directory_names():
    ids = ["a", "A", "~a", "%61", "~61", "a.", ".a", "a%2F", "a/"]
    names = [case_dir_name(i) for i in ids]
    assert len(set(names)) == len(ids)
