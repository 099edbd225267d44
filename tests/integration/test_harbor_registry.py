"""The `harbor` export's `dataset.toml`, judged by Harbor's own code (harbor 0.25.0 in its
virtualenv, run as a subprocess on the export directory): its `DatasetManifest` loads the file,
its `Packager.compute_content_hash` gives every task package the digest we wrote, and its
`harbor sync` logic (`harbor.cli.sync.sync_dataset`) finds every task it can name unchanged."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

import caseshelf
from caseshelf.bootstrap import build, load_settings
from caseshelf.domain import export_parts
from caseshelf.domain.identity import Identity
from caseshelf.services.exports import ExportRequest
from tests.consumers import HARBOR_VENV, harbor_cli
from tests.integration.test_export_round_trip import register_source

pytestmark = pytest.mark.integration

ME = Identity("local", "alice")
KINDS = ("gsm8k", "humaneval", "terminal-bench", "harbor")

# Run by the harbor virtualenv's Python on an export directory (and a copy of it to sync).
HARBOR_SIDE = r"""
import json, sys
from pathlib import Path
from harbor.cli.sync import sync_dataset
from harbor.models.dataset.manifest import DatasetManifest
from harbor.publisher.packager import Packager

root, copy = Path(sys.argv[1]), Path(sys.argv[2])
manifest = DatasetManifest.from_toml_file(root / "dataset.toml")
digests = {
    child.name: "sha256:" + Packager.compute_content_hash(child)[0]
    for child in sorted(root.iterdir())
    if child.is_dir()
}
changes = sync_dataset(copy)
print(json.dumps({
    "dataset": manifest.dataset.model_dump(mode="json"),
    "metadata": manifest.metadata,
    "tasks": [t.model_dump(mode="json") for t in manifest.tasks],
    "digests": digests,
    "sync": [[c.name, c.source] for c in changes],
    "rewritten": (copy / "dataset.toml").read_text(),
}))
"""


def harbor_reads(root: Path, tmp: Path) -> dict[str, Any]:
    harbor_cli()  # installs harbor into its virtualenv when missing, or skips saying why
    copy = tmp / f"{root.name}-synced"
    shutil.copytree(root, copy)
    got = subprocess.run(
        [str(HARBOR_VENV / "bin" / "python"), "-c", HARBOR_SIDE, str(root), str(copy)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert got.returncode == 0, got.stderr[-3000:]
    out: dict[str, Any] = json.loads(got.stdout)
    return out


def _manifest(root: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((root / "manifest.json").read_text())
    return doc


def _check(root: Path, harbor: dict[str, Any], name: str) -> None:
    doc = _manifest(root)
    ours = tomllib.loads((root / "dataset.toml").read_text())
    dirs = [entry["dir"] for entry in doc["cases"].values()]
    # Harbor's model holds what we wrote: the dataset, one task a case, in the dataset's order
    assert harbor["dataset"]["name"] == f"{name}/{name}"
    assert harbor["dataset"]["version"] == doc["dataset"]["version"]
    assert harbor["tasks"] == ours["tasks"] and len(ours["tasks"]) == len(dirs)
    assert harbor["metadata"]["caseshelf"]["content_digest"] == doc["content_digest"]
    assert harbor["metadata"]["caseshelf"]["export_id"] == doc["export_id"]
    # Every task's digest is the one Harbor computes of its package
    assert [t["digest"] for t in ours["tasks"]] == [harbor["digests"][d] for d in dirs]
    # harbor sync: every task whose task.toml names it is found, and unchanged
    sources = {task: source for task, source in harbor["sync"]}
    assert "local" not in sources.values(), sources
    assert harbor["rewritten"] and tomllib.loads(harbor["rewritten"])["tasks"] == ours["tasks"]
    # And manifest.json lists dataset.toml with its digest
    assert doc["files"]["dataset.toml"]["size"] == (root / "dataset.toml").stat().st_size


@pytest.fixture(scope="module")
def exported(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("harbor-registry")
    svc = build(load_settings({}, home=str(root / "home")))
    names = {}
    for kind in KINDS:
        names[kind] = register_source(svc, kind, shared_data)
        res = svc.exports.export_version(
            ME, names[kind], "latest", ExportRequest(format="harbor"), to=str(root / kind)
        )
        assert res.warning_count == 0, res.warnings
    return {"root": root, "names": names}


def job_export(cs: Any, home: Path, ref: str) -> Path:
    """`ref` exported as `harbor` by a job of parts into the embedded store (no `to`): the
    directory of its prefix among the store's objects."""
    out = cs.export(ref, {"format": "harbor"})
    return home / "objects" / out.prefix


