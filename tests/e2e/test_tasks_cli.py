"""`caseshelf import-tasks`, `caseshelf migrate` and `caseshelf register` of legacy files, as
subprocesses on a fresh embedded store."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.helpers import run_cli as cli

pytestmark = pytest.mark.e2e


def test_import_tasks_terminal_bench_skip_invalid(shared_data, tmp_path):
    # Given the real Terminal-Bench tasks (one without tests)
    src = str(shared_data / "terminal-bench")
    # When imported without a template, every task without an image is named
    bad = cli(tmp_path, "import-tasks", src, "--dataset", "tb", "--version", "1")
    assert bad.returncode == 1 and "no prebuilt image" in bad.stderr
    # And with a template and --skip-invalid, the incomplete task is reported and left out
    ok = cli(
        tmp_path,
        "import-tasks",
        src,
        "--image-template",
        "reg/tb:{id}",
        "--skip-invalid",
        "--dataset",
        "tb",
        "--json",
    )
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert out["case_count"] == 9 and out["version"] == "1.0.0"
    assert [s["task"] for s in out["skipped"]] == ["evoeval/5"]
    assert "skipped 1 task: evoeval/5\n  task 'evoeval/5': is incomplete" in ok.stderr


def test_import_tasks_case_dirs_and_harbor(shared_data, tmp_path):
    cases = cli(
        tmp_path,
        "import-tasks",
        str(shared_data / "agent-eval-harness" / "opencode-smoke" / "eval.yaml"),
        "--format",
        "case-dirs",
        "--json",
    )
    assert cases.returncode == 0, cases.stderr
    assert json.loads(cases.stdout)["id"] == "opencode-smoke"
    harbor = cli(
        tmp_path,
        "import-tasks",
        str(shared_data / "harbor"),
        "-f",
        "harbor",
        "--image-template",
        "h:{id}",
        "--json",
    )
    assert harbor.returncode == 0, harbor.stderr
    assert json.loads(harbor.stdout)["case_count"] == 6


def test_register_legacy_files_warns_and_migrate_silences(shared_data, tmp_path):
    work = tmp_path / "d"
    shutil.copytree(shared_data / "mas-lab" / "legacy", work)
    trip = work / "trip_queries-full-example.yaml"
    first = cli(tmp_path, "register", str(trip), "--json")
    assert first.returncode == 0, first.stderr
    assert "docs/migration.md#dataset.legacy_item" in first.stderr
    # One warning per code for the whole file (6 legacy items), naming the file
    warned = [line for line in first.stderr.splitlines() if "dataset.legacy_item:" in line]
    assert len(warned) == 1 and str(trip) in warned[0]
    check = cli(tmp_path, "migrate", "--check", str(work))
    assert check.returncode == 1
    assert cli(tmp_path, "migrate", str(work)).returncode == 0
    again = cli(tmp_path, "register", str(trip), "--json")
    assert again.returncode == 0 and "migration.md" not in again.stderr
    # The migrated file means the same: same label, same content, nothing new created
    assert json.loads(again.stdout)["created"] is False
    assert json.loads(again.stdout)["content_digest"] == json.loads(first.stdout)["content_digest"]


def test_an_s3_source_without_aws_credentials_is_a_clear_error(tmp_path):
    # Given no AWS credentials anywhere (no variables, no files, no instance metadata)
    env = {
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_SESSION_TOKEN": "",
        "AWS_PROFILE": "",
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    # When tasks are imported from an S3 prefix
    got = cli(
        tmp_path / "home",
        "import-tasks",
        "s3://bucket/tasks/",
        "--format",
        "terminal-bench",
        "--image-template",
        "r/{id}",
        env=env,
        timeout=120,
    )
    # Then the command fails with one line naming the cause, not a traceback
    assert got.returncode == 1
    assert "error: AWS:" in got.stderr and "Traceback" not in got.stderr
