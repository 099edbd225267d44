"""The envelope migrator: rewrites YAML datasets in place, keeping comments and key order."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from caseshelf.domain.envelope import case_to_plain
from caseshelf.services import migrate as migrate_mod
from caseshelf.services.loaders import load_dataset
from caseshelf.services.migrate import migrate_file, migrate_paths, migrate_text
from caseshelf.services.registry import parse_dataset

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / ".." / "shared" / "data"

LEGACY = """\
# trip queries
apiVersion: lab/v1
kind: Dataset
metadata:
  name: trips
  version: "1.0"
spec:
  item_schema: {prompt: str}
  items:
    # first item
    - id: "a b"   # odd id, kept
      prompt: "Go to Tokyo."   # the ask
      category: travel
      expected_answer: yes
      tool_fixtures: {scene: fixtures/a.yaml}

    # second item
    - id: b
      inputs:
        user:
          - role: user
            content: hello
      expectations:
        correct_action: refund
"""


def plains(path: Path) -> list[dict]:
    raw, _ = load_dataset(path)
    raw.setdefault("version", "1")
    return [case_to_plain(c) for c in parse_dataset(raw).cases]


def test_rewrite_keeps_comments_order_and_ids(tmp_path):
    # Given a legacy lab Dataset with comments
    f = tmp_path / "trips.yaml"
    f.write_text(LEGACY)
    # (the one-key pointer does not load as it is; its path alone means the same)
    same = tmp_path / "same.yaml"
    same.write_text(LEGACY.replace("{scene: fixtures/a.yaml}", "fixtures/a.yaml"))
    before = plains(same)
    # When it is migrated
    result = migrate_file(f)
    text = f.read_text()
    # Then the file is rewritten into the envelope, comments and ids intact
    assert result.status == "changed"
    assert "# trip queries" in text and "# first item" in text and "# second item" in text
    assert "# the ask" in text and "# odd id, kept" in text
    assert 'id: "a b"' in text
    assert "item_schema" not in text
    assert "tool_fixtures: fixtures/a.yaml" in text
    assert text.index("id: b") < text.index("user: hello") < text.index("details:")
    # And it loads without a warning into the same cases
    _, warnings = load_dataset(f)
    assert warnings == []
    assert plains(f) == before


def test_second_run_changes_nothing(tmp_path):
    f = tmp_path / "trips.yaml"
    f.write_text(LEGACY)
    migrate_file(f)
    once = f.read_bytes()
    assert migrate_file(f).status == "unchanged"
    assert f.read_bytes() == once


@pytest.mark.parametrize(
    ("snippet", "message"),
    [
        ("tool_fixtures: {a: x.yaml, b: y.yaml}", "'x1'.*several keys"),
        ("expectations: {k: 1, details: {k: 2}}", "'x1'.*both on expectations"),
    ],
)
def test_ambiguity_fails_with_the_item_id_and_writes_nothing(tmp_path, snippet, message):
    f = tmp_path / "d.yaml"
    body = (
        "kind: Dataset\napiVersion: lab/v1\nmetadata: {name: d}\n"
        f"spec:\n  items:\n  - id: x1\n    prompt: p\n    {snippet}\n"
    )
    f.write_text(body)
    result = migrate_file(f)
    assert result.status == "error"
    assert re.search(message, result.error or "")
    assert f.read_text() == body


def test_non_dataset_yaml_is_left_untouched(tmp_path):
    f = tmp_path / "config.yaml"
    body = "# not a dataset\nkind: Experiment\nspec: {prompt: x}\n"
    f.write_text(body)
    g = tmp_path / "list.yaml"
    g.write_text("- 1\n- 2\n")
    results = {r.path.name: r.status for r in migrate_paths([tmp_path])}
    assert results == {"config.yaml": "skipped", "list.yaml": "skipped"}
    assert f.read_text() == body and g.read_text() == "- 1\n- 2\n"


def test_check_writes_nothing(tmp_path):
    f = tmp_path / "trips.yaml"
    f.write_text(LEGACY)
    [result] = migrate_paths([tmp_path], check=True)
    assert result.status == "changed"
    assert f.read_text() == LEGACY


def test_a_failed_write_leaves_the_original_and_no_temp_file(tmp_path, monkeypatch):
    f = tmp_path / "trips.yaml"
    f.write_text(LEGACY)

    def boom(_fd):
        raise OSError("disk full")

    monkeypatch.setattr(migrate_mod.os, "fsync", boom)
    with pytest.raises(OSError, match="disk full"):
        migrate_file(f)
    assert f.read_text() == LEGACY
    assert os.listdir(tmp_path) == ["trips.yaml"]


def test_bare_list_becomes_a_dataset_named_after_the_file(tmp_path):
    text, changed, codes = migrate_text("- id: q\n  prompt: hi  # c\n", "mini")
    assert changed and codes == ["dataset.bare_list", "dataset.legacy_item"]
    assert text.startswith("apiVersion: lab/v1\nkind: Dataset\nmetadata:\n  name: mini\n")
    assert "user: hi # c" in text


def test_real_mas_lab_files_migrate_to_the_same_cases(tmp_path):
    src = DATA / "mas-lab"
    if not src.exists():
        pytest.skip(f"shared benchmark data not present: {src}")
    shutil.copytree(src, tmp_path / "m")
    files = sorted((tmp_path / "m").rglob("*.yaml"))
    before = {f.name: plains(f) for f in files}
    for f in files:
        assert migrate_file(f).status in {"changed", "unchanged"}
    for f in files:
        _raw, warnings = load_dataset(f)
        assert warnings == [], f.name
        assert plains(f) == before[f.name], f.name
    trip = (tmp_path / "m/legacy/trip_queries-full-example.yaml").read_text()
    assert "# ── Multi-turn with HITL and memory seeds" in trip
    assert "# deterministic session for replay" in trip
    assert "# no target_agent → all agents receive this" in trip


def test_script_and_cli_exit_codes(tmp_path):
    f = tmp_path / "trips.yaml"
    f.write_text(LEGACY)
    script = [sys.executable, str(ROOT / "scripts" / "migrate_dataset_envelope.py")]
    check = subprocess.run([*script, "--check", str(tmp_path)], capture_output=True, text=True)
    assert check.returncode == 1 and "would rewrite" in check.stdout
    assert f.read_text() == LEGACY
    from caseshelf.cli import run

    assert run(["migrate", str(tmp_path)]) == 0
    assert run(["migrate", "--check", str(tmp_path)]) == 0
