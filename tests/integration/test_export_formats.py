"""Every export format judged by the tool that reads it, on the real data in ../shared/data:
`harbor lint` on Harbor task packages, inspect_ai's `json_dataset` on inspect samples, Hugging
Face `datasets.load_dataset`, pyarrow and pandas on jsonl / parquet rows."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.export_formats import ROW_COLUMNS, case_from_row
from caseshelf.domain.identity import Identity
from caseshelf.services.exports import ExportRequest
from caseshelf.services.registry import parse_dataset
from tests.consumers import compose_env, harbor_cli
from tests.integration.test_export_round_trip import register_source

pytestmark = pytest.mark.integration

ME = Identity("local", "alice")
KINDS = ("gsm8k", "humaneval", "terminal-bench", "harbor")


@pytest.fixture(scope="module")
def exported(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each real source registered once and exported in every format."""
    root = tmp_path_factory.mktemp("formats")
    svc = build(load_settings({}, home=str(root / "home")))
    out: dict[str, Any] = {"svc": svc, "root": root, "names": {}}
    for kind in KINDS:
        name = register_source(svc, kind, shared_data)
        out["names"][kind] = name
        for fmt in ("harbor", "inspect", "jsonl", "parquet"):
            res = svc.exports.export_version(
                ME, name, "latest", ExportRequest(format=fmt), to=str(root / f"{kind}-{fmt}")
            )
            assert res.warning_count == 0, res.warnings
    return out


def _cases(svc: Any, name: str) -> list[dict[str, Any]]:
    return list(svc.registry.list_cases(ME, name, "latest", limit=1000).items)


# --- harbor -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_harbor_lint_accepts_every_exported_task_package(exported, kind, tmp_path):
    harbor = harbor_cli()
    env = compose_env(tmp_path / "docker")  # packages with environment/docker-compose.yaml too
    root = exported["root"] / f"{kind}-harbor"
    packages = sorted(p for p in root.iterdir() if p.is_dir())
    assert len(packages) == len(_cases(exported["svc"], exported["names"][kind]))
    got = subprocess.run(
        [str(harbor), "lint", "--json", *map(str, packages)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
    )
    assert got.returncode in (0, 1), got.stderr  # 1: findings; 2: it could not lint
    findings = json.loads(got.stdout)
    bad = [f for f in findings if f["rule"] in ("invalid-task-config", "invalid-task-files")]
    assert bad == [], bad
    for package in packages:
        assert (package / "task.toml").is_file()
        if kind != "harbor":  # Harbor's own tasks keep their layout (a multi-step one has steps/)
            assert (package / "instruction.md").is_file()
            assert (package / "tests" / "test.sh").stat().st_mode & 0o111
    print(Counter(f["rule"] for f in findings))


def test_harbor_lint_reads_the_compose_files_of_the_exported_packages(exported, tmp_path):
    # Given the exported packages that have an environment/docker-compose.yaml
    harbor = harbor_cli()
    env = compose_env(tmp_path / "docker")
    composed = sorted(
        p
        for kind in KINDS
        for p in (exported["root"] / f"{kind}-harbor").iterdir()
        if (p / "environment" / "docker-compose.yaml").is_file()
    )
    if not composed:
        pytest.skip("no exported package of ../shared/data has an environment/docker-compose.yaml")
    # When harbor lints one whose compose file is broken, it says so: the check is live, so
    # test_harbor_lint_accepts_every_exported_task_package, linting these packages with the
    # same environment, has read their compose files and found nothing invalid
    broken = tmp_path / "broken"
    shutil.copytree(composed[0], broken)
    (broken / "environment" / "docker-compose.yaml").write_text("services: [not, a, map]\n")
    got = subprocess.run(
        [str(harbor), "lint", "--json", str(broken)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
    )
    rules = {f["rule"] for f in json.loads(got.stdout)}
    assert "invalid-task-config" in rules, got.stdout


def test_a_harbor_export_of_a_case_without_instruction_text_is_a_400_before_writing(tmp_path):
    svc = build(load_settings({}, home=str(tmp_path / "home")))
    cases = [
        {"id": "ok", "inputs": {"user": "Say hi."}, "expectations": {"ground_truth": "hi"}},
        {
            "id": "no-text",
            "inputs": {"user": {"ref": "prompt.md"}},
            "files": {"prompt.md": {"text": "x"}},
        },
    ]
    svc.registry.register(ME, parse_dataset({"id": "mixed", "version": "1.0.0", "cases": cases}))
    for fmt, field in (("harbor", "inputs.user"), ("inspect", "inputs.user")):
        out = tmp_path / f"out-{fmt}"
        with pytest.raises(BadRequest) as info:
            svc.exports.export_version(ME, "mixed", "1.0.0", ExportRequest(format=fmt), to=str(out))
        assert (
            info.value.fields.get("case_id") == "no-text"
            and info.value.fields.get("field") == field
        )
        assert "no-text" in info.value.detail
        assert (
            not out.exists()
            and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
        )


# --- inspect ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_inspect_json_dataset_loads_the_samples(exported, kind):
    from inspect_ai.dataset import json_dataset

    root = exported["root"] / f"{kind}-inspect"
    dataset = json_dataset(str(root / "samples.jsonl"))
    cases = {c["id"]: c for c in _cases(exported["svc"], exported["names"][kind])}
    assert len(dataset) == len(cases)
    for sample in dataset:
        case = cases[sample.id]
        user = case["inputs"]["user"]
        if isinstance(user, str):
            assert sample.input == user
        else:  # several user turns: one user message each
            assert [m.role for m in sample.input] == ["user"] * len(user)
            assert [m.content for m in sample.input] == user
        truth = case.get("expectations", {}).get("ground_truth")
        if isinstance(truth, str):
            assert sample.target == truth
        assert sample.metadata["caseshelf"].get("tags", []) == case.get("tags", [])
        for dest, path in (sample.files or {}).items():
            # resolved by inspect against the dataset's directory: the file is there
            assert Path(path).is_file(), (dest, path)
        if case.get("image"):
            assert sample.sandbox is not None and sample.sandbox.type == "docker"
            assert Path(sample.sandbox.config).is_file()
    if kind == "humaneval":
        first = dataset[0]
        assert set(first.files) == {"solution.py", "tests/test_solution.py"}


# --- jsonl / parquet --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_datasets_pyarrow_and_pandas_read_the_rows_back_to_the_cases(
    exported, kind, fmt, tmp_path, monkeypatch
):
    import datasets
    import pandas as pd
    import pyarrow.parquet as pq

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    root = exported["root"] / f"{kind}-{fmt}"
    path = root / ("cases.jsonl" if fmt == "jsonl" else "cases.parquet")
    ds = datasets.load_dataset(
        "json" if fmt == "jsonl" else "parquet",
        data_files=str(path),
        split="train",
        cache_dir=str(tmp_path / "cache"),
    )
    cases = _cases(exported["svc"], exported["names"][kind])
    assert ds.column_names == list(ROW_COLUMNS)
    assert ds.num_rows == len(cases)
    # Every row gives back its case, field for field (files by digest, their bodies beside)
    for row, case in zip(ds, cases, strict=True):
        assert case_from_row(row) == case
        for f in row["files"]:
            assert (root / f["export_path"]).is_file()
    frame = pd.read_json(path, lines=True) if fmt == "jsonl" else pd.read_parquet(path)
    assert list(frame["id"]) == [c["id"] for c in cases]
    if fmt == "parquet":
        schema = pq.read_schema(path)
        assert str(schema.field("timeout_sec").type) == "int64"
        assert str(schema.field("tags").type) == "list<element: string>"
