"""`caseshelf.domain.harbor_registry`: Harbor names, the default ignore rules as Git reads them,
Harbor's task digest from paths and digests, and `dataset.toml` as TOML. (The digests are
compared with Harbor's own code on real exports in tests/integration/test_harbor_registry.py.)"""

from __future__ import annotations

import hashlib
import tomllib

import pytest

from caseshelf.domain.harbor_registry import (
    DEFAULT_IGNORES,
    _default_ignored,
    collected_paths,
    is_harbor_name,
    manifest_head,
    manifest_tail,
    manifest_task,
    name_part,
    task_digest,
    task_name,
)

pytestmark = pytest.mark.unit


def test_names_are_harbor_names_and_distinct() -> None:
    assert name_part("gsm8k-0001") == "gsm8k-0001"
    odd = ["a b", "a/b", "a..b", ".hidden", "é", "a_b!", "a b!"]
    parts = [name_part(i) for i in odd]
    assert all(is_harbor_name(f"org/{p}") for p in parts)
    assert len(set(parts)) == len(odd)
    assert parts[0].startswith("a-b-") and len(parts[0]) == len("a-b-") + 12
    case = {"id": "x", "metadata": {"harbor_task": {"name": "harbor/hello-world"}}}
    assert task_name(case, "org") == "harbor/hello-world"
    assert task_name({"id": "x", "metadata": {"harbor_task": {"name": "no org"}}}, "o") == "o/x"


def test_the_default_ignores_match_as_git_reads_them() -> None:
    pathspec = pytest.importorskip("pathspec")
    spec = pathspec.PathSpec.from_lines("gitignore", DEFAULT_IGNORES)
    paths = [
        "tests/__pycache__/a.txt",
        "tests/__pycache__",
        "environment/x.pyc",
        "environment/x.pyc/inner.txt",
        "environment/.pyc",
        "solution/.DS_Store",
        "solution/a.DS_Store",
        "tests/a.swp",
        "tests/a.swo",
        "tests/a~",
        "tests/~",
        "tests/a~/b",
        "tests/a.py",
        "tests/pycache/x",
        "environment/app/__pycache__x/y",
    ]
    assert paths
    for path in paths:
        assert _default_ignored(path) == bool(spec.match_file(path)), path


def test_the_digest_is_harbors_over_the_files_it_collects() -> None:
    files = {
        "task.toml": "sha256:" + "1" * 64,
        "instruction.md": "sha256:" + "2" * 64,
        "tests/test.sh": "sha256:" + "3" * 64,
        "tests/__pycache__/t.pyc": "sha256:" + "4" * 64,  # ignored by default
        "config.yaml": "sha256:" + "5" * 64,  # not a file Harbor packages
        "environment/Dockerfile": "sha256:" + "6" * 64,
    }
    picked = collected_paths(files, {})
    assert picked == ["environment/Dockerfile", "instruction.md", "task.toml", "tests/test.sh"]
    outer = hashlib.sha256()
    for path in picked:
        outer.update(f"{path}\0{files[path][7:]}\n".encode())
    assert task_digest(files.items(), {}) == "sha256:" + outer.hexdigest()


def test_dataset_toml_is_toml_with_the_tasks_in_order() -> None:
    dataset = {"id": "gsm8k", "version": "1.2.0", "description": 'say "hi"\x7f', "tags": ["math"]}
    body = (
        manifest_head(dataset)
        + manifest_task("gsm8k/a", "sha256:" + "a" * 64)
        + manifest_task("gsm8k/b", "sha256:" + "b" * 64)
        + manifest_tail(
            dataset,
            content_digest="sha256:" + "c" * 64,
            export_id="e" * 64,
            case_count=2,
            subset={"ids": ["a", "b"]},
        )
    )
    doc = tomllib.loads(body.decode())
    assert doc["dataset"] == {
        "name": "gsm8k/gsm8k",
        "version": "1.2.0",
        "description": 'say "hi"\x7f',
        "authors": [],
        "keywords": ["math"],
    }
    assert [t["name"] for t in doc["tasks"]] == ["gsm8k/a", "gsm8k/b"]
    assert doc["metadata"]["caseshelf"]["case_count"] == 2
    assert doc["metadata"]["caseshelf"]["subset"] == '{"ids":["a","b"]}'