def assert_same_as_one_pass(job_root: Path, one_pass: Path) -> None:
    for name in ("dataset.toml", "manifest.json"):
        assert (job_root / name).read_bytes() == (one_pass / name).read_bytes(), name


@pytest.mark.parametrize("kind", KINDS)
def test_harbor_computes_the_digests_dataset_toml_pins(exported, kind, tmp_path):
    root = exported["root"] / kind
    harbor = harbor_reads(root, tmp_path)
    _check(root, harbor, exported["names"][kind])
    sources = {task: source for task, source in harbor["sync"]}
    if kind != "harbor":  # every generated task.toml names its task
        assert set(sources.values()) == {"unchanged"}, sources
    else:  # Harbor's own tasks keep their task.toml; those with a [task] name are found
        assert "unchanged" in sources.values()


def test_a_task_with_ignore_rules_and_ignored_files(tmp_path: Path) -> None:
    # Given a Harbor task with its own .gitignore and a .harborignore in tests/, and a
    # generated task with files Harbor leaves out by default (__pycache__, *.pyc, *~)
    cs = caseshelf.connect(home=tmp_path / "home")
    task_toml = '[task]\nname = "acme/rules"\n\n[environment]\ndocker_image = "python:3.12"\n'
    ruled = {
        "id": "rules",
        "inputs": {"user": "Do it."},
        "image": "python:3.12",
        "metadata": {"harbor_task": {"name": "acme/rules"}},
        "files": {
            path: {"text": body}
            for path, body in {
                "task.toml": task_toml,
                "instruction.md": "Do it.\n",
                "README.md": "about\n",
                ".gitignore": "*.log\n!keep.log\n",
                "environment/Dockerfile": "FROM python:3.12\n",
                "environment/build.log": "noise\n",
                "environment/keep.log": "kept\n",
                "environment/__pycache__/m.pyc": "kept: the task's own .gitignore rules\n",
                "tests/test.sh": "#!/bin/bash\n",
                "tests/.harborignore": "secret.txt\nfixtures/\n",
                "tests/secret.txt": "hidden\n",
                "tests/fixtures/big.bin": "hidden\n",
                "tests/keep.txt": "kept\n",
                "solution/solve.sh": "#!/bin/bash\n",
                "metrics/extra.json": "{}\n",
            }.items()
        },
    }
    plain = {
        "id": "plain one",
        "inputs": {"user": "What is 2 + 2?"},
        "expectations": {"ground_truth": "4"},
        "files": {
            path: {"text": "x\n"}
            for path in (
                "notes.txt~",
                "tests/__pycache__/t.pyc",
                "tests/__pycache__/cache.txt",
                "tests/test_x.py",
                ".DS_Store",
            )
        },
    }
    cs.register("rules", cases=[ruled, plain], version="1.0.0")
    out = tmp_path / "out"
    cs.export("rules@1.0.0", {"format": "harbor"}, to=str(out))
    # When Harbor reads the export
    harbor = harbor_reads(out, tmp_path)
    # Then it computes the digests we pinned, for both tasks
    _check(out, harbor, "rules")
    ours = tomllib.loads((out / "dataset.toml").read_text())
    assert ours["tasks"][0]["name"] == "acme/rules"
    assert ours["tasks"][1]["name"].startswith("rules/plain-one-")
    assert {name: source for name, source in harbor["sync"]} == {
        t["name"]: "unchanged" for t in ours["tasks"]
    }
    # And the export written by a job of parts is the same, and Harbor reads it the same
    home = tmp_path / "home"
    job_root = job_export(cs, home, "rules@1.0.0")
    assert_same_as_one_pass(job_root, out)
    _check(job_root, harbor_reads(job_root, tmp_path), "rules")


@pytest.mark.parametrize("kind", ["terminal-bench", "harbor"])
def test_an_export_job_of_several_parts_writes_the_dataset_toml_harbor_reads(
    exported, kind, tmp_path, monkeypatch
):
    # Given a real source's version exported in one pass (the module's fixture)
    name = exported["names"][kind]
    home = exported["root"] / "home"
    # When it is exported by a job of parts of two cases each
    monkeypatch.setattr(export_parts, "MAX_PART_CASES", 2)
    job_root = job_export(caseshelf.connect(home=home), home, f"{name}@latest")
    # Then dataset.toml and the manifest are the one-pass export's, byte for byte
    assert_same_as_one_pass(job_root, exported["root"] / kind)
    # And Harbor computes the digests it pins and finds its tasks
    harbor = harbor_reads(job_root, tmp_path)
    _check(job_root, harbor, name)
    assert "unchanged" in {source for _, source in harbor["sync"]}
