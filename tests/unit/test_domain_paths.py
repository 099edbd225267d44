"""Path rules (DESIGN §6, CWE-22/59) and the case id -> directory name encoding."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caseshelf.domain.errors import BadRequest
from caseshelf.domain.paths import (
    RESERVED_NAMES,
    case_dir_name,
    case_id_from_dir,
    check_relative_path,
    destination_problem,
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


@pytest.mark.parametrize("dest", ["data/input.yaml", "input.yaml.bak", "tests/hooks", "ref.md"])
def test_reserved_names_only_count_at_the_top_of_the_destination(dest):
    assert destination_problem(dest) is None


@pytest.mark.parametrize("dest", ["", ".", "/", "/abs", "../up", "a\\b"])
def test_a_destination_also_obeys_the_relative_path_rules(dest):
    assert destination_problem(dest) is not None


# -- case id <-> directory name ----------------------------------------------------------------


@pytest.mark.parametrize("case_id", ["a", "HumanEval_0", "task-1.2", "A.b-c_d", "x..y"])
def test_plain_ids_are_their_own_directory_name(case_id):
    assert case_dir_name(case_id) == case_id


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
    assert case_dir_name("HumanEval/0") == "~HumanEval%2F0"
    assert case_dir_name("..") == "~%2E%2E"
    assert case_dir_name("é") == "~%C3%A9"


@settings(max_examples=500, deadline=None)
@given(case_id=st.text(min_size=1, max_size=64))
def test_directory_names_are_safe_and_round_trip_for_any_unicode_id(case_id):
    name = case_dir_name(case_id)
    assert "/" not in name and "\\" not in name and "\x00" not in name
    assert not name.startswith(".")
    assert case_id_from_dir(name) == case_id


@settings(max_examples=300, deadline=None)
@given(a=st.text(min_size=1, max_size=16), b=st.text(min_size=1, max_size=16))
def test_the_encoding_is_injective(a, b):
    if a != b:
        assert case_dir_name(a) != case_dir_name(b)


def test_look_alike_ids_get_distinct_directory_names():
    ids = ["a", "A", "~a", "%61", "~61", "a.", ".a", "a%2F", "a/"]
    names = [case_dir_name(i) for i in ids]
    assert len(set(names)) == len(ids)
