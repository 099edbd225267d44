"""The GitHub Actions workflow in examples/ci: valid YAML that runs the strict check and posts
the markdown check and diff (docs/datasets-as-code.md, "CI")."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

WORKFLOW = Path(__file__).resolve().parents[2] / "examples" / "ci" / "caseshelf-check.yml"


def test_the_workflow_checks_strictly_and_posts_the_markdown() -> None:
    doc = yaml.safe_load(WORKFLOW.read_text())
    steps = doc["jobs"]["check"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "caseshelf check --strict --format markdown" in runs
    assert 'caseshelf diff "$base" "$candidate" --format markdown' in runs
    assert any(s.get("with", {}).get("path") == "comment.md" for s in steps)
    assert doc["jobs"]["check"]["env"]["CASESHELF_API"] == "${{ secrets.CASESHELF_API }}"
