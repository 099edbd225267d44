"""`caseshelf import|preview|recipes` as a subprocess, on the embedded store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hf_fake import standard_hub

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def caseshelf(home: Path, *args: str, env: dict[str, str] | None = None):
    full = {**os.environ, "CASESHELF_HOME": str(home), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "caseshelf.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=full,
        timeout=120,
        check=False,
    )


def test_import_gsm8k_with_the_local_recipe_prints_version_count_and_digest(tmp_path, shared_data):
    got = caseshelf(
        tmp_path,
        "import",
        str(shared_data / "gsm8k" / "test.jsonl"),
        "--recipe",
        "recipes/gsm8k.yaml",
    )
    assert got.returncode == 0, got.stderr
    assert "1.0.0" in got.stdout and "1319" in got.stdout
    assert "sha256:" in got.stdout
    again = caseshelf(
        tmp_path,
        "import",
        str(shared_data / "gsm8k" / "test.jsonl"),
        "--recipe",
        "recipes/gsm8k.yaml",
        "--limit",
        "10",
        "--json",
    )
    out = json.loads(again.stdout)
    assert (out["version"], out["case_count"], out["produced_by"]["limit"]) == ("1.1.0", 10, 10)


def test_import_from_the_hub_through_the_catalog_recipe(tmp_path):
    hub = standard_hub()
    try:
        env = {"HF_ENDPOINT": hub.url, "CASESHELF_HF_VIEWER_URL": hub.url}
        got = caseshelf(
            tmp_path,
            "import",
            "hf://openai/gsm8k",
            "--config",
            "main",
            "--split",
            "test",
            "--recipe",
            "gsm8k",
            "--json",
            env=env,
        )
        assert got.returncode == 0, got.stderr
        out = json.loads(got.stdout)
        assert out["case_count"] == 250
        assert (
            out["produced_by"]["source"]["revision"] == "0123456789abcdef0123456789abcdef01234567"
        )
        assert hub.counts["rows"] == 3
    finally:
        hub.stop()


def test_preview_and_recipe_commands(tmp_path, shared_data):
    got = caseshelf(
        tmp_path,
        "preview",
        str(shared_data / "truthfulqa" / "TruthfulQA_mini.csv"),
        "--recipe",
        "recipes/truthfulqa.yaml",
        "--json",
    )
    assert got.returncode == 0, got.stderr
    preview = json.loads(got.stdout)
    assert len(preview["cases"]) == 5 and "Correct Answers" in preview["fields"]
    assert caseshelf(tmp_path, "recipes", "register", "recipes/truthfulqa.yaml").returncode == 0
    listed = json.loads(caseshelf(tmp_path, "recipes", "ls", "--json").stdout)
    assert [r["id"] for r in listed["items"]] == ["truthfulqa-csv"]
    assert caseshelf(tmp_path, "recipes", "rm", "truthfulqa-csv@1.0.0").returncode == 0
    bad = caseshelf(tmp_path, "import", "nowhere.jsonl", "--recipe", "recipes/gsm8k.yaml")
    assert bad.returncode == 1 and "no such file" in bad.stderr
